//! Typed references to actors, and the two ways to message them: `tell` and `ask`.
//!
//! An [`ActorRef`] names a stable [`ActorId`]; it is `Clone + Send + Sync` and serializes
//! as that id alone, so it can be stored in actor state (and so in checkpoints) and sent in
//! messages. Deserializing it looks the id up on the node doing the deserializing.

use crate::actor::lifecycle::{ActorCell, Control};
use crate::actor::mailbox::Status;
use crate::actor::reply::ReplyTo;
use crate::actor::{type_tag, Actor, Message};
use crate::actor_id::ActorId;
use crate::error::{AskError, SendError};
use crate::node::NodeHandle;
use crate::recovery::hooks::{self as recovery_hooks, MainAskSend, RecoveryHooks, TellHook};
use crate::telemetry;
use crate::transport::frame::{Envelope, RemoteError};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Poll};
use std::time::Duration;
use tokio::sync::oneshot;

/// A typed, location-independent reference to an actor of type `A`.
pub struct ActorRef<A: Actor> {
    route: Route<A>,
}

enum Route<A: Actor> {
    /// The actor lives on this node: messages move into its mailbox.
    Local(Arc<ActorCell<A>>),
    /// The actor lives on another node: messages are encoded and sent there.
    Remote(Arc<RemoteTarget>),
}

pub(crate) struct RemoteTarget {
    id: ActorId,
    node: NodeHandle,
    ask_timeout: Duration,
    type_tag: u64,
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        let route = match &self.route {
            Route::Local(cell) => Route::Local(Arc::clone(cell)),
            Route::Remote(target) => Route::Remote(Arc::clone(target)),
        };
        ActorRef { route }
    }
}

impl<A: Actor> std::fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = match self.route {
            Route::Local(_) => "local",
            Route::Remote(_) => "remote",
        };
        write!(f, "ActorRef<{}>({}, {place})", A::NAME, self.id())
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id()
    }
}
impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> ActorRef<A> {
    pub(crate) fn from_cell(cell: Arc<ActorCell<A>>) -> Self {
        ActorRef {
            route: Route::Local(cell),
        }
    }

    /// The actor's cell when it lives on this node.
    pub(crate) fn local_cell(&self) -> Option<&Arc<ActorCell<A>>> {
        match &self.route {
            Route::Local(cell) => Some(cell),
            Route::Remote(_) => None,
        }
    }

    pub(crate) fn remote(id: ActorId, node: NodeHandle, ask_timeout: Duration) -> Self {
        ActorRef {
            route: Route::Remote(Arc::new(RemoteTarget {
                id,
                node,
                ask_timeout,
                type_tag: type_tag::<A>(),
            })),
        }
    }

    /// The actor's stable identity.
    pub fn id(&self) -> ActorId {
        match &self.route {
            Route::Local(cell) => cell.mailbox.id,
            Route::Remote(t) => t.id,
        }
    }

    /// Messages waiting in the actor's mailbox, for a local actor (`None` for a remote one).
    pub fn queued(&self) -> Option<usize> {
        match &self.route {
            Route::Local(cell) => Some(cell.mailbox.len()),
            Route::Remote(_) => None,
        }
    }

    /// Whether the actor lives on this node.
    pub fn is_local(&self) -> bool {
        matches!(self.route, Route::Local(_))
    }

    /// Whether the actor still accepts messages, as far as this node knows (a remote
    /// actor counts as alive while its node is).
    pub fn is_alive(&self) -> bool {
        match &self.route {
            Route::Local(cell) => cell.mailbox.status() == Status::Running,
            Route::Remote(t) => t.node.transport().is_some_and(|tr| {
                tr.liveness(t.id.rank()) == crate::failure_detector::PeerLiveness::Alive
            }),
        }
    }

    /// Sends `msg` without waiting for it to be handled.
    ///
    /// Messages from one sender to one actor are handled in the order they were sent.
    /// Fails, handing the message back, if the actor has stopped or failed, or its node is
    /// unreachable.
    #[inline]
    pub fn tell<M: Message<A>>(&self, msg: M) -> Result<(), SendError<M>> {
        self.tell_with(msg, ReplyTo::none())
    }

    /// A tell of `msg` with reply slot `reply` (empty for a tell, an actor's route for
    /// an actor's ask).
    #[inline]
    pub(crate) fn tell_with<M: Message<A>>(
        &self,
        msg: M,
        reply: ReplyTo<M::Reply>,
    ) -> Result<(), SendError<M>> {
        match &self.route {
            // Recovery off: nothing of the node is read. Kept this small so that it is
            // inlined into the sender (out of line, a cross-core tell cost 6-9% more).
            Route::Local(cell) if !cell.mailbox.recovers => cell
                .send(msg.into_set(reply))
                .map_err(|(set, status)| send_error::<A, M>(cell.mailbox.id, set, status)),
            _ => self.tell_through_hooks(msg, reply),
        }
    }

    /// A tell to another node, or on a node with recovery on: the node's hooks say how.
    #[inline(never)]
    fn tell_through_hooks<M: Message<A>>(
        &self,
        msg: M,
        reply: ReplyTo<M::Reply>,
    ) -> Result<(), SendError<M>> {
        use crate::actor::reexecution::{self, Made};
        // A re-executed async handler does not send again what its checkpoint holds; it
        // gets the outcome the send had.
        if let Made::Skip(code) = reexecution::effect_seen() {
            reexecution::drop_skipped(reply);
            let id = self.id();
            return match code {
                0 => {
                    reexecution::drop_skipped(msg);
                    Ok(())
                }
                1 => Err(SendError::ActorStopped { id, message: msg }),
                2 => Err(SendError::ActorFailed { id, message: msg }),
                _ => Err(SendError::Unreachable {
                    id,
                    reason: "refused before the checkpoint this handler was restored from".into(),
                    message: msg,
                }),
            };
        }
        let sent = reexecution::making(|| match recovery_hooks::tell_hook(self.node_handle()) {
            TellHook::None => self.tell_direct(msg, reply),
            TellHook::Main(hooks) => self.main_tell(hooks, msg, reply),
            TellHook::LogAll(hooks, from) => self.logged_local_tell(hooks, from, msg, reply),
        });
        reexecution::outcome(match &sent {
            Ok(()) => 0,
            Err(SendError::ActorStopped { .. }) => 1,
            Err(SendError::ActorFailed { .. }) => 2,
            Err(SendError::Unreachable { .. }) => 3,
        });
        sent
    }

    #[inline]
    fn tell_direct<M: Message<A>>(
        &self,
        msg: M,
        reply: ReplyTo<M::Reply>,
    ) -> Result<(), SendError<M>> {
        match &self.route {
            Route::Local(cell) => cell
                .send(msg.into_set(reply))
                .map_err(|(set, status)| send_error::<A, M>(cell.mailbox.id, set, status)),
            Route::Remote(t) => {
                let set = msg.into_set(reply);
                t.send(set, None).map_err(|(set, reason)| {
                    telemetry::send_error(A::NAME);
                    SendError::Unreachable {
                        id: t.id,
                        reason,
                        message: take_back::<A, M>(set),
                    }
                })
            }
        }
    }

    fn node_handle(&self) -> &NodeHandle {
        match &self.route {
            Route::Local(cell) => cell.node(),
            Route::Remote(t) => &t.node,
        }
    }

    /// Measurement mode (log everything): a tell inside the node is also serialized and
    /// logged, as it would be without correlated sets.
    #[cold]
    fn logged_local_tell<M: Message<A>>(
        &self,
        layer: &Arc<dyn RecoveryHooks>,
        from: ActorId,
        msg: M,
        reply: ReplyTo<M::Reply>,
    ) -> Result<(), SendError<M>> {
        if let Route::Local(cell) = &self.route {
            let set = msg.into_set(reply);
            // A copy for the log, not a message that leaves: its slots stay live here.
            let logged =
                crate::actor::reply::serializing_for_checkpoint(|| crate::wire::encode(&set));
            if let Ok(bytes) = logged {
                layer.log_local(from, cell.mailbox.id, bytes.into());
            }
            return cell
                .send(set)
                .map_err(|(set, status)| send_error::<A, M>(cell.mailbox.id, set, status));
        }
        self.tell_direct(msg, reply)
    }

    /// A tell from the app's main on a node with recovery on: counted, so that a
    /// restarted node's main does not make again the tells its checkpoint contains.
    #[cold]
    fn main_tell<M: Message<A>>(
        &self,
        layer: &Arc<dyn RecoveryHooks>,
        msg: M,
        reply: ReplyTo<M::Reply>,
    ) -> Result<(), SendError<M>> {
        let node = self.node_handle();
        match &self.route {
            Route::Local(_) => {
                let mut pending = Some((msg, reply));
                let mut sent = Ok(());
                layer.main_tell_local(node, &mut || {
                    if let Some((msg, reply)) = pending.take() {
                        sent = self.tell_direct(msg, reply);
                    }
                });
                sent
            }
            Route::Remote(t) => {
                // A tell that cannot leave (too large, or not encodable) is refused
                // before it is counted among main's sends: a re-executed main is refused
                // the same way, instead of skipping a send it then makes differently.
                let set = msg.into_set(reply);
                match t.envelope(&set, None) {
                    Ok(env) => {
                        layer.main_tell_remote(node, env);
                        Ok(())
                    }
                    Err(e) => Err(SendError::Unreachable {
                        id: t.id,
                        reason: e.to_string(),
                        message: take_back::<A, M>(set),
                    }),
                }
            }
        }
    }

    /// Sends `msg` and returns a future of the handler's reply.
    ///
    /// The request times out after the node's default ask timeout unless
    /// [`Ask::timeout`] sets another. The future needs a Tokio runtime with timers, which
    /// [`crate::Node::block_on`] provides.
    ///
    /// Inside an `async fn` handler this is [`crate::Context::ask`]: the reply comes back
    /// to the handler's actor as a result (recovered like one), and there is no timeout.
    pub fn ask<M: Message<A>>(&self, msg: M) -> Ask<A, M::Reply> {
        if let Some((asker, awaits)) = crate::actor::awaits::asking_handler() {
            return self.handler_ask(asker, awaits, msg);
        }
        if let TellHook::Main(layer) = recovery_hooks::tell_hook(self.node_handle()) {
            if let Some(tr) = self.node_handle().transport() {
                return self.main_ask(layer, tr, msg);
            }
        }
        let id = self.id();
        match &self.route {
            Route::Local(cell) => {
                let (reply, rx) = ReplyTo::channel();
                let state = match cell.send(msg.into_set(reply)) {
                    Ok(()) => AskState::Local(rx),
                    Err((_, status)) => {
                        telemetry::send_error(A::NAME);
                        AskState::Failed(Some(status_error(id, status)))
                    }
                };
                Ask {
                    id,
                    status: Some(Arc::clone(cell) as Arc<dyn StatusView>),
                    timeout: Some(cell.mailbox.ask_timeout),
                    state,
                    sleep: None,
                    main_layer: None,
                    settled: false,
                    _reply: PhantomData,
                }
            }
            Route::Remote(t) => {
                if t.node.recovery().is_some() && crate::actor::lifecycle::current_actor().is_some()
                {
                    telemetry::ask_unrecovered(A::NAME);
                }
                let state = match t.node.transport() {
                    None => AskState::Failed(Some(AskError::Unreachable {
                        id,
                        reason: "this node is not part of a cluster".into(),
                    })),
                    Some(tr) => {
                        let (request, rx) = tr.new_request(id.rank());
                        let set = msg.into_set(ReplyTo::outgoing(tr.rank(), request));
                        match t.send(set, Some(request)) {
                            Ok(()) => AskState::Remote(rx, request, tr),
                            Err((_, reason)) => {
                                tr.cancel_request(request);
                                telemetry::send_error(A::NAME);
                                AskState::Failed(Some(AskError::Unreachable { id, reason }))
                            }
                        }
                    }
                };
                Ask {
                    id,
                    status: None,
                    timeout: Some(t.ask_timeout),
                    state,
                    sleep: None,
                    main_layer: None,
                    settled: false,
                    _reply: PhantomData,
                }
            }
        }
    }

    /// An ask made inside an async handler: an await of the handler's actor, as
    /// [`crate::Context::ask`] makes it.
    fn handler_ask<M: Message<A>>(
        &self,
        asker: ActorId,
        awaits: crate::actor::awaits::SharedAwaits,
        msg: M,
    ) -> Ask<A, M::Reply> {
        let id = self.id();
        let key = awaits.lock().unwrap_or_else(|e| e.into_inner()).ask(id);
        let route = crate::actor::awaits::AwaitRoute {
            to: asker,
            asked: id,
            key,
        };
        let mut result = crate::actor::awaits::ResultOf {
            awaits,
            to: id,
            key,
            done: false,
        };
        let slot = if self.is_local() {
            ReplyTo::to_await(route, None)
        } else {
            ReplyTo::await_outgoing(route)
        };
        let state = match self.tell_with(msg, slot) {
            Ok(()) => AskState::Await(result),
            Err(e) => {
                result.forget();
                AskState::Failed(Some(match e {
                    SendError::ActorStopped { id, .. } => AskError::ActorStopped(id),
                    SendError::ActorFailed { id, .. } => AskError::ActorFailed(id),
                    SendError::Unreachable { id, reason, .. } => {
                        AskError::Unreachable { id, reason }
                    }
                }))
            }
        };
        Ask {
            id,
            status: None,
            timeout: None,
            state,
            sleep: None,
            main_layer: None,
            settled: false,
            _reply: PhantomData,
        }
    }

    /// An ask by the app's `main` with recovery on (see the recovery layer's
    /// `main_replay`): counted among main's sends and numbered by its position, its reply
    /// kept by the node; a restarted node's `main` skips it if its checkpoint contains it
    /// and gets the reply kept from before the failure, or made after the restore (by a
    /// restored actor, or resent by the replier's node).
    #[cold]
    fn main_ask<M: Message<A>>(
        &self,
        layer: &Arc<dyn RecoveryHooks>,
        tr: Arc<crate::transport::Transport>,
        msg: M,
    ) -> Ask<A, M::Reply> {
        let id = self.id();
        let node = self.node_handle();
        let mut msg = Some(msg);
        let started = match &self.route {
            Route::Local(cell) => {
                let rank = node.rank();
                layer.main_ask(
                    node,
                    &tr,
                    id,
                    MainAskSend::Local(&mut |request| {
                        let Some(msg) = msg.take() else {
                            return false;
                        };
                        let reply = ReplyTo::to_driver(rank, request);
                        let refused = cell.send(msg.into_set(reply)).is_err();
                        if refused {
                            telemetry::send_error(A::NAME);
                        }
                        refused
                    }),
                )
            }
            // The sending side's image of the slot: it only serializes as the route.
            Route::Remote(t) => layer.main_ask(
                node,
                &tr,
                id,
                MainAskSend::Remote(&mut |request| {
                    let Some(msg) = msg.take() else {
                        return Err((RemoteError::ActorGone(id), "sent twice".into()));
                    };
                    t.envelope(
                        &msg.into_set(ReplyTo::outgoing(node.rank(), request)),
                        Some(request),
                    )
                    .map_err(|refused| {
                        telemetry::send_error(A::NAME);
                        (refused.outcome(id), refused.to_string())
                    })
                }),
            ),
        };
        let (status, timeout) = match &self.route {
            Route::Local(cell) => (
                Some(Arc::clone(cell) as Arc<dyn StatusView>),
                cell.mailbox.ask_timeout,
            ),
            Route::Remote(t) => (None, t.ask_timeout),
        };
        let state = match started.failed {
            Some(reason) => AskState::Failed(Some(AskError::Unreachable { id, reason })),
            None => AskState::Remote(started.reply, started.request, tr),
        };
        Ask {
            id,
            status,
            timeout: Some(timeout),
            state,
            sleep: None,
            main_layer: Some(Arc::clone(layer)),
            settled: false,
            _reply: PhantomData,
        }
    }

    /// Asks the actor to stop once it has handled every message already in its mailbox.
    /// Sends made after this call fail. Only local actors can be stopped this way.
    pub fn stop(&self) {
        if let Route::Local(cell) = &self.route {
            Control::request_stop(Arc::clone(cell));
        }
    }
}

/// Why a message for another node did not become an envelope.
#[derive(Debug)]
enum NotSent {
    /// It did not encode.
    Encode(String),
    /// It encodes to more than a frame carries.
    TooLarge(crate::transport::TooLarge),
}

impl std::fmt::Display for NotSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotSent::Encode(e) => write!(f, "the message does not encode: {e}"),
            NotSent::TooLarge(e) => e.fmt(f),
        }
    }
}

impl NotSent {
    /// The refusal as the outcome of `main`'s ask to `id`: kept like an answer, so a
    /// re-executed `main` gets the same.
    fn outcome(&self, id: ActorId) -> RemoteError {
        match self {
            NotSent::TooLarge(e) => e.outcome(),
            NotSent::Encode(e) => RemoteError::Undecodable(id, format!("not encoded: {e}")),
        }
    }
}

impl RemoteTarget {
    /// Encodes `set` into an envelope for the actor.
    fn envelope<S: Serialize>(&self, set: &S, request: Option<u64>) -> Result<Envelope, NotSent> {
        let payload = crate::wire::encode_bytes(set).map_err(|e| NotSent::Encode(e.to_string()))?;
        if let Some(t) = self.node.transport() {
            t.check_fits(payload.len(), "message")
                .map_err(NotSent::TooLarge)?;
        }
        Ok(Envelope {
            to: self.id,
            from: crate::actor::lifecycle::current_actor()
                .unwrap_or_else(|| recovery_hooks::main_id(self.node.rank())),
            type_tag: self.type_tag,
            request,
            payload,
        })
    }

    /// Encodes `set` and queues it for the actor's node; hands `set` back on failure.
    fn send<S: Serialize>(&self, set: S, request: Option<u64>) -> Result<(), (S, String)> {
        let env = match self.envelope(&set, request) {
            Ok(env) => env,
            Err(e) => return Err((set, e.to_string())),
        };
        send_envelope(&self.node, env).map_err(|e| (set, e))
    }
}

/// Queues `env` for its addressee's node, from the current actor (or `main`). With
/// recovery on the message goes through the node's recovery layer (logged, indexed, with
/// the dependency vector).
pub(crate) fn send_envelope(node: &NodeHandle, env: Envelope) -> Result<(), String> {
    let Some(transport) = node.transport() else {
        return Err(format!(
            "node {} is not reachable from a single-node run",
            env.to.rank()
        ));
    };
    if let Some(layer) = node.recovery() {
        let from = crate::actor::lifecycle::current_actor()
            .unwrap_or_else(|| recovery_hooks::main_id(node.rank()));
        return layer.send_remote(node, from, env);
    }
    transport.send_envelope(env).map_err(|e| e.to_string())
}

fn take_back<A: Actor, M: Message<A>>(set: A::Msg) -> M {
    match M::from_set(set) {
        Some(m) => m,
        None => unreachable!("a message set built from M converts back to M"),
    }
}

fn send_error<A: Actor, M: Message<A>>(id: ActorId, set: A::Msg, status: Status) -> SendError<M> {
    telemetry::send_error(A::NAME);
    let message = take_back::<A, M>(set);
    match status {
        Status::Failed => SendError::ActorFailed { id, message },
        _ => SendError::ActorStopped { id, message },
    }
}

fn status_error(id: ActorId, status: Status) -> AskError {
    match status {
        Status::Failed => AskError::ActorFailed(id),
        _ => AskError::ActorStopped(id),
    }
}

impl<A: Actor> Serialize for ActorRef<A> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.id().serialize(serializer)
    }
}

impl<'de, A: Actor> Deserialize<'de> for ActorRef<A> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let id = ActorId::deserialize(deserializer)?;
        let node = NodeHandle::current().ok_or_else(|| {
            serde::de::Error::custom(format!(
                "cannot resolve actor {id}: deserialized outside a Lazarus node"
            ))
        })?;
        node.actor_ref::<A>(id).map_err(serde::de::Error::custom)
    }
}

/// What an [`Ask`] needs to know about a local actor's status.
pub(crate) trait StatusView: Send + Sync {
    fn status(&self) -> Status;
}

enum AskState<R> {
    Local(oneshot::Receiver<R>),
    Remote(
        oneshot::Receiver<Result<Vec<u8>, RemoteError>>,
        u64,
        Arc<crate::transport::Transport>,
    ),
    Failed(Option<AskError>),
    /// Made inside an async handler: the result of one of its actor's awaits.
    Await(crate::actor::awaits::ResultOf),
}

/// A pending request: await it for the reply.
#[must_use = "an Ask does nothing unless awaited"]
pub struct Ask<A: Actor, R> {
    id: ActorId,
    status: Option<Arc<dyn StatusView>>,
    timeout: Option<Duration>,
    state: AskState<R>,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The node's recovery layer, for an ask by `main` with recovery on: its timeout is
    /// kept as its outcome.
    main_layer: Option<Arc<dyn RecoveryHooks>>,
    /// The ask has its outcome (returned, or given up on).
    settled: bool,
    _reply: PhantomData<fn() -> A>,
}

impl<A: Actor, R> Drop for Ask<A, R> {
    fn drop(&mut self) {
        // An ask by `main` dropped unanswered (`select!`, an outer timeout): given up on,
        // like a timeout, so a re-executed `main` that drops it again does not get the
        // late reply meant for nobody.
        if !self.settled && self.main_layer.is_some() {
            self.give_up();
        }
    }
}

impl<A: Actor, R> Ask<A, R> {
    /// Waits at most `timeout` for the reply instead of the node's default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Waits for the reply for as long as it takes.
    pub fn no_timeout(mut self) -> Self {
        self.timeout = None;
        self
    }

    /// Stops waiting for a remote reply; for an ask by `main` with recovery on, keeps
    /// "timed out" as its outcome (a re-executed `main` gives up there too). False if
    /// the reply won the race (it is being handed over: wait for it).
    fn give_up(&mut self) -> bool {
        if let AskState::Remote(_, request, transport) = &self.state {
            if let Some(layer) = &self.main_layer {
                if !layer.main_ask_timed_out(*request, self.id) {
                    return false;
                }
            }
            transport.cancel_request(*request);
        }
        self.settled = true;
        true
    }

    fn closed_error(&self) -> AskError {
        let id = self.id;
        match self.status.as_ref().map(|s| s.status()) {
            Some(Status::Failed) => AskError::ActorFailed(id),
            Some(Status::Stopped) => AskError::ActorStopped(id),
            // The actor is alive, so its handler dropped the ReplyTo.
            _ => AskError::NoReply(id),
        }
    }
}

fn remote_error(id: ActorId, e: RemoteError) -> AskError {
    match e {
        RemoteError::NoReply(_) => AskError::NoReply(id),
        RemoteError::ActorGone(_) => AskError::ActorStopped(id),
        other => AskError::Rejected {
            id,
            reason: other.to_string(),
        },
    }
}

impl<A: Actor, R> Unpin for Ask<A, R> {}

impl<A: Actor, R: serde::de::DeserializeOwned + 'static> Future for Ask<A, R> {
    type Output = Result<R, AskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let id = this.id;
        let ready =
            match &mut this.state {
                AskState::Failed(err) => Some(Err(err.take().unwrap_or(AskError::NoReply(id)))),
                AskState::Await(result) => match result.poll_result::<R>(cx.waker()) {
                    Some(out) => Some(out),
                    None => return Poll::Pending,
                },
                AskState::Local(rx) => match Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(r)) => Some(Ok(r)),
                    Poll::Ready(Err(_)) => Some(Err(this.closed_error())),
                    Poll::Pending => None,
                },
                AskState::Remote(rx, _, _) => match Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(Ok(bytes))) => Some(crate::wire::decode::<R>(&bytes).map_err(
                        |e| AskError::Rejected {
                            id,
                            reason: format!("reply did not decode: {e}"),
                        },
                    )),
                    Poll::Ready(Ok(Err(RemoteError::TimedOut(_)))) => {
                        // A re-executed `main`: this ask timed out before the failure.
                        telemetry::ask_timeout(A::NAME);
                        Some(Err(AskError::Timeout {
                            id,
                            timeout: this.timeout.unwrap_or_default(),
                        }))
                    }
                    Poll::Ready(Ok(Err(e))) => Some(Err(remote_error(id, e))),
                    Poll::Ready(Err(_)) => Some(Err(AskError::Unreachable {
                        id,
                        reason: format!("node {} failed before replying", id.rank()),
                    })),
                    Poll::Pending => None,
                },
            };
        if let Some(out) = ready {
            this.settled = true;
            return Poll::Ready(out);
        }
        let Some(timeout) = this.timeout else {
            return Poll::Pending;
        };
        if this.sleep.is_none() {
            // Arm the timer only when the reply is not immediately there.
            if tokio::runtime::Handle::try_current().is_err() {
                if !this.give_up() {
                    this.timeout = None;
                    return Poll::Pending;
                }
                return Poll::Ready(Err(AskError::NoTimer));
            }
            this.sleep = Some(Box::pin(tokio::time::sleep(timeout)));
        }
        if let Some(sleep) = this.sleep.as_mut() {
            ready!(sleep.as_mut().poll(cx));
        }
        if !this.give_up() {
            // The reply won the race and is on its way to the receiver (whose waker this
            // poll registered): it is the outcome, not the timeout.
            this.timeout = None;
            this.sleep = None;
            return Poll::Pending;
        }
        telemetry::ask_timeout(A::NAME);
        Poll::Ready(Err(AskError::Timeout { id, timeout }))
    }
}
