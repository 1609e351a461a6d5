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
    })
}
