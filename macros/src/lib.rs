//! Macros that turn plain Rust types into Lazarus actors.
//!
//! - `#[derive(Actor)]` on the state struct implements `lazarus::Actor` (its name and
//!   lifecycle hooks). The state must be serde-serializable: it goes into checkpoints.
//! - `#[messages]` on an inherent impl block turns every method marked `#[message]` into a
//!   message type with a typed reply, and generates the actor's handler table.
//!
//! Both expand to paths under `::lazarus`, so use them through the `lazarus` crate.

use proc_macro::TokenStream;

mod derive_actor;
mod messages;

/// Implements `lazarus::Actor` for a struct or enum.
///
/// Options, all optional: `#[actor(name = "Name", on_start = method, on_stop = method)]`,
/// where the hook methods have the signature `fn(&mut self, &mut Context<Self>)`.
#[proc_macro_derive(Actor, attributes(actor))]
pub fn derive_actor(input: TokenStream) -> TokenStream {
    derive_actor::expand(syn::parse_macro_input!(input as syn::DeriveInput))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// Generates message types and the handler table from an impl block.
///
/// Each method marked `#[message]` becomes a message struct named after the method in
/// PascalCase (`fn add_point` → `AddPoint`, or `#[message(name = Other)]`), whose fields are
/// the method's parameters. The method's return type is the reply to `ask`. Parameters of
/// type `&mut Context<Self>` and `ReplyTo<R>` are supplied by the runtime instead: a
/// handler taking `ReplyTo<R>` replies `R` through it, possibly later, and returns `()`.
#[proc_macro_attribute]
pub fn messages(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        return syn::Error::new(
            proc_macro2::TokenStream::from(attr)
                .into_iter()
                .next()
                .map_or_else(proc_macro2::Span::call_site, |t| t.span()),
            "#[messages] takes no arguments",
        )
        .into_compile_error()
        .into();
    }
    messages::expand(syn::parse_macro_input!(item as syn::ItemImpl))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
