//! Rollback recovery: the sans-IO protocol core (causal message logging between correlated
//! sets, after Algorithm 1 of "A Lightweight Causal Message Logging Protocol", with the
//! correlated-set coordination of Bouteiller et al.).
//!
//! One [`SetProtocol`] per correlated set (by default a node). It owns the dependency
//! vector, the per-channel send and delivery indices, the sender-based log and the
//! recovery exchange; the driver owns everything else (transport, actors, checkpoint
//! storage, failure detection) and feeds it events:
//!
//! | event | call | actions returned |
//! |---|---|---|
//! | an actor sends to another set | [`SetProtocol::on_send`] | transmit (with [`MessageMeta`]) or suppress |
//! | a message arrives from another set | [`SetProtocol::on_receive`] | (queued or duplicate) |
//! | the set can run a handler | [`SetProtocol::poll_delivery`] | the next deliverable message |
//! | the set checkpoints | [`SetProtocol::checkpoint`] → store → [`SetProtocol::checkpoint_committed`] | CHECKPOINT_ADVANCE notices |
//! | the set restarts | [`SetProtocol::restore`] | ROLLBACK to every set |
//! | a control message arrives | [`SetProtocol::on_control`] | resends, RESPONSE, ROLLBACK |
//!
//! Messages between actors of the same set never go through the protocol: the set's
//! coordinated checkpoint captures them. The protocol, its guarantees and its contract
//! with applications (send-determinism) are described in `docs/recovery.md`.
//!
//! Modules, one concept each: [`ids`] (sets, channels, incarnations), [`dep_vector`] (the
//! dependency-interval vector), [`messages`] (what goes on the wire), [`sender_log`] (the
//! sending side and its log), [`delivery`] (the receiving side and the delivery rule),
//! [`snapshot`] (what goes into a checkpoint), [`protocol`] (the state machine),
//! [`error`] (refused events), [`replay_check`] (the determinism contract's checker:
//! regenerated messages compared with the copies delivered before the failure),
//! [`timer_state`] (an actor's timers: arm numbers, fired and
//! cancelled timers, what a checkpoint keeps of them); for order-sensitive actors, [`determinant`] (recorded
//! nondeterministic events and their replay script) and [`event_logging`] (the
//! pessimistic event-logger exchange that keeps determinants on other sets) and
//! [`send_gate`] (which messages leaving the set wait for stable determinants);
//! [`log_dump`] (payloads of the log moved out to logger nodes); [`stash`] (which
//! stashed message an actor takes next) and [`suspension`] (what a checkpoint keeps of
//! a suspended async handler, and its re-execution on restore); and around all of
//! them [`node`], the node-level machine ([`NodeRecovery`]: channel checks, frames that
//! arrive early, the logger store, the send gate) that the runtime's recovery driver and
//! the simulator both run.

pub mod delivery;
pub mod dep_vector;
pub mod determinant;
pub mod error;
pub mod event_logging;
pub mod ids;
pub mod log_dump;
pub mod messages;
pub mod node;
pub mod protocol;
pub mod replay_check;
pub mod send_gate;
pub mod sender_log;
pub mod snapshot;
pub mod stash;
pub mod suspension;
pub mod timer_state;

pub use delivery::{DependencyRule, Received, SendPositions};
pub use dep_vector::DepVector;
pub use determinant::{Determinant, Diverged, Event, ReplayDelivery, ReplayPoll, ReplayScript};
pub use error::ProtocolError;
pub use event_logging::{
    loggers_of, EventLogging, EventMessage, EventSnapshot, EventStats, EventStore,
};
pub use ids::{ChannelId, CheckpointId, Incarnation, SetId};
pub use log_dump::{BlockId, DumpRef, Held, LogDump};
pub use messages::{ChannelIndices, ControlMessage, MessageMeta, RecoveryReport};
pub use node::{
    Admission, Arrival, CheckpointRefused, ControlOutcome, EarlyFrame, EventRead, EventsArrival,
    Frame, GateRule, NodeConfig, NodeImage, NodeRecovery, Refused, Routed, Sent, Unservable,
};
pub use protocol::{Action, Config, Delivery, ProtocolStats, SendOutcome, SetProtocol};
pub use replay_check::{ContractViolation, DeliveredDigests, FoundBy};
pub use send_gate::{Dependence, GateSender, SendGate};
pub use sender_log::{LogPayload, LogStats};
pub use snapshot::Snapshot;
pub use stash::{next_stashed, Receiving, Stashed};
pub use suspension::{Effect, ReplayShort, Suspension};
pub use timer_state::{Deadline, TimerImage, TimerState};
