//! What a handler can reach besides its own state: its own reference, its node, its core,
//! the means to stop itself, asks whose replies come back as messages, timers, and the
//! nondeterministic inputs (time, random numbers) that recovery logs and replays.

use crate::actor::actor_ref::ActorRef;
use crate::actor::awaits::{
    sleep_source, AwaitDelivery, AwaitRoute, Awaited, AwaitedValue, ResultOf,
};
use crate::actor::reexecution;
use crate::actor::reply::{ActorRoute, LocalDelivery, ReplyTo};
use crate::actor::timer::TimerId;
use crate::actor::{type_tag, Actor, Message, ReplyMessage};
use crate::actor_id::ActorId;
use crate::error::AskError;
use crate::error::SendError;
use crate::node::{CoreId, NodeHandle};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Passed to handlers and lifecycle hooks of actor `A`.
pub struct Context<A: Actor> {
    myself: ActorRef<A>,
    node: NodeHandle,
    core: CoreId,
    stop_requested: bool,
    /// Selective receive: the only sender whose messages are delivered now.
    receive_only: Option<ActorId>,
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(myself: ActorRef<A>, node: NodeHandle, core: CoreId) -> Self {
        Context {
            myself,
            node,
            core,
            stop_requested: false,
            receive_only: None,
        }
    }

    /// This actor's id.
    pub fn id(&self) -> ActorId {
        self.myself.id()
    }

    /// A reference to this actor, to hand to others.
    pub fn myself(&self) -> &ActorRef<A> {
        &self.myself
    }

    /// The core this actor runs on (it never moves).
    pub fn core(&self) -> CoreId {
        self.core
    }

    /// The node this actor runs on, to spawn or look up actors.
    pub fn node(&self) -> &NodeHandle {
        &self.node
    }

    /// Stops this actor after the current handler returns. Messages still in its mailbox
    /// are not handled: they are counted and logged as dead letters, and their askers get
    /// [`crate::AskError::ActorStopped`].
    pub fn stop(&mut self) {
        self.stop_requested = true;
    }

    /// Asks actor `to` with `msg`. In an `async fn` handler, await it for the reply:
    ///
    /// ```ignore
    /// let product = ctx.ask(&self.block, Multiply { x }).await?;
    /// ```
    ///
    /// The ask is sent when the future is first polled, and the handler's actor takes no
    /// other message until the handler completes (several asks awaited together, with
    /// `futures::future::join_all`, all leave at once). The reply comes back to this
    /// actor as a message, ordered like its other messages; with recovery on, a handler
    /// suspended in an await is re-executed by a restore (docs/recovery.md, "Suspended
    /// async handlers").
    ///
    /// In a synchronous handler, [`ActorAsk::reply_as`] names the message of this actor
    /// that the reply comes back as:
    ///
    /// ```ignore
    /// ctx.ask(&self.block, Multiply { x }).reply_as::<Part>()?;
    /// // ... and later, a handler of this actor: `fn part(&mut self, product: Product)`
    /// ```
    ///
    /// Unlike [`ActorRef::ask`], nothing waits: `msg` leaves like a tell and the reply is a
    /// message to this actor, handled like any other (per-sender FIFO with the replier's
    /// other messages). With recovery on both are logged and replayed like tells, so the
    /// ask survives a failure of either node, and an asker that is restored gets the
    /// reply its re-executed handler asked for. A handler that drops its `ReplyTo`
    /// unanswered sends nothing; there is no timeout (arm one with
    /// [`Context::send_after`] if needed).
    pub fn ask<'a, B: Actor, M: Message<B>>(
        &'a self,
        to: &'a ActorRef<B>,
        msg: M,
    ) -> ActorAsk<'a, A, B, M> {
        ActorAsk {
            asker: &self.myself,
            to,
            msg: Some(msg),
            result: None,
        }
    }

    /// In an `async fn` handler: waits `delay` (at least), then goes on.
    ///
    /// ```ignore
    /// ctx.sleep(Duration::from_millis(10)).await;
    /// ```
    ///
    /// The handler is suspended meanwhile like in an await of an ask (its actor takes no
    /// other message). With recovery on a sleep survives a failure: a checkpoint holds it
    /// with the time it had left, and a restore that re-executes the handler arms it
    /// again with that time (or hands back its end, if it was over).
    pub fn sleep(&self, delay: Duration) -> ActorSleep<'_, A> {
        ActorSleep {
            actor: &self.myself,
            delay,
            result: None,
        }
    }

    /// Sends `msg` to this actor after `delay` (a timer). The message is handled like any
    /// other, after `delay` at the earliest; cancel it with [`Context::cancel_timer`].
    ///
    /// With recovery on a pending timer survives a failure (the checkpoint holds it and
    /// the restore re-arms it with the delay it had left), and in an order-sensitive actor
    /// the point at which a timer is handled among the other messages is logged and
    /// replayed exactly. In a send-deterministic actor that point is free after a restore:
    /// only use timers there for what does not change the messages it sends.
    pub fn send_after<M: Message<A>>(&mut self, delay: Duration, msg: M) -> TimerId {
        let set = msg.into_set(ReplyTo::none());
        // A re-executed async handler's timer armed before its checkpoint: the
        // checkpoint holds it.
        if let Some(seq) = reexecution::arm_skipped() {
            reexecution::drop_skipped(set);
            return TimerId(seq);
        }
        match self.myself.local_cell() {
            Some(cell) => cell.arm_timer(delay, set),
            // A context always belongs to a local actor.
            None => TimerId(0),
        }
    }

    /// Cancels a timer of this actor: true if its message had not been handled yet (it
    /// now never will be), false if it already was (or the id is not one of its timers).
    pub fn cancel_timer(&mut self, timer: TimerId) -> bool {
        reexecution::effect_read(|| {
            u64::from(
                self.myself
                    .local_cell()
                    .is_some_and(|cell| cell.cancel_timer(timer)),
            )
        }) != 0
    }

    /// Whether messages are waiting in this actor's mailbox: a probe, the try-receive of
    /// an actor (it takes no message; return from the handler to get the next one). For
    /// handlers that work in slices and yield only when there is something to serve.
    ///
    /// The answer depends on timing, so with recovery on it is an event of an
    /// order-sensitive actor: "messages waiting" is logged, and runs of "nothing waiting"
    /// are logged lazily (one determinant per run, and only once a message leaves the node
    /// after them); a restored actor's probes return the logged answers. In an actor that
    /// is not order-sensitive the answer is not logged, so its sends must not depend on it.
    pub fn messages_waiting(&mut self) -> bool {
        let Some(cell) = self.myself.local_cell() else {
            return false;
        };
        let mut fresh = || !cell.mailbox.is_empty();
        let mut probe = || match self.node.recovery() {
            Some(layer) if A::ORDER_SENSITIVE => layer.probe(self.myself.id(), &mut fresh),
            _ => fresh(),
        };
        reexecution::value(|| u64::from(probe())) != 0
    }

    /// Selective receive: from the next delivery on, handle only messages sent by
    /// `sender` (an actor on any node, or a node's `main` by
    /// [`Context::driver_of`]); messages from anyone else, timers included, wait in the
    /// mailbox in arrival order until [`Context::receive_from_anyone`]. The actor's own
    /// messages from `sender` keep their send order, as always.
    ///
    /// With recovery on, a delivery made while a sender is named is determined by that
    /// channel's FIFO order alone, so, unlike other deliveries to an order-sensitive actor,
    /// it is not logged (no determinant, nothing to wait for) and a restored actor makes
    /// the same one again. The named sender survives a checkpoint with the actor.
    ///
    /// Only order-sensitive actors (`#[actor(order_sensitive)]`) can do this: the
    /// messages of the others do not carry their sender.
    pub fn receive_only_from(&mut self, sender: ActorId) -> Result<(), crate::ReceiveError> {
        if !A::ORDER_SENSITIVE {
            return Err(crate::ReceiveError::NotOrderSensitive(A::NAME));
        }
        self.receive_only = Some(sender);
        Ok(())
    }

    /// Ends a selective receive: every sender's messages are delivered again, those that
    /// waited first, in arrival order.
    pub fn receive_from_anyone(&mut self) {
        self.receive_only = None;
    }

    /// The sender a selective receive waits for, if one is set.
    pub fn receive_filter(&self) -> Option<ActorId> {
        self.receive_only
    }

    /// The id that stands for `main` of node `rank` as a sender (for
    /// [`Context::receive_only_from`]).
    pub fn driver_of(rank: u16) -> ActorId {
        crate::recovery::hooks::main_id(rank)
    }

    pub(crate) fn set_receive_filter(&mut self, sender: Option<ActorId>) {
        self.receive_only = sender;
    }

    pub(crate) fn stop_requested(&self) -> bool {
        self.stop_requested
    }

    /// The current time. With recovery on this read is a determinant: it is logged, and
    /// the actor re-executing after a failure reads the same value again. Read time
    /// through this (not `SystemTime::now`) in any actor whose messages depend on it.
    pub fn now(&mut self) -> SystemTime {
        let fresh = || {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        };
        let nanos = self.nondeterministic(fresh);
        UNIX_EPOCH + Duration::from_nanos(nanos)
    }

    /// 64 random bits. With recovery on this draw is a determinant, logged and replayed
    /// like [`Context::now`].
    pub fn random(&mut self) -> u64 {
        // std's per-process random hasher keys: fresh OS-seeded randomness, no extra crate.
        self.nondeterministic(|| {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(
                SystemTime::now()
                    .elapsed()
                    .map_or(0, |d| d.as_nanos() as u64),
            );
            h.finish()
        })
    }

    fn nondeterministic(&mut self, fresh: impl FnOnce() -> u64) -> u64 {
        // A suspended async handler's reads are in its record; others are logged by the
        // recovery layer.
        reexecution::value(|| match self.node.recovery() {
            Some(layer) => {
                let mut fresh = Some(fresh);
                layer.value(self.myself.id(), &mut || fresh.take().map_or(0, |f| f()))
            }
            None => fresh(),
        })
    }
}

/// A sleep of an async handler ([`Context::sleep`]).
#[must_use = "a sleep does nothing unless awaited"]
pub struct ActorSleep<'a, A: Actor> {
    actor: &'a ActorRef<A>,
    delay: Duration,
    /// Once started by a poll: the result it waits for.
    result: Option<ResultOf>,
}

impl<A: Actor> Unpin for ActorSleep<'_, A> {}

impl<A: Actor> Future for ActorSleep<'_, A> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.result.is_none() {
            // A context always belongs to a local actor.
            let Some(cell) = this.actor.local_cell() else {
                return Poll::Ready(());
            };
            let awaits = cell.awaits();
            let source = sleep_source(this.actor.id());
            let key = awaits.lock().unwrap_or_else(|e| e.into_inner()).ask(source);
            // A re-executed handler's sleep started before the checkpoint: the checkpoint
            // holds it (pending, or its end).
            if !reexecution::skips_effect() {
                cell.start_sleep(key, this.delay);
            }
            this.result = Some(ResultOf {
                awaits,
                to: source,
                key,
                done: false,
            });
        }
        match this
            .result
            .as_mut()
            .map(|r| r.poll_result::<()>(cx.waker()))
        {
            Some(None) => Poll::Pending,
            _ => Poll::Ready(()),
        }
    }
}

/// An ask by an actor ([`Context::ask`]): awaited in an `async fn` handler, or sent by
/// [`ActorAsk::reply_as`] with the message of the asker that carries the reply.
#[must_use = "an actor's ask is sent by awaiting it or by `reply_as`"]
pub struct ActorAsk<'a, A: Actor, B: Actor, M: Message<B>> {
    asker: &'a ActorRef<A>,
    to: &'a ActorRef<B>,
    msg: Option<M>,
    /// Once sent by a poll: the result it waits for.
    result: Option<ResultOf>,
}

// Nothing in it is pinned: the message is moved out by the first poll.
impl<A: Actor, B: Actor, M: Message<B>> Unpin for ActorAsk<'_, A, B, M> {}

impl<A: Actor, B: Actor, M: Message<B>> Future for ActorAsk<'_, A, B, M> {
    type Output = Result<M::Reply, AskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.result.is_none() {
            if let Err(e) = this.send() {
                return Poll::Ready(Err(e));
            }
        }
        match this.result.as_mut() {
            Some(result) => match result.poll_result::<M::Reply>(cx.waker()) {
                Some(out) => Poll::Ready(out),
                None => Poll::Pending,
            },
            None => Poll::Ready(Err(AskError::NoReply(this.to.id()))),
        }
    }
}

impl<A: Actor, B: Actor, M: Message<B>> ActorAsk<'_, A, B, M> {
    /// Sends the ask an async handler awaits: numbered among this actor's asks to the
    /// asked one, its result routed back to this actor.
    fn send(&mut self) -> Result<(), AskError> {
        let asked = self.to.id();
        let Some(msg) = self.msg.take() else {
            return Err(AskError::NoReply(asked));
        };
        let Some(cell) = self.asker.local_cell() else {
            return Err(AskError::Unreachable {
                id: asked,
                reason: "an awaited ask is made by a local actor's handler".into(),
            });
        };
        let awaits = cell.awaits();
        let key = awaits.lock().unwrap_or_else(|e| e.into_inner()).ask(asked);
        let route = AwaitRoute {
            to: self.asker.id(),
            asked,
            key,
        };
        // Asked inside the node, recovery off: the result moves into this actor's
        // mailbox unencoded.
        let local = (self.to.is_local() && !cell.mailbox.recovers).then(|| {
            let asker = Arc::clone(cell);
            Box::new(move |r: Result<M::Reply, AskError>| {
                let value = match r {
                    Ok(v) => AwaitedValue::Local(Box::new(v)),
                    Err(e) => AwaitedValue::Failed(e),
                };
                asker.deliver_result(
                    Awaited {
                        from: asked,
                        key,
                        value,
                    },
                    None,
                )
            }) as AwaitDelivery<M::Reply>
        });
        self.result = Some(ResultOf {
            awaits,
            to: asked,
            key,
            done: false,
        });
        let slot = if self.to.is_local() {
            ReplyTo::to_await(route, local)
        } else {
            ReplyTo::await_outgoing(route)
        };
        self.to.tell_with(msg, slot).map_err(|e| {
            // The result is not awaited any more; the slot dropped with the message
            // sends one that is dropped as given up on.
            if let Some(r) = self.result.as_mut() {
                r.forget();
            }
            match e {
                SendError::ActorStopped { id, .. } => AskError::ActorStopped(id),
                SendError::ActorFailed { id, .. } => AskError::ActorFailed(id),
                SendError::Unreachable { id, reason, .. } => AskError::Unreachable { id, reason },
            }
        })
    }

    /// Sends the ask; the reply will come back to the asker as message `H`, whose one
    /// argument has the reply's type. Fails, handing the message back, like
    /// [`ActorRef::tell`].
    pub fn reply_as<H: ReplyMessage<A, Inner = M::Reply>>(mut self) -> Result<(), SendError<M>> {
        let Some(msg) = self.msg.take() else {
            unreachable!("an ask that was polled is not sent again")
        };
        let route = ActorRoute {
            to: self.asker.id(),
            type_tag: type_tag::<A>(),
            variant: H::variant(),
        };
        // Asked inside the node: the reply moves into the asker's mailbox like a tell,
        // unencoded, unless the slot is checkpointed and restored first.
        let local = self.to.is_local().then(|| {
            let asker = self.asker.clone();
            Box::new(move |reply: M::Reply| asker.tell(H::wrap(reply)).is_ok())
                as LocalDelivery<M::Reply>
        });
        self.to.tell_with(msg, ReplyTo::to_actor(route, local))
    }
}
