//! The one seam between the actor core and the recovery layer: what actors, mailboxes,
//! replies, `main`, the node and the transport ask of recovery, as the trait
//! [`RecoveryHooks`].
//!
//! A node holds its hooks as an `Option` ([`crate::node::NodeHandle::recovery`]): `None`
//! is recovery off, and then none of these calls happens; there is no process-wide flag.
//! The recovery layer (`recovery::layer`) implements the trait; nothing else in the crate
//! names the layer's types. The core owns what is kept per actor for recovery (its
//! [`dependence`] on the node's determinants) and the numbering of `main`'s asks, since
//! a reply slot and the transport read them without the layer.

pub(crate) mod dependence;

use crate::actor::lifecycle::Control;
use crate::actor::mailbox::Stamp;
use crate::actor::supervision::SupervisionEvent;
use crate::actor_id::ActorId;
use crate::executor::CoreQueue;
use crate::node::NodeHandle;
use crate::recovery::Dependence;
use crate::transport::frame::{Envelope, RecoveryFrame, RemoteError};
use crate::transport::Transport;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

/// A reply as an asker receives it: the encoded value, or why there is none.
pub(crate) type Outcome = Result<Vec<u8>, RemoteError>;

/// What the actor core asks of a node's recovery layer. Every method is called only on a
/// node with recovery on.
pub(crate) trait RecoveryHooks: Send + Sync + Any {
    // Inside the node.

    /// Whether every message is logged, also between actors of the node (a measurement
    /// mode: what correlated sets save).
    fn logs_everything(&self) -> bool;
    /// Measurement mode: `from`'s message to `to` inside the node, encoded, is logged.
    fn log_local(&self, from: ActorId, to: ActorId, payload: bytes::Bytes);
    /// An actor of the node, depending on `sender`, pushed a message into the mailbox of
    /// an actor on `receiver`: an event of the set, counted after the push.
    fn local_delivery(&self, node: &NodeHandle, receiver: &CoreQueue, sender: Dependence);
    /// The stamp of the next message from `from` to order-sensitive `to` inside the node.
    fn stamp_local(&self, from: ActorId, to: ActorId) -> Stamp;
    /// An actor turn begins on this thread.
    fn turn_begins(&self);

    // Order-sensitive deliveries and values that are not determined by messages.

    /// Whether order-sensitive `actor` may handle the message with `stamp` now (recorded
    /// or replayed if so).
    fn admit(&self, actor: ActorId, stamp: Stamp) -> bool;
    /// The same for a delivery a selective receive made (determined by its channel).
    fn admit_selected(&self, actor: ActorId, stamp: Stamp) -> bool;
    /// Order-sensitive `actor` holds messages back: it is woken when its replay can
    /// move on.
    fn note_waiting(&self, actor: ActorId);
    /// A value read outside messages (`ctx.now()`, `ctx.random()`): logged, or the
    /// logged one during a replay.
    fn value(&self, actor: ActorId, fresh: &mut dyn FnMut() -> u64) -> u64;
    /// A probe of order-sensitive `actor`'s mailbox: logged, or the logged answer.
    fn probe(&self, actor: ActorId, fresh: &mut dyn FnMut() -> bool) -> bool;

    // Messages to other nodes.

    /// `from` (an actor of the node, or `main`) sends `env` to another node: logged,
    /// indexed and sent once what it depends on is stable.
    fn send_remote(&self, node: &NodeHandle, from: ActorId, env: Envelope) -> Result<(), String>;
    /// A frame of node `from`'s recovery layer arrived on a connection of its
    /// incarnation `via`. A logged message returns its addressee and the depth of the
    /// deepest mailbox it filled (for the transport's inbound backpressure).
    fn on_frame(
        &self,
        node: &NodeHandle,
        from: u16,
        via: u32,
        frame: RecoveryFrame,
    ) -> Option<(ActorId, usize)>;
    /// A connection to `peer`'s incarnation `incarnation` is up.
    fn peer_connected(&self, peer: u16, incarnation: u32, addr: std::net::SocketAddr);

    // The app's `main`.

    /// `main` tells an actor of this node: counted among its sends and, unless a
    /// restored checkpoint holds it already, pushed by `push`.
    fn main_tell_local(&self, node: &NodeHandle, push: &mut dyn FnMut());
    /// `main` tells an actor of another node `env`: counted, logged and sent.
    fn main_tell_remote(&self, node: &NodeHandle, env: Envelope);
    /// `main` asks actor `to`: counted, numbered by its position among `main`'s sends,
    /// sent by `send` unless skipped, its reply expected from the transport.
    fn main_ask(
        &self,
        node: &NodeHandle,
        transport: &Arc<Transport>,
        to: ActorId,
        send: MainAskSend<'_>,
    ) -> MainAsk;
    /// `main`'s ask `request` to `to` is given up on: its timeout is kept as its outcome.
    /// False if it has its reply already.
    fn main_ask_timed_out(&self, request: u64, to: ActorId) -> bool;
    /// `main` is about to wait: a restarted node restores its actors first.
    fn main_waits(&self, node: &NodeHandle);
    /// An actor of this node answers `main`'s ask `request` on node `rank`.
    /// `Ok(false)`: `main` gave up on the ask before this reply.
    fn reply_to_main(
        &self,
        node: &NodeHandle,
        rank: u16,
        request: u64,
        outcome: &Outcome,
    ) -> Result<bool, String>;

    // Replies to other nodes made under the layer's lock.

    /// Whether this thread holds a recovery layer's lock (a send that waited for queue
    /// room could then wait for a network task that waits for the lock).
    fn holds_lock(&self) -> bool;
    /// Sends the reply to node `rank`'s ask `request` without waiting for queue room.
    fn send_reply_unblocking(&self, rank: u16, request: u64, outcome: Outcome);

    // Actors' lives.

    /// Child actor `id` was spawned: logged messages that waited for it go in.
    fn child_spawned(&self, node: &NodeHandle, id: ActorId);
    /// A restarted node starts its actors once their states are back: true if `cell`'s
    /// start is deferred until then.
    fn defer_start(&self, cell: Arc<dyn Control>) -> bool;
    /// An actor failed: the set rolls back as one unit.
    fn actor_failed(&self, failure: &SupervisionEvent);

    // The node's life.

    /// This process's incarnation of its rank.
    fn incarnation_number(&self) -> u32;
    /// What the node waits for, for the supervisor's report (waiting at most `patience`
    /// for the layer's lock).
    fn stall_report(&self, node: &NodeHandle, patience: Duration) -> String;
    /// The sender-based log's payload bytes and entries, for the supervisor's samples;
    /// `None` if the layer is busy (never waits for its lock) or has no protocol yet.
    fn log_size(&self) -> Option<(u64, u64)>;
    /// The node's `main` has finished: tell the supervisor.
    fn announce_finished(&self);
    /// The node shuts down: final totals, background threads stopped.
    fn shutdown(&self);
    /// The layer itself, for tests and tools that reach its statistics.
    fn as_any(&self) -> &dyn Any;
}

/// What recovery must do with a tell from this thread.
pub(crate) enum TellHook<'a> {
    /// Nothing: recovery is off, or an actor sends inside its node.
    None,
    /// The app's `main` sends: counted (see [`RecoveryHooks::main_tell_local`]).
    Main(&'a Arc<dyn RecoveryHooks>),
    /// An actor sends inside its node and every message is logged (measurement mode).
    LogAll(&'a Arc<dyn RecoveryHooks>, ActorId),
}

/// The hook for a tell from this thread through `node`: one load when recovery is off.
#[inline]
pub(crate) fn tell_hook(node: &NodeHandle) -> TellHook<'_> {
    let Some(hooks) = node.recovery() else {
        return TellHook::None;
    };
    match crate::actor::lifecycle::current_actor() {
        None => TellHook::Main(hooks),
        Some(from) if hooks.logs_everything() => TellHook::LogAll(hooks, from),
        Some(_) => TellHook::None,
    }
}

/// How `main`'s ask reaches its actor: the part that knows the message's type.
pub(crate) enum MainAskSend<'a> {
    /// To an actor of this node: pushes the message with the reply slot of the given
    /// request; true if the mailbox refused it.
    Local(&'a mut dyn FnMut(u64) -> bool),
    /// To an actor of another node: the envelope for the given request, or why the
    /// message cannot leave (the outcome kept for the ask, and the reason).
    Remote(&'a mut dyn FnMut(u64) -> Result<Envelope, (RemoteError, String)>),
}

/// `main`'s ask, sent (or skipped, or refused).
pub(crate) struct MainAsk {
    /// Its request number.
    pub(crate) request: u64,
    /// Where its reply arrives.
    pub(crate) reply: tokio::sync::oneshot::Receiver<Outcome>,
    /// Why it failed at once, if it did (the transport's request is cancelled).
    pub(crate) failed: Option<String>,
}

/// The pseudo-actor that sends on behalf of the app's `main` on node `rank`.
pub(crate) fn main_id(rank: u16) -> ActorId {
    ActorId::main_of(rank)
}

pub(crate) use crate::transport::frame::{is_main_request, request_number, MAIN_REQUEST};

thread_local! {
    static DROPS_SILENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with the reply slots of `main`'s asks that it drops answering nothing: the
/// caller gives the one answer itself (a message refused by its mailbox).
pub(crate) fn without_drop_replies<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            DROPS_SILENT.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(DROPS_SILENT.with(|s| s.replace(true)));
    f()
}

/// Whether a dropped reply slot of `main`'s must answer nothing (see
/// [`without_drop_replies`]).
pub(crate) fn drop_replies_silenced() -> bool {
    DROPS_SILENT.with(|s| s.get())
}
