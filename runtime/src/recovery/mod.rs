//! Recovery, in three parts:
//!
//! - the protocol's sans-IO machines (`SetProtocol`, `EventLogging`, `NodeRecovery`, ...),
//!   which live in `lazarus-proto` and are re-exported here: what recovery decides (their
//!   rules: the module docs of `lazarus_proto::recovery`);
//! - `hooks`: the one seam through which the actor core, the node, replies and the
//!   transport reach recovery (the trait `RecoveryHooks`, held per node as an `Option`);
//! - [`layer`]: the driver that implements the hooks around the machines with threads,
//!   locks, files and metrics (checkpoints, restores, the replay of `main`, event loggers,
//!   logger nodes, the stall watch).
//!
//! Nothing outside this folder names the layer except the cluster start-up, which builds
//! it and installs it on its node.

pub use lazarus_proto::recovery::*;

pub(crate) mod hooks;
#[doc(hidden)]
pub mod layer;
