//! Logger nodes: dedicated processes that keep, in their memory, the part of the nodes'
//! sender-based logs over the log quota (the logger-nodes paper, Martsinkevich et al.).
//!
//! A node over its dump threshold moves blocks of logged payloads to a logger
//! ([`recovery::log_dump`](crate::recovery::log_dump) chooses them,
//! the recovery layer's log offload ships them); the logger keeps each block until the node
//! says no logged entry points into it any more, and serves it back when the node must
//! resend those messages to a peer that rolled back. [`store`] is the logger's memory
//! (sans-IO, with its capacity), [`wire`] the requests and answers, [`client`] the
//! node's side of the connection; the logger process itself (`lazarus logger`) is
//! `lazarus-cli`'s `logger_server`.

pub mod client;
pub mod store;
pub mod wire;

pub use client::LoggerClient;
pub use store::{BlockStore, StoreStats};
pub use wire::{LoggerRequest, LoggerResponse};

use std::sync::Arc;
use std::time::Duration;

/// The name in logger `index`'s certificate.
pub fn server_name(index: u16) -> String {
    format!("logger{index}.lazarus")
}

/// QUIC settings of the node-logger connections, on both ends: windows for whole blocks
/// in flight.
pub fn quic_transport_config() -> Arc<quinn::TransportConfig> {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(64 << 20));
    t.receive_window(quinn::VarInt::from_u32(128 << 20));
    t.send_window(128 << 20);
    t.max_concurrent_bidi_streams(quinn::VarInt::from_u32(64));
    t.keep_alive_interval(Some(Duration::from_secs(1)));
    t.initial_rtt(Duration::from_millis(10));
    t.max_idle_timeout(Some(quinn::VarInt::from_u32(10_000).into()));
    Arc::new(t)
}
