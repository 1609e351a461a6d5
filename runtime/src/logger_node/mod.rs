//! Logger nodes: dedicated processes that keep, in their memory, the part of the nodes'
//! sender-based logs over the log quota (the logger-nodes paper, Martsinkevich et al.).
//!
//! A node over its dump threshold moves blocks of logged payloads to a logger
//! ([`recovery::log_dump`](crate::recovery::log_dump) chooses them,
//! the recovery layer's log offload ships them); the logger keeps each block until the node
//! says no logged entry points into it any more, and serves it back when the node must
//! resend those messages to a peer that rolled back. [`store`] is the logger's memory
//! (sans-IO, with its capacity), [`wire`] the requests and answers, [`server`] the
//! process (`lazarus logger`), [`client`] the node's side of the connection.

pub mod client;
pub mod server;
pub mod store;
pub mod wire;

pub use client::LoggerClient;
pub use server::{serve, serve_until, LoggerOptions};
pub use store::{BlockStore, StoreStats};
pub use wire::{LoggerRequest, LoggerResponse};
