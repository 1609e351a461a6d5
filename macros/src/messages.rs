//! `#[messages]` and the `#[message]` markers inside it.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Attribute, FnArg, GenericArgument, Ident, ImplItem, ImplItemFn, ItemImpl, Pat, PathArguments,
    ReturnType, Type, Visibility,
};

/// One `#[message]` method, analysed.
struct Handler {
    method: Ident,
    message: Ident,
    vis: Visibility,
    docs: Vec<Attribute>,
    fields: Vec<(Ident, Type)>,
    /// The call's arguments in the method's parameter order.
    args: Vec<Arg>,
    reply: Type,
    deferred: bool,
    /// An `async fn`: run by `handle_async`, its future owning the actor.
    asynchronous: bool,
}

impl Handler {
    /// Binds the message's fields (from `msg`) to the names of the handler's parameters.
    fn destructure(&self) -> TokenStream {
        let m = &self.message;
        let names = self.fields.iter().map(|(n, _)| n);
        if self.fields.is_empty() {
            quote!(let #m = msg;)
        } else {
            quote!(let #m { #(#names),* } = msg;)
        }
    }

    /// The call's arguments in parameter order, the context passed as `ctx`.
    fn call_args(&self, ctx: TokenStream) -> Vec<TokenStream> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Field(n) => quote!(#n),
                Arg::Context => ctx.clone(),
                Arg::ReplyTo => quote!(reply),
            })
            .collect()
    }
}

enum Arg {
    Field(Ident),
    Context,
    ReplyTo,
}

pub(crate) fn expand(mut item: ItemImpl) -> syn::Result<TokenStream> {
    if let Some((_, path, _)) = &item.trait_ {
        return Err(syn::Error::new_spanned(
            path,
            "#[messages] goes on an inherent impl block (`impl MyActor { ... }`), not a trait impl",
        ));
    }
    if !item.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &item.generics,
            "generic actors are not supported: give the actor a concrete type",
        ));
    }
    let actor_ident = match &*item.self_ty {
        Type::Path(p) if p.qself.is_none() => p
            .path
            .segments
            .last()
            .map(|s| s.ident.clone())
            .ok_or_else(|| syn::Error::new_spanned(&item.self_ty, "expected an actor type"))?,
        other => {
            return Err(syn::Error::new_spanned(
                other,
                "expected an actor type name",
            ))
        }
    };
    let actor_ty = item.self_ty.clone();

    // A malformed handler is reported and left out; the rest is still generated so the
    // user sees that one error, not a cascade of "no handlers" errors.
    let mut handlers = Vec::new();
    let mut errors: Option<syn::Error> = None;
    for impl_item in &mut item.items {
        let ImplItem::Fn(f) = impl_item else { continue };
        let Some(pos) = f.attrs.iter().position(|a| a.path().is_ident("message")) else {
            continue;
        };
        let marker = f.attrs.remove(pos);
        match analyse(f, &marker) {
            Ok(h) => handlers.push(h),
            Err(e) => match &mut errors {
                Some(all) => all.combine(e),
                None => errors = Some(e),
            },
        }
    }

    let set = format_ident!("__LazarusMessagesOf{}", actor_ident);
    let mut out = TokenStream::new();

    for (index, h) in handlers.iter().enumerate() {
        let Handler {
            message,
            vis,
            docs,
            fields,
            reply,
            ..
        } = h;
        let body = if fields.is_empty() {
            quote!(;)
        } else {
            let names = fields.iter().map(|(n, _)| n);
            let tys = fields.iter().map(|(_, t)| t);
            quote!({ #( #vis #names: #tys, )* })
        };
        let checks = fields
            .iter()
            .map(|(n, t)| (format!("field `{n}` of message `{message}`"), t))
            .chain(std::iter::once((
                format!("the reply of message `{message}`"),
                reply,
            )))
            .map(|(what, t)| {
                let text = format!(
                    "{what} has type `{}`, which must implement serde's Serialize and \
                     Deserialize (messages and replies cross nodes)",
                    quote!(#t).to_string().replace(' ', "")
                );
                quote_spanned! {t.span()=>
                    ::core::assert!(::lazarus::__private::IsSerde::<#t>::SERDE, #text);
                }
            });
        out.extend(quote! {
            #(#docs)*
            #[derive(::lazarus::__private::serde::Serialize, ::lazarus::__private::serde::Deserialize)]
            #[serde(crate = "::lazarus::__private::serde")]
            #vis struct #message #body

            const _: () = {
                #[allow(unused_imports)]
                use ::lazarus::__private::NotSerde as _;
                #(#checks)*
            };

            impl ::lazarus::Message<#actor_ty> for #message {
                type Reply = #reply;
                #[inline]
                fn into_set(self, reply: ::lazarus::ReplyTo<#reply>) -> #set {
                    #set::#message(self, reply)
                }
                #[allow(unreachable_patterns)]
                fn from_set(set: #set) -> ::core::option::Option<Self> {
                    match set {
                        #set::#message(m, _) => ::core::option::Option::Some(m),
                        _ => ::core::option::Option::None,
                    }
                }
            }
        });
        // A message of at most one value can carry the reply of an actor's ask.
        let wrap = match fields.as_slice() {
            [] => Some((quote!(()), quote!(#message))),
            [(name, ty)] => Some((quote!(#ty), quote!(#message { #name: inner }))),
            _ => None,
        };
        if let Some((inner, built)) = wrap {
            let variant = u32::try_from(index)
                .map_err(|_| syn::Error::new_spanned(message, "too many handlers in one actor"))?;
            out.extend(quote! {
                impl ::lazarus::ReplyMessage<#actor_ty> for #message {
                    type Inner = #inner;
                    #[inline]
                    #[allow(unused_variables)]
                    fn wrap(inner: #inner) -> Self {
                        #built
                    }
                    #[inline]
                    fn variant() -> u32 {
                        #variant
                    }
                }
            });
        }
    }

    let variants = handlers.iter().map(|h| {
        let (m, r) = (&h.message, &h.reply);
        quote!(#m(#m, ::lazarus::ReplyTo<#r>))
    });
    let names = handlers.iter().map(|h| {
        let m = &h.message;
        let s = m.to_string();
        quote!(#set::#m(..) => #s)
    });
    let arms = handlers.iter().map(|h| {
        let (m, method) = (&h.message, &h.method);
        if h.asynchronous {
            // Run by `handle_async`; never called here.
            return quote! {
                #set::#m(msg, reply) => {
                    ::core::mem::drop((msg, reply));
                }
            };
        }
        let destructure = h.destructure();
        let call_args = h.call_args(quote!(ctx));
        let call = if h.deferred {
            quote!(self.#method(#(#call_args),*);)
        } else {
            quote! {
                let value = self.#method(#(#call_args),*);
                let _ = reply.send(value);
            }
        };
        quote! {
            #set::#m(msg, reply) => {
                #destructure
                #call
            }
        }
    });

    // `async fn` handlers: their future owns the actor and its context until it
    // completes, and hands them back.
    let async_handlers: Vec<&Handler> = handlers.iter().filter(|h| h.asynchronous).collect();
    let async_items = if async_handlers.is_empty() {
        quote!()
    } else {
        let patterns = async_handlers.iter().map(|h| {
            let m = &h.message;
            quote!(#set::#m(..))
        });
        let async_arms = async_handlers.iter().map(|h| {
            let (m, method) = (&h.message, &h.method);
            let destructure = h.destructure();
            let call_args = h.call_args(quote!(&mut ctx));
            let call = if h.deferred {
                quote!(actor.#method(#(#call_args),*).await;)
            } else {
                quote! {
                    let value = actor.#method(#(#call_args),*).await;
                    let _ = reply.send(value);
                }
            };
            quote! {
                #set::#m(msg, reply) => {
                    #destructure
                    #call
                }
            }
        });
        quote! {
            fn is_async(msg: &#set) -> bool {
                ::core::matches!(msg, #(#patterns)|*)
            }

            #[allow(unused_variables, unused_mut)]
            fn handle_async(
                self,
                msg: #set,
                ctx: ::lazarus::Context<Self>,
            ) -> ::lazarus::__private::AsyncTurn<Self> {
                ::std::boxed::Box::pin(async move {
                    let mut actor = self;
                    let mut ctx = ctx;
                    #[allow(unreachable_patterns)]
                    match msg {
                        #(#async_arms)*
                        _ => {}
                    }
                    (actor, ctx)
                })
            }
        }
    };

    out.extend(quote! {
        #[doc(hidden)]
        #[allow(non_camel_case_types, private_interfaces, clippy::enum_variant_names)]
        #[derive(::lazarus::__private::serde::Serialize, ::lazarus::__private::serde::Deserialize)]
        #[serde(crate = "::lazarus::__private::serde")]
        pub enum #set { #(#variants,)* }

        impl ::lazarus::MessageEnum for #set {
            fn type_name(&self) -> &'static str {
                match *self { #(#names,)* }
            }
        }

        impl ::lazarus::Handlers for #actor_ty {
            type Msg = #set;
            #[allow(unused_variables)]
            fn handle(&mut self, msg: #set, ctx: &mut ::lazarus::Context<Self>) {
                match msg { #(#arms)* }
            }

            #async_items
        }

        #item
    });
    if let Some(errors) = errors {
        out.extend(errors.into_compile_error());
    }
    Ok(out)
}

fn analyse(f: &ImplItemFn, marker: &Attribute) -> syn::Result<Handler> {
    let sig = &f.sig;
    let method = sig.ident.clone();
    let mut message = format_ident!("{}", pascal_case(&method.to_string()), span = method.span());
    if !matches!(marker.meta, syn::Meta::Path(_)) {
        marker.parse_nested_meta(|meta| {
            if meta.path.is_ident("name") {
                message = meta.value()?.parse()?;
                Ok(())
            } else {
                Err(meta.error("unknown message option; expected `name`"))
            }
        })?;
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new_spanned(
            &sig.generics,
            "message handlers cannot be generic",
        ));
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_some() => {}
        Some(other) => {
            return Err(syn::Error::new_spanned(
                other,
                "a message handler takes `&mut self` first",
            ))
        }
        None => {
            return Err(syn::Error::new(
                sig.span(),
                "a message handler takes `&mut self` first",
            ))
        }
    }
    let mut fields = Vec::new();
    let mut args = Vec::new();
    let mut deferred_reply: Option<Type> = None;
    for input in inputs {
        let FnArg::Typed(pt) = input else {
            return Err(syn::Error::new_spanned(input, "unexpected receiver"));
        };
        if is_context(&pt.ty) {
            args.push(Arg::Context);
            continue;
        }
        if let Some(r) = reply_to_arg(&pt.ty) {
            if deferred_reply.is_some() {
                return Err(syn::Error::new_spanned(
                    &pt.ty,
                    "a handler takes at most one `ReplyTo`",
                ));
            }
            deferred_reply = Some(r);
            args.push(Arg::ReplyTo);
            continue;
        }
        let Pat::Ident(pi) = &*pt.pat else {
            return Err(syn::Error::new_spanned(
                &pt.pat,
                "message parameters must be plain names (they become the message's fields)",
            ));
        };
        if matches!(&*pt.ty, Type::Reference(_)) {
            return Err(syn::Error::new_spanned(
                &pt.ty,
                "message parameters are owned values (messages move between actors and nodes); \
                 take the value instead of a reference",
            ));
        }
        fields.push((pi.ident.clone(), (*pt.ty).clone()));
        args.push(Arg::Field(pi.ident.clone()));
    }
    let returns: Type = match &sig.output {
        ReturnType::Default => syn::parse_quote!(()),
        ReturnType::Type(_, t) => (**t).clone(),
    };
    let (reply, deferred) = match deferred_reply {
        Some(r) => {
            if !matches!(&returns, Type::Tuple(t) if t.elems.is_empty()) {
                return Err(syn::Error::new_spanned(
                    &sig.output,
                    "a handler that takes `ReplyTo<R>` answers through it and must return `()`",
                ));
            }
            (r, true)
        }
        None => (returns, false),
    };
    Ok(Handler {
        method,
        message,
        vis: f.vis.clone(),
        docs: f
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .cloned()
            .collect(),
        fields,
        args,
        reply,
        deferred,
        asynchronous: sig.asyncness.is_some(),
    })
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match ty {
        Type::Path(p) => p.path.segments.last(),
        _ => None,
    }
}

fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) if r.mutability.is_some() => {
            last_segment(&r.elem).is_some_and(|s| s.ident == "Context")
        }
        _ => false,
    }
}

fn reply_to_arg(ty: &Type) -> Option<Type> {
    let seg = last_segment(ty)?;
    if seg.ident != "ReplyTo" {
        return None;
    }
    match &seg.arguments {
        PathArguments::AngleBracketed(a) => a.args.iter().find_map(|g| match g {
            GenericArgument::Type(t) => Some(t.clone()),
            _ => None,
        }),
        _ => None,
    }
}

fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}
