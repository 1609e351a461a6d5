//! `#[derive(Actor)]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::{DeriveInput, Ident, LitStr};

pub(crate) fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    if !input.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &input.generics,
            "generic actors are not supported: give the actor a concrete type",
        ));
    }
    // Reported beside the impl, not instead of it: one error, not a cascade of unmet
    // `Actor` bounds.
    let skipped_slot = refuse_skipped_reply_slots(&input)
        .err()
        .map(|e| e.into_compile_error());
    let ident = &input.ident;
    let mut name = LitStr::new(&ident.to_string(), ident.span());
    let mut on_start: Option<Ident> = None;
    let mut on_stop: Option<Ident> = None;
    let mut order_sensitive = false;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("actor")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("name") {
                name = meta.value()?.parse()?;
            } else if meta.path.is_ident("on_start") {
                on_start = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("on_stop") {
                on_stop = Some(meta.value()?.parse()?);
            } else if meta.path.is_ident("order_sensitive") {
                order_sensitive = true;
            } else {
                return Err(meta.error(
                    "unknown actor option; expected `name`, `on_start`, `on_stop` or \
                     `order_sensitive`",
                ));
            }
            Ok(())
        })?;
    }
    let start = on_start.map(|m| {
        quote! {
            fn on_start(&mut self, ctx: &mut ::lazarus::Context<Self>) { Self::#m(self, ctx) }
        }
    });
    let stop = on_stop.map(|m| {
        quote! {
            fn on_stop(&mut self, ctx: &mut ::lazarus::Context<Self>) { Self::#m(self, ctx) }
        }
    });
    let not_serde = format!(
        "actor state `{ident}` must implement serde's Serialize and Deserialize (it goes into \
         checkpoints): add #[derive(serde::Serialize, serde::Deserialize)]"
    );
    // Spanned on the type name so an unmet bound (not serializable, no handlers) points
    // at the actor.
    Ok(quote_spanned! {ident.span()=>
        #skipped_slot
        const _: () = {
            #[allow(unused_imports)]
            use ::lazarus::__private::NotSerde as _;
            ::core::assert!(::lazarus::__private::IsSerde::<#ident>::SERDE, #not_serde);
        };
        impl ::lazarus::Actor for #ident {
            const NAME: &'static str = #name;
            const ORDER_SENSITIVE: bool = #order_sensitive;
            #start
            #stop
        }
        // So a restarted node can rebuild instances spawned from handlers.
        ::lazarus::register_actor!(#ident);
    })
}

/// A `ReplyTo` in actor state must go into checkpoints: with recovery on, a restored
/// actor answers the asks of `main` from before the checkpoint through it (the
/// re-executed `main` does not ask again), and a skipped slot would leave `main`
/// waiting for ever. Refused where the derive can see it: a field whose type names
/// `ReplyTo` and that serde skips.
fn refuse_skipped_reply_slots(input: &DeriveInput) -> syn::Result<()> {
    let fields: Vec<&syn::Field> = match &input.data {
        syn::Data::Struct(data) => data.fields.iter().collect(),
        syn::Data::Enum(data) => data.variants.iter().flat_map(|v| v.fields.iter()).collect(),
        syn::Data::Union(_) => Vec::new(),
    };
    for field in fields {
        if !mentions(&field.ty, "ReplyTo") {
            continue;
        }
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("serde")) {
            if mentions(&attr.meta, "skip")
                || mentions(&attr.meta, "skip_serializing")
                || mentions(&attr.meta, "skip_deserializing")
            {
                return Err(syn::Error::new_spanned(
                    attr,
                    "a `ReplyTo` in actor state must be checkpointed: remove this \
                     `#[serde(skip)]`. With recovery on, an actor restored from a checkpoint \
                     answers `main`'s earlier asks through it, and a skipped slot leaves \
                     `main` waiting for ever (it serializes as its route; with recovery off \
                     nothing serializes it)",
                ));
            }
        }
    }
    Ok(())
}

/// Whether the tokens of `node` contain the identifier `word`.
fn mentions(node: &impl quote::ToTokens, word: &str) -> bool {
    fn walk(tokens: TokenStream, word: &str) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => i == word,
            proc_macro2::TokenTree::Group(g) => walk(g.stream(), word),
            _ => false,
        })
    }
    walk(node.to_token_stream(), word)
}
