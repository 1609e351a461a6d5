//! Lazarus: an actor runtime for cluster and HPC applications, built to carry transparent
//! rollback recovery.
//!
//! This crate owns the actor core: actors defined with [`derive@Actor`] and [`messages`],
//! one pinned executor thread per hardware core ([`Node`]), typed references
//! ([`ActorRef`]) that name a stable [`ActorId`], fire-and-forget [`ActorRef::tell`] and
//! request/reply [`ActorRef::ask`], lifecycle hooks and failure reporting
//! ([`SupervisionEvent`]).
//!
//! ```
//! use lazarus::{messages, Actor, Node};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Actor, Serialize, Deserialize, Default)]
//! struct Counter {
//!     total: u64,
//! }
//!
//! #[messages]
//! impl Counter {
//!     /// Adds `amount` and returns the new total.
//!     #[message]
//!     fn add(&mut self, amount: u64) -> u64 {
//!         self.total += amount;
//!         self.total
//!     }
//! }
//!
//! let node = Node::builder().build().unwrap();
//! let counter = node.spawn(Counter::default()).unwrap();
//! counter.tell(Add { amount: 2 }).unwrap();
//! let total = node.block_on(counter.ask(Add { amount: 3 })).unwrap();
//! assert_eq!(total, 5);
//! node.shutdown();
//! ```
#![warn(missing_docs)]

pub mod actor;
pub use lazarus_proto::{actor_id, failure_detector, wire};
#[doc(hidden)]
pub mod checkpoint;
pub mod cluster;
pub mod dense;
pub mod error;
mod executor;
#[doc(hidden)]
pub mod failpoint;
#[doc(hidden)]
pub mod logger_node;
pub mod node;
pub mod payload;
use lazarus_proto::range_set;
pub mod recovery;
pub mod telemetry;
#[doc(hidden)]
pub mod transport;
pub mod window;

#[doc(hidden)]
pub use actor::actor_kind;
pub use actor::{actor_ref, context, reply, supervision, timer};
#[doc(hidden)]
pub use executor::topology;

// Unit tests define actors with the derive macros, whose expansions name `::lazarus`.
#[cfg(test)]
extern crate self as lazarus;

pub use actor::{
    Actor, CheckpointState, Handlers, Message, MessageEnum, ReplyMessage, WireMessage,
};
pub use actor_id::ActorId;
pub use actor_ref::{ActorRef, Ask};
pub use cluster::ending::{ResultLine, Verdict};
pub use cluster::{Cluster, ClusterError, ClusterSpec};
pub use context::Context;
pub use error::{AskError, NodeError, ReceiveError, SendError, SpawnError};
pub use lazarus_macros::{messages, Actor};
pub use node::{CoreId, Node, NodeBuilder, NodeHandle};
pub use payload::Payload;
pub use reply::ReplyTo;
pub use supervision::{FailureKind, SupervisionEvent};
pub use window::{ReduceOp, Window, WindowError};

/// What an app needs in scope: `use lazarus::prelude::*;` brings the derive macros, the
/// node and cluster, actor references, the handler context and reply slots, and the
/// errors their calls return.
pub mod prelude {
    pub use crate::{
        messages, Actor, ActorId, ActorRef, AskError, Cluster, ClusterError, ClusterSpec, Context,
        Node, NodeError, NodeHandle, Payload, ReplyTo, ResultLine, SendError, SpawnError, Verdict,
    };
}

/// Items the macros expand to. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::actor::actor_kind::ActorKind;
    pub use crate::actor::awaits::AsyncTurn;
    pub use inventory;
    pub use serde;
    use std::marker::PhantomData;

    /// `IsSerde::<T>::SERDE` is `true` when `T` is serde-serializable both ways, and falls
    /// back to [`NotSerde`]'s `false` otherwise, so the macros can fail compilation with a
    /// message of their own (inherent items win over trait items only when their bounds
    /// hold).
    pub struct IsSerde<T: ?Sized>(PhantomData<T>);
    /// Fallback for [`IsSerde`].
    pub trait NotSerde {
        /// Not serializable.
        const SERDE: bool = false;
    }
    impl<T: ?Sized> NotSerde for IsSerde<T> {}
    impl<T: serde::Serialize + serde::de::DeserializeOwned> IsSerde<T> {
        /// Serializable.
        pub const SERDE: bool = true;
    }
}
