//! The node-level recovery machine: what a node does around its set's [`SetProtocol`]
//! and [`EventLogging`], in one sans-IO state machine that the runtime's recovery driver
//! and the recovery simulator both run.
//!
//! A node is one correlated set. Around the protocol it:
//!
//! - refuses frames whose channels do not run between the sender's node and this one
//!   (sets are nodes: a message node `n` logged comes from one of its actors);
//! - keeps the frames that arrive before a restarted node has its protocol (or its
//!   event logging) back, for the driver to feed again once it has;
//! - keeps the determinants other nodes ship to it as their event logger (the store is
//!   durable: the driver journals every message before it is handled here);
//! - holds messages leaving the node until the determinants their sender depends on are
//!   stable (the send gate of pessimistic event logging), and keeps protocol frames
//!   (resends, control) behind what it holds, so nothing overtakes on a channel.
//!
//! - routes what the protocol delivers: a reply to the node's `main` goes to `main`; a
//!   message for a child actor that a restarted node's replay has not spawned again
//!   waits (with those after it) until the driver says the child is spawned.
//!
//! Inputs are `handle_*` calls; outputs are polled: [`NodeRecovery::poll_transmit`] for
//! frames to other nodes, [`NodeRecovery::poll_routed`] for messages the actors (or
//! `main`) may take now. The driver owns everything with a clock, a thread, a lock, a socket or a
//! file: it turns protocol actions that need a logger node's copy into frames, stores
//! checkpoints, counts metrics and wakes actors.

use super::{
    Action, ChannelId, CheckpointId, Config, ControlMessage, Delivery, Dependence, Determinant,
    Diverged, Event, EventLogging, EventMessage, EventSnapshot, EventStore, GateSender,
    Incarnation, LogPayload, MessageMeta, ProtocolError, Received, RecoveryReport, ReplayDelivery,
    ReplayPoll, SendGate, SendOutcome, SetId, SetProtocol, Snapshot,
};
use crate::actor_id::ActorId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// A frame between the recovery machines of two nodes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Frame<P> {
    /// An application message with the protocol's metadata (a first send or a resend).
    Message {
        /// Channel, send index, sender's incarnation, dependency vector.
        meta: MessageMeta,
        /// The message.
        payload: P,
    },
    /// A message of the rollback-recovery protocol (ROLLBACK, RESPONSE, ...).
    Control(ControlMessage),
    /// A message of event logging (determinants to a logger, acknowledgements, fetches).
    Events(EventMessage),
}

/// Which determinants a message leaving the node waits for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GateRule {
    /// Only those its sending actor depends on (see [`super::send_gate`]).
    #[default]
    PerActor,
    /// Every determinant the node recorded (a measurement baseline).
    WholeNode,
}

/// A frame refused: it could not have come from a correct peer.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// A channel it names does not run between the sending node and this one.
    #[error("a channel it names does not run between node {from} and this node")]
    Channel {
        /// The sending node.
        from: u16,
    },
    /// The protocol refused it.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// What became of an application message from another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The protocol took it (queued, or dropped as a duplicate or as stale).
    Received(Received),
    /// Kept until the node has its protocol back ([`NodeRecovery::take_early`]).
    Early,
}

/// What a control message from another node did.
#[derive(Debug)]
pub struct ControlOutcome<P> {
    /// Resends and control messages the protocol asks for. The driver turns them into
    /// frames (fetching a resend's payload from a logger node where the log moved it)
    /// and hands them to [`NodeRecovery::send_behind_held`].
    pub actions: Vec<Action<P>>,
    /// A ROLLBACK this node cannot serve.
    pub unservable: Option<Unservable>,
    /// A peer asked this node to checkpoint (its log is over its quota).
    pub checkpoint_wanted: bool,
    /// This node's own recovery completed with this message.
    pub recovered: bool,
    /// Messages of the peer's older incarnations dropped from the inbox.
    pub stale_dropped: u64,
}

/// A ROLLBACK a node cannot serve: the peer restored an older checkpoint than the one it
/// committed (that one was damaged or lost), and the messages in between are gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unservable {
    /// The peer's incarnation that sent the ROLLBACK.
    pub incarnation: Incarnation,
    /// The channels whose log was released past what it reports delivered, as
    /// `(channel, released, delivered)`.
    pub gaps: Vec<(ChannelId, u64, u64)>,
}

/// What an event-logging message from another node did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventsArrival {
    /// Handled.
    Handled,
    /// This node's determinant fetch completed with it; `replay`: the log holds
    /// determinants to replay.
    Fetched {
        /// Whether the fetched log holds anything to replay.
        replay: bool,
    },
    /// Kept until the node has its event logging back ([`NodeRecovery::take_early_events`]).
    Early,
}

/// What became of an application message an actor of this node sent to another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sent {
    /// Logged and queued for transmission (now, or once the determinants it waits for
    /// are stable: `held`).
    Logged {
        /// Its index on its channel.
        send_index: u64,
        /// The determinant count it waits for; the sender depends on no fewer from now.
        needed: u64,
        /// Whether it waits in the send gate.
        held: bool,
        /// Recovery metadata bytes it carries.
        piggyback: usize,
    },
    /// A regenerated message the receiver already has: not transmitted.
    Suppressed {
        /// Its index on its channel.
        send_index: u64,
    },
    /// The node has no protocol (a restarted node loading its checkpoint): not sent.
    NoProtocol,
}

/// Whether an order-sensitive actor may take a message now (see
/// [`NodeRecovery::admit_delivery`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Past the actor's logged events: taken, and recorded as a determinant.
    Recorded {
        /// What the actor depends on from now (joined with what it depended on).
        depends: Dependence,
        /// The log held another kind of event at this tick: the determinism contract
        /// is broken, and the actor runs free from here.
        diverged: Option<Diverged>,
    },
    /// The actor's replay names this message at this tick: taken from the log. From now
    /// on the actor depends on every determinant of the node.
    Replayed,
    /// Not now: the replay names another message first, or the node has no event
    /// logging yet or still fetches its determinants.
    NotNow,
}

/// A nondeterministic value an actor read (see [`NodeRecovery::read_value`] and
/// [`NodeRecovery::probe`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRead<T> {
    /// The value: the logged one during a replay, else the fresh one.
    pub value: T,
    /// What the actor depends on from now (joined with what it depended on).
    pub depends: Dependence,
    /// Taken from the log.
    pub replayed: bool,
    /// The log held another kind of event at this tick (the actor runs free from here).
    pub diverged: Option<Diverged>,
}

/// A frame that arrived before the node had its protocol back.
#[derive(Debug)]
pub enum EarlyFrame<P> {
    /// An application message and the incarnation whose connection carried it.
    Message {
        /// The sender's incarnation whose connection carried it.
        via: Incarnation,
        /// The protocol's metadata.
        meta: MessageMeta,
        /// The message.
        payload: P,
    },
    /// A control message.
    Control(ControlMessage),
}

/// Where a message the protocol delivers goes ([`NodeRecovery::poll_routed`]).
#[derive(Debug)]
pub enum Routed<P> {
    /// To the actor its channel names.
    Actor(Delivery<P>),
    /// To the node's `main`: a reply to one of its asks.
    Main(Delivery<P>),
    /// Held: its addressee is a child actor of this node that the replay has not spawned
    /// again yet (it goes out through [`NodeRecovery::child_spawned`]).
    AwaitingSpawn(ActorId),
}

/// What a node's recovery machine is started or restored with.
#[derive(Clone, Copy, Debug)]
pub struct NodeConfig {
    /// Nodes (correlated sets) in the run.
    pub nodes: u16,
    /// Event loggers each determinant is stored at.
    pub event_loggers: u16,
    /// The protocol's tunables.
    pub protocol: Config,
}

/// The recovery part of a node's checkpoint: what [`NodeRecovery::restore`] takes back.
#[derive(Debug)]
pub struct NodeImage<P> {
    /// The protocol's state: sender-based log, delivered counts, incarnations.
    pub protocol: Snapshot<P>,
    /// Event logging's state: the determinants not yet known stable, the next sequence.
    pub events: EventSnapshot,
}

/// Why a checkpoint cannot be taken or committed now.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointRefused {
    /// A restarted node has not installed its protocol yet.
    #[error("the node is still being restored")]
    NotReady,
    /// Logged messages wait for child actors a replay has not spawned again: they would
    /// be in no image. The driver tries again shortly.
    #[error("{0} logged messages wait for actors not spawned again yet")]
    AwaitingSpawn(usize),
    /// The protocol refused the commit.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}

/// The node-level recovery state machine (see the module docs).
#[derive(Debug)]
pub struct NodeRecovery<P: LogPayload> {
    me: SetId,
    gate_rule: GateRule,
    /// `None` while a restarted node is still loading its checkpoint.
    protocol: Option<SetProtocol<P>>,
    /// Frames that arrived before `protocol` existed, from whom.
    early: Vec<(SetId, EarlyFrame<P>)>,
    /// `None` while a restarted node is still loading its checkpoint (and without
    /// event logging).
    events: Option<EventLogging>,
    /// Event-logging frames that arrived before `events` existed.
    early_events: Vec<(SetId, EventMessage)>,
    /// Other nodes' determinants this node keeps as their logger.
    store: EventStore,
    /// Frames to other nodes waiting for stable determinants (or behind such a frame).
    held: SendGate<Frame<P>>,
    /// Frames to send, in order.
    transmit: VecDeque<(SetId, Frame<P>)>,
    /// Frames the gate held so far.
    gated: u64,
    /// The determinants the set's interval depends on: the largest count a sender of a
    /// message counted into the interval inside the set depended on (see
    /// [`Self::on_local_deliveries`]). Every message leaving the set waits for them too.
    interval_needs: u64,
    /// Deliveries for child actors the replay has not spawned again, per child, in
    /// delivery order.
    awaiting_spawn: BTreeMap<ActorId, VecDeque<Delivery<P>>>,
}

impl<P: LogPayload> NodeRecovery<P> {
    /// The machine of node `me`, keeping `store` as other nodes' event logger (read back
    /// from its journal by the driver). The protocol and event logging are started by
    /// [`Self::start`] (a fresh run) or [`Self::restore`] (a restarted node).
    pub fn new(me: SetId, gate_rule: GateRule, store: EventStore) -> Self {
        NodeRecovery {
            me,
            gate_rule,
            protocol: None,
            early: Vec::new(),
            events: None,
            early_events: Vec::new(),
            store,
            held: SendGate::new(),
            transmit: VecDeque::new(),
            gated: 0,
            interval_needs: 0,
            awaiting_spawn: BTreeMap::new(),
        }
    }

    /// Starts a node of a fresh run: its protocol and event logging from nothing.
    pub fn start(&mut self, config: NodeConfig) -> Result<(), ProtocolError> {
        let protocol = SetProtocol::with_config(self.me, config.nodes, config.protocol)?;
        let events = EventLogging::new(self.me, config.nodes, config.event_loggers)?;
        self.start_protocol(protocol);
        self.start_events(events, []);
        Ok(())
    }

    /// Takes the recovery part of a checkpoint of this node. The driver calls it with
    /// the node's actors paused, so that the image and the actors' states are one cut;
    /// `clock_of` gives an order-sensitive actor's event clock in that cut.
    ///
    /// Refused while messages wait for children not spawned again: the cut would hold
    /// them nowhere.
    pub fn checkpoint(
        &mut self,
        clock_of: impl Fn(ActorId) -> u64,
    ) -> Result<NodeImage<P>, CheckpointRefused> {
        let waiting = self.awaiting_spawn_len();
        if waiting > 0 {
            return Err(CheckpointRefused::AwaitingSpawn(waiting));
        }
        let protocol = self
            .protocol
            .as_mut()
            .ok_or(CheckpointRefused::NotReady)?
            .checkpoint();
        let events = self
            .events
            .as_ref()
            .map(|e| e.checkpoint(clock_of))
            .unwrap_or_default();
        Ok(NodeImage { protocol, events })
    }

    /// The checkpoint `id` taken by [`Self::checkpoint`], whose event part is `events`,
    /// is durable. The protocol announces it (the peers may release their logs up to
    /// it: the returned actions); then the loggers may release the determinants it
    /// covers, and frames held for those determinants may leave ([`Self::poll_transmit`]).
    pub fn handle_checkpoint_committed(
        &mut self,
        id: CheckpointId,
        events: EventSnapshot,
    ) -> Result<Vec<Action<P>>, CheckpointRefused> {
        let actions = self
            .protocol
            .as_mut()
            .ok_or(CheckpointRefused::NotReady)?
            .checkpoint_committed(id)?;
        self.events_committed(events);
        Ok(actions)
    }

    /// Restarts this node from `image` as `incarnation`: the protocol and event logging
    /// come back from it. Returns the protocol's ROLLBACKs to send; event logging's
    /// fetches of the determinants logged since are already queued
    /// ([`Self::poll_transmit`]). Frames that arrived before are then in
    /// [`Self::take_early`] and [`Self::take_early_events`], for the driver to handle
    /// again.
    pub fn restore(
        &mut self,
        image: NodeImage<P>,
        incarnation: Incarnation,
        config: NodeConfig,
    ) -> Result<Vec<Action<P>>, ProtocolError> {
        // A file of another rank in this node's place (a mislabelled copy) is refused:
        // restored, it would answer for another node's channels.
        if image.protocol.set != self.me {
            return Err(ProtocolError::InvalidSnapshot(format!(
                "it is node {}'s, not node {}'s",
                image.protocol.set.0, self.me.0
            )));
        }
        let (protocol, actions) =
            SetProtocol::restore(image.protocol, incarnation, config.protocol)?;
        let (events, fetches) = EventLogging::restore(
            self.me,
            config.nodes,
            config.event_loggers,
            image.events,
            incarnation,
        )?;
        self.start_protocol(protocol);
        self.start_events(events, fetches);
        Ok(actions)
    }

    /// Installs the protocol (a fresh one, or one restored from a checkpoint). The
    /// frames that arrived before are then in [`Self::take_early`].
    pub fn start_protocol(&mut self, protocol: SetProtocol<P>) {
        self.protocol = Some(protocol);
    }

    /// Frames that arrived before the protocol was installed, for the driver to handle
    /// again (in arrival order).
    pub fn take_early(&mut self) -> Vec<(SetId, EarlyFrame<P>)> {
        std::mem::take(&mut self.early)
    }

    /// Installs event logging; `notices` (a restored one's fetches) are sent at once.
    /// The frames that arrived before are then in [`Self::take_early_events`].
    fn start_events(
        &mut self,
        logging: EventLogging,
        notices: impl IntoIterator<Item = (SetId, EventMessage)>,
    ) {
        self.events = Some(logging);
        self.transmit
            .extend(notices.into_iter().map(|(to, m)| (to, Frame::Events(m))));
    }

    /// Event-logging frames that arrived before event logging was installed.
    pub fn take_early_events(&mut self) -> Vec<(SetId, EventMessage)> {
        std::mem::take(&mut self.early_events)
    }

    /// The protocol, once installed.
    pub fn protocol(&self) -> Option<&SetProtocol<P>> {
        self.protocol.as_ref()
    }

    /// The protocol, once installed.
    pub fn protocol_mut(&mut self) -> Option<&mut SetProtocol<P>> {
        self.protocol.as_mut()
    }

    /// This node's event logging, once installed.
    pub fn events(&self) -> Option<&EventLogging> {
        self.events.as_ref()
    }

    /// This node's event logging, once installed.
    pub fn events_mut(&mut self) -> Option<&mut EventLogging> {
        self.events.as_mut()
    }

    /// The determinants this node keeps for other nodes.
    pub fn logger_store(&self) -> &EventStore {
        &self.store
    }

    /// Takes the machine apart (a simulated crash keeps the store, which is durable, and
    /// counts what the rest did).
    pub fn into_parts(self) -> (Option<SetProtocol<P>>, Option<EventLogging>, EventStore) {
        (self.protocol, self.events, self.store)
    }

    /// Frames kept until the protocol is installed.
    pub fn early_len(&self) -> usize {
        self.early.len()
    }

    /// Frames held by the send gate now.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Frames the send gate held so far.
    pub fn gated(&self) -> u64 {
        self.gated
    }

    /// Whether order-sensitive `actor`, at event tick `tick` (its clock plus one), may
    /// take message `send_index` of `channel` now: without deciding or recording
    /// anything (a scheduler choosing among held messages asks this first).
    pub fn may_admit(
        &self,
        actor: ActorId,
        tick: u64,
        channel: ChannelId,
        send_index: u64,
    ) -> bool {
        let Some(logging) = self.events.as_ref().filter(|l| !l.is_fetching()) else {
            return false;
        };
        match logging.script().delivery(actor, tick) {
            Ok(ReplayDelivery::Forced {
                channel: c,
                send_index: i,
            }) => c == channel && i == send_index,
            // Free; or diverged, reported when the delivery is attempted.
            _ => true,
        }
    }

    /// Order-sensitive `actor`, at event tick `tick`, is about to take message
    /// `send_index` of `channel`: past its logged events it may (and the delivery is
    /// recorded), during its replay only if the log names this message, while the node
    /// fetches its log not at all. The driver moves the actor's clock to `tick` unless
    /// the answer is [`Admission::NotNow`].
    pub fn admit_delivery(
        &mut self,
        actor: ActorId,
        tick: u64,
        channel: ChannelId,
        send_index: u64,
    ) -> Admission {
        let Some(logging) = self.events.as_mut().filter(|l| !l.is_fetching()) else {
            return Admission::NotNow;
        };
        let diverged = match logging.script().delivery(actor, tick) {
            Ok(ReplayDelivery::Forced {
                channel: c,
                send_index: i,
            }) => {
                if c != channel || i != send_index {
                    return Admission::NotNow;
                }
                logging.note_replayed();
                return Admission::Replayed;
            }
            Ok(ReplayDelivery::Free) => None,
            Err(e) => Some(e),
        };
        let seq = logging.record(Determinant {
            actor,
            tick,
            event: Event::Delivery {
                channel,
                send_index,
            },
        });
        Admission::Recorded {
            depends: Dependence::Below(seq + 1),
            diverged,
        }
    }

    /// Whether order-sensitive `actor`, in a selective receive at event tick `tick`, may
    /// take a message now. The channel's FIFO order determines the delivery, so nothing
    /// is recorded. `Err`: the log holds another event at this tick (the contract is
    /// broken; the actor runs free). `None`: not while the node fetches its log (the
    /// clock must not move before the script is known).
    pub fn admit_selected(&self, actor: ActorId, tick: u64) -> Option<Result<(), String>> {
        let logging = self.events.as_ref().filter(|l| !l.is_fetching())?;
        Some(match logging.script().delivery(actor, tick) {
            Ok(ReplayDelivery::Free)
            | Err(Diverged {
                logged: Event::EmptyUpTo(_),
                ..
            }) => Ok(()),
            other => Err(format!(
                "actor {actor} at tick {tick}: a selective receive where the log holds {other:?}"
            )),
        })
    }

    /// A nondeterministic value `actor` reads at event tick `tick` (`ctx.now()`,
    /// `ctx.random()`): the logged one during its replay, else `fresh()`, recorded.
    /// `None` without event logging (the driver then uses a fresh value unrecorded).
    pub fn read_value(
        &mut self,
        actor: ActorId,
        tick: u64,
        fresh: impl FnOnce() -> u64,
    ) -> Option<EventRead<u64>> {
        let logging = self.events.as_mut()?;
        let diverged = match logging.script().value(actor, tick) {
            Ok(Some(value)) => {
                logging.note_replayed();
                return Some(EventRead {
                    value,
                    depends: Dependence::Set,
                    replayed: true,
                    diverged: None,
                });
            }
            Ok(None) => None,
            Err(e) => Some(e),
        };
        let value = fresh();
        let seq = logging.record(Determinant {
            actor,
            tick,
            event: Event::Value(value),
        });
        Some(EventRead {
            value,
            depends: Dependence::Below(seq + 1),
            replayed: false,
            diverged,
        })
    }

    /// A probe of `actor`'s mailbox at event tick `tick` (whether messages wait): the
    /// logged answer during its replay, else `fresh()`. A "waiting" answer is recorded;
    /// runs of empty ones lazily, as one determinant and only if a message leaves the
    /// node after them (so the actor then depends on the whole node).
    pub fn probe(
        &mut self,
        actor: ActorId,
        tick: u64,
        fresh: impl FnOnce() -> bool,
    ) -> Option<EventRead<bool>> {
        let logging = self.events.as_mut()?;
        let diverged = match logging.script().poll(actor, tick) {
            Ok(ReplayPoll::Empty) => {
                logging.note_replayed();
                return Some(EventRead {
                    value: false,
                    depends: Dependence::Set,
                    replayed: true,
                    diverged: None,
                });
            }
            Ok(ReplayPoll::Waiting | ReplayPoll::Forced { .. }) => {
                logging.note_replayed();
                return Some(EventRead {
                    value: true,
                    depends: Dependence::Set,
                    replayed: true,
                    diverged: None,
                });
            }
            Ok(ReplayPoll::Free) => None,
            Err(e) => Some(e),
        };
        let waiting = fresh();
        let depends = if waiting {
            let seq = logging.record(Determinant {
                actor,
                tick,
                event: Event::Waiting,
            });
            Dependence::Below(seq + 1)
        } else {
            logging.empty_poll(actor, tick);
            Dependence::Set
        };
        Some(EventRead {
            value: waiting,
            depends,
            replayed: false,
            diverged,
        })
    }

    /// An application message from node `from` arrived on a connection of its
    /// incarnation `via`. Call [`Self::poll_delivery`] afterwards.
    pub fn handle_message(
        &mut self,
        from: SetId,
        via: Incarnation,
        meta: MessageMeta,
        payload: P,
    ) -> Result<Arrival, Refused> {
        if !runs_between(&meta.channel, from, self.me) {
            return Err(Refused::Channel { from: from.0 });
        }
        let Some(protocol) = self.protocol.as_mut() else {
            self.early
                .push((from, EarlyFrame::Message { via, meta, payload }));
            return Ok(Arrival::Early);
        };
        Ok(Arrival::Received(
            protocol.on_receive(from, via, meta, payload)?,
        ))
    }

    /// A control message from node `from` arrived. `None`: kept until the protocol is
    /// installed. Call [`Self::poll_delivery`] afterwards.
    pub fn handle_control(
        &mut self,
        from: SetId,
        message: ControlMessage,
    ) -> Result<Option<ControlOutcome<P>>, Refused> {
        if !channels_fit(self.me, from, &message) {
            return Err(Refused::Channel { from: from.0 });
        }
        let Some(protocol) = self.protocol.as_mut() else {
            self.early.push((from, EarlyFrame::Control(message)));
            return Ok(None);
        };
        let was_recovering = protocol.is_recovering();
        // Read before the ROLLBACK is applied: what the restarted peer needs that this
        // node's log no longer holds.
        let unservable = match &message {
            ControlMessage::Rollback(report) => Some(Unservable {
                incarnation: report.incarnation,
                gaps: protocol.released_past(from, &report.delivered),
            }),
            _ => None,
        };
        let stale_before = protocol.stats().stale_messages;
        let actions = protocol.on_control(from, message)?;
        let stale_dropped = protocol.stats().stale_messages - stale_before;
        Ok(Some(ControlOutcome {
            // A stale ROLLBACK (an older incarnation's) answers nothing; a current one
            // always gets a RESPONSE.
            unservable: unservable.filter(|u| !actions.is_empty() && !u.gaps.is_empty()),
            actions,
            checkpoint_wanted: protocol.take_checkpoint_request(),
            recovered: was_recovering && !protocol.is_recovering(),
            stale_dropped,
        }))
    }

    /// An event-logging message from node `from` arrived. A driver that keeps the
    /// logger store durable journals it before this call (it is acknowledged here).
    pub fn handle_events(
        &mut self,
        from: SetId,
        message: EventMessage,
    ) -> Result<EventsArrival, Refused> {
        let Some(logging) = self.events.as_mut() else {
            self.early_events.push((from, message));
            return Ok(EventsArrival::Early);
        };
        let was_fetching = logging.is_fetching();
        let replies = logging.on_message(from, message, &mut self.store)?;
        let fetched = was_fetching && !logging.is_fetching();
        let replay = !logging.script().is_empty();
        self.transmit
            .extend(replies.into_iter().map(|(to, m)| (to, Frame::Events(m))));
        self.flush_events();
        Ok(if fetched {
            EventsArrival::Fetched { replay }
        } else {
            EventsArrival::Handled
        })
    }

    /// `n` messages were put into mailboxes of this node by a sender of this node that
    /// depends on `sender` (`None`: not known, taken as every determinant recorded so
    /// far): they count in the set's interval
    /// ([`SetProtocol::on_local_deliveries`]), and from now on every message leaving the
    /// set waits, besides what its own sender depends on, for the determinants these
    /// events depend on. Returns the new interval (`None` without a protocol).
    ///
    /// Why: a message carries the set's interval as its requirement on the set, and a
    /// restored set delivers what depends on the message only once its replay has
    /// counted as many events again. The interval counts every actor's events, not only
    /// the sender's; an event made on a determinant that was never stable (an
    /// order-sensitive actor's message to itself or a neighbour, after a nondeterministic
    /// delivery whose determinant died with the set) is never made again, and a replay
    /// that takes another branch there may never reach the count: the requirement binds
    /// for ever (docs/recovery.md, "Sends made again", seed 89086). Waiting for the
    /// determinants of the counted events makes every event a requirement counts one
    /// the replay makes again.
    pub fn on_local_deliveries(&mut self, n: u64, sender: Option<Dependence>) -> Option<u64> {
        let protocol = self.protocol.as_mut()?;
        let interval = protocol.on_local_deliveries(n);
        if n > 0 {
            if let Some(logging) = self.events.as_mut() {
                let needed = sender.unwrap_or(Dependence::Set).needed(logging);
                self.interval_needs = self.interval_needs.max(needed);
            }
        }
        Some(interval)
    }

    /// An actor of this node (`sender`: its id and what it depends on; `None` for a
    /// sender that is not an actor, such as `main`) sends `payload` on `channel` to node
    /// `to`: logged, and queued for transmission once the determinants it depends on
    /// are stable. The driver folds the node's local deliveries into the protocol first
    /// (the message depends on them).
    pub fn handle_send(
        &mut self,
        to: SetId,
        channel: ChannelId,
        payload: P,
        sender: Option<(ActorId, Dependence)>,
    ) -> Result<Sent, ProtocolError> {
        let Some(protocol) = self.protocol.as_mut() else {
            return Ok(Sent::NoProtocol);
        };
        let (meta, payload) = match protocol.on_send(to, channel, payload)? {
            SendOutcome::Transmit { meta, payload } => (meta, payload),
            SendOutcome::Suppressed { meta } => {
                return Ok(Sent::Suppressed {
                    send_index: meta.send_index,
                })
            }
        };
        let piggyback = meta.piggyback_len();
        let send_index = meta.send_index;
        let frame = Frame::Message { meta, payload };
        let Some(logging) = self.events.as_mut() else {
            self.send_behind_held(to, frame);
            return Ok(Sent::Logged {
                send_index,
                needed: 0,
                held: !self.held.is_empty(),
                piggyback,
            });
        };
        let (needed, from) = match sender {
            Some((id, d)) if self.gate_rule == GateRule::PerActor => (
                // The message's requirement on this set counts the set's events, the
                // senders' of its local events' included (see `on_local_deliveries`).
                d.needed(logging).max(self.interval_needs),
                GateSender::Tracked(id),
            ),
            _ => (logging.before_send(), GateSender::Set),
        };
        let stable = logging.stable_below();
        let held = match self.held.send(stable, needed, from, to, frame) {
            Some(frame) => {
                self.transmit.push_back((to, frame));
                false
            }
            None => {
                self.gated += 1;
                // Shipped now: the frame waits for their acknowledgements.
                self.ship_determinants();
                true
            }
        };
        Ok(Sent::Logged {
            send_index,
            needed,
            held,
            piggyback,
        })
    }

    /// Queues a protocol frame (a resend, a control message) to node `to` behind every
    /// frame the gate holds.
    pub fn send_behind_held(&mut self, to: SetId, frame: Frame<P>) {
        if let Some(frame) = self.held.send(0, 0, GateSender::Set, to, frame) {
            self.transmit.push_back((to, frame));
        }
    }

    /// Ships the determinant batches due and lets out the held frames whose
    /// determinants are stable now.
    pub fn flush_events(&mut self) {
        self.ship_determinants();
        self.release_held();
    }

    /// The node's checkpoint with determinant part `snapshot` committed: the loggers
    /// may release what it covers, and frames held for determinants it covers may leave.
    fn events_committed(&mut self, snapshot: EventSnapshot) {
        if let Some(logging) = self.events.as_mut() {
            let releases = logging.checkpoint_committed(snapshot);
            self.transmit
                .extend(releases.into_iter().map(|(to, m)| (to, Frame::Events(m))));
        }
        self.release_held();
    }

    /// The next frame to send, in order.
    pub fn poll_transmit(&mut self) -> Option<(SetId, Frame<P>)> {
        self.transmit.pop_front()
    }

    /// The next message an actor of this node may take, if one is deliverable.
    pub fn poll_delivery(&mut self) -> Option<Delivery<P>> {
        self.protocol.as_mut()?.poll_delivery()
    }

    /// The next deliverable message and where it goes. `unspawned(id)` says whether
    /// child actor `id` of this node is not there (neither live nor known to have
    /// exited): in a restarted node, the replay has then not spawned it again yet, and
    /// its messages wait, in order, for [`Self::child_spawned`]. A child can be
    /// deliverable as soon as the message that makes its parent spawn it is in the
    /// parent's mailbox, before the handler runs.
    pub fn poll_routed(&mut self, unspawned: impl Fn(ActorId) -> bool) -> Option<Routed<P>> {
        let protocol = self.protocol.as_mut()?;
        let restarted = protocol.incarnation().0 > 0;
        let d = protocol.poll_delivery()?;
        let to = d.channel.to;
        if to == ActorId::main_of(self.me.0) {
            return Some(Routed::Main(d));
        }
        let wait = restarted
            && to.is_child()
            && to.rank() == self.me.0
            && (self.awaiting_spawn.contains_key(&to) || unspawned(to));
        if wait {
            self.awaiting_spawn.entry(to).or_default().push_back(d);
            return Some(Routed::AwaitingSpawn(to));
        }
        Some(Routed::Actor(d))
    }

    /// Child actor `id` was spawned again: the deliveries that waited for it, in order.
    pub fn child_spawned(&mut self, id: ActorId) -> VecDeque<Delivery<P>> {
        self.awaiting_spawn.remove(&id).unwrap_or_default()
    }

    /// How many deliveries wait for children to be spawned again (a checkpoint waits
    /// until none do: they would be in no image).
    pub fn awaiting_spawn_len(&self) -> usize {
        self.awaiting_spawn.values().map(VecDeque::len).sum()
    }

    /// The children that deliveries wait for.
    pub fn awaiting_spawn_ids(&self) -> impl Iterator<Item = ActorId> + '_ {
        self.awaiting_spawn.keys().copied()
    }

    fn ship_determinants(&mut self) {
        if let Some(logging) = self.events.as_mut() {
            let batches = logging.poll_transmit();
            self.transmit
                .extend(batches.into_iter().map(|(to, m)| (to, Frame::Events(m))));
        }
    }

    fn release_held(&mut self) {
        let stable = self.events.as_ref().map_or(u64::MAX, |l| l.stable_below());
        self.transmit.extend(self.held.release(stable));
    }
}

/// Whether `channel` runs from an actor of node `sender` to an actor of node `receiver`.
pub fn runs_between(channel: &ChannelId, sender: SetId, receiver: SetId) -> bool {
    channel.from.rank() == sender.0 && channel.to.rank() == receiver.0
}

/// Whether every channel a control message from node `from` names runs between node `me`
/// and `from`, in the direction its field means: the indices and digests of deliveries
/// are of channels from our actors to `from`'s, the sent indices of a
/// CHECKPOINT_ADVANCE of channels the other way. Otherwise the protocol would keep state
/// (and checkpoint it) for channels that do not exist.
pub fn channels_fit(me: SetId, from: SetId, message: &ControlMessage) -> bool {
    let towards_them = |c: &ChannelId| runs_between(c, me, from);
    let towards_us = |c: &ChannelId| runs_between(c, from, me);
    let report_fits = |r: &RecoveryReport| {
        r.delivered.iter().all(|(c, _)| towards_them(&c))
            && r.checkpointed.iter().all(|(c, _)| towards_them(&c))
    };
    match message {
        ControlMessage::Rollback(report) => report_fits(report),
        ControlMessage::Response {
            report,
            digests,
            positions,
            ..
        } => {
            report_fits(report)
                && digests.runs().iter().all(|r| towards_them(&r.channel))
                && positions.iter().all(|r| towards_them(&r.channel))
        }
        ControlMessage::CheckpointAdvance { checkpointed, sent } => {
            checkpointed.iter().all(|(c, _)| towards_them(&c))
                && sent.iter().all(|(c, _)| towards_us(&c))
        }
        ControlMessage::CheckpointRequest => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::{ChannelIndices, Determinant, Event, RecoveryReport};

    type Node = NodeRecovery<Vec<u8>>;

    fn a(rank: u16) -> ActorId {
        ActorId::new(rank, 7).unwrap()
    }

    /// Node `me` of three, with its protocol and event logging (two loggers) started.
    fn node(me: u16) -> Node {
        let mut n = Node::new(SetId(me), GateRule::PerActor, EventStore::new());
        n.start_protocol(SetProtocol::new(SetId(me), 3).unwrap());
        n.start_events(EventLogging::new(SetId(me), 3, 2).unwrap(), []);
        n
    }

    fn sent(n: &mut Node) -> Vec<(SetId, Frame<Vec<u8>>)> {
        std::iter::from_fn(|| n.poll_transmit()).collect()
    }

    /// Node 0 records a delivery determinant for actor `a(0)`; returns its number.
    fn record(n: &mut Node) -> u64 {
        n.events_mut().unwrap().record(Determinant {
            actor: a(0),
            tick: 1,
            event: Event::Delivery {
                channel: ChannelId::new(a(1), a(0)),
                send_index: 1,
            },
        })
    }

    #[test]
    fn a_message_waits_for_the_determinants_its_sender_depends_on_and_protocol_frames_wait_behind_it(
    ) {
        let mut n = node(0);
        let seq = record(&mut n);
        let depends = Dependence::Below(seq + 1);
        let r = n.handle_send(
            SetId(1),
            ChannelId::new(a(0), a(1)),
            vec![1],
            Some((a(0), depends)),
        );
        assert!(matches!(r, Ok(Sent::Logged { held: true, .. })), "{r:?}");
        // Only the determinant batches leave: one to each logger.
        let out = sent(&mut n);
        assert_eq!(out.len(), 2);
        assert!(out
            .iter()
            .all(|(_, f)| matches!(f, Frame::Events(EventMessage::Log { .. }))));
        // A control frame to the same node must not overtake the held message.
        n.send_behind_held(SetId(1), Frame::Control(ControlMessage::CheckpointRequest));
        assert!(sent(&mut n).is_empty());
        // An actor that depends on nothing passes.
        let free = n.handle_send(
            SetId(2),
            ChannelId::new(a(0), a(2)),
            vec![2],
            Some((ActorId::new(0, 8).unwrap(), Dependence::Below(0))),
        );
        assert!(matches!(free, Ok(Sent::Logged { held: false, .. })));
        assert_eq!(sent(&mut n).len(), 1);
        // One logger's acknowledgement is not enough; both are.
        for logger in [1, 2] {
            let ack = EventMessage::Ack {
                producer_incarnation: Incarnation(0),
                held_below: seq + 1,
            };
            n.handle_events(SetId(logger), ack).unwrap();
            let out = sent(&mut n);
            if logger == 1 {
                assert!(out.is_empty(), "left on one acknowledgement: {out:?}");
            } else {
                assert!(matches!(out[0].1, Frame::Message { .. }));
                assert!(matches!(out[1].1, Frame::Control(_)));
                assert_eq!(out.len(), 2);
            }
        }
        assert_eq!(n.held_len(), 0);
        assert_eq!(n.gated(), 1);
    }

    /// The shape of simulator seed 89086 (docs/recovery.md, "Sends made again"):
    /// an order-sensitive actor `a(0)` puts a message into a mailbox of its own set right
    /// after a nondeterministic delivery (one event of the set's interval), then a
    /// deterministic client of the same set, which depends on no determinant, sends a
    /// request to node 1. The request carries the interval, which counts the other
    /// actor's event. Had it left before that determinant was stable, and node 0 died,
    /// its replay could take another branch there (the determinant is gone) and never
    /// count that event again: node 1's answer, which depends on the request, binds
    /// on an interval the restored set never reaches, although the request itself has
    /// been made again. So the request waits for the determinants of the counted event.
    #[test]
    fn a_message_waits_for_the_determinants_of_the_local_events_its_requirement_counts() {
        let client = ActorId::new(0, 8).unwrap();
        let request = ChannelId::new(client, a(1));
        let mut n = node(0);
        let checkpoint = n.protocol_mut().unwrap().checkpoint();
        let seq = record(&mut n);
        // a(0) forwards to itself: an event of the set, on an unstable determinant.
        assert_eq!(
            n.on_local_deliveries(1, Some(Dependence::Below(seq + 1))),
            Some(1)
        );
        // The client depends on no determinant, yet its request waits.
        let r = n.handle_send(
            SetId(1),
            request,
            vec![1],
            Some((client, Dependence::Below(0))),
        );
        assert!(
            matches!(r, Ok(Sent::Logged { held: true, needed, .. }) if needed == seq + 1),
            "the request counts a(0)'s event and must wait for its determinant: {r:?}"
        );
        assert!(sent(&mut n)
            .iter()
            .all(|(_, f)| matches!(f, Frame::Events(_))));

        // Why: the deadlock the request would cause had it left now, at interval 1.
        // Node 1 answers (depending on the request, so on node 0's interval 1); node 0
        // dies and restores the checkpoint (interval 0); the peers report the request;
        // the replay makes it again, but a(0)'s new branch puts nothing into a mailbox.
        let mut depend = crate::recovery::DepVector::new();
        depend.set(SetId(0), 1);
        depend.set(SetId(1), 1);
        let answer = MessageMeta {
            channel: ChannelId::new(a(1), client),
            send_index: 1,
            sender_incarnation: Incarnation(0),
            depend,
        };
        let (mut restored, _) =
            SetProtocol::<Vec<u8>>::restore(checkpoint, Incarnation(1), Default::default())
                .unwrap();
        for peer in [1, 2] {
            let delivered: ChannelIndices = if peer == 1 {
                [(request, 1)].into_iter().collect()
            } else {
                ChannelIndices::default()
            };
            let positions = if peer == 1 {
                vec![crate::recovery::SendPositions {
                    channel: request,
                    first: 1,
                    at: vec![1],
                }]
            } else {
                Vec::new()
            };
            let report = RecoveryReport {
                incarnation: Incarnation(0),
                delivered,
                checkpointed: ChannelIndices::default(),
            };
            restored
                .on_response(
                    SetId(peer),
                    Incarnation(1),
                    report,
                    &Default::default(),
                    &positions,
                )
                .unwrap();
        }
        restored
            .on_receive(SetId(1), Incarnation(0), answer, vec![9])
            .unwrap();
        assert!(matches!(
            restored.on_send(SetId(1), request, vec![1]),
            Ok(SendOutcome::Suppressed { .. })
        ));
        assert_eq!(restored.next_regeneration(), None, "made again");
        assert!(restored.poll_delivery().is_none());
        assert_eq!(
            restored.next_requirement(),
            Some(1),
            "for ever: nothing counts"
        );

        // With the gate, the request leaves once the determinant is stable: a replay
        // then replays a(0)'s delivery and counts its event again.
        for logger in [1, 2] {
            let ack = EventMessage::Ack {
                producer_incarnation: Incarnation(0),
                held_below: seq + 1,
            };
            n.handle_events(SetId(logger), ack).unwrap();
        }
        let out = sent(&mut n);
        assert!(
            matches!(&out[..], [(SetId(1), Frame::Message { meta, .. })] if meta.depend.get(SetId(0)) == 1),
            "{out:?}"
        );
    }

    #[test]
    fn a_restarted_node_holds_messages_for_a_child_not_spawned_again_and_routes_replies_to_main() {
        let mut fresh = SetProtocol::<Vec<u8>>::new(SetId(0), 3).unwrap();
        let (restored, _rollbacks) =
            SetProtocol::restore(fresh.checkpoint(), Incarnation(1), Default::default()).unwrap();
        let mut n = Node::new(SetId(0), GateRule::PerActor, EventStore::new());
        n.start_protocol(restored);
        // Both peers answer the rollback: they delivered nothing from node 0.
        for peer in [1, 2] {
            let response = ControlMessage::Response {
                to_incarnation: Incarnation(1),
                report: RecoveryReport {
                    incarnation: Incarnation(0),
                    delivered: ChannelIndices::default(),
                    checkpointed: ChannelIndices::default(),
                },
                digests: Default::default(),
                positions: Vec::new(),
            };
            n.handle_control(SetId(peer), response).unwrap();
        }
        let child = ActorId::child(a(0), 0);
        let main = ActorId::main_of(0);
        let arrive = |n: &mut Node, to: ActorId, payload: u8| {
            let meta = MessageMeta {
                channel: ChannelId::new(a(1), to),
                send_index: 1,
                sender_incarnation: Incarnation(0),
                depend: Default::default(),
            };
            n.handle_message(SetId(1), Incarnation(0), meta, vec![payload])
                .unwrap();
        };
        let route = |n: &mut Node, spawned: bool| n.poll_routed(|_| !spawned);
        // The child is not there: its message waits.
        arrive(&mut n, child, 1);
        assert!(matches!(route(&mut n, false), Some(Routed::AwaitingSpawn(c)) if c == child));
        assert_eq!(n.awaiting_spawn_len(), 1);
        // A reply to main goes to main.
        arrive(&mut n, main, 2);
        assert!(matches!(route(&mut n, false), Some(Routed::Main(d)) if d.payload == vec![2]));
        // The same child's next message waits behind the first even if the driver now
        // sees the child: they keep their order.
        let meta = MessageMeta {
            channel: ChannelId::new(a(1), child),
            send_index: 2,
            sender_incarnation: Incarnation(0),
            depend: Default::default(),
        };
        n.handle_message(SetId(1), Incarnation(0), meta, vec![3])
            .unwrap();
        assert!(matches!(
            route(&mut n, true),
            Some(Routed::AwaitingSpawn(_))
        ));
        assert!(route(&mut n, true).is_none());
        // Those messages would be in no image: the checkpoint waits.
        assert!(matches!(
            n.checkpoint(|_| 0),
            Err(CheckpointRefused::AwaitingSpawn(2))
        ));
        let released: Vec<Vec<u8>> = n
            .child_spawned(child)
            .into_iter()
            .map(|d| d.payload)
            .collect();
        assert_eq!(released, vec![vec![1], vec![3]]);
        assert_eq!(n.awaiting_spawn_len(), 0);
        assert!(n.checkpoint(|_| 0).is_ok());
        // A node that never restarted has no children to wait for.
        let mut first = node(0);
        let meta = MessageMeta {
            channel: ChannelId::new(a(1), child),
            send_index: 1,
            sender_incarnation: Incarnation(0),
            depend: Default::default(),
        };
        first
            .handle_message(SetId(1), Incarnation(0), meta, vec![4])
            .unwrap();
        assert!(matches!(
            first.poll_routed(|_| true),
            Some(Routed::Actor(_))
        ));
    }

    fn config() -> NodeConfig {
        NodeConfig {
            nodes: 3,
            event_loggers: 2,
            protocol: Config::default(),
        }
    }

    #[test]
    fn a_committed_checkpoint_lets_out_what_waited_for_the_determinants_it_covers_then_announces_itself(
    ) {
        let mut n = node(0);
        let seq = record(&mut n);
        let r = n.handle_send(
            SetId(1),
            ChannelId::new(a(0), a(1)),
            vec![1],
            Some((a(0), Dependence::Below(seq + 1))),
        );
        assert!(matches!(r, Ok(Sent::Logged { held: true, .. })), "{r:?}");
        sent(&mut n); // the determinant batches
                      // The image holds the actor past the determinant's tick: a replay never makes
                      // that event again, so nothing needs it stable any more.
        let image = n.checkpoint(|_| 1).unwrap();
        assert!(
            sent(&mut n).is_empty(),
            "a checkpoint taken is not yet durable"
        );
        let announce = n
            .handle_checkpoint_committed(image.protocol.id, image.events)
            .unwrap();
        for action in announce {
            let Action::Control { to, message } = action else {
                panic!("a commit asks for no resend: {action:?}");
            };
            n.send_behind_held(to, Frame::Control(message));
        }
        let out = sent(&mut n);
        let message = out
            .iter()
            .position(|(to, f)| *to == SetId(1) && matches!(f, Frame::Message { .. }));
        let advance = out.iter().position(|(to, f)| {
            *to == SetId(1) && matches!(f, Frame::Control(ControlMessage::CheckpointAdvance { .. }))
        });
        assert!(message.is_some(), "the held message left: {out:?}");
        assert!(
            advance.is_some(),
            "the commit is announced to node 1: {out:?}"
        );
        assert!(message < advance, "nothing overtakes on the link: {out:?}");
        assert_eq!(n.held_len(), 0);
        // A commit of a checkpoint never taken is refused.
        let taken = n.checkpoint(|_| 1).unwrap();
        let unknown = CheckpointId(taken.protocol.id.0 + 1);
        assert!(matches!(
            n.handle_checkpoint_committed(unknown, taken.events),
            Err(CheckpointRefused::Protocol(_))
        ));
    }

    #[test]
    fn a_restored_node_fetches_its_determinants_rolls_back_every_peer_and_keeps_what_came_early() {
        let mut before = node(0);
        record(&mut before);
        let image = before.checkpoint(|_| 0).unwrap();
        let mut n = Node::new(SetId(0), GateRule::PerActor, EventStore::new());
        // A node still loading its checkpoint takes none.
        assert!(matches!(
            n.checkpoint(|_| 0),
            Err(CheckpointRefused::NotReady)
        ));
        n.handle_control(SetId(2), ControlMessage::CheckpointRequest)
            .unwrap();
        assert_eq!(n.early_len(), 1);
        let rollbacks = n.restore(image, Incarnation(1), config()).unwrap();
        let mut to: Vec<SetId> = rollbacks
            .iter()
            .map(|a| match a {
                Action::Control {
                    to,
                    message: ControlMessage::Rollback(_),
                } => *to,
                other => panic!("a restore asks only for ROLLBACKs: {other:?}"),
            })
            .collect();
        to.sort();
        assert_eq!(to, vec![SetId(1), SetId(2)]);
        // Event logging is back and fetches what its loggers hold since the image.
        assert!(n.events().is_some_and(|e| e.is_fetching()));
        let notices = sent(&mut n);
        for logger in [SetId(1), SetId(2)] {
            assert!(
                notices.iter().any(|(to, f)| *to == logger
                    && matches!(f, Frame::Events(EventMessage::Fetch { .. }))),
                "logger {logger} is asked for what it holds: {notices:?}"
            );
        }
        assert!(notices.iter().all(|(_, f)| matches!(f, Frame::Events(_))));
        assert_eq!(n.take_early().len(), 1);
        // Restoring node 0 from node 1's image is refused.
        let mut other = node(1);
        let wrong = other.checkpoint(|_| 0).unwrap();
        let mut n = Node::new(SetId(0), GateRule::PerActor, EventStore::new());
        assert!(n.restore(wrong, Incarnation(1), config()).is_err());
        assert!(n.protocol().is_none());
    }

    #[test]
    fn frames_that_arrive_before_the_protocol_is_back_are_kept_in_order() {
        let mut n = Node::new(SetId(0), GateRule::PerActor, EventStore::new());
        let meta = MessageMeta {
            channel: ChannelId::new(a(1), a(0)),
            send_index: 1,
            sender_incarnation: Incarnation(0),
            depend: Default::default(),
        };
        let got = n.handle_message(SetId(1), Incarnation(0), meta, vec![9]);
        assert!(matches!(got, Ok(Arrival::Early)));
        let ctl = n.handle_control(SetId(2), ControlMessage::CheckpointRequest);
        assert!(matches!(ctl, Ok(None)));
        let ev = n.handle_events(
            SetId(1),
            EventMessage::Restarted {
                incarnation: Incarnation(1),
            },
        );
        assert!(matches!(ev, Ok(EventsArrival::Early)));
        assert!(n.poll_delivery().is_none());
        n.start_protocol(SetProtocol::new(SetId(0), 3).unwrap());
        let early = n.take_early();
        assert!(matches!(early[0], (SetId(1), EarlyFrame::Message { .. })));
        assert!(matches!(early[1], (SetId(2), EarlyFrame::Control(_))));
        assert_eq!(early.len(), 2);
        n.start_events(EventLogging::new(SetId(0), 3, 2).unwrap(), []);
        assert_eq!(n.take_early_events().len(), 1);
    }

    #[test]
    fn a_message_on_a_channel_between_other_nodes_is_refused_even_before_the_protocol_is_back() {
        let mut n = Node::new(SetId(0), GateRule::PerActor, EventStore::new());
        let meta = MessageMeta {
            channel: ChannelId::new(a(2), a(0)),
            send_index: 1,
            sender_incarnation: Incarnation(0),
            depend: Default::default(),
        };
        let got = n.handle_message(SetId(1), Incarnation(0), meta, vec![9]);
        assert!(matches!(got, Err(Refused::Channel { from: 1 })));
        assert_eq!(n.early_len(), 0);
    }

    #[test]
    fn control_messages_naming_channels_between_other_nodes_are_refused() {
        let indices = |c: ChannelId| -> ChannelIndices { [(c, 3)].into_iter().collect() };
        let report = |delivered: ChannelIndices| RecoveryReport {
            incarnation: Incarnation(1),
            delivered,
            checkpointed: ChannelIndices::default(),
        };
        // Node 0 hears from node 1.
        let ours_to_theirs = ChannelId::new(a(0), a(1));
        let theirs_to_ours = ChannelId::new(a(1), a(0));
        let elsewhere = ChannelId::new(a(2), a(1));
        let fits = |m: ControlMessage| channels_fit(SetId(0), SetId(1), &m);
        assert!(fits(ControlMessage::Rollback(report(indices(
            ours_to_theirs
        )))));
        assert!(!fits(ControlMessage::Rollback(report(indices(
            theirs_to_ours
        )))));
        assert!(!fits(ControlMessage::Rollback(report(indices(elsewhere)))));
        let advance = |checkpointed, sent| ControlMessage::CheckpointAdvance { checkpointed, sent };
        assert!(fits(advance(
            indices(ours_to_theirs),
            indices(theirs_to_ours)
        )));
        assert!(!fits(advance(
            indices(ours_to_theirs),
            indices(ours_to_theirs)
        )));
        assert!(!fits(advance(
            indices(elsewhere),
            ChannelIndices::default()
        )));
        assert!(fits(ControlMessage::CheckpointRequest));
        // And the machine refuses them.
        let mut n = node(0);
        let r = n.handle_control(
            SetId(1),
            ControlMessage::Rollback(report(indices(elsewhere))),
        );
        assert!(matches!(r, Err(Refused::Channel { from: 1 })));
    }
}
