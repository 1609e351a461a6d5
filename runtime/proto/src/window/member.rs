//! [`Member`]: one node's membership in one window, as a sans-IO machine. It is both the
//! origin of the operations the node's actors issue and the target of those that reach
//! the node's part; the driver owns the part's memory and the transport, and passes the
//! memory in where an operation is applied.
//!
//! Inputs are `issue`, `fence`, `handle_*` and the checkpoint calls; outputs are the
//! frames of [`Member::poll_transmit`] and the values returned. The rules it keeps are
//! the module's (see [`super`]).

use super::element::WindowError;
use super::ops::{Op, OpKind, OpMeta, Progress, Reply, Shape, WindowFrame};
use crate::actor_id::ActorId;
use crate::range_set::RangeSet;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A frame for member `to` (possibly this node itself: an answer to its own actor).
#[derive(Clone, Debug, PartialEq)]
pub struct Transmit {
    /// The receiving member's rank.
    pub to: u16,
    /// The frame.
    pub frame: WindowFrame,
}

/// An operation the node's actor issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Issued {
    /// Its identity.
    pub meta: OpMeta,
    /// Whether the origin may apply it to the target's memory itself (through the
    /// target's gate). False for a re-execution the target may already have: that one
    /// goes over the message path, where the target drops it or answers it from its log.
    pub direct: bool,
    /// A restarted node's `main` issued again an operation its checkpoint image had
    /// issued: a write is done already (applied, or in the image's log, which the
    /// restart exchange resends), so the driver drops it; a read is asked again with
    /// [`Member::send_op`] (or [`Member::handle_op`] on the node's own part) and the
    /// target answers it from the answers it keeps for `main`.
    pub replayed: bool,
}

/// What a restarted node's `main` does at a fence it calls again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MainFence {
    /// The node completed it before: it returns at once.
    Done,
    /// The checkpoint image was taken during it: the driver waits for it to complete.
    Resume,
    /// A fence the image had not called: [`Member::fence`].
    New,
}

/// Whether a membership keeps what recovery needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Operations logged at their origins, answers kept at their targets: a restarted
    /// node gets back what its image lacks.
    On,
    /// Nothing kept for a restart (the run has recovery off): no node restarts.
    Off,
}

/// A restarted node's `main`, which is in no image: it runs again from its start, and
/// its operations and fences are numbered again from the first.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rerun {
    /// Per target: operations `main` issued again in this incarnation.
    issued: BTreeMap<u16, u64>,
    /// Per target: the last index of `main`'s the image had issued.
    upto: BTreeMap<u16, u64>,
    /// Fences `main` called again.
    fences: u64,
    /// Fences the image had called: its epoch, one more if it was fencing.
    fences_upto: u64,
}

/// What became of an operation that reached the target.
#[derive(Clone, Debug, PartialEq)]
pub enum Applied {
    /// Applied now (a get's or fetch-and-op's answer is queued for its origin).
    Now,
    /// A re-execution of one applied before: dropped, or answered from the log.
    Again,
    /// Of a later epoch than the target's: kept until the target's fence reaches it.
    Held,
}

/// An operation kept at its origin until the target's checkpoint covers it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Logged {
    epoch: u64,
    op: Op,
    /// A fetch-and-op's answer once its origin has it: resent with the operation, so
    /// that a restarted target keeps it as the answer.
    answered: Option<Vec<u8>>,
}

impl Logged {
    /// The frame that sends it again as `origin`'s operation `index`.
    fn resend(&self, origin: ActorId, index: u64, reply: Reply) -> WindowFrame {
        WindowFrame::Op {
            meta: OpMeta {
                origin,
                index,
                epoch: self.epoch,
            },
            op: self.op.clone(),
            reply,
        }
    }
}

/// What the node knows after its own restart of a target's progress on its channels.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum Known {
    /// Never restarted: every operation is new to every target.
    Everything,
    /// Restarted, the target has not answered yet: nothing may go direct.
    Waiting,
    /// What the target had applied per channel when it answered: those operations go
    /// over messages (the target drops them or answers them from its log).
    Applied(BTreeMap<ActorId, RangeSet>),
}

/// What a checkpoint of the node keeps of its membership (the part's memory is copied by
/// the driver beside it, under the closed gate).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemberImage {
    shape: Shape,
    rank: u16,
    epoch: u64,
    fencing: bool,
    // Origin side.
    issued: BTreeMap<(ActorId, u16), u64>,
    issued_in_epoch: Vec<u64>,
    log: Vec<BTreeMap<(ActorId, u64), Logged>>,
    notices_sent: Vec<BTreeMap<u64, u64>>,
    awaiting: BTreeMap<(u16, ActorId, u64), Logged>,
    covered: Vec<BTreeMap<ActorId, RangeSet>>,
    // Target side.
    applied: BTreeMap<ActorId, RangeSet>,
    counted: Vec<u64>,
    answers: BTreeMap<ActorId, BTreeMap<u64, Vec<u8>>>,
}

impl MemberImage {
    /// The epoch the image was taken in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The window's shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
}

/// Sizes of what the membership keeps, for metrics and the memory cost of recovery.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberStats {
    /// Operations in the origin's log.
    pub logged: usize,
    /// Their bytes.
    pub logged_bytes: usize,
    /// Answers kept for restarted origins.
    pub answers: usize,
    /// Their bytes.
    pub answer_bytes: usize,
    /// Operations of later epochs waiting at the target.
    pub held: usize,
    /// Re-executed operations answered from the log (this incarnation).
    pub answered_again: u64,
}

/// What a held operation owes its origin once applied.
#[derive(Clone, Debug, PartialEq)]
struct Pending {
    /// Send the answer.
    send: bool,
    /// The answer its origin got before, kept instead of the one computed.
    answered: Option<Vec<u8>>,
}

impl Pending {
    fn of(reply: Reply) -> Pending {
        match reply {
            Reply::Answer => Pending {
                send: true,
                answered: None,
            },
            Reply::Effect => Pending {
                send: false,
                answered: None,
            },
            Reply::Answered(values) => Pending {
                send: false,
                answered: Some(values),
            },
        }
    }
}

/// One node's membership in one window.
#[derive(Debug)]
pub struct Member {
    /// What a checkpoint keeps: the shape, the epoch and fence; on the origin side the
    /// last index issued per channel (origin actor, target), operations of the current
    /// epoch per target, the log (operations until the target's checkpoint covers them),
    /// fence counts sent (until the target's checkpoint passes their epoch), answers
    /// awaited and what each target's last checkpoint covers; on the target side the
    /// indices applied per origin actor (a set, not a high mark: within an epoch
    /// operations commute, and a direct operation may overtake a resent one), operations
    /// of the current epoch applied per origin node, and answers kept for origins that
    /// may re-execute.
    kept: MemberImage,
    /// Per target: what this node knows of its progress after this node's restart.
    known: Vec<Known>,
    /// The indices applied or held, per origin actor.
    received: BTreeMap<ActorId, RangeSet>,
    /// Fence counts received, per epoch and origin node.
    notices: BTreeMap<u64, BTreeMap<u16, u64>>,
    /// Operations of later epochs.
    held: BTreeMap<u64, Vec<(u16, OpMeta, Op, Pending)>>,
    /// What the last committed checkpoint holds of the target side.
    committed: Option<(u64, BTreeMap<ActorId, RangeSet>)>,
    answered_again: u64,
    /// After a restart: `main` running again from its start.
    rerun: Rerun,
    recovery: Recovery,
    outbox: VecDeque<Transmit>,
}

impl Member {
    /// The membership of node `rank` in a new window, at epoch 0.
    pub fn new(shape: Shape, rank: u16) -> Result<Member, WindowError> {
        shape.len_of(rank)?;
        let n = usize::from(shape.members());
        Ok(Member {
            kept: MemberImage {
                shape,
                rank,
                epoch: 0,
                fencing: false,
                issued: BTreeMap::new(),
                issued_in_epoch: vec![0; n],
                log: vec![BTreeMap::new(); n],
                notices_sent: vec![BTreeMap::new(); n],
                awaiting: BTreeMap::new(),
                covered: vec![BTreeMap::new(); n],
                applied: BTreeMap::new(),
                counted: vec![0; n],
                answers: BTreeMap::new(),
            },
            known: vec![Known::Everything; n],
            received: BTreeMap::new(),
            notices: BTreeMap::new(),
            held: BTreeMap::new(),
            committed: None,
            answered_again: 0,
            rerun: Rerun::default(),
            recovery: Recovery::On,
            outbox: VecDeque::new(),
        })
    }

    /// The membership of node `rank` in a new window of a run without recovery: nothing
    /// is logged or kept for a restart.
    pub fn without_recovery(shape: Shape, rank: u16) -> Result<Member, WindowError> {
        let mut member = Member::new(shape, rank)?;
        member.recovery = Recovery::Off;
        Ok(member)
    }

    /// The window's shape.
    pub fn shape(&self) -> &Shape {
        &self.kept.shape
    }

    /// This node's rank.
    pub fn rank(&self) -> u16 {
        self.kept.rank
    }

    /// The node's epoch: the number of fences it has completed.
    pub fn epoch(&self) -> u64 {
        self.kept.epoch
    }

    /// Whether the node has called a fence that has not completed.
    pub fn is_fencing(&self) -> bool {
        self.kept.fencing
    }

    fn member(&self, rank: u16) -> Result<usize, WindowError> {
        self.kept.shape.len_of(rank)?;
        Ok(usize::from(rank))
    }

    fn members(&self) -> impl Iterator<Item = u16> {
        0..self.kept.shape.members()
    }

    /// The next frame to send, in order.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        self.outbox.pop_front()
    }

    // ---------------------------------------------------------------- origin side

    /// Actor `origin` of this node issues `op` on `target`'s part: checked, numbered,
    /// counted for the fence and, when it changes another node's part or answers, logged.
    /// The driver then applies it itself ([`Issued::direct`] and the target's gate open:
    /// [`Member::handle_direct`] at the target) or hands it to [`Member::send_op`].
    pub fn issue(&mut self, origin: ActorId, target: u16, op: &Op) -> Result<Issued, WindowError> {
        let t = self.member(target)?;
        op.check(&self.kept.shape, target)?;
        if origin == ActorId::main_of(self.kept.rank) {
            if let Some(index) = self.rerun_index(target) {
                return Ok(Issued {
                    meta: OpMeta {
                        origin,
                        index,
                        epoch: self.rerun.fences,
                    },
                    direct: false,
                    replayed: true,
                });
            }
        }
        // The fence's counts are out: an operation now would be in no count (the app
        // issued it concurrently with its fence, against the contract).
        if self.kept.fencing {
            return Err(WindowError::FenceInProgress(self.kept.epoch));
        }
        let last = self
            .kept
            .issued
            .get(&(origin, target))
            .copied()
            .unwrap_or(0);
        // u64::MAX is no member of a range set: the last index is never used.
        let index = last
            .checked_add(1)
            .filter(|i| *i < u64::MAX)
            .ok_or(WindowError::Overflow)?;
        let in_epoch = self.kept.issued_in_epoch[t]
            .checked_add(1)
            .ok_or(WindowError::Overflow)?;
        self.kept.issued.insert((origin, target), index);
        self.kept.issued_in_epoch[t] = in_epoch;
        let meta = OpMeta {
            origin,
            index,
            epoch: self.kept.epoch,
        };
        let covered = self.kept.covered[t]
            .get(&origin)
            .is_some_and(|c| c.contains(index));
        if self.recovery == Recovery::On && target != self.kept.rank && !covered {
            self.kept.log[t].insert(
                (origin, index),
                Logged {
                    epoch: self.kept.epoch,
                    op: op.clone(),
                    answered: None,
                },
            );
        }
        let direct = target == self.kept.rank
            || op.kind.may_go_direct()
                && match &self.known[t] {
                    Known::Everything => true,
                    Known::Waiting => false,
                    Known::Applied(applied) => {
                        !applied.get(&origin).is_some_and(|a| a.contains(index))
                    }
                };
        Ok(Issued {
            meta,
            direct,
            replayed: false,
        })
    }

    /// The index of a restarted `main`'s next operation to `target` if the image had
    /// issued it already.
    fn rerun_index(&mut self, target: u16) -> Option<u64> {
        let upto = self.rerun.upto.get(&target).copied().unwrap_or(0);
        let issued = self.rerun.issued.entry(target).or_insert(0);
        if *issued >= upto {
            return None;
        }
        *issued += 1;
        Some(*issued)
    }

    /// `main` calls a fence: on a restarted node, one its image had called already
    /// returns at once or resumes ([`MainFence`]); any other is [`MainFence::New`].
    /// Only `main`'s fences go through here: an actor's are in its image.
    pub fn main_fence(&mut self) -> MainFence {
        if self.rerun.fences >= self.rerun.fences_upto {
            return MainFence::New;
        }
        self.rerun.fences += 1;
        if self.rerun.fences <= self.kept.epoch {
            MainFence::Done
        } else {
            MainFence::Resume
        }
    }

    /// Sends an issued operation over the message path (not direct, or the target's gate
    /// refused it); its answer, if any, is awaited. An operation on the node's own part
    /// is applied with [`Member::handle_op`] instead.
    pub fn send_op(&mut self, target: u16, meta: OpMeta, op: Op) {
        if op.kind.answers() {
            self.kept.awaiting.insert(
                (target, meta.origin, meta.index),
                Logged {
                    epoch: meta.epoch,
                    op: op.clone(),
                    answered: None,
                },
            );
        }
        self.outbox.push_back(Transmit {
            to: target,
            frame: WindowFrame::Op {
                reply: if op.kind.answers() {
                    Reply::Answer
                } else {
                    Reply::Effect
                },
                meta,
                op,
            },
        });
    }

    /// Target `from` answered one of this node's operations: `true` the first time (hand
    /// it to the waiting actor), `false` for a second answer to a resent operation.
    /// An operation on the node's own part is answered at once, by a frame to itself. A
    /// fetch-and-op's answer is kept with the operation in the log.
    ///
    /// Refused if its length is not that of the elements the operation reads.
    pub fn handle_answer(
        &mut self,
        from: u16,
        origin: ActorId,
        index: u64,
        values: &[u8],
    ) -> Result<bool, WindowError> {
        if from == self.kept.rank {
            return Ok(true);
        }
        let key = (from, origin, index);
        let Some(awaited) = self.kept.awaiting.get(&key) else {
            return Ok(false);
        };
        let expected = (awaited.op.count as usize).saturating_mul(awaited.op.elem.size());
        if values.len() != expected {
            return Err(WindowError::AnswerLength {
                from,
                bytes: values.len(),
                expected,
            });
        }
        self.kept.awaiting.remove(&key);
        if let Some(logged) = self.kept.log[usize::from(from)].get_mut(&(origin, index)) {
            if matches!(logged.op.kind, OpKind::FetchAndOp(_)) {
                logged.answered = Some(values.to_vec());
            }
        }
        Ok(true)
    }

    /// The node's fence of its current epoch: every member is told how many operations
    /// this node issued to it in the epoch. The fence completes in
    /// [`Member::poll_fence`].
    pub fn fence(&mut self) -> Result<(), WindowError> {
        if self.kept.fencing {
            return Err(WindowError::FenceInProgress(self.kept.epoch));
        }
        self.kept.fencing = true;
        for target in self.members() {
            let count = self.kept.issued_in_epoch[usize::from(target)];
            if target == self.kept.rank {
                self.notices
                    .entry(self.kept.epoch)
                    .or_default()
                    .insert(target, count);
            } else {
                self.kept.notices_sent[usize::from(target)].insert(self.kept.epoch, count);
                self.outbox.push_back(Transmit {
                    to: target,
                    frame: WindowFrame::Notice {
                        epoch: self.kept.epoch,
                        count,
                    },
                });
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- target side

    fn admit(&mut self, from: u16, meta: &OpMeta) -> Result<Option<Applied>, WindowError> {
        let f = self.member(from)?;
        if meta.origin.rank() != from {
            return Err(WindowError::UnknownMember {
                rank: meta.origin.rank(),
                members: self.kept.shape.members(),
            });
        }
        if meta.index == 0 || meta.index == u64::MAX {
            return Err(WindowError::ZeroIndex(meta.origin.to_string()));
        }
        let seen = |m: &BTreeMap<ActorId, RangeSet>| {
            m.get(&meta.origin).is_some_and(|s| s.contains(meta.index))
        };
        if seen(&self.kept.applied) || seen(&self.received) {
            return Ok(Some(Applied::Again));
        }
        if meta.epoch < self.kept.epoch {
            return Err(WindowError::EpochPassed {
                origin: meta.origin.to_string(),
                rank: self.kept.rank,
                index: meta.index,
                epoch: meta.epoch,
                current: self.kept.epoch,
            });
        }
        if meta.epoch > self.kept.epoch {
            return Ok(Some(Applied::Held));
        }
        let announced = self
            .notices
            .get(&self.kept.epoch)
            .and_then(|n| n.get(&from))
            .copied();
        if let Some(announced) = announced {
            if self.kept.counted[f] >= announced {
                return Err(WindowError::TooManyOperations {
                    from,
                    rank: self.kept.rank,
                    epoch: self.kept.epoch,
                    announced,
                    applied: self.kept.counted[f] + 1,
                });
            }
        }
        Ok(None)
    }

    fn record(&mut self, from: u16, meta: &OpMeta, answer: Option<Vec<u8>>, send: bool) {
        self.kept
            .applied
            .entry(meta.origin)
            .or_default()
            .insert(meta.index);
        self.received
            .entry(meta.origin)
            .or_default()
            .insert(meta.index);
        self.kept.counted[usize::from(from)] += 1;
        let Some(values) = answer else { return };
        // An actor of this node fails with it, its state with its image: its answers
        // need no keeping. `main` is in no image: it asks again after a restart.
        let keep = from != self.kept.rank || meta.origin == ActorId::main_of(self.kept.rank);
        if keep && self.recovery == Recovery::On {
            self.kept
                .answers
                .entry(meta.origin)
                .or_default()
                .insert(meta.index, values.clone());
        }
        if send {
            self.outbox.push_back(Transmit {
                to: from,
                frame: WindowFrame::Answer {
                    origin: meta.origin,
                    index: meta.index,
                    values,
                },
            });
        }
    }

    fn apply_and_record(
        &mut self,
        from: u16,
        meta: &OpMeta,
        op: &Op,
        pending: Pending,
        part: &mut [u8],
    ) -> Result<(), WindowError> {
        let values = op.apply(&self.kept.shape, self.kept.rank, part)?;
        // What its origin got the first time wins over what this order gives.
        let values = pending.answered.or(values);
        self.record(from, meta, values, pending.send);
        Ok(())
    }

    fn answer_again(&mut self, from: u16, meta: &OpMeta, op: &Op) -> Result<(), WindowError> {
        let applied = self
            .kept
            .applied
            .get(&meta.origin)
            .is_some_and(|s| s.contains(meta.index));
        if !op.kind.answers() || !applied {
            // A write applied before, or an operation still held: nothing to answer now.
            return Ok(());
        }
        let values = self
            .kept
            .answers
            .get(&meta.origin)
            .and_then(|a| a.get(&meta.index))
            .cloned()
            .ok_or_else(|| WindowError::AnswerReleased {
                origin: meta.origin.to_string(),
                index: meta.index,
            })?;
        self.answered_again += 1;
        self.outbox.push_back(Transmit {
            to: from,
            frame: WindowFrame::Answer {
                origin: meta.origin,
                index: meta.index,
                values,
            },
        });
        Ok(())
    }

    /// An operation from node `from` reached this node's part over the message path (or
    /// from one of this node's own actors): applied to `part` now, recognised as a
    /// re-execution, or held for a later epoch. Refused without any change if it does
    /// not fit the window or its epoch has passed without it. `reply`: what its origin
    /// wants back.
    pub fn handle_op(
        &mut self,
        from: u16,
        meta: OpMeta,
        op: Op,
        reply: Reply,
        part: &mut [u8],
    ) -> Result<Applied, WindowError> {
        op.check(&self.kept.shape, self.kept.rank)?;
        match self.admit(from, &meta)? {
            Some(Applied::Again) => {
                if reply == Reply::Answer {
                    self.answer_again(from, &meta, &op)?;
                    // A copy resent for its effect may be the one held: it answers now.
                    if let Some(held) = self.held.get_mut(&meta.epoch) {
                        for (_, m, _, pending) in held.iter_mut() {
                            if m.origin == meta.origin && m.index == meta.index {
                                pending.send = true;
                            }
                        }
                    }
                }
                Ok(Applied::Again)
            }
            Some(Applied::Held) => {
                self.received
                    .entry(meta.origin)
                    .or_default()
                    .insert(meta.index);
                self.held
                    .entry(meta.epoch)
                    .or_default()
                    .push((from, meta, op, Pending::of(reply)));
                Ok(Applied::Held)
            }
            Some(Applied::Now) | None => {
                self.apply_and_record(from, &meta, &op, Pending::of(reply), part)?;
                Ok(Applied::Now)
            }
        }
    }

    /// Node `from`'s actor applied an operation to this node's part itself, through the
    /// gate, and left its record (with the values a get or fetch-and-op read): the
    /// target's bookkeeping catches up. The gate let it in only at this epoch. One the
    /// target has already (resent over the message path while its origin was writing it)
    /// changes nothing: only puts and gets go direct, and doing one twice is doing it once.
    pub fn handle_direct(
        &mut self,
        from: u16,
        meta: OpMeta,
        kind: OpKind,
        answer: Option<Vec<u8>>,
    ) -> Result<(), WindowError> {
        if !kind.may_go_direct() {
            return Err(WindowError::NotDirect(kind));
        }
        // Something else than `None`: the origin resent it over the message path while it
        // was writing it (this node restarted); a put written twice, or a get read twice,
        // is the same.
        match self.admit(from, &meta)? {
            None => {
                // Its origin has the values already: nothing to send, only to keep.
                let answer = answer.filter(|_| kind.answers());
                self.record(from, &meta, answer, false);
                Ok(())
            }
            Some(Applied::Again) => Ok(()),
            // The gate let it in at another epoch than this machine's: the driver's gate
            // word and the machine disagree.
            Some(_) => Err(WindowError::EpochPassed {
                origin: meta.origin.to_string(),
                rank: self.kept.rank,
                index: meta.index,
                epoch: meta.epoch,
                current: self.kept.epoch,
            }),
        }
    }

    /// Node `from`'s fence of `epoch` announced `count` operations to this node. A
    /// count of an epoch this node has passed is a re-executed fence's and is ignored.
    pub fn handle_notice(&mut self, from: u16, epoch: u64, count: u64) -> Result<(), WindowError> {
        let f = self.member(from)?;
        if epoch < self.kept.epoch {
            return Ok(());
        }
        let notices = self.notices.entry(epoch).or_default();
        if let Some(&before) = notices.get(&from) {
            if before != count {
                return Err(WindowError::NoticeChanged {
                    from,
                    rank: self.kept.rank,
                    epoch,
                    count,
                    before,
                });
            }
            return Ok(());
        }
        if epoch == self.kept.epoch && self.kept.counted[f] > count {
            return Err(WindowError::TooManyOperations {
                from,
                rank: self.kept.rank,
                epoch,
                announced: count,
                applied: self.kept.counted[f],
            });
        }
        notices.insert(from, count);
        Ok(())
    }

    /// Whether the fence this node called can complete: every member's count for the
    /// epoch is in, that many of its operations have been applied here, and every answer
    /// this node's operations of the epoch wait for has come.
    pub fn fence_ready(&self) -> bool {
        if !self.kept.fencing || !self.kept.awaiting.is_empty() {
            return false;
        }
        let Some(notices) = self.notices.get(&self.kept.epoch) else {
            return false;
        };
        self.members()
            .all(|r| notices.get(&r) == Some(&self.kept.counted[usize::from(r)]))
    }

    /// Completes the fence if it is ready ([`Member::fence_ready`]): the node enters the
    /// next epoch, and the operations held for it are applied to `part` now. Returns the
    /// new epoch. The driver advances the part's gate word with it.
    pub fn poll_fence(&mut self, part: &mut [u8]) -> Result<Option<u64>, WindowError> {
        if !self.fence_ready() {
            return Ok(None);
        }
        let next = self
            .kept
            .epoch
            .checked_add(1)
            .ok_or(WindowError::Overflow)?;
        self.notices.remove(&self.kept.epoch);
        self.kept.epoch = next;
        self.kept.fencing = false;
        self.kept.issued_in_epoch.iter_mut().for_each(|c| *c = 0);
        self.kept.counted.iter_mut().for_each(|c| *c = 0);
        for (from, meta, op, pending) in self.held.remove(&next).unwrap_or_default() {
            // Held operations passed the channel checks when they came.
            self.apply_and_record(from, &meta, &op, pending, part)?;
        }
        Ok(Some(next))
    }

    // ---------------------------------------------------------------- checkpoints

    /// What a checkpoint keeps. Taken with the gate closed and drained and every direct
    /// record handled, beside a copy of the part.
    pub fn image(&self) -> MemberImage {
        self.kept.clone()
    }

    /// The checkpoint holding `image` is committed: each origin node is told which of
    /// its operations it may drop from its log, each target which answers it may drop.
    pub fn checkpoint_committed(&mut self, image: &MemberImage) {
        for peer in self.members().filter(|&r| r != self.kept.rank) {
            let ops = of_rank(&image.applied, peer);
            self.outbox.push_back(Transmit {
                to: peer,
                frame: WindowFrame::Covered {
                    ops,
                    epoch: image.epoch,
                },
            });
            // Up to the first answer the image still awaits: a restore asks for it again.
            // Never `main`'s: a restarted `main` runs from its start and asks them all.
            let main = ActorId::main_of(self.kept.rank);
            let answers: Vec<(ActorId, u64)> = image
                .issued
                .iter()
                .filter(|((origin, target), _)| *target == peer && *origin != main)
                .map(|((o, _), i)| {
                    let awaited = image
                        .awaiting
                        .range((peer, *o, 0)..=(peer, *o, u64::MAX))
                        .next()
                        .map_or(*i, |((_, _, first), _)| first - 1);
                    (*o, awaited.min(*i))
                })
                .collect();
            if !answers.is_empty() {
                self.outbox.push_back(Transmit {
                    to: peer,
                    frame: WindowFrame::AnswersTaken { answers },
                });
            }
        }
        self.committed = Some((image.epoch, image.applied.clone()));
    }

    fn release_log(&mut self, target: usize, ops: &[(ActorId, RangeSet)], epoch: u64) {
        for (origin, indices) in ops {
            if origin.rank() != self.kept.rank {
                continue;
            }
            self.kept.covered[target]
                .entry(*origin)
                .or_default()
                .union_with(indices);
            self.kept.log[target].retain(|(o, i), _| o != origin || !indices.contains(*i));
        }
        self.kept.notices_sent[target].retain(|e, _| *e >= epoch);
    }

    /// Target `from`'s committed checkpoint holds these of this node's operations and is
    /// at `epoch`: they leave the log.
    pub fn handle_covered(
        &mut self,
        from: u16,
        ops: &[(ActorId, RangeSet)],
        epoch: u64,
    ) -> Result<(), WindowError> {
        let t = self.member(from)?;
        self.release_log(t, ops, epoch);
        Ok(())
    }

    /// Origin `from`'s committed checkpoint issued operations up to these indices to this
    /// node: their answers are never asked again.
    pub fn handle_answers_taken(
        &mut self,
        from: u16,
        answers: &[(ActorId, u64)],
    ) -> Result<(), WindowError> {
        self.member(from)?;
        for &(origin, index) in answers {
            if origin.rank() != from {
                continue;
            }
            if let Some(kept) = self.kept.answers.get_mut(&origin) {
                kept.retain(|i, _| *i > index);
                if kept.is_empty() {
                    self.kept.answers.remove(&origin);
                }
            }
        }
        Ok(())
    }

    /// The membership a restarted node gets back from its checkpoint image. Every other
    /// member is told what the image had of its actors' operations, so that it resends
    /// the rest ([`WindowFrame::Restarted`]); the node's own operations that were waiting
    /// for answers are sent again; until a target answers, nothing goes to it direct.
    pub fn restore(image: MemberImage) -> Result<Member, WindowError> {
        let n = usize::from(image.shape.members());
        let sized = |len: usize| len == n;
        if !sized(image.issued_in_epoch.len())
            || !sized(image.log.len())
            || !sized(image.notices_sent.len())
            || !sized(image.covered.len())
            || !sized(image.counted.len())
            || image.shape.len_of(image.rank).is_err()
            || image
                .awaiting
                .keys()
                .any(|(t, _, i)| *i == 0 || usize::from(*t) >= n)
        {
            return Err(WindowError::InvalidImage(format!(
                "its tables do not have one entry per member of {n}"
            )));
        }
        let mut member = Member {
            known: vec![Known::Waiting; n],
            received: image.applied.clone(),
            notices: BTreeMap::new(),
            held: BTreeMap::new(),
            committed: Some((image.epoch, image.applied.clone())),
            answered_again: 0,
            rerun: Rerun {
                upto: image
                    .issued
                    .iter()
                    .filter(|((origin, _), _)| *origin == ActorId::main_of(image.rank))
                    .map(|((_, target), last)| (*target, *last))
                    .collect(),
                fences_upto: image.epoch + u64::from(image.fencing),
                ..Rerun::default()
            },
            recovery: Recovery::On,
            outbox: VecDeque::new(),
            kept: image,
        };
        member.known[usize::from(member.kept.rank)] = Known::Everything;
        if member.kept.fencing {
            let own = member.kept.issued_in_epoch[usize::from(member.kept.rank)];
            member
                .notices
                .entry(member.kept.epoch)
                .or_default()
                .insert(member.kept.rank, own);
        }
        for peer in member.members().filter(|&r| r != member.kept.rank) {
            let progress = member.progress_of(peer);
            member.outbox.push_back(Transmit {
                to: peer,
                frame: WindowFrame::Restarted(progress),
            });
        }
        // The answers it awaited are asked again when each target answers the restart.
        Ok(member)
    }

    /// What this node has of `peer`'s operations: applied or held, and what its last
    /// committed checkpoint holds.
    fn progress_of(&self, peer: u16) -> Progress {
        let (covered_epoch, covered) = match &self.committed {
            Some((e, applied)) => (*e, of_rank(applied, peer)),
            None => (0, Vec::new()),
        };
        Progress {
            applied: of_rank(&self.received, peer),
            epoch: self.kept.epoch,
            covered,
            covered_epoch,
        }
    }

    /// Member `from` told what it has of this node's operations (it restarted, or it
    /// answers this node's restart): what it lacks is sent again (logged operations not
    /// in its set, fence counts from its epoch on), what its checkpoint holds leaves the
    /// log, and this node's re-executed operations that it has take the message path.
    /// A restart is answered with this node's own progress.
    pub fn handle_progress(
        &mut self,
        from: u16,
        progress: &Progress,
        restarted: bool,
    ) -> Result<(), WindowError> {
        let t = self.member(from)?;
        self.release_log(t, &progress.covered, progress.covered_epoch);
        let has = |origin: &ActorId, index: u64| {
            progress
                .applied
                .iter()
                .any(|(o, s)| o == origin && s.contains(index))
        };
        // What it awaits from `from`: asked again whether `from` has it or not (an answer
        // in flight is lost with a restarted sender; `from` answers from its log).
        for (&(target, origin, index), logged) in &self.kept.awaiting {
            if target == from {
                self.outbox.push_back(Transmit {
                    to: from,
                    frame: logged.resend(origin, index, Reply::Answer),
                });
            }
        }
        for (&(origin, index), logged) in &self.kept.log[t] {
            if has(&origin, index) || self.kept.awaiting.contains_key(&(from, origin, index)) {
                continue;
            }
            // Resent for its effect: nobody waits for what it answers.
            let reply = match &logged.answered {
                Some(values) => Reply::Answered(values.clone()),
                None => Reply::Effect,
            };
            self.outbox.push_back(Transmit {
                to: from,
                frame: logged.resend(origin, index, reply),
            });
        }
        for (&e, &count) in self.kept.notices_sent[t].range(progress.epoch..) {
            self.outbox.push_back(Transmit {
                to: from,
                frame: WindowFrame::Notice { epoch: e, count },
            });
        }
        if !matches!(self.known[t], Known::Everything) {
            let mine = progress
                .applied
                .iter()
                .filter(|(o, _)| o.rank() == self.kept.rank)
                .cloned()
                .collect();
            self.known[t] = Known::Applied(mine);
        }
        if restarted {
            let own = self.progress_of(from);
            self.outbox.push_back(Transmit {
                to: from,
                frame: WindowFrame::Resumed(own),
            });
        }
        Ok(())
    }

    /// Handles any frame from member `from` (`part` is this node's memory, for
    /// operations). An answer returns `Some((origin, index, values))` the first time: the
    /// answer of `origin`'s operation `index` to `from`.
    pub fn handle_frame(
        &mut self,
        from: u16,
        frame: WindowFrame,
        part: &mut [u8],
    ) -> Result<Option<(ActorId, u64, Vec<u8>)>, WindowError> {
        match frame {
            WindowFrame::Op { meta, op, reply } => {
                self.handle_op(from, meta, op, reply, part).map(|_| None)
            }
            WindowFrame::Answer {
                origin,
                index,
                values,
            } => Ok(self
                .handle_answer(from, origin, index, &values)?
                .then_some((origin, index, values))),
            WindowFrame::Refused { reason } => Err(WindowError::PeerRefused { from, reason }),
            WindowFrame::Notice { epoch, count } => {
                self.handle_notice(from, epoch, count).map(|_| None)
            }
            WindowFrame::Covered { ops, epoch } => {
                self.handle_covered(from, &ops, epoch).map(|_| None)
            }
            WindowFrame::AnswersTaken { answers } => {
                self.handle_answers_taken(from, &answers).map(|_| None)
            }
            WindowFrame::Restarted(progress) => {
                self.handle_progress(from, &progress, true).map(|_| None)
            }
            WindowFrame::Resumed(progress) => {
                self.handle_progress(from, &progress, false).map(|_| None)
            }
        }
    }

    /// What the membership keeps now.
    pub fn stats(&self) -> MemberStats {
        let logged = self.kept.log.iter().map(BTreeMap::len).sum();
        let logged_bytes = self
            .kept
            .log
            .iter()
            .flat_map(|l| l.values())
            .map(|l| l.op.weight())
            .sum();
        let answers = self.kept.answers.values().map(BTreeMap::len).sum();
        let answer_bytes = self
            .kept
            .answers
            .values()
            .flat_map(|a| a.values())
            .map(Vec::len)
            .sum();
        let held = self.held.values().map(Vec::len).sum();
        MemberStats {
            logged,
            logged_bytes,
            answers,
            answer_bytes,
            held,
            answered_again: self.answered_again,
        }
    }

    /// The origins and indices of the operations this node awaits answers for.
    pub fn awaiting(&self) -> BTreeSet<(u16, ActorId, u64)> {
        self.kept.awaiting.keys().copied().collect()
    }
}

/// The entries of `applied` whose origin actor lives on node `rank`.
fn of_rank(applied: &BTreeMap<ActorId, RangeSet>, rank: u16) -> Vec<(ActorId, RangeSet)> {
    applied
        .iter()
        .filter(|(origin, _)| origin.rank() == rank)
        .map(|(o, s)| (*o, s.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::element::{ElementType, ReduceOp};

    /// Members of one window with their parts, and the frames between them in FIFO
    /// order per pair; answers collected per origin actor.
    struct Cluster {
        members: Vec<Member>,
        parts: Vec<Vec<u8>>,
        queues: BTreeMap<(u16, u16), VecDeque<WindowFrame>>,
        answers: BTreeMap<(ActorId, u64), Vec<u8>>,
    }

    fn shape(n: u16, len: u64) -> Shape {
        Shape {
            window: crate::window::WindowId(0),
            elem: ElementType::U64,
            lens: vec![len; usize::from(n)],
        }
    }

    fn actor(rank: u16) -> ActorId {
        ActorId::new(rank, 1).unwrap()
    }

    fn values(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn op(kind: OpKind, offset: u64, operand: &[u64]) -> Op {
        Op {
            kind,
            elem: ElementType::U64,
            offset,
            count: if kind == OpKind::Get {
                1
            } else {
                operand.len() as u64
            },
            operand: values(operand),
        }
    }

    impl Cluster {
        fn new(n: u16, len: u64) -> Cluster {
            Cluster {
                members: (0..n)
                    .map(|r| Member::new(shape(n, len), r).unwrap())
                    .collect(),
                parts: vec![vec![0; len as usize * 8]; usize::from(n)],
                queues: BTreeMap::new(),
                answers: BTreeMap::new(),
            }
        }

        fn collect(&mut self, rank: u16) {
            while let Some(t) = self.members[usize::from(rank)].poll_transmit() {
                self.queues
                    .entry((rank, t.to))
                    .or_default()
                    .push_back(t.frame);
            }
        }

        /// Issues over the message path (or applies locally for the own part).
        fn issue(&mut self, rank: u16, target: u16, op: Op) -> OpMeta {
            let r = usize::from(rank);
            let issued = self.members[r].issue(actor(rank), target, &op).unwrap();
            if target == rank {
                let part = &mut self.parts[r];
                self.members[r]
                    .handle_op(rank, issued.meta, op, Reply::Answer, part)
                    .unwrap();
            } else {
                self.members[r].send_op(target, issued.meta, op);
            }
            self.collect(rank);
            issued.meta
        }

        /// Delivers every queued frame until none is left.
        fn settle(&mut self) {
            loop {
                let Some((&(from, to), _)) = self.queues.iter().find(|(_, q)| !q.is_empty()) else {
                    return;
                };
                let frame = self
                    .queues
                    .get_mut(&(from, to))
                    .unwrap()
                    .pop_front()
                    .unwrap();
                let t = usize::from(to);
                let got = self.members[t]
                    .handle_frame(from, frame, &mut self.parts[t])
                    .unwrap();
                if let Some((origin, index, values)) = got {
                    self.answers.insert((origin, index), values);
                }
                let _ = self.members[t].poll_fence(&mut self.parts[t]).unwrap();
                self.collect(to);
            }
        }

        fn fence_all(&mut self) {
            for r in 0..self.members.len() as u16 {
                self.members[usize::from(r)].fence().unwrap();
                self.collect(r);
            }
            self.settle();
            for r in 0..self.members.len() {
                let _ = self.members[r].poll_fence(&mut self.parts[r]).unwrap();
            }
        }

        fn word(&self, rank: u16, i: usize) -> u64 {
            let p = &self.parts[usize::from(rank)];
            u64::from_le_bytes(p[i * 8..i * 8 + 8].try_into().unwrap())
        }
    }

    /// `main` of node `rank` issues `op` to `target` as a driver does: a replayed write
    /// is dropped, anything else is sent (or applied on the own part). The operation's
    /// identity, and whether it was replayed.
    fn main_issues(c: &mut Cluster, rank: u16, target: u16, op: Op) -> (OpMeta, bool) {
        let r = usize::from(rank);
        let issued = c.members[r]
            .issue(ActorId::main_of(rank), target, &op)
            .unwrap();
        if !issued.replayed || op.kind.answers() {
            if target == rank {
                let part = &mut c.parts[r];
                c.members[r]
                    .handle_op(rank, issued.meta, op, Reply::Answer, part)
                    .unwrap();
            } else {
                c.members[r].send_op(target, issued.meta, op);
            }
        }
        c.collect(rank);
        (issued.meta, issued.replayed)
    }

    /// `main` of node 0: puts 7 at node 1, gets node 1's element and its own, fences;
    /// accumulates 1 into node 1's element and gets it, fences.
    fn main_program(c: &mut Cluster, fenced: &mut Vec<MainFence>) -> Vec<(OpMeta, bool)> {
        let mut seen = Vec::new();
        seen.push(main_issues(c, 0, 1, op(OpKind::Put, 0, &[7])));
        c.settle();
        let f = c.members[0].main_fence();
        fenced.push(f);
        if f == MainFence::New {
            c.members[0].fence().unwrap();
            c.collect(0);
        }
        c.members[1].fence().unwrap();
        c.collect(1);
        c.settle();
        let _ = c.members[0].poll_fence(&mut c.parts[0]).unwrap();
        seen.push(main_issues(c, 0, 1, op(OpKind::Get, 0, &[])));
        seen.push(main_issues(c, 0, 0, op(OpKind::Get, 0, &[])));
        seen.push(main_issues(
            c,
            0,
            1,
            op(OpKind::Accumulate(ReduceOp::Sum), 0, &[1]),
        ));
        c.settle();
        seen
    }

    #[test]
    fn a_restarted_main_runs_again_from_its_start_and_gets_what_it_got_before() {
        let mut c = Cluster::new(2, 1);
        c.parts[0] = values(&[3]);
        let mut fenced = Vec::new();
        let first = main_program(&mut c, &mut fenced);
        assert_eq!(fenced, vec![MainFence::New]);
        let got = |c: &Cluster, meta: &OpMeta| c.answers.get(&(meta.origin, meta.index)).cloned();
        let before: Vec<_> = first.iter().map(|(m, _)| got(&c, m)).collect();
        assert_eq!(before[1], Some(values(&[7])));
        assert_eq!(before[2], Some(values(&[3])));
        // Node 0's checkpoint, committed; then node 1 moves on and node 0 dies.
        let image = c.members[0].image();
        let saved = c.parts[0].clone();
        c.members[0].checkpoint_committed(&image);
        c.collect(0);
        c.settle();
        c.issue(1, 1, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[100]));
        c.issue(1, 0, op(OpKind::Put, 0, &[200]));
        c.settle();
        c.members[0] = Member::restore(image).unwrap();
        c.parts[0] = saved;
        c.answers.clear();
        c.collect(0);
        c.settle();
        // `main` runs again from its start: same indices, replayed, the same answers
        // (node 1 keeps `main`'s, node 0 its own `main`'s), and its put is not redone.
        let mut fenced = Vec::new();
        let again = main_program(&mut c, &mut fenced);
        assert_eq!(fenced, vec![MainFence::Done]);
        assert!(again.iter().all(|(_, replayed)| *replayed));
        assert_eq!(
            again.iter().map(|(m, _)| m.index).collect::<Vec<_>>(),
            first.iter().map(|(m, _)| m.index).collect::<Vec<_>>()
        );
        let after: Vec<_> = again.iter().map(|(m, _)| got(&c, m)).collect();
        assert_eq!(after, before);
        assert_eq!(c.word(1, 0), 108, "7, node 0's 1 once, node 1's own 100");
        // Past the image, `main`'s operations are new.
        let (meta, replayed) = main_issues(&mut c, 0, 1, op(OpKind::Get, 0, &[]));
        assert!(!replayed);
        assert_eq!(meta.index, 4);
        c.settle();
        assert_eq!(got(&c, &meta), Some(values(&[108])));
        assert_eq!(c.members[0].main_fence(), MainFence::New);
    }

    #[test]
    fn without_recovery_nothing_is_kept_for_a_restart() {
        let mut c = Cluster::new(2, 2);
        c.members = (0..2)
            .map(|r| Member::without_recovery(shape(2, 2), r).unwrap())
            .collect();
        c.issue(0, 1, op(OpKind::Put, 0, &[5]));
        let get = c.issue(0, 1, op(OpKind::Get, 0, &[]));
        main_issues(&mut c, 1, 1, op(OpKind::Get, 0, &[]));
        c.settle();
        assert_eq!(c.answers.get(&(get.origin, get.index)), Some(&values(&[5])));
        for m in &c.members {
            let stats = m.stats();
            assert_eq!((stats.logged, stats.answers), (0, 0), "{stats:?}");
        }
        // With recovery on, the same keeps the put and get until a checkpoint, and the
        // answers of main.
        let mut c = Cluster::new(2, 2);
        c.issue(0, 1, op(OpKind::Put, 0, &[5]));
        c.issue(0, 1, op(OpKind::Get, 0, &[]));
        main_issues(&mut c, 1, 1, op(OpKind::Get, 0, &[]));
        c.settle();
        assert_eq!(c.members[0].stats().logged, 2);
        assert_eq!(c.members[1].stats().answers, 2);
    }

    #[test]
    fn a_fence_completes_once_every_announced_operation_is_applied() {
        let mut c = Cluster::new(3, 4);
        c.issue(0, 2, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[5]));
        c.issue(1, 2, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[7]));
        c.issue(2, 2, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[1]));
        c.issue(0, 1, op(OpKind::Put, 3, &[9]));
        // Node 2 fences while node 0's operation is still on its way: not ready.
        let held = c.queues.remove(&(0, 2)).unwrap();
        c.fence_all();
        assert_eq!(c.members[2].epoch(), 0, "node 0's accumulate is missing");
        assert!(c.members[2].is_fencing());
        assert_eq!(c.members[1].epoch(), 1);
        c.queues.insert((0, 2), held);
        c.settle();
        assert_eq!(c.members[2].epoch(), 1);
        assert_eq!(c.word(2, 0), 13);
        assert_eq!(c.word(1, 3), 9);
    }

    #[test]
    fn an_operation_of_a_later_epoch_waits_for_the_targets_fence() {
        let mut c = Cluster::new(2, 2);
        c.members[0].fence().unwrap();
        c.collect(0);
        c.members[1].fence().unwrap();
        c.collect(1);
        // Node 1's count reaches node 0, which enters epoch 1 and puts; node 0's count
        // has not reached node 1, still in epoch 0.
        let notice = c.queues.remove(&(0, 1)).unwrap();
        c.settle();
        assert_eq!((c.members[0].epoch(), c.members[1].epoch()), (1, 0));
        c.issue(0, 1, op(OpKind::Put, 1, &[42]));
        let put = c.queues.remove(&(0, 1)).unwrap();
        // The put overtakes the count (it took another path): held, not applied.
        let mut part = std::mem::take(&mut c.parts[1]);
        for frame in put {
            c.members[1].handle_frame(0, frame, &mut part).unwrap();
        }
        c.parts[1] = part;
        assert_eq!(c.members[1].stats().held, 1);
        assert_eq!(c.word(1, 1), 0);
        c.queues.insert((0, 1), notice);
        c.settle();
        assert_eq!(c.members[1].epoch(), 1);
        assert_eq!(
            c.word(1, 1),
            42,
            "applied when the fence let node 1 into epoch 1"
        );
        assert_eq!(c.members[1].stats().held, 0);
    }

    #[test]
    fn a_restarted_target_gets_back_every_operation_after_its_image() {
        let mut c = Cluster::new(2, 2);
        c.issue(0, 1, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[1]));
        c.settle();
        let image = c.members[1].image();
        let saved = c.parts[1].clone();
        c.members[1].checkpoint_committed(&image);
        c.collect(1);
        c.settle();
        assert_eq!(c.members[0].stats().logged, 0, "the checkpoint covers it");
        c.issue(0, 1, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[10]));
        c.issue(0, 1, op(OpKind::Accumulate(ReduceOp::Sum), 1, &[3]));
        c.settle();
        assert_eq!(c.members[0].stats().logged, 2);
        assert_eq!((c.word(1, 0), c.word(1, 1)), (11, 3));
        // Node 1 dies and restarts from its image.
        c.members[1] = Member::restore(image).unwrap();
        c.parts[1] = saved;
        c.collect(1);
        c.settle();
        assert_eq!((c.word(1, 0), c.word(1, 1)), (11, 3), "resent exactly once");
        c.fence_all();
        assert_eq!((c.members[0].epoch(), c.members[1].epoch()), (1, 1));
    }

    #[test]
    fn a_restarted_origin_reads_what_it_read_before_though_the_target_moved_on() {
        let mut c = Cluster::new(2, 1);
        let image = c.members[0].image();
        c.issue(1, 1, op(OpKind::Put, 0, &[5]));
        c.fence_all();
        let get = c.issue(0, 1, op(OpKind::Get, 0, &[]));
        c.issue(0, 1, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[2]));
        c.settle();
        assert_eq!(c.answers[&(get.origin, get.index)], values(&[5]));
        c.fence_all();
        c.issue(1, 1, op(OpKind::Put, 0, &[100]));
        c.fence_all();
        assert_eq!(c.word(1, 0), 100);
        // Node 0 dies; its image is from before all of this. It re-executes.
        c.members[0] = Member::restore(image).unwrap();
        c.answers.clear();
        c.collect(0);
        c.settle();
        c.fence_all();
        let again = c.issue(0, 1, op(OpKind::Get, 0, &[]));
        c.issue(0, 1, op(OpKind::Accumulate(ReduceOp::Sum), 0, &[2]));
        c.settle();
        assert_eq!(again, get);
        assert_eq!(
            c.answers[&(get.origin, get.index)],
            values(&[5]),
            "from the log"
        );
        assert_eq!(
            c.word(1, 0),
            100,
            "the re-executed accumulate is not applied again"
        );
        // Once node 0's checkpoint covers the get, node 1 drops its answer.
        assert_eq!(c.members[1].stats().answers, 1);
        let image = c.members[0].image();
        c.members[0].checkpoint_committed(&image);
        c.collect(0);
        c.settle();
        assert_eq!(c.members[1].stats().answers, 0);
    }

    #[test]
    fn direct_operations_are_booked_once_and_a_repeat_changes_nothing() {
        let mut m = Member::new(shape(2, 2), 1).unwrap();
        let meta = OpMeta {
            origin: actor(0),
            index: 1,
            epoch: 0,
        };
        m.handle_direct(0, meta, OpKind::Get, Some(values(&[3])))
            .unwrap();
        assert_eq!(m.stats().answers, 1);
        // Its origin wrote it again while it was resent (a restart): counted once.
        m.handle_direct(0, meta, OpKind::Get, Some(values(&[3])))
            .unwrap();
        assert_eq!(m.kept.counted[0], 1);
        assert!(matches!(
            m.handle_direct(0, meta, OpKind::Accumulate(ReduceOp::Sum), None),
            Err(WindowError::NotDirect(_))
        ));
        // Over the message path the same operation is a repeat answered from the log.
        let mut part = vec![0; 16];
        let again = m
            .handle_op(0, meta, op(OpKind::Get, 0, &[]), Reply::Answer, &mut part)
            .unwrap();
        assert_eq!(again, Applied::Again);
        let answer = m.poll_transmit().unwrap();
        assert_eq!(
            answer.frame,
            WindowFrame::Answer {
                origin: actor(0),
                index: 1,
                values: values(&[3])
            }
        );
    }

    #[test]
    fn bad_operations_and_counts_are_refused_without_a_change() {
        let mut m = Member::new(shape(2, 2), 1).unwrap();
        let mut part = vec![0; 16];
        let meta = |index, epoch| OpMeta {
            origin: actor(0),
            index,
            epoch,
        };
        let mut wrong = op(OpKind::Put, 0, &[1]);
        wrong.elem = ElementType::F64;
        assert!(matches!(
            m.handle_op(0, meta(1, 0), wrong, Reply::Answer, &mut part),
            Err(WindowError::WrongElementType { .. })
        ));
        assert!(matches!(
            m.handle_op(
                0,
                meta(1, 0),
                op(OpKind::Put, 2, &[1]),
                Reply::Answer,
                &mut part
            ),
            Err(WindowError::OutOfRange { .. })
        ));
        assert!(matches!(
            m.handle_op(
                0,
                meta(0, 0),
                op(OpKind::Put, 0, &[1]),
                Reply::Answer,
                &mut part
            ),
            Err(WindowError::ZeroIndex(_))
        ));
        assert!(matches!(
            m.handle_op(
                1,
                meta(1, 0),
                op(OpKind::Put, 0, &[1]),
                Reply::Answer,
                &mut part
            ),
            Err(WindowError::UnknownMember { .. })
        ));
        m.handle_notice(0, 0, 1).unwrap();
        assert!(matches!(
            m.handle_notice(0, 0, 2),
            Err(WindowError::NoticeChanged { .. })
        ));
        m.handle_op(
            0,
            meta(1, 0),
            op(OpKind::Put, 0, &[1]),
            Reply::Answer,
            &mut part,
        )
        .unwrap();
        assert!(matches!(
            m.handle_op(
                0,
                meta(2, 0),
                op(OpKind::Put, 1, &[1]),
                Reply::Answer,
                &mut part
            ),
            Err(WindowError::TooManyOperations { .. })
        ));
        assert_eq!(part, values(&[1, 0]), "only the valid put changed the part");
        let mut origin = Member::new(shape(2, 2), 0).unwrap();
        assert!(matches!(
            origin.issue(actor(0), 5, &op(OpKind::Put, 0, &[1])),
            Err(WindowError::UnknownMember { rank: 5, .. })
        ));
        assert_eq!(origin.stats().logged, 0);
    }
}

#[cfg(test)]
mod refusals {
    use super::*;
    use crate::window::element::{ElementType, ReduceOp};
    use crate::window::WindowId;

    fn member(rank: u16) -> Member {
        let shape = Shape {
            window: WindowId(0),
            elem: ElementType::U32,
            lens: vec![4, 4],
        };
        Member::new(shape, rank).unwrap()
    }

    fn get(count: u64) -> Op {
        Op {
            kind: OpKind::Get,
            elem: ElementType::U32,
            offset: 0,
            count,
            operand: Vec::new(),
        }
    }

    #[test]
    fn an_operation_issued_during_the_fence_is_refused_and_counts_nothing() {
        let mut m = member(0);
        m.fence().unwrap();
        let put = Op {
            kind: OpKind::Accumulate(ReduceOp::Sum),
            elem: ElementType::U32,
            offset: 0,
            count: 1,
            operand: 1u32.to_le_bytes().to_vec(),
        };
        assert_eq!(
            m.issue(ActorId::main_of(0), 1, &put),
            Err(WindowError::FenceInProgress(0))
        );
        assert_eq!(m.stats().logged, 0);
    }

    #[test]
    fn an_answer_of_the_wrong_length_is_refused_and_still_awaited() {
        let mut m = member(0);
        let issued = m.issue(ActorId::main_of(0), 1, &get(2)).unwrap();
        m.send_op(1, issued.meta, get(2));
        let origin = issued.meta.origin;
        assert!(matches!(
            m.handle_answer(1, origin, 1, &[0; 4]),
            Err(WindowError::AnswerLength {
                bytes: 4,
                expected: 8,
                ..
            })
        ));
        assert_eq!(m.awaiting().len(), 1);
        assert_eq!(m.handle_answer(1, origin, 1, &[0; 8]), Ok(true));
        assert_eq!(m.handle_answer(1, origin, 1, &[0; 8]), Ok(false), "once");
    }

    #[test]
    fn the_last_index_is_refused_from_the_network() {
        let mut m = member(1);
        let meta = OpMeta {
            origin: ActorId::main_of(0),
            index: u64::MAX,
            epoch: 0,
        };
        let mut part = vec![0; 16];
        assert!(matches!(
            m.handle_op(0, meta, get(1), Reply::Answer, &mut part),
            Err(WindowError::ZeroIndex(_))
        ));
    }

    #[test]
    fn a_refusal_from_a_peer_fails_the_frame_with_its_reason() {
        let mut m = member(0);
        let mut part = vec![0; 16];
        let e = m
            .handle_frame(
                1,
                WindowFrame::Refused {
                    reason: "wrong element type".into(),
                },
                &mut part,
            )
            .unwrap_err();
        assert!(e.to_string().contains("wrong element type"), "{e}");
    }
}
