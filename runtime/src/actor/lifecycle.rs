//! The life of one actor on its core: start hook, message batches, stop hook, and what
//! happens to its mailbox when it stops or fails.
//!
//! An [`ActorCell`] is the actor as the runtime sees it: mailbox, state and a `scheduled`
//! flag. A send pushes into the mailbox and, if the flag was clear, queues the cell on its
//! core. The cell runs a batch, clears the flag, and re-queues itself if messages arrived
//! meanwhile. The flag makes the cell run on at most one thread at a time (always its own
//! core's), in mailbox order.

use crate::actor::actor_ref::ActorRef;
use crate::actor::awaits::{
    polling_handler, sleep_source, AsyncTurn, Awaited, AwaitedValue, HandlerWaker, ResultPayload,
    SharedAwaits, RESULT_TAG, SLEEP_BIT,
};
use crate::actor::context::Context;
use crate::actor::mailbox::{Mailbox, Signal, Stamp, Status};
use crate::actor::reexecution::{self, Before, Recorded, SuspendedImage};
use crate::actor::supervision::{panic_text, FailureKind, SupervisionEvent};
use crate::actor::timer::{TimerId, TimerTarget, Timers};
use crate::actor::{type_tag, Actor, MessageEnum};
use crate::actor_id::ActorId;
use crate::executor::{CoreQueue, Runnable};
use crate::node::{CoreId, NodeHandle};
use crate::recovery::hooks::dependence::{self, ActorDependence};
use crate::recovery::hooks::RecoveryHooks;
use crate::recovery::{next_stashed, Dependence, Receiving, Stashed};
use crate::telemetry::ActorStats;
use crate::transport::frame::{Envelope, RemoteError};
use std::any::Any;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Messages handled per turn before the core moves on to other actors.
const BATCH: usize = 256;

thread_local! {
    /// The actor whose handler or hook runs on this thread (None on other threads): the
    /// sender of the messages it sends, which names their channel.
    static CURRENT_ACTOR: std::cell::Cell<Option<ActorId>> = const { std::cell::Cell::new(None) };
}

/// The actor running on this thread, if any.
pub(crate) fn current_actor() -> Option<ActorId> {
    CURRENT_ACTOR.with(|c| c.get())
}

/// An actor as it goes into a checkpoint: its state and the messages in its mailbox.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ActorImage {
    /// The actor.
    pub(crate) id: ActorId,
    /// Fingerprint of its type (checked on restore).
    pub(crate) type_tag: u64,
    /// Whether `on_start` had run.
    pub(crate) started: bool,
    /// Its postcard-encoded state.
    pub(crate) state: crate::payload::Payload,
    /// Its pending messages in mailbox order, postcard-encoded.
    pub(crate) mailbox: Vec<crate::payload::Payload>,
    /// For an order-sensitive actor: each pending message's channel stamp (same order).
    #[serde(default)]
    pub(crate) stamps: Vec<Option<Stamp>>,
    /// Its timers: arm count, pending ones with their remaining delay, fired ones not yet
    /// handled.
    #[serde(default)]
    pub(crate) timers: crate::actor::timer::TimersImage,
    /// The sender its selective receive waited for, if one was set.
    #[serde(default)]
    pub(crate) receive_only: Option<ActorId>,
    /// How many actors it has spawned (its next child's number, [`ActorId::child`]).
    #[serde(default)]
    pub(crate) children: u64,
    /// The core it runs on (where a restarted node rebuilds a child actor).
    #[serde(default)]
    pub(crate) core: usize,
    /// Its async handler suspended at the checkpoint, if one was: an encoded
    /// [`SuspendedImage`] (the state above is the actor's from before the handler).
    #[serde(default)]
    pub(crate) suspended: Option<crate::payload::Payload>,
    /// Results that came for its awaits and were not taken yet, encoded.
    #[serde(default)]
    pub(crate) results: Vec<crate::payload::Payload>,
    /// Asks its awaits made so far to each actor: later asks number on from these.
    #[serde(default)]
    pub(crate) asked: Vec<(ActorId, u64)>,
    /// Its async handler's sleeps not over yet: key and nanoseconds left.
    #[serde(default)]
    pub(crate) sleeps: Vec<(u64, u64)>,
    /// For each of `results`: the channel stamp of one the delivery order has not admitted
    /// yet (an order-sensitive actor's, recovery on), none for one already handed to the
    /// awaits.
    #[serde(default)]
    pub(crate) result_stamps: Vec<Option<Stamp>>,
}

/// One actor: its mailbox, its state, and where it runs.
pub(crate) struct ActorCell<A: Actor> {
    pub(crate) mailbox: Mailbox<A::Msg>,
    scheduled: AtomicBool,
    core: Arc<CoreQueue>,
    core_id: CoreId,
    node: NodeHandle,
    state: Mutex<State<A>>,
    /// Actors spawned from its handlers and hooks so far: the next one's number.
    children: AtomicU64,
    /// Locked apart from `state`: the timer thread fires while a handler runs.
    timers: Mutex<Timers<A::Msg>>,
    /// Which of the node's determinants this actor's messages to other nodes wait for
    /// (recovery on; see `recovery::hooks::dependence`).
    dependence: ActorDependence,
    /// Its async handlers' awaits: asks made, results not taken yet. Made at its first
    /// await (most actors never await: a spawn allocates nothing for it).
    awaits: OnceLock<SharedAwaits>,
    /// The buffer its last checkpoint image's state was encoded into, handed back once
    /// the image was stored (recovery on). A fresh buffer of a large state costs a page
    /// fault per 4 KiB, taken while the node's cores are paused: two thirds of the pause
    /// for jacobi2d's 32 MB tiles.
    image_buffer: Mutex<Vec<u8>>,
}

enum Phase {
    NotStarted,
    Running,
    Exited,
}

struct State<A: Actor> {
    phase: Phase,
    actor: Option<A>,
    ctx: Option<Context<A>>,
    stats: ActorStats,
    /// Order-sensitive actors: messages (and, with recovery on, results) taken out of the
    /// mailbox that cannot be delivered yet (the logged delivery order of a replay does not
    /// allow them, a selective receive waits for another sender, or an async handler
    /// awaits), in arrival order.
    stash: VecDeque<(Held<A::Msg>, Option<Stamp>)>,
    /// The last turn ended with held messages it had no time for: run again even if the
    /// mailbox is empty.
    rerun: bool,
    /// An async handler that awaits: it holds the actor and its context meanwhile.
    suspended: Option<Box<Suspended<A>>>,
}

/// What waits in an actor's stash.
enum Held<M> {
    /// A message.
    Msg(M),
    /// A result for an await of an order-sensitive actor (recovery on): handed to its
    /// awaits once the delivery order admits it, as a message would be handled.
    Result(Awaited),
}

/// An async handler awaiting a result.
struct Suspended<A: Actor> {
    future: AsyncTurn<A>,
    waker: Arc<HandlerWaker>,
    /// `waker` as the future sees it.
    waker_handle: Waker,
    message_type: &'static str,
    /// Stop and barrier signals that came meanwhile: they wait for the handler, like the
    /// messages enqueued before them.
    deferred: Vec<Signal<A::Msg>>,
    /// With recovery on: what a checkpoint keeps of the handler, and what a restore
    /// re-executes it from (`reexecution`).
    recorded: Option<Box<Recorded>>,
    /// Results that came while a re-execution hands back recorded ones: taken after.
    held: Vec<Awaited>,
}

/// How a suspended handler's turn went.
enum Drive {
    /// It still awaits.
    Pending,
    /// It completed; the actor takes messages again.
    Done,
    /// The actor ends.
    Exit(Exit),
}

/// How a turn ended the actor.
enum Exit {
    /// Stopped by request; run `on_stop`.
    Stopped,
    /// A handler or hook panicked.
    Failed(FailureKind, String),
}

impl<A: Actor> ActorCell<A> {
    /// A cell for `actor`; without one, a vacant cell that [`Control::restore_image`]
    /// must fill before it runs (one that runs vacant stops at once).
    pub(crate) fn new(
        actor: Option<A>,
        mailbox: Mailbox<A::Msg>,
        core: Arc<CoreQueue>,
        core_id: CoreId,
        node: NodeHandle,
    ) -> Arc<Self> {
        let stats = ActorStats::new(A::NAME, mailbox.id.to_string());
        // A spawned actor starts from what its spawner knew.
        let dependence = ActorDependence::new(if node.recovers() {
            dependence::of_sender()
        } else {
            Dependence::Below(0)
        });
        Arc::new(ActorCell {
            dependence,
            mailbox,
            scheduled: AtomicBool::new(false),
            core,
            core_id,
            node,
            state: Mutex::new(State {
                phase: Phase::NotStarted,
                actor,
                ctx: None,
                stats,
                stash: VecDeque::new(),
                rerun: false,
                suspended: None,
            }),
            awaits: OnceLock::new(),
            children: AtomicU64::new(0),
            image_buffer: Mutex::new(Vec::new()),
            timers: Mutex::new(Timers::default()),
        })
    }

    /// Arms a timer that sends `msg` to this actor after `delay`.
    pub(crate) fn arm_timer(self: &Arc<Self>, delay: Duration, msg: A::Msg) -> TimerId {
        let deadline = deadline_after(delay);
        let seq = self
            .timers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .arm(deadline, msg);
        let weak: Weak<dyn TimerTarget> = Arc::downgrade(self) as Weak<dyn TimerTarget>;
        crate::actor::timer::schedule(deadline, seq, weak);
        TimerId(seq)
    }

    /// Cancels a timer: true if its message had not been handled (and now never will be).
    pub(crate) fn cancel_timer(&self, id: TimerId) -> bool {
        self.timers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .cancel(id.0)
    }

    /// Whether results for this actor's awaits are deliveries its recovery layer orders
    /// (logged as determinants): an order-sensitive actor with recovery on.
    fn orders_results(&self) -> bool {
        A::ORDER_SENSITIVE && self.mailbox.recovers && self.node.recovery().is_some()
    }

    /// Enqueues the result of an await that came encoded (from another node, with its
    /// channel stamp if it came through the recovery layer, or through an encoded reply
    /// slot on this node).
    fn result_encoded(
        self: &Arc<Self>,
        env: &Envelope,
        local: bool,
        stamp: Option<Stamp>,
    ) -> Result<(), RemoteError> {
        let id = self.mailbox.id;
        let (asked, key, outcome): ResultPayload = crate::wire::decode(&env.payload)
            .map_err(|e| RemoteError::Undecodable(id, format!("result: {e}")))?;
        let value = match outcome {
            Ok(bytes) => AwaitedValue::Encoded(bytes),
            Err(e) => AwaitedValue::Failed(e),
        };
        let result = Awaited {
            from: asked,
            key,
            value,
        };
        let delivered = if local {
            self.deliver_local_result(result, env.from)
        } else {
            self.deliver_result(result, stamp.filter(|_| self.orders_results()))
        };
        if delivered {
            Ok(())
        } else {
            Err(RemoteError::ActorGone(id))
        }
    }

    /// Enqueues a result from `from`, an actor of this node: with recovery on, accounted
    /// like a message between them ([`ActorCell::send`]): the receiver takes on the
    /// sender's dependence, an order-sensitive one gets the channel's stamp, and the push
    /// is an event of the set.
    fn deliver_local_result(self: &Arc<Self>, result: Awaited, from: ActorId) -> bool {
        let layer = if self.mailbox.recovers {
            self.node.recovery()
        } else {
            None
        };
        let Some(layer) = layer else {
            return self.deliver_result(result, None);
        };
        let sender = dependence::of_sender();
        self.dependence.raise(sender);
        let stamp = A::ORDER_SENSITIVE.then(|| layer.stamp_local(from, self.mailbox.id));
        if !self.deliver_result(result, stamp) {
            return false;
        }
        if current_actor().is_some() {
            layer.local_delivery(&self.node, &self.core, sender);
        }
        true
    }

    /// Whether the message with `stamp`, just taken out of the mailbox, is to be handled
    /// (false for a timer cancelled after it fired).
    fn handle_now(&self, stamp: Option<Stamp>) -> bool {
        match stamp {
            Some(s) if crate::actor::timer::is_source(s.from) => self
                .timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .handle(s.index),
            _ => true,
        }
    }

    /// Starts sleep `key` of an async handler: its result comes after `delay`.
    pub(crate) fn start_sleep(self: &Arc<Self>, key: u64, delay: Duration) {
        let deadline = deadline_after(delay);
        self.awaits()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sleeps
            .insert(key, deadline);
        let weak: Weak<dyn TimerTarget> = Arc::downgrade(self) as Weak<dyn TimerTarget>;
        crate::actor::timer::schedule(deadline, SLEEP_BIT | key, weak);
    }

    /// Sleep `key` is over: its result goes to the actor, unless a restore replaced it.
    fn sleep_over(self: &Arc<Self>, key: u64) {
        let awaits = self.awaits();
        // The push happens under the awaits' lock: a checkpoint holds each sleep either
        // pending or as a result (see `checkpoint_image`).
        let mut a = awaits.lock().unwrap_or_else(|e| e.into_inner());
        if a.sleeps.remove(&key).is_none() {
            return;
        }
        let from = sleep_source(self.mailbox.id);
        let result = Awaited {
            from,
            key,
            value: AwaitedValue::Encoded(Vec::new()),
        };
        // On the actor's timer channel, numbered apart from its timers.
        let stamp = self.orders_results().then_some(Stamp {
            from,
            index: SLEEP_BIT | key,
        });
        let pushed = self.mailbox.push_result(result, stamp);
        drop(a);
        if pushed {
            self.notify();
        }
    }

    /// The node the actor lives on.
    pub(crate) fn node(&self) -> &NodeHandle {
        &self.node
    }

    /// Its async handlers' awaits.
    pub(crate) fn awaits(&self) -> SharedAwaits {
        Arc::clone(self.awaits.get_or_init(SharedAwaits::default))
    }

    /// Whether the await `result` answers was made and given up.
    fn result_given_up(&self, result: &Awaited) -> bool {
        self.awaits.get().is_some_and(|a| {
            a.lock()
                .unwrap_or_else(|e| e.into_inner())
                .given_up(result.from, result.key)
        })
    }

    /// Hands a result taken out of the mailbox to the awaits.
    fn deliver_to_awaits(&self, result: Awaited) {
        self.deliver_to_handler(result, None);
    }

    /// Hands a result taken out of the mailbox to the awaits of the suspended handler
    /// `suspended`: marked woken directly if it waits for it (the caller polls it next).
    fn deliver_to_handler(&self, result: Awaited, suspended: Option<&Suspended<A>>) {
        let awaits = self.awaits.get_or_init(SharedAwaits::default);
        let own = suspended.map(|s| &s.waker_handle);
        let woke = awaits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .deliver(result, own);
        if woke {
            if let Some(s) = suspended {
                s.waker.woken.store(true, Ordering::Release);
            }
        }
    }

    /// Enqueues the result of an await (with its channel stamp if the delivery order
    /// admits it) and wakes the actor; false if it has stopped.
    pub(crate) fn deliver_result(self: &Arc<Self>, result: Awaited, stamp: Option<Stamp>) -> bool {
        if !self.mailbox.push_result(result, stamp) {
            return false;
        }
        self.notify();
        true
    }

    /// Queues the cell on its core unless it is already queued or running.
    #[inline]
    pub(crate) fn notify(self: &Arc<Self>) {
        // SeqCst RMW pairs with the SeqCst clear in `run`: either the runner sees our
        // message when it re-checks the mailbox, or we see the flag clear and queue it.
        if !self.scheduled.swap(true, Ordering::SeqCst) {
            self.core.schedule(Arc::clone(self) as Arc<dyn Runnable>);
        }
    }

    /// Enqueues an application message and wakes the actor.
    #[inline]
    pub(crate) fn send(self: &Arc<Self>, msg: A::Msg) -> Result<(), (A::Msg, Status)> {
        if !self.mailbox.recovers {
            return self.push_and_wake(msg);
        }
        let Some(layer) = self.node.recovery() else {
            return self.push_and_wake(msg);
        };
        // Before the push, so the receiver's next send out of the node sees it.
        let sender = dependence::of_sender();
        self.dependence.raise(sender);
        self.push_and_wake(msg)?;
        // A message from an actor of this node is an event of the set: counted after the
        // push, so whatever it lets through comes after it (`main`'s tells are counted
        // as its inputs).
        if current_actor().is_some() {
            layer.local_delivery(&self.node, &self.core, sender);
        }
        Ok(())
    }

    fn push_and_wake(self: &Arc<Self>, msg: A::Msg) -> Result<(), (A::Msg, Status)> {
        if A::ORDER_SENSITIVE {
            let from = current_actor()
                .unwrap_or_else(|| crate::recovery::hooks::main_id(self.node.rank()));
            let stamp = match self.node.recovery() {
                Some(layer) => layer.stamp_local(from, self.mailbox.id),
                // Without recovery only the sender matters (selective receive).
                None => Stamp { from, index: 0 },
            };
            return self.send_stamped(msg, stamp);
        }
        self.mailbox.push_msg(msg)?;
        self.notify();
        Ok(())
    }

    fn signal(self: &Arc<Self>, signal: Signal<A::Msg>) {
        self.mailbox.push_signal(signal);
        self.notify();
    }

    fn turn(self: &Arc<Self>, state: &mut State<A>) {
        CURRENT_ACTOR.with(|c| c.set(Some(self.mailbox.id)));
        let hooks = if self.mailbox.recovers {
            self.node.recovery()
        } else {
            None
        };
        let entered = hooks.map(|layer| {
            layer.turn_begins();
            dependence::enter(&self.dependence)
        });
        self.turn_inner(state);
        drop(entered);
        CURRENT_ACTOR.with(|c| c.set(None));
    }

    fn turn_inner(self: &Arc<Self>, state: &mut State<A>) {
        let exit = match state.phase {
            Phase::Exited => {
                drain_dead_letters::<A>(&self.mailbox, &mut state.stats, usize::MAX);
                return;
            }
            Phase::NotStarted => {
                let ctx = Context::new(
                    ActorRef::from_cell(Arc::clone(self)),
                    self.node.clone(),
                    self.core_id,
                );
                let ctx = state.ctx.insert(ctx);
                state.phase = Phase::Running;
                match state.actor.as_mut() {
                    Some(actor) => match catch_unwind(AssertUnwindSafe(|| actor.on_start(ctx))) {
                        Ok(()) => self.run_turn(state),
                        Err(p) => Some(Exit::Failed(FailureKind::StartPanicked, panic_text(&*p))),
                    },
                    None => Some(Exit::Stopped),
                }
            }
            Phase::Running => self.run_turn(state),
        };
        if let Some(exit) = exit {
            self.exit(state, exit);
        }
    }

    /// A running actor's turn: a suspended async handler first, then messages; a message
    /// for an async handler starts it.
    fn run_turn(self: &Arc<Self>, state: &mut State<A>) -> Option<Exit> {
        // A few handlers per turn, then other actors of the core get theirs.
        for _ in 0..4 {
            if state.suspended.is_some() {
                match self.drive_suspended(state) {
                    Drive::Pending => return None,
                    Drive::Exit(e) => return Some(e),
                    Drive::Done => {}
                }
            }
            let mut start_async = None;
            if let Some(exit) = self.batch(state, &mut start_async) {
                return Some(exit);
            }
            let msg = start_async?;
            let (Some(actor), Some(ctx)) = (state.actor.take(), state.ctx.take()) else {
                return Some(Exit::Stopped);
            };
            let recorded = match self.record_start(&actor, &msg) {
                Ok(recorded) => recorded,
                Err(e) => {
                    let message_type = msg.type_name();
                    state.actor = Some(actor);
                    state.ctx = Some(ctx);
                    return Some(Exit::Failed(
                        FailureKind::HandlerPanicked { message_type },
                        e,
                    ));
                }
            };
            let waker = self.handler_waker();
            let message_type = msg.type_name();
            state.suspended = Some(Box::new(Suspended {
                future: A::handle_async(actor, msg, ctx),
                waker_handle: Waker::from(Arc::clone(&waker)),
                waker,
                message_type,
                deferred: Vec::new(),
                recorded,
                held: Vec::new(),
            }));
        }
        state.rerun = true;
        None
    }

    /// The waker of an async handler that starts now (polled at once).
    fn handler_waker(self: &Arc<Self>) -> Arc<HandlerWaker> {
        let weak = Arc::downgrade(self);
        Arc::new(HandlerWaker {
            woken: AtomicBool::new(true),
            notify: Box::new(move || {
                if let Some(cell) = weak.upgrade() {
                    cell.notify();
                }
            }),
        })
    }

    /// With recovery on, the record of an async handler that starts now: the actor's
    /// state and the message, encoded (a checkpoint keeps them while the handler is
    /// suspended), and what its asks, spawns and timers count from.
    fn record_start(&self, actor: &A, msg: &A::Msg) -> Result<Option<Box<Recorded>>, String> {
        if !self.mailbox.recovers || self.node.recovery().is_none() {
            return Ok(None);
        }
        let (state, message) = crate::actor::reply::serializing_for_checkpoint(|| {
            let state = crate::wire::encode(actor).map_err(|e| format!("state: {e}"))?;
            let message = crate::wire::encode(msg).map_err(|e| format!("message: {e}"))?;
            Ok::<_, String>((state, message))
        })
        .map_err(|e| {
            format!(
                "actor {} ({}): an async handler with recovery on keeps the state it started \
                 from, which does not encode: {e}",
                self.mailbox.id,
                A::NAME
            )
        })?;
        let before = Before {
            asked: self
                .awaits
                .get()
                .map(|a| a.lock().unwrap_or_else(|e| e.into_inner()).asked())
                .unwrap_or_default(),
            children: self.children.load(Ordering::Acquire),
            timers: self
                .timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .armed(),
        };
        Ok(Some(Box::new(Recorded::live(
            crate::payload::Payload(state),
            crate::payload::Payload(message),
            before,
        ))))
    }

    /// Takes what arrived for an actor whose async handler is suspended (results to their
    /// awaits, messages to the stash, stop and barrier signals deferred) and polls the
    /// handler if something woke it. An order-sensitive actor with recovery on takes its
    /// results as deliveries: one at a time, in the order its delivery order admits
    /// (recorded, or replayed from the log), each followed by a poll, so what the handler
    /// does depends on that order alone.
    fn drive_suspended(self: &Arc<Self>, state: &mut State<A>) -> Drive {
        let id = self.mailbox.id;
        let layer = if self.orders_results() {
            self.node.recovery()
        } else {
            None
        };
        let polled = {
            let State {
                suspended, stash, ..
            } = &mut *state;
            let Some(suspended) = suspended.as_mut() else {
                return Drive::Done;
            };
            let reexecuting = |s: &Suspended<A>| s.recorded.as_ref().is_some_and(|r| r.reexecuting);
            let mut taken = 0;
            while taken < BATCH {
                let Some(signal) = self.mailbox.pop() else {
                    break;
                };
                taken += 1;
                match signal {
                    Signal::Result(r, Some(stamp)) if layer.is_some() => {
                        stash.push_back((Held::Result(r), Some(stamp)))
                    }
                    Signal::Result(r, _) if reexecuting(suspended) => suspended.held.push(r),
                    Signal::Result(r, _) => self.deliver_to_handler(r, Some(suspended)),
                    Signal::Msg(m) => stash.push_back((Held::Msg(m), None)),
                    Signal::Stamped(m, stamp) => stash.push_back((Held::Msg(m), Some(stamp))),
                    other => suspended.deferred.push(other),
                }
            }
            let mut more = taken == BATCH;
            let mut admitted = 0;
            let polled = loop {
                if suspended.waker.woken.swap(false, Ordering::AcqRel) {
                    match self.poll_handler(suspended) {
                        Ok(Poll::Pending) => {}
                        done => break done,
                    }
                }
                let Some(layer) = layer.filter(|_| !reexecuting(suspended)) else {
                    break Ok(Poll::Pending);
                };
                if admitted == BATCH {
                    more = true;
                    break Ok(Poll::Pending);
                }
                let given_up = |r: &Awaited| self.result_given_up(r);
                let next = take_next(
                    Some(&**layer),
                    id,
                    stash,
                    None,
                    Receiving::Results,
                    &self.timers,
                    &given_up,
                );
                match next {
                    // Admitted, or given up (dropped by the awaits).
                    Some((Held::Result(r), _)) => {
                        admitted += 1;
                        self.deliver_to_handler(r, Some(suspended));
                    }
                    // A timer cancelled after it rang: dropped (no other message is a
                    // candidate while the handler awaits).
                    Some((Held::Msg(m), stamp)) => {
                        let live = self.handle_now(stamp);
                        debug_assert!(!live, "only results are candidates while suspended");
                        drop(m);
                    }
                    None => {
                        if stash.iter().any(|(h, _)| matches!(h, Held::Result(_))) {
                            layer.note_waiting(id);
                        }
                        break Ok(Poll::Pending);
                    }
                }
            };
            if more {
                state.rerun = true;
            }
            polled
        };
        match polled {
            Err(exit) => {
                state.suspended = None;
                Drive::Exit(exit)
            }
            Ok(Poll::Pending) => Drive::Pending,
            Ok(Poll::Ready((actor, ctx))) => {
                let stop = ctx.stop_requested();
                state.actor = Some(actor);
                state.ctx = Some(ctx);
                if let Some(done) = state.suspended.take() {
                    // Behind everything already in the mailbox, as when they came: only
                    // results and refused sends can have come after them.
                    for signal in done.deferred {
                        self.mailbox.requeue(signal);
                    }
                    for result in done.held {
                        self.deliver_to_awaits(result);
                    }
                }
                if stop {
                    return Drive::Exit(Exit::Stopped);
                }
                Drive::Done
            }
        }
    }

    /// Polls a suspended handler that was woken. A restore's re-execution hands back the
    /// recorded results one at a time, each followed by a poll; then checks that the
    /// handler made again what its record holds, and goes on live. Pending only once
    /// live.
    fn poll_handler(&self, suspended: &mut Suspended<A>) -> Result<Poll<(A, Context<A>)>, Exit> {
        let mut cx = std::task::Context::from_waker(&suspended.waker_handle);
        let message_type = suspended.message_type;
        let failed = |reason: String| {
            Exit::Failed(
                FailureKind::HandlerPanicked { message_type },
                format!("actor {} ({}): {reason}", self.mailbox.id, A::NAME),
            )
        };
        loop {
            let future = &mut suspended.future;
            let polled = reexecution::polling(&mut suspended.recorded, || {
                polling_handler(self.mailbox.id, self.awaits(), || {
                    catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(&mut cx)))
                })
            });
            let polled = match polled {
                Err(p) => {
                    return Err(Exit::Failed(
                        FailureKind::HandlerPanicked { message_type },
                        panic_text(&*p),
                    ))
                }
                Ok(p) => p,
            };
            let Some(recorded) = suspended.recorded.as_mut().filter(|r| r.reexecuting) else {
                return Ok(polled);
            };
            if polled.is_pending() && recorded.replaying() {
                // (`woken` is left as it is: the loop polls again anyway, and a wake-up
                // from another thread during the poll must not be lost.)
                match recorded.next_replayed() {
                    Some(Ok(result)) => self.deliver_to_awaits(result),
                    Some(Err(e)) => return Err(failed(e)),
                    None => {}
                }
                continue;
            }
            // Completed within its re-execution (it had not, when the record was taken),
            // or every recorded result is back: it must have made again what its record
            // holds.
            let finished = recorded.finish_reexecution();
            crate::telemetry::async_reexecution(finished.is_err());
            if let Err(short) = finished {
                return Err(failed(short.to_string()));
            }
            if polled.is_ready() {
                return Ok(polled);
            }
            for result in std::mem::take(&mut suspended.held) {
                self.deliver_to_awaits(result);
            }
            if !suspended.waker.woken.swap(false, Ordering::AcqRel) {
                return Ok(polled);
            }
        }
    }

    /// Enqueues `msg` with its channel stamp (an order-sensitive receiver).
    fn send_stamped(self: &Arc<Self>, msg: A::Msg, stamp: Stamp) -> Result<(), (A::Msg, Status)> {
        self.mailbox.push_stamped(msg, stamp)?;
        self.notify();
        Ok(())
    }

    /// Handles up to [`BATCH`] signals; stops at a message for an async handler, which it
    /// leaves in `start_async`. Returns how the actor ended, if it did.
    fn batch(&self, state: &mut State<A>, start_async: &mut Option<A::Msg>) -> Option<Exit> {
        let (Some(actor), Some(ctx)) = (state.actor.as_mut(), state.ctx.as_mut()) else {
            return Some(Exit::Stopped);
        };
        let stats = &mut state.stats;
        let stash = &mut state.stash;
        let id = self.mailbox.id;
        // Only order-sensitive actors with recovery on consult the delivery order.
        let layer = if A::ORDER_SENSITIVE {
            self.node.recovery().map(|l| &**l)
        } else {
            None
        };
        let mut dequeued = 0u64;
        // Handler calls of this batch, counted for the core once at its end.
        let mut handled = 0u64;
        let mut exit = None;
        // The mailbox ran dry: held messages (if any) were not deliverable either.
        let mut drained = false;
        for _ in 0..BATCH {
            // Selective receive: while set, only this sender's messages are delivered.
            let only = ctx.receive_filter();
            let holding = layer.is_some() || only.is_some() || !stash.is_empty();
            let stashed = if holding {
                let given_up = |r: &Awaited| self.result_given_up(r);
                let receiving = receiving(only);
                take_next(layer, id, stash, only, receiving, &self.timers, &given_up)
            } else {
                None
            };
            let signal = match stashed {
                Some((Held::Msg(msg), Some(stamp))) => Signal::Stamped(msg, stamp),
                Some((Held::Msg(msg), None)) => Signal::Msg(msg),
                Some((Held::Result(r), _)) => {
                    self.deliver_to_awaits(r);
                    continue;
                }
                None => {
                    let Some(signal) = self.mailbox.pop() else {
                        drained = true;
                        break;
                    };
                    dequeued += 1;
                    match signal {
                        // Held back unless the filter and the logged order (or, past it,
                        // this moment) make it the next delivery; a held one keeps its
                        // place. A cancelled timer goes on to be dropped.
                        Signal::Stamped(msg, stamp) if holding => {
                            let next = || {
                                let alone = [stashed_of(&self.timers, None, Some(stamp))];
                                next_stashed(alone, receiving(only), |_, _| {
                                    may_deliver(layer, id, stamp, only)
                                })
                            };
                            if stash.is_empty() && next().is_some() {
                                Signal::Stamped(msg, stamp)
                            } else {
                                stash.push_back((Held::Msg(msg), Some(stamp)));
                                continue;
                            }
                        }
                        // A result the delivery order admits is handed to the awaits
                        // (kept for an ask not made yet), one given up on is dropped.
                        Signal::Result(r, Some(stamp)) if layer.is_some() => {
                            let given_up = self.result_given_up(&r);
                            let alone = [Stashed::<ActorId>::Result { given_up }];
                            let next = || {
                                next_stashed(alone, receiving(only), |_, _| {
                                    may_deliver(layer, id, stamp, None)
                                })
                            };
                            if stash.is_empty() && next().is_some() {
                                self.deliver_to_awaits(r);
                            } else {
                                stash.push_back((Held::Result(r), Some(stamp)));
                            }
                            continue;
                        }
                        // No sender known: never the one a filter waits for.
                        Signal::Msg(msg) if only.is_some() || !stash.is_empty() => {
                            stash.push_back((Held::Msg(msg), None));
                            continue;
                        }
                        other => other,
                    }
                }
            };
            let (msg, stamp) = match signal {
                Signal::Msg(msg) => (Some(msg), None),
                Signal::Stamped(msg, stamp) => (Some(msg), Some(stamp)),
                other => {
                    if let Some(e) = self.control(other, stats) {
                        exit = Some(e);
                        break;
                    }
                    (None, None)
                }
            };
            match msg {
                Some(msg) if !self.handle_now(stamp) => drop(msg),
                None => {}
                Some(msg) if A::is_async(&msg) => {
                    handled += 1;
                    *start_async = Some(msg);
                    break;
                }
                Some(msg) => {
                    handled += 1;
                    let message_type = msg.type_name();
                    let started = stats.start_handler();
                    let id = self.mailbox.id;
                    let outcome = catch_unwind(AssertUnwindSafe(|| {
                        crate::failpoint::before_handler(id, message_type);
                        actor.handle(msg, ctx)
                    }));
                    stats.end_handler(started);
                    if let Err(p) = outcome {
                        exit = Some(Exit::Failed(
                            FailureKind::HandlerPanicked { message_type },
                            panic_text(&*p),
                        ));
                        break;
                    }
                    if ctx.stop_requested() {
                        exit = Some(Exit::Stopped);
                        break;
                    }
                }
            }
        }
        if !stash.is_empty() {
            if let Some(l) = layer {
                l.note_waiting(id);
            }
            state.rerun = !drained && exit.is_none();
        }
        let depth = self.mailbox.len() as u64;
        stats.flush(dequeued, depth, self.mailbox.signals_pushed());
        if handled > 0 {
            crate::executor::count_handled(handled);
        }
        exit
    }

    /// Acts on a control signal; returns how the actor ends if it does.
    fn control(&self, signal: Signal<A::Msg>, stats: &ActorStats) -> Option<Exit> {
        match signal {
            Signal::Stop => Some(Exit::Stopped),
            Signal::Barrier(ack) => {
                let _ = ack.send(stats.total_delivered);
                None
            }
            Signal::Result(r, _) => {
                // No handler awaits it now: kept if its ask is not made yet.
                self.deliver_to_awaits(r);
                None
            }
            Signal::Msg(_) | Signal::Stamped(..) => None,
        }
    }

    fn exit(&self, state: &mut State<A>, exit: Exit) {
        // Refuse new sends before anything else, so senders get an error from now on.
        if self.mailbox.status() == Status::Running {
            self.mailbox.set_status(Status::Stopping);
        }
        let exit = match exit {
            Exit::Stopped => {
                let hook = match (state.actor.as_mut(), state.ctx.as_mut()) {
                    (Some(actor), Some(ctx)) => {
                        catch_unwind(AssertUnwindSafe(|| actor.on_stop(ctx)))
                    }
                    _ => Ok(()),
                };
                match hook {
                    Ok(()) => Exit::Stopped,
                    Err(p) => Exit::Failed(FailureKind::StopPanicked, panic_text(&*p)),
                }
            }
            failed => failed,
        };
        match exit {
            Exit::Stopped => self.mailbox.set_status(Status::Stopped),
            Exit::Failed(kind, panic_message) => {
                self.mailbox.set_status(Status::Failed);
                state.stats.failed();
                let event = SupervisionEvent {
                    actor: self.mailbox.id,
                    actor_type: A::NAME,
                    core: self.core_id,
                    kind,
                    panic_message,
                };
                tracing::error!(%event, "actor failed");
                self.node.report_failure(&event);
            }
        }
        state.phase = Phase::Exited;
        // The context holds a reference to this cell: drop it to break the cycle (a
        // suspended handler's future holds both).
        state.suspended = None;
        state.ctx = None;
        state.actor = None;
        drain_dead_letters::<A>(&self.mailbox, &mut state.stats, usize::MAX);
        self.node.deregister(self.mailbox.id);
    }
}

/// `delay` from now; a delay past what the clock can count (`Duration::MAX`: "never")
/// is a century.
fn deadline_after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 24 * 3600)))
        .unwrap_or(now)
}

/// Whether an order-sensitive actor may handle the message with `stamp` now: from the
/// sender a selective receive names, if any, and admitted by the delivery order (a
/// selected delivery is determined by its channel's FIFO order, so it logs nothing).
fn may_deliver(
    layer: Option<&dyn RecoveryHooks>,
    id: ActorId,
    stamp: Stamp,
    only: Option<ActorId>,
) -> bool {
    match (only, layer) {
        (Some(sender), _) if stamp.from != sender => false,
        (Some(_), Some(l)) => l.admit_selected(id, stamp),
        (None, Some(l)) => l.admit(id, stamp),
        (_, None) => true,
    }
}

/// What a selective receive's filter lets the actor take (see `recovery::Receiving`).
fn receiving(only: Option<ActorId>) -> Receiving {
    match only {
        Some(_) => Receiving::Selective,
        None => Receiving::Anything,
    }
}

/// A stashed message (or result) as `recovery::next_stashed` sees it; `result`: a result,
/// and whether its await was given up. A timer cancelled after it rang, or a result whose
/// await was given up, is taken out (to be dropped) before any delivery decision, so it
/// takes no tick of the event clock: whether it came before the cancel (or the give-up)
/// depends on timing, and a replay in which it had not (a cancel removed it while pending,
/// a sleep given up never ends) must not wait for it.
fn stashed_of<M>(
    timers: &Mutex<Timers<M>>,
    result: Option<bool>,
    stamp: Option<Stamp>,
) -> Stashed<ActorId> {
    if let Some(given_up) = result {
        return Stashed::Result { given_up };
    }
    match stamp {
        None => Stashed::Unordered,
        Some(s) if crate::actor::timer::is_source(s.from) => Stashed::Timer {
            cancelled: timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_cancelled(s.index),
        },
        Some(s) => Stashed::Message { from: s.from },
    }
}

/// The first stashed message (or result) of an order-sensitive actor that may be delivered
/// now, or a timer cancelled after it rang or a result whose await was given up (to drop):
/// the rule of `recovery::next_stashed`, with the delivery order asked about each
/// candidate. A result is admitted whatever sender a selective receive names (`receiving`
/// says when results are candidates); `given_up` says whether its await was given up.
fn take_next<M>(
    layer: Option<&dyn RecoveryHooks>,
    id: ActorId,
    stash: &mut VecDeque<(Held<M>, Option<Stamp>)>,
    only: Option<ActorId>,
    receiving: Receiving,
    timers: &Mutex<Timers<M>>,
    given_up: &dyn Fn(&Awaited) -> bool,
) -> Option<(Held<M>, Option<Stamp>)> {
    let seen_as = stash.iter().map(|(held, stamp)| {
        let result = match held {
            Held::Result(r) => Some(given_up(r)),
            Held::Msg(_) => None,
        };
        stashed_of(timers, result, *stamp)
    });
    let pos = next_stashed(seen_as, receiving, |pos, seen| {
        let filter = match seen {
            Stashed::Result { .. } => None,
            _ => only,
        };
        stash[pos]
            .1
            .is_some_and(|stamp| may_deliver(layer, id, stamp, filter))
    })?;
    stash.remove(pos)
}

/// Accounts for messages that will never be handled: counted, logged, and their askers'
/// reply slots dropped (so the asker gets an error, not silence).
fn drain_dead_letters<A: Actor>(mailbox: &Mailbox<A::Msg>, stats: &mut ActorStats, max: usize) {
    let mut left = 0u64;
    let mut dequeued = 0u64;
    for _ in 0..max {
        match mailbox.pop() {
            Some(Signal::Msg(msg) | Signal::Stamped(msg, _)) => {
                tracing::warn!(actor = %mailbox.id, actor_type = A::NAME, message_type = msg.type_name(), "dead letter");
                left += 1;
                dequeued += 1;
            }
            Some(_) => dequeued += 1,
            None => break,
        }
    }
    if dequeued > 0 {
        stats.dead_letters(left);
        stats.flush(dequeued, mailbox.len() as u64, mailbox.signals_pushed());
    }
}

impl<A: Actor> Runnable for ActorCell<A> {
    fn run(self: Arc<Self>) {
        // Handlers run under catch_unwind, so the lock is never poisoned by them.
        let rerun = {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            self.turn(&mut state);
            std::mem::take(&mut state.rerun)
        };
        self.scheduled.store(false, Ordering::SeqCst);
        if rerun || !self.mailbox.is_empty() {
            self.notify();
        }
    }
}

impl<A: Actor> TimerTarget for ActorCell<A> {
    fn fire(self: Arc<Self>, seq: u64) {
        if seq & SLEEP_BIT != 0 {
            return self.sleep_over(seq & !SLEEP_BIT);
        }
        // The push happens under the timers lock (see `checkpoint_image`).
        let mut timers = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        let Some(msg) = timers.take_fired(seq) else {
            return; // cancelled
        };
        let stamp = Stamp {
            from: crate::actor::timer::source_of(self.mailbox.id),
            index: seq,
        };
        if self.mailbox.push_stamped(msg, stamp).is_ok() {
            drop(timers);
            self.notify();
        }
    }
}

impl<A: Actor> crate::actor::actor_ref::StatusView for ActorCell<A> {
    fn status(&self) -> Status {
        self.mailbox.status()
    }
}

/// Type-erased control of one actor, kept in the node's registry.
pub(crate) trait Control: Send + Sync {
    fn id(&self) -> ActorId;
    /// Decodes a message that came from another node and enqueues it (with its channel
    /// stamp when it came through the recovery layer).
    fn deliver_encoded(
        self: Arc<Self>,
        env: &Envelope,
        stamp: Option<Stamp>,
    ) -> Result<(), RemoteError>;
    /// Decodes a message from this node and enqueues it like a tell from the current
    /// thread (an actor's ask answered through an encoded reply slot).
    fn tell_encoded(self: Arc<Self>, env: &Envelope) -> Result<(), RemoteError>;
    /// Messages waiting in the mailbox.
    fn depth(&self) -> usize;
    /// Graceful stop: messages already enqueued are handled first; new sends fail.
    fn request_stop(self: Arc<Self>);
    /// A barrier answered once everything enqueued before it is handled; `None` if the
    /// actor no longer runs.
    fn barrier(self: Arc<Self>) -> Option<oneshot::Receiver<u64>>;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// The actor's checkpoint image; `None` if it has exited. Call only while the node's
    /// cores are paused (no handler runs and nobody else pushes into mailboxes).
    fn checkpoint_image(&self) -> Result<Option<ActorImage>, String>;
    /// Replaces the state and mailbox of an actor that has not run yet with `image`; it
    /// then resumes where the image was taken (no second `on_start` if it had run).
    fn restore_image(self: Arc<Self>, image: &ActorImage) -> Result<(), String>;
    /// Lets the actor run (a start deferred while its node was being restored).
    fn wake(self: Arc<Self>);
    /// Ends an actor that has not run, without its hooks: a restarted node's `main`
    /// spawned it again, but it had exited before the checkpoint.
    fn retire(self: Arc<Self>);
    /// The number of the next actor this one spawns (counts it).
    fn next_child(&self) -> u64;
    /// Takes back the buffer of a stored image's state, for the next checkpoint to
    /// encode into.
    fn recycle_image(&self, image: ActorImage);
}

impl<A: Actor> Control for ActorCell<A> {
    fn id(&self) -> ActorId {
        self.mailbox.id
    }

    fn deliver_encoded(
        self: Arc<Self>,
        env: &Envelope,
        stamp: Option<Stamp>,
    ) -> Result<(), RemoteError> {
        let id = self.mailbox.id;
        if env.type_tag == RESULT_TAG {
            return self.result_encoded(env, false, stamp);
        }
        if env.type_tag != type_tag::<A>() {
            return Err(RemoteError::WrongType(id));
        }
        let msg: A::Msg = crate::wire::decode(&env.payload)
            .map_err(|e| RemoteError::Undecodable(id, e.to_string()))?;
        // On refusal the message (and its remote reply slot) is dropped here, which tells a
        // remote asker that the actor is gone.
        let pushed = match stamp {
            Some(stamp) if A::ORDER_SENSITIVE => self.send_stamped(msg, stamp),
            // Without recovery only the sender matters (selective receive).
            None if A::ORDER_SENSITIVE && !self.node.recovers() => {
                let stamp = Stamp {
                    from: env.from,
                    index: 0,
                };
                self.send_stamped(msg, stamp)
            }
            _ => self.mailbox.push_msg(msg).map(|()| self.notify()),
        };
        pushed.map_err(|_| RemoteError::ActorGone(id))
    }

    fn tell_encoded(self: Arc<Self>, env: &Envelope) -> Result<(), RemoteError> {
        let id = self.mailbox.id;
        if env.type_tag == RESULT_TAG {
            return self.result_encoded(env, true, None);
        }
        if env.type_tag != type_tag::<A>() {
            return Err(RemoteError::WrongType(id));
        }
        let msg: A::Msg = crate::wire::decode(&env.payload)
            .map_err(|e| RemoteError::Undecodable(id, e.to_string()))?;
        // Measurement mode (log everything): logged like any other tell inside the node.
        if let crate::recovery::hooks::TellHook::LogAll(layer, from) =
            crate::recovery::hooks::tell_hook(self.node())
        {
            layer.log_local(from, id, env.payload.clone());
        }
        self.send(msg).map_err(|_| RemoteError::ActorGone(id))
    }

    fn depth(&self) -> usize {
        self.mailbox.len()
    }

    fn request_stop(self: Arc<Self>) {
        if self.mailbox.begin_stop() {
            self.signal(Signal::Stop);
        }
    }

    fn barrier(self: Arc<Self>) -> Option<oneshot::Receiver<u64>> {
        if matches!(self.mailbox.status(), Status::Stopped | Status::Failed) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.signal(Signal::Barrier(tx));
        Some(rx)
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn checkpoint_image(&self) -> Result<Option<ActorImage>, String> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // A suspended handler holds the actor: the image keeps the state it started
        // from and its record instead.
        let suspended = match &state.suspended {
            Some(s) => match &s.recorded {
                Some(r) => Some((r, &s.held)),
                None => {
                    return Err(format!(
                        "actor {} ({}): its async handler for {} is suspended and keeps no \
                         record (recovery was off when it started)",
                        self.mailbox.id,
                        A::NAME,
                        s.message_type
                    ))
                }
            },
            None => None,
        };
        let actor = state.actor.as_ref();
        if actor.is_none() && suspended.is_none() {
            return Ok(None);
        }
        let started = match state.phase {
            Phase::NotStarted => false,
            Phase::Running => true,
            Phase::Exited => return Ok(None),
        };
        // Timers first: the timer thread pushes a fired one under this lock, so the image
        // holds each timer either pending or in the mailbox, never both or neither.
        let timers = self.timers.lock().unwrap_or_else(|e| e.into_inner());
        // Likewise the awaits: a sleep's result is pushed under their lock.
        let awaits = self
            .awaits
            .get()
            .map(|a| a.lock().unwrap_or_else(|e| e.into_inner()));
        let mut signals = Vec::with_capacity(self.mailbox.len());
        while let Some(s) = self.mailbox.pop() {
            signals.push(s);
        }
        let mut state_bytes =
            std::mem::take(&mut *self.image_buffer.lock().unwrap_or_else(|e| e.into_inner()));
        let encoded = crate::actor::reply::serializing_for_checkpoint(|| {
            match (actor, suspended) {
                (_, Some((recorded, _))) => {
                    state_bytes.clear();
                    state_bytes.extend_from_slice(&recorded.record.before);
                }
                (Some(actor), None) => {
                    crate::wire::encode_into(actor, &mut state_bytes).map_err(|e| e.to_string())?;
                }
                (None, None) => {}
            }
            let mut mailbox = Vec::new();
            let mut stamps = Vec::new();
            // Held messages came out of the mailbox first: they stay ahead.
            let held = state.stash.iter().filter_map(|(h, s)| match h {
                Held::Msg(m) => Some((m, *s)),
                Held::Result(_) => None,
            });
            let queued = signals.iter().filter_map(|s| match s {
                Signal::Msg(m) => Some((m, None)),
                Signal::Stamped(m, st) => Some((m, Some(*st))),
                _ => None,
            });
            for (m, stamp) in held.chain(queued) {
                let bytes = crate::wire::encode(m).map_err(|e| e.to_string())?;
                mailbox.push(crate::payload::Payload(bytes));
                stamps.push(stamp);
            }
            let timers = timers
                .image(Instant::now(), |m| {
                    crate::wire::encode(m).map(crate::payload::Payload)
                })
                .map_err(|e| e.to_string())?;
            // Results not taken yet: stashed until the delivery order admits them (with
            // their stamps), held by a re-execution, queued, or kept by the awaits.
            let mut results = Vec::new();
            let mut result_stamps = Vec::new();
            let stashed = state.stash.iter().filter_map(|(h, s)| match h {
                Held::Result(r) => Some((r, *s)),
                Held::Msg(_) => None,
            });
            let held = suspended.map_or(&[][..], |(_, held)| &held[..]);
            let queued = signals.iter().filter_map(|s| match s {
                Signal::Result(r, stamp) => Some((r, *stamp)),
                _ => None,
            });
            for (r, stamp) in stashed.chain(held.iter().map(|r| (r, None))).chain(queued) {
                results.push(reexecution::encode_result(r.from, r.key, &r.value)?);
                result_stamps.push(stamp);
            }
            if let Some(a) = &awaits {
                for (from, key, value) in a.untaken() {
                    results.push(reexecution::encode_result(from, key, value)?);
                    result_stamps.push(None);
                }
            }
            let (asked, suspended) = match suspended {
                Some((recorded, _)) => (
                    recorded.before.asked.clone(),
                    Some(crate::payload::Payload(
                        crate::wire::encode(&recorded.image()).map_err(|e| e.to_string())?,
                    )),
                ),
                None => (awaits.as_ref().map(|a| a.asked()).unwrap_or_default(), None),
            };
            let sleeps = awaits
                .as_ref()
                .map(|a| a.sleeps_left(Instant::now()))
                .unwrap_or_default();
            let results = (results, result_stamps);
            Ok::<_, String>((mailbox, stamps, timers, results, asked, suspended, sleeps))
        });
        for s in signals {
            self.mailbox.requeue(s);
        }
        drop(awaits);
        drop(timers);
        let (mailbox, stamps, timers, (results, result_stamps), asked, suspended, sleeps) =
            encoded.map_err(|e| format!("actor {} ({}): {e}", self.mailbox.id, A::NAME))?;
        Ok(Some(ActorImage {
            id: self.mailbox.id,
            type_tag: type_tag::<A>(),
            started,
            state: crate::payload::Payload(state_bytes),
            mailbox,
            stamps,
            timers,
            receive_only: state.ctx.as_ref().and_then(Context::receive_filter),
            children: self.children.load(Ordering::Acquire),
            core: self.core_id.0,
            suspended,
            results,
            asked,
            sleeps,
            result_stamps,
        }))
    }

    fn restore_image(self: Arc<Self>, image: &ActorImage) -> Result<(), String> {
        let id = self.mailbox.id;
        if image.type_tag != type_tag::<A>() {
            return Err(format!(
                "actor {id}: the checkpoint holds another actor type than {}",
                A::NAME
            ));
        }
        let actor: A = crate::wire::decode(&image.state)
            .map_err(|e| format!("actor {id} ({}): state: {e}", A::NAME))?;
        // A handler suspended at the checkpoint: re-executed from its message and record.
        let suspended = match &image.suspended {
            Some(bytes) if image.started => {
                let kept: SuspendedImage = crate::wire::decode(bytes)
                    .map_err(|e| format!("actor {id} ({}): suspended handler: {e}", A::NAME))?;
                let message: A::Msg = crate::wire::decode(&kept.record.message).map_err(|e| {
                    format!("actor {id} ({}): suspended handler's message: {e}", A::NAME)
                })?;
                Some((Recorded::restored(kept, image.state.clone()), message))
            }
            Some(_) => {
                return Err(format!(
                    "actor {id} ({}): the checkpoint holds a suspended handler of an actor \
                     that had not started",
                    A::NAME
                ))
            }
            None => None,
        };
        let mut results = Vec::with_capacity(image.results.len());
        for r in &image.results {
            results.push(
                reexecution::decode_result(r)
                    .map_err(|e| format!("actor {id} ({}): {e}", A::NAME))?,
            );
        }
        let mut msgs = Vec::with_capacity(image.mailbox.len());
        for m in &image.mailbox {
            msgs.push(
                crate::wire::decode::<A::Msg>(m)
                    .map_err(|e| format!("actor {id} ({}): message: {e}", A::NAME))?,
            );
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !matches!(state.phase, Phase::NotStarted) {
            return Err(format!("actor {id} already runs: too late to restore it"));
        }
        if !image.timers.is_empty() {
            let due = self
                .timers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .restore(&image.timers, Instant::now(), |b| {
                    crate::wire::decode::<A::Msg>(b)
                })
                .map_err(|e| format!("actor {id} ({}): timer message: {e}", A::NAME))?;
            for (seq, deadline) in due {
                let weak: Weak<dyn TimerTarget> = Arc::downgrade(&self) as Weak<dyn TimerTarget>;
                crate::actor::timer::schedule(deadline, seq, weak);
            }
        }
        self.children.store(image.children, Ordering::Release);
        if !image.asked.is_empty() || suspended.is_some() {
            self.awaits()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .restore(&image.asked);
        }
        for &(key, left) in &image.sleeps {
            self.start_sleep(key, Duration::from_nanos(left));
        }
        state.actor = Some(actor);
        if image.started {
            let mut ctx = Context::new(
                ActorRef::from_cell(Arc::clone(&self)),
                self.node.clone(),
                self.core_id,
            );
            ctx.set_receive_filter(image.receive_only);
            state.ctx = Some(ctx);
            state.phase = Phase::Running;
        }
        if let Some((recorded, message)) = suspended {
            let (Some(actor), Some(ctx)) = (state.actor.take(), state.ctx.take()) else {
                unreachable!("set just above for a started actor")
            };
            let message_type = message.type_name();
            let waker = self.handler_waker();
            state.suspended = Some(Box::new(Suspended {
                future: A::handle_async(actor, message, ctx),
                waker_handle: Waker::from(Arc::clone(&waker)),
                waker,
                message_type,
                deferred: Vec::new(),
                recorded: Some(Box::new(recorded)),
                held: Vec::new(),
            }));
        }
        // Messages sent to it since it was spawned (none, the node was not running yet)
        // would go after the image's.
        let later: Vec<_> = std::iter::from_fn(|| self.mailbox.pop()).collect();
        for (i, m) in msgs.into_iter().enumerate() {
            match image.stamps.get(i).copied().flatten() {
                Some(stamp) => self.mailbox.requeue(Signal::Stamped(m, stamp)),
                None => self.mailbox.requeue(Signal::Msg(m)),
            }
        }
        for (i, r) in results.into_iter().enumerate() {
            let stamp = image.result_stamps.get(i).copied().flatten();
            self.mailbox.requeue(Signal::Result(r, stamp));
        }
        for s in later {
            self.mailbox.requeue(s);
        }
        Ok(())
    }

    fn wake(self: Arc<Self>) {
        self.notify();
    }

    fn retire(self: Arc<Self>) {
        self.mailbox.set_status(Status::Stopped);
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.phase = Phase::Exited;
        state.ctx = None;
        state.actor = None;
        drain_dead_letters::<A>(&self.mailbox, &mut state.stats, usize::MAX);
        drop(state);
        self.node.deregister(self.mailbox.id);
    }

    fn recycle_image(&self, image: ActorImage) {
        let buffer = image.state.into_inner();
        // A state that has shrunk to under half of its buffer gets a smaller one next time.
        let mut slot = self.image_buffer.lock().unwrap_or_else(|e| e.into_inner());
        if buffer.capacity() / 2 <= buffer.len() && slot.capacity() < buffer.capacity() {
            *slot = buffer;
        }
    }

    fn next_child(&self) -> u64 {
        self.children.fetch_add(1, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::layer::{RecoveryConfig, RecoveryLayer};

    #[derive(crate::Actor, serde::Serialize, serde::Deserialize)]
    struct Grid {
        #[serde(with = "crate::dense")]
        values: Vec<f64>,
    }

    #[crate::messages]
    impl Grid {
        #[message]
        fn shrink(&mut self, len: usize) {
            self.values.truncate(len);
        }
    }

    #[test]
    fn a_checkpoint_encodes_an_actors_state_into_the_buffer_its_last_stored_image_used() {
        let node = crate::Node::builder().cores(1).pin(false).build().unwrap();
        let id = ActorId::new(0, 0).unwrap();
        let grid = Grid {
            values: vec![1.5; 1 << 16],
        };
        let cell = node
            .handle()
            .spawn_cell(crate::CoreId(0), id, Some(grid))
            .unwrap();
        let first = cell.checkpoint_image().unwrap().unwrap();
        let buffer = first.state.as_ptr();
        cell.recycle_image(first);
        let second = cell.checkpoint_image().unwrap().unwrap();
        assert_eq!(second.state.as_ptr(), buffer, "no fresh memory to fault in");
        let back: Grid = crate::wire::decode(&second.state).unwrap();
        assert_eq!(back.values, vec![1.5; 1 << 16]);
        cell.recycle_image(second);

        // A state that shrank to a fraction of its buffer does not pin the large one.
        node.handle()
            .lookup::<Grid>(id)
            .unwrap()
            .tell(Shrink { len: 16 })
            .unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let small = loop {
            let image = cell.checkpoint_image().unwrap().unwrap();
            if image.state.len() < 1024 || Instant::now() > deadline {
                break image;
            }
            cell.recycle_image(image);
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert!(small.state.len() < 1024, "the message was handled");
        cell.recycle_image(small);
        assert!(cell.image_buffer.lock().unwrap().capacity() < 1024);
    }

    /// What `take_next` took, as a message's text and stamp (a result as "result").
    fn taken(t: Option<(Held<&str>, Option<Stamp>)>) -> Option<(&str, Option<Stamp>)> {
        t.map(|(h, stamp)| match h {
            Held::Msg(m) => (m, stamp),
            Held::Result(_) => ("result", stamp),
        })
    }

    fn test_layer(name: &str) -> (std::path::PathBuf, Arc<RecoveryLayer>) {
        let dir = std::env::temp_dir().join(format!("lazarus-{name}-{}", std::process::id()));
        let layer = RecoveryLayer::new(0, 2, RecoveryConfig::for_tests(dir.clone()));
        (dir, layer)
    }

    #[test]
    fn a_timer_cancelled_after_it_fired_leaves_the_stash_without_a_tick_of_the_event_clock() {
        // Whether a timer fired before the handler that cancels it ran depends on timing.
        // A replay may cancel it while still pending, and then it never comes: had its
        // original drop taken a tick (a logged delivery), that replay would wait for it at
        // the logged tick forever.
        let (dir, layer) = test_layer("cancelled");
        let actor = ActorId::new(0, 1).unwrap();
        let timers = Mutex::new(Timers::default());
        let stamp = |seq| {
            Some(Stamp {
                from: crate::actor::timer::source_of(actor),
                index: seq,
            })
        };
        let (cancelled, live) = {
            let mut t = timers.lock().unwrap();
            let (a, b) = (t.arm(Instant::now(), "a"), t.arm(Instant::now(), "b"));
            t.take_fired(a);
            t.take_fired(b);
            assert!(t.cancel(a));
            (a, b)
        };
        let mut stash = VecDeque::from([
            (Held::Msg("a"), stamp(cancelled)),
            (Held::Msg("b"), stamp(live)),
        ]);
        let clock = |layer: &RecoveryLayer| layer.lock().events.clocks.get(&actor).copied();
        let hooks = Some(&*layer as &dyn RecoveryHooks);

        let next = take_next(
            hooks,
            actor,
            &mut stash,
            None,
            Receiving::Anything,
            &timers,
            &|_| false,
        );
        assert_eq!(
            taken(next),
            Some(("a", stamp(cancelled))),
            "taken out, to be dropped"
        );
        assert_eq!(clock(&layer), None, "no tick, no determinant");
        // The live timer is a delivery like any other: one tick, recorded.
        let next = take_next(
            hooks,
            actor,
            &mut stash,
            None,
            Receiving::Anything,
            &timers,
            &|_| false,
        );
        assert_eq!(taken(next), Some(("b", stamp(live))));
        assert_eq!(clock(&layer), Some(1));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_order_sensitive_actors_result_is_a_delivery_admitted_in_its_turn() {
        // The order its results come in can change what an order-sensitive actor's handler
        // does (the first of two asks to answer wins): each result's delivery takes a tick
        // and is logged like a message's, so a replay hands them over in the same order.
        let (dir, layer) = test_layer("results");
        let actor = ActorId::new(0, 1).unwrap();
        let (peer, other) = (ActorId::new(1, 0).unwrap(), ActorId::new(1, 1).unwrap());
        let timers = Mutex::new(Timers::<&str>::default());
        let result = |from, key| {
            Held::Result(Awaited {
                from,
                key,
                value: AwaitedValue::Encoded(Vec::new()),
            })
        };
        let stamp = |from, index| Some(Stamp { from, index });
        let clock = |layer: &RecoveryLayer| layer.lock().events.clocks.get(&actor).copied();
        let hooks = Some(&*layer as &dyn RecoveryHooks);
        let mut stash = VecDeque::from([
            (Held::Msg("tell"), stamp(other, 1)),
            (result(peer, 1), stamp(peer, 3)),
        ]);

        // A selective receive (of `other`'s messages) leaves results for the handler that
        // awaits them: its deliveries are not logged, a result's is.
        let only = Some(other);
        let next = take_next(
            hooks,
            actor,
            &mut stash,
            only,
            Receiving::Selective,
            &timers,
            &|_| false,
        );
        assert_eq!(taken(next), Some(("tell", stamp(other, 1))));
        assert_eq!(stash.len(), 1, "the result waits");
        // A suspended handler takes its results only, each with a tick of its own.
        stash.push_front((Held::Msg("later"), stamp(other, 2)));
        let next = take_next(
            hooks,
            actor,
            &mut stash,
            None,
            Receiving::Results,
            &timers,
            &|_| false,
        );
        assert_eq!(taken(next), Some(("result", stamp(peer, 3))));
        assert_eq!(clock(&layer), Some(2), "a tick for the result");
        assert_eq!(
            taken(take_next(
                hooks,
                actor,
                &mut stash,
                None,
                Receiving::Results,
                &timers,
                &|_| false,
            )),
            None,
            "a message waits for the handler to complete"
        );
        // A result whose await was given up (a sleep a `select` dropped) is taken out
        // without a tick: a replay that gives the sleep up before it ends never gets it.
        stash.push_back((result(peer, 2), stamp(peer, 4)));
        let given_up = |r: &Awaited| r.key == 2;
        let next = take_next(
            hooks,
            actor,
            &mut stash,
            None,
            Receiving::Results,
            &timers,
            &given_up,
        );
        assert_eq!(taken(next), Some(("result", stamp(peer, 4))));
        assert_eq!(clock(&layer), Some(2), "no tick, no determinant");
        let _ = std::fs::remove_dir_all(dir);
    }
}
