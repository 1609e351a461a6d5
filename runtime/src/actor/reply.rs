//! Reply slots: how a handler answers an `ask`.
//!
//! A handler that returns a value replies synchronously; one that takes a [`ReplyTo`]
//! parameter may keep it (for example until a token comes back around a ring) and reply
//! later. For a `tell` the slot is empty and replying is a no-op. A slot that came from
//! another node replies over the transport; dropping it unanswered tells the asker so.
//! A slot of an actor's ask ([`crate::Context::ask`]) replies with a message to the
//! asking actor, sent like a tell from the replier (logged and replayed with recovery on).

use crate::actor::awaits::{AwaitDelivery, AwaitRoute, ResultPayload, RESULT_TAG};
use crate::actor_id::ActorId;
use crate::error::AskError;
use crate::node::NodeHandle;
use crate::transport::frame::{Envelope, RemoteError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::oneshot;

enum Slot<R> {
    /// Nobody waits (`tell`), or the answer was given.
    Empty,
    /// An asker on this node.
    Local(oneshot::Sender<R>),
    /// The sending side's image of a remote slot: serializes as the route, inert here.
    Outgoing { rank: u16, request: u64 },
    /// An asker on node `rank`, waiting for request `request`.
    Remote { rank: u16, request: u64 },
    /// An actor that asked: the reply goes to it as a message. `local` delivers it
    /// without encoding while the slot has not left the asker's node.
    Actor {
        route: ActorRoute,
        local: Option<LocalDelivery<R>>,
    },
    /// An async handler awaits the reply (`ctx.ask(..).await`): it goes to the asker as
    /// a result. `local` delivers it without encoding while the slot has not left the
    /// asker's node.
    Await {
        route: AwaitRoute,
        local: Option<AwaitDelivery<R>>,
        /// Serialized to cross nodes: the copy that left answers, this one is inert.
        left: AtomicBool,
    },
    /// The asking side's image of an await's slot sent to another node: serializes as
    /// the route, inert here.
    AwaitOutgoing(AwaitRoute),
}

/// Hands a reply to an asking actor of this node as its reply message.
pub(crate) type LocalDelivery<R> = Box<dyn FnOnce(R) -> bool + Send + Sync>;

/// Where the reply of an actor's ask goes: the asking actor, as the message at position
/// `variant` of its message set (see [`crate::ReplyMessage`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ActorRoute {
    pub(crate) to: ActorId,
    /// The asker's message-set fingerprint, checked by its node like any message's.
    pub(crate) type_tag: u64,
    pub(crate) variant: u32,
}

/// A slot as it crosses nodes and goes into checkpoints: its route.
#[derive(Serialize, Deserialize)]
enum WireRoute {
    /// Nobody waits.
    None,
    /// Request `request` of node `rank`.
    Request { rank: u16, request: u64 },
    /// An actor's ask.
    Actor(ActorRoute),
    /// An ask an async handler awaits.
    Await(AwaitRoute),
}

/// The right to answer one request. Dropping it unanswered makes the asker's `ask` fail
/// with [`crate::AskError::NoReply`]; an actor that asked with
/// [`Context::ask`](crate::Context::ask) waits for a message instead, and gets none.
#[must_use = "dropping a ReplyTo leaves the asker without an answer"]
pub struct ReplyTo<R> {
    slot: Slot<R>,
}

impl<R> ReplyTo<R> {
    /// A slot for a message sent with `tell`: nobody waits for the answer.
    pub fn none() -> Self {
        ReplyTo { slot: Slot::Empty }
    }

    pub(crate) fn channel() -> (Self, oneshot::Receiver<R>) {
        let (tx, rx) = oneshot::channel();
        (
            ReplyTo {
                slot: Slot::Local(tx),
            },
            rx,
        )
    }

    pub(crate) fn outgoing(rank: u16, request: u64) -> Self {
        ReplyTo {
            slot: Slot::Outgoing { rank, request },
        }
    }

    /// The slot of an ask by `main` on node `rank` with recovery on: answered through
    /// the recovery layer, and checkpointed as its route (see
    /// `RecoveryHooks::main_ask`).
    pub(crate) fn to_driver(rank: u16, request: u64) -> Self {
        ReplyTo {
            slot: Slot::Remote { rank, request },
        }
    }

    /// The slot of an ask by an actor: the reply goes to the asker along `route`, or
    /// through `local` while the slot stays on the asker's node.
    pub(crate) fn to_actor(route: ActorRoute, local: Option<LocalDelivery<R>>) -> Self {
        ReplyTo {
            slot: Slot::Actor { route, local },
        }
    }

    /// The slot of an ask an async handler awaits: the result goes to the asker along
    /// `route`, or through `local` while the slot stays on the asker's node.
    pub(crate) fn to_await(route: AwaitRoute, local: Option<AwaitDelivery<R>>) -> Self {
        ReplyTo {
            slot: Slot::Await {
                route,
                local,
                left: AtomicBool::new(false),
            },
        }
    }

    /// The asking side's image of the slot of an awaited ask to another node.
    pub(crate) fn await_outgoing(route: AwaitRoute) -> Self {
        ReplyTo {
            slot: Slot::AwaitOutgoing(route),
        }
    }

    /// Moves the slot out, leaving an empty one (`std::mem::take`).
    pub fn take(&mut self) -> Self {
        std::mem::take(self)
    }

    /// Whether somebody is waiting for the answer (the message came from `ask`).
    pub fn is_requested(&self) -> bool {
        matches!(
            self.slot,
            Slot::Local(_) | Slot::Remote { .. } | Slot::Actor { .. } | Slot::Await { .. }
        )
    }
}

impl<R: Serialize> ReplyTo<R> {
    /// Answers the request. Returns `false` if nobody was waiting any more (the asker timed
    /// out or went away) or the message came from `tell`.
    pub fn send(self, reply: R) -> bool {
        use crate::actor::reexecution::{self, Made};
        if !self.kept() {
            return self.answer(reply);
        }
        // A re-executed async handler answered before its checkpoint: it gets the
        // outcome it had.
        if let Made::Skip(code) = reexecution::effect_seen() {
            reexecution::drop_skipped(self);
            return code == 0;
        }
        let answered = reexecution::making(|| self.answer(reply));
        reexecution::outcome(u64::from(!answered));
        answered
    }

    fn answer(mut self, reply: R) -> bool {
        match std::mem::replace(&mut self.slot, Slot::Empty) {
            Slot::Local(tx) => tx.send(reply).is_ok(),
            Slot::Remote { rank, request } => {
                let outcome = crate::wire::encode(&reply).map_err(|e| {
                    RemoteError::Undecodable(ActorId::from_u64(0), format!("reply encoding: {e}"))
                });
                send_remote(rank, request, outcome)
            }
            Slot::Actor {
                local: Some(deliver),
                ..
            } => deliver(reply),
            Slot::Actor { route, local: None } => match send_to_actor(route, &reply) {
                Ok(()) => true,
                Err(e) => {
                    crate::telemetry::send_error("reply");
                    tracing::warn!(
                        asker = %route.to,
                        "the reply to actor {}'s ask was not sent: {e}",
                        route.to
                    );
                    false
                }
            },
            Slot::Await {
                local: Some(deliver),
                ..
            } => deliver(Ok(reply)),
            Slot::Await {
                route, local: None, ..
            } => {
                let outcome = crate::wire::encode(&reply).map_err(|e| AskError::Rejected {
                    id: route.asked,
                    reason: format!("reply encoding: {e}"),
                });
                send_result(route, outcome)
            }
            Slot::Empty | Slot::Outgoing { .. } | Slot::AwaitOutgoing(_) => false,
        }
    }
}

/// Sends the result of an await to the asking actor, from the current actor like a tell
/// (logged with recovery on).
fn send_result(route: AwaitRoute, outcome: Result<Vec<u8>, AskError>) -> bool {
    let sent = (|| {
        let node = NodeHandle::current().ok_or("this thread belongs to no node")?;
        let payload: ResultPayload = (route.asked, route.key, outcome);
        let payload = crate::wire::encode_bytes(&payload).map_err(|e| e.to_string())?;
        send_to_asker(&node, route.to, RESULT_TAG, payload)
    })();
    match sent {
        Ok(()) => true,
        Err(e) => {
            crate::telemetry::send_error("reply");
            tracing::warn!(asker = %route.to, "the result of actor {}'s await was not sent: {e}", route.to);
            false
        }
    }
}

/// Sends `reply` to the actor that asked, as the message `route` names: encoded as that
/// message of the asker's set (the variant, the value, an empty reply slot), and sent from
/// the current actor like a tell.
fn send_to_actor<R: Serialize>(route: ActorRoute, reply: &R) -> Result<(), String> {
    let node = NodeHandle::current().ok_or("this thread belongs to no node")?;
    let payload = crate::wire::encode_bytes(&(route.variant, reply, WireRoute::None))
        .map_err(|e| e.to_string())?;
    send_to_asker(&node, route.to, route.type_tag, payload)
}

/// Sends `payload` (a message of type `type_tag`) to the asking actor `to`, from the
/// current actor like a tell: into its mailbox on this node, else to its node.
fn send_to_asker(
    node: &NodeHandle,
    to: ActorId,
    type_tag: u64,
    payload: bytes::Bytes,
) -> Result<(), String> {
    let env = Envelope {
        to,
        from: crate::actor::lifecycle::current_actor()
            .unwrap_or_else(|| crate::recovery::hooks::main_id(node.rank())),
        type_tag,
        request: None,
        payload,
    };
    if to.rank() == node.rank() {
        return node.tell_encoded(&env).map_err(|e| e.to_string());
    }
    if let Some(t) = node.transport() {
        // The route came from a message or an image: it may name a node the cluster
        // lacks.
        if usize::from(to.rank()) >= t.size() {
            return Err(format!(
                "the asker {to} names node {} but the cluster has {} nodes",
                to.rank(),
                t.size()
            ));
        }
        t.check_fits(env.payload.len(), "reply")
            .map_err(|e| e.to_string())?;
    }
    crate::actor::actor_ref::send_envelope(node, env)
}

fn send_remote(rank: u16, request: u64, mut outcome: Result<Vec<u8>, RemoteError>) -> bool {
    let node = NodeHandle::current();
    // A reply no peer would accept becomes the error saying so: the asker learns why
    // instead of waiting (for ever, for `main` with recovery on).
    if let (Some(t), Ok(bytes)) = (node.as_ref().and_then(|n| n.transport()), &outcome) {
        if t.rank() != rank {
            if let Err(e) = t.check_fits(bytes.len(), "reply") {
                tracing::warn!(rank, "the reply to node {rank}'s ask is not sent: {e}");
                outcome = Err(e.outcome());
            }
        }
    }
    if crate::recovery::hooks::is_main_request(request) {
        // An answer to the app's main with recovery on: logged, so a restarted main
        // gets it again.
        if let Some((node, layer)) = node.as_ref().and_then(|n| n.recovery().map(|l| (n, l))) {
            return match layer.reply_to_main(node, rank, request, &outcome) {
                Ok(delivered) => delivered,
                Err(e) => {
                    tracing::warn!(rank, "reply to main on node {rank} not sent: {e}");
                    false
                }
            };
        }
        // Only a node with recovery on makes such a request, and its peers have it on
        // too; an unlogged reply would be refused there.
        tracing::error!(
            rank,
            "reply to main's ask on node {rank} dropped: this thread belongs to no node with recovery on"
        );
        return false;
    }
    // A slot dropped while this thread holds the recovery layer's lock (a message the
    // layer delivered was refused, and its slot with it): a send that waited for queue
    // room could wait for a network task that waits for the lock.
    if let Some(layer) = node.as_ref().and_then(|n| n.recovery()) {
        if layer.holds_lock() {
            layer.send_reply_unblocking(rank, request, outcome);
            return true;
        }
    }
    match node.and_then(|n| n.transport()) {
        Some(t) => t.send_reply(rank, request, outcome).is_ok(),
        None => {
            tracing::warn!(
                rank,
                request,
                "reply to a remote asker dropped: no transport on this thread"
            );
            false
        }
    }
}

impl<R> ReplyTo<R> {
    /// Whether a checkpoint keeps this slot, so that answering or dropping it is an
    /// effect of an async handler (a slot it answered before its checkpoint is in a
    /// re-execution's message again, decoded). A local asker's slot is not kept: its
    /// asker asks again after a restart.
    fn kept(&self) -> bool {
        match &self.slot {
            Slot::Empty | Slot::Outgoing { .. } | Slot::AwaitOutgoing(_) | Slot::Local(_) => false,
            Slot::Await { left, .. } => !left.load(Ordering::Acquire),
            Slot::Remote { .. } | Slot::Actor { .. } => true,
        }
    }
}

impl<R> Drop for ReplyTo<R> {
    fn drop(&mut self) {
        if crate::actor::reexecution::dropping_skipped() {
            return;
        }
        // Dropping it unanswered tells the asker (most kinds): an effect of a handler,
        // which a re-executed async handler does not make again.
        if !matches!(self.slot, Slot::Actor { .. })
            && self.kept()
            && crate::actor::reexecution::skips_effect()
        {
            return;
        }
        if matches!(&self.slot, Slot::Await { left, .. } if !left.load(Ordering::Acquire))
            && !crate::recovery::hooks::drop_replies_silenced()
        {
            // The asker's handler awaits: it gets an error instead of waiting for ever.
            if let Slot::Await { route, local, .. } = std::mem::replace(&mut self.slot, Slot::Empty)
            {
                let error = if std::thread::panicking() {
                    AskError::ActorFailed(route.asked)
                } else {
                    AskError::NoReply(route.asked)
                };
                match local {
                    Some(deliver) => {
                        deliver(Err(error));
                    }
                    None => {
                        send_result(route, Err(error));
                    }
                }
            }
            return;
        }
        if let Slot::Actor { route, .. } = &self.slot {
            // Nothing to tell: the asker waits for a message, not a call. Also dropped
            // with the state a rollback replaces, so not a warning.
            tracing::debug!(asker = %route.to, "an actor's ask was dropped unanswered");
            return;
        }
        if let Slot::Remote { rank, request } = self.slot {
            if crate::recovery::hooks::is_main_request(request)
                && (std::thread::panicking() || crate::recovery::hooks::drop_replies_silenced())
            {
                // A handler panicked with recovery on: its node rolls back and the
                // restored actor answers `main` (a "no reply" now would contradict it).
                // Or the layer answers for the refused message itself.
                return;
            }
            send_remote(
                rank,
                request,
                Err(RemoteError::NoReply(ActorId::from_u64(0))),
            );
        }
    }
}

impl<R> std::fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyTo")
            .field("requested", &self.is_requested())
            .finish()
    }
}

impl<R> Default for ReplyTo<R> {
    /// An empty slot, like [`ReplyTo::none`].
    ///
    /// With recovery on, do not `#[serde(skip)]` a `ReplyTo` kept in actor state (the
    /// `Actor` derive refuses it): a checkpoint keeps the route of `main`'s asks and of
    /// asks from other nodes, so an actor restored from it still answers an ask that
    /// `main` made before the checkpoint (and that the re-executed `main` does not make
    /// again). A skipped slot is lost with the failure, and `main` waits for ever.
    fn default() -> Self {
        ReplyTo::none()
    }
}

thread_local! {
    static CHECKPOINTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with reply slots of local askers serialized as empty (for checkpoint images).
pub(crate) fn serializing_for_checkpoint<T>(f: impl FnOnce() -> T) -> T {
    CHECKPOINTING.with(|c| c.set(true));
    let out = f();
    CHECKPOINTING.with(|c| c.set(false));
    out
}

impl<R> Serialize for ReplyTo<R> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.slot {
            Slot::Empty => WireRoute::None.serialize(s),
            Slot::Outgoing { rank, request } | Slot::Remote { rank, request } => {
                WireRoute::Request {
                    rank: *rank,
                    request: *request,
                }
                .serialize(s)
            }
            Slot::Actor { route, .. } => WireRoute::Actor(*route).serialize(s),
            Slot::Await { route, left, .. } => {
                // Handed on to another node, which answers: dropping this copy says
                // nothing. (A checkpoint's copy does not leave.)
                if !CHECKPOINTING.with(|c| c.get()) {
                    left.store(true, Ordering::Release);
                }
                WireRoute::Await(*route).serialize(s)
            }
            Slot::AwaitOutgoing(route) => WireRoute::Await(*route).serialize(s),
            // A checkpoint keeps the actor's state, not the asker's thread: after a
            // restart the local asker (the app's main) asks again.
            Slot::Local(_) if CHECKPOINTING.with(|c| c.get()) => WireRoute::None.serialize(s),
            Slot::Local(_) => Err(serde::ser::Error::custom(
                "a reply slot of a local asker cannot cross nodes",
            )),
        }
    }
}

impl<'de, R> Deserialize<'de> for ReplyTo<R> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match WireRoute::deserialize(d)? {
            WireRoute::None => ReplyTo::none(),
            WireRoute::Request { rank, request } => ReplyTo {
                slot: Slot::Remote { rank, request },
            },
            WireRoute::Actor(route) => ReplyTo::to_actor(route, None),
            WireRoute::Await(route) => ReplyTo::to_await(route, None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot may be kept in anything shared between threads, as before actor asks gave
    /// it a local delivery: the type checks it, so this compiles or it does not.
    #[test]
    fn a_reply_slot_can_be_shared_between_threads() {
        fn shareable<T: Send + Sync>() {}
        shareable::<ReplyTo<u64>>();
        shareable::<ReplyTo<Vec<u8>>>();
    }
}
