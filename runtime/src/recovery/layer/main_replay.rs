//! The app's `main` under recovery: which of its sends a restarted node's
//! re-executed `main` skips, and the replies to its asks.
//!
//! `main` is not checkpointed: a restarted node runs it again from the top. Its sends are
//! counted in one sequence (tells and asks, to any node); those the restored checkpoint
//! already contains are skipped, the others are made again and regenerate the same
//! messages. An ask needs its reply in every incarnation, so with recovery on:
//! - its request number is its position in that sequence (with [`MAIN_REQUEST`] set),
//!   the same in every incarnation, instead of a per-process counter, and its reply slot
//!   is checkpointed as that route (in the asked actor's mailbox or state);
//! - a reply from another node travels back as a logged message on the channel from the
//!   replying actor to the driver (sender-based log, dependency vector, replay and
//!   suppression like any message between sets), not as an unlogged reply frame; a
//!   reply from `main`'s own node is kept directly;
//! - every reply delivered to `main` is kept for the whole run, in the node's reply
//!   journal beside its checkpoints (each checkpoint appends the replies since the
//!   previous one and records the journal's length; memory holds only those), so a
//!   re-executed `main` gets each answer again, whether it arrived before the checkpoint
//!   (from the journal) or after (made again by a restored actor, or resent by the
//!   replier's node).

use crate::actor_id::ActorId;
use crate::node::NodeHandle;
use crate::range_set::RangeSet;
use crate::transport::frame::{outcome_bytes, Envelope, RemoteError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;

pub(crate) use crate::recovery::hooks::{
    is_main_request, request_number, without_drop_replies, Outcome, MAIN_REQUEST,
};

/// Message type tag of a reply to `main`'s ask carried as a logged message ("LZREPLY").
pub(crate) const REPLY_TAG: u64 = 0x4C5A_5245_504C_5900;

/// The logged message that carries the reply to `main`'s ask `request` on node
/// `rank`, from actor `from`.
pub(crate) fn reply_envelope(
    to: ActorId,
    from: ActorId,
    request: u64,
    outcome: &Outcome,
) -> Result<Envelope, String> {
    let payload = encode_outcome(outcome).map_err(|e| e.to_string())?;
    Ok(Envelope {
        to,
        from,
        type_tag: REPLY_TAG,
        request: Some(request),
        payload,
    })
}

/// A reply to `main` made while its thread held the layer's lock (see
/// [`super::StateGuard`]).
pub(crate) struct Deferred {
    /// The replier's node.
    pub(crate) node: NodeHandle,
    /// The replying actor.
    pub(crate) from: ActorId,
    /// `main`'s node.
    pub(crate) rank: u16,
    /// The ask's request number.
    pub(crate) request: u64,
    /// The reply.
    pub(crate) outcome: Outcome,
}

thread_local! {
    static DEFERRED: RefCell<Vec<Deferred>> = const { RefCell::new(Vec::new()) };
}

/// Keeps `reply` until this thread releases the layer's lock.
pub(crate) fn defer(reply: Deferred) {
    DEFERRED.with(|d| d.borrow_mut().push(reply));
}

/// Takes the replies deferred on this thread for `layer`'s node.
pub(crate) fn take_deferred(layer: &super::RecoveryLayer) -> Vec<Deferred> {
    DEFERRED.with(|d| {
        let mut all = d.borrow_mut();
        if all.is_empty() {
            return Vec::new();
        }
        let (mine, others): (Vec<_>, Vec<_>) =
            std::mem::take(&mut *all).into_iter().partition(|r| {
                super::RecoveryLayer::of(&r.node).is_some_and(|l| std::ptr::eq(l, layer))
            });
        *all = others;
        mine
    })
}

/// Sends the replies deferred on this thread (its layer lock was just released), in the
/// order they were made.
pub(crate) fn send_deferred() {
    let deferred = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    for d in deferred {
        let Some(layer) = super::RecoveryLayer::of(&d.node) else {
            continue;
        };
        let sent = layer.send_reply_to_main(&d.node, d.from, d.rank, d.request, &d.outcome);
        if let Err(e) = sent {
            tracing::warn!(
                rank = d.rank,
                "reply to main on node {} not sent: {e}",
                d.rank
            );
        }
    }
}

/// `main`'s side of recovery on one node.
#[derive(Debug, Default)]
pub(crate) struct MainReplay {
    /// Sends (tells, asks) `main` has made in this incarnation.
    pub(crate) sent: u64,
    /// In a restarted node: sends up to this count are in the restored checkpoint and
    /// are not made again.
    pub(crate) replayed_upto: u64,
    /// Replies to asks `main` has not made yet in this incarnation (a restarted node's
    /// replies from its journal, and any that arrive before the re-executed `main` asks
    /// again), by request number, encoded. Each is taken when `main` asks.
    awaiting_ask: BTreeMap<u64, Bytes>,
    /// Replies kept since the last append to the node's reply journal, in order
    /// (shared: a checkpoint's paused instant copies references, not the replies). Each
    /// kept reply is the asked actor's id (8 bytes, little-endian; 0 if unknown) followed
    /// by the encoded outcome.
    unjournaled: Vec<(u64, Bytes)>,
    /// The actor each unanswered ask of this incarnation went to, by request number.
    asked: BTreeMap<u64, ActorId>,
    /// Asks a re-executed `main` made to another actor than its lost incarnation did.
    pub(crate) diverged: u64,
    /// Positions of the asks answered so far, in any incarnation: a second reply to one
    /// is refused.
    answered: RangeSet,
    /// Replies kept over the run.
    kept: u64,
    /// Bytes of the node's reply journal holding every kept reply not in `unjournaled`.
    journal_len: u64,
    /// The thread that made `main`'s first send in this incarnation.
    thread: Option<std::thread::ThreadId>,
    /// Sends made from other threads: numbered in whatever order they happen, so a
    /// re-executed `main` may number them differently.
    pub(crate) off_thread_sends: u64,
}

/// What a checkpoint keeps of [`MainReplay`]. The replies themselves are in the
/// node's reply journal ([`crate::checkpoint::journal`]), the image holds its length.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct MainImage {
    /// Sends `main` had made.
    pub(crate) sent: u64,
    /// Replies kept: the records in the first `journal_len` bytes of the journal.
    pub(crate) kept: u64,
    /// Bytes of the reply journal that belong to this image.
    pub(crate) journal_len: u64,
    /// Positions of the answered asks, as half-open ranges.
    pub(crate) answered: RangeSet,
}

/// The asked actor (if known) and the encoded outcome of a kept reply.
fn split_kept(kept: &[u8]) -> (Option<ActorId>, &[u8]) {
    match kept.split_first_chunk::<8>() {
        Some((asked, encoded)) => {
            let asked = u64::from_le_bytes(*asked);
            ((asked != 0).then(|| ActorId::from_u64(asked)), encoded)
        }
        None => (None, kept),
    }
}

/// An outcome's encoding (the reply's bytes as one byte string).
pub(crate) fn encode_outcome(outcome: &Outcome) -> Result<Bytes, crate::wire::WireError> {
    crate::wire::encode_bytes(&outcome_bytes::Encoding(outcome))
}

/// An outcome from its encoding.
pub(crate) fn decode_outcome_bytes(encoded: &[u8]) -> Result<Outcome, crate::wire::WireError> {
    crate::wire::decode::<outcome_bytes::Decoded>(encoded).map(|d| d.0)
}

fn decode_outcome(request: u64, encoded: &[u8]) -> Result<Outcome, String> {
    decode_outcome_bytes(encoded)
        .map_err(|e| format!("reply to request {request:#x} did not decode: {e}"))
}

impl MainReplay {
    /// Counts one send of `main`; true if the restored checkpoint already contains it.
    pub(crate) fn count_send(&mut self) -> bool {
        let here = std::thread::current().id();
        if *self.thread.get_or_insert(here) != here {
            self.off_thread_sends += 1;
        }
        self.sent += 1;
        self.sent <= self.replayed_upto
    }

    /// `main` asks `to` (request `request`): takes the reply kept for it before the ask
    /// was made, if any (`main` asks each once per incarnation; a reply that arrives
    /// later is handed to the waiting ask), with the actor the lost incarnation asked
    /// if that was another one (a re-executed `main` that diverged).
    pub(crate) fn ask(&mut self, request: u64, to: ActorId) -> Option<(Outcome, Option<ActorId>)> {
        let Some(kept) = self.awaiting_ask.remove(&request) else {
            self.asked.insert(request, to);
            return None;
        };
        let (asked, encoded) = split_kept(&kept);
        let diverged = asked.filter(|a| *a != to);
        if diverged.is_some() {
            self.diverged += 1;
        }
        // Kept replies decoded when they were kept; a restored one comes from a journal
        // whose records were verified.
        let outcome = match decode_outcome(request, encoded) {
            Ok(outcome) => outcome,
            Err(e) => Err(RemoteError::Undecodable(ActorId::from_u64(0), e)),
        };
        Some((outcome, diverged))
    }

    /// Replies kept over the run (for the final totals).
    pub(crate) fn replies_kept(&self) -> u64 {
        self.kept
    }

    /// A logged reply to `main` was delivered: keeps it. Returns the request and the
    /// outcome to hand to the asker, or why the message is not a reply to `main`.
    pub(crate) fn on_reply(&mut self, env: &Envelope) -> Result<(u64, Outcome), String> {
        let request = match env.request {
            Some(r) if is_main_request(r) => r,
            other => return Err(format!("request number {other:?} is not one of main's")),
        };
        // A copy: the payload may be a slice of a much larger receive buffer.
        let outcome = self.keep(request, Bytes::copy_from_slice(&env.payload))?;
        Ok((request, outcome))
    }

    /// Keeps the encoded reply to `main`'s ask `request` and returns it decoded (refused
    /// if it does not decode, or the request has a reply already).
    pub(crate) fn keep(&mut self, request: u64, encoded: Bytes) -> Result<Outcome, String> {
        let outcome = decode_outcome(request, &encoded)?;
        self.insert(request, encoded)?;
        Ok(outcome)
    }

    /// Keeps a reply made on this node (encoded here) and returns it for the asker.
    pub(crate) fn keep_outcome(
        &mut self,
        request: u64,
        outcome: &Outcome,
    ) -> Result<Outcome, String> {
        let encoded = encode_outcome(outcome).map_err(|e| e.to_string())?;
        self.insert(request, encoded)?;
        Ok(outcome.clone())
    }

    /// `main`'s ask `request` to `to` timed out: keeps that as its outcome, so a
    /// re-executed `main` times out there too, and a reply arriving later is refused.
    /// False if the ask has an outcome already (its reply won the race).
    pub(crate) fn keep_timeout(&mut self, request: u64, to: ActorId) -> bool {
        let position = request & !MAIN_REQUEST;
        if self.answered.contains(position) {
            return false;
        }
        self.keep_outcome(request, &Err(RemoteError::TimedOut(to)))
            .is_ok()
    }

    /// Keeps a reply an actor of this node made to `main`'s ask `request` and returns it
    /// for the asker; `Ok(None)` if `main` gave up on the ask before (its timeout is the
    /// outcome, the reply is dropped).
    pub(crate) fn keep_local_reply(
        &mut self,
        request: u64,
        outcome: &Outcome,
    ) -> Result<Option<Outcome>, String> {
        if self.is_answered(request) {
            return Ok(None);
        }
        self.keep_outcome(request, outcome).map(Some)
    }

    /// Whether `request` has its outcome (a second reply to it is refused as a
    /// duplicate, not as an error).
    pub(crate) fn is_answered(&self, request: u64) -> bool {
        self.answered.contains(request & !MAIN_REQUEST)
    }

    fn insert(&mut self, request: u64, encoded: Bytes) -> Result<(), String> {
        let position = request & !MAIN_REQUEST;
        if encoded.len() > crate::checkpoint::journal::MAX_REPLY {
            return Err(format!(
                "a reply of {} bytes to main's request {position:#x}: the journal keeps at most {}",
                encoded.len(),
                crate::checkpoint::journal::MAX_REPLY
            ));
        }
        if !self.answered.insert(position) {
            return Err(format!("a second reply to main's request {position:#x}"));
        }
        self.kept += 1;
        let asked = self.asked.remove(&request).map_or(0, ActorId::as_u64);
        let mut kept = bytes::BytesMut::with_capacity(8 + encoded.len());
        kept.extend_from_slice(&asked.to_le_bytes());
        kept.extend_from_slice(&encoded);
        let encoded = kept.freeze();
        if position > self.sent {
            // `main` has not asked yet (it is being re-executed): hold it for the ask.
            self.awaiting_ask.insert(request, encoded.clone());
        }
        self.unjournaled.push((request, encoded));
        Ok(())
    }

    /// What a checkpoint keeps, and the replies it must append to the journal first
    /// (see [`MainReplay::journaled`]).
    pub(crate) fn image(&self) -> (MainImage, Vec<(u64, Bytes)>) {
        (
            MainImage {
                // During a restarted `main`'s replay the restored states already hold
                // the effects of every send up to `replayed_upto`.
                sent: self.sent.max(self.replayed_upto),
                kept: self.kept,
                journal_len: self.journal_len,
                answered: self.answered.clone(),
            },
            self.unjournaled.clone(),
        )
    }

    /// The first `records` unjournaled replies are now durable in the journal, which is
    /// `journal_len` bytes long.
    pub(crate) fn journaled(&mut self, records: usize, journal_len: u64) {
        self.unjournaled
            .drain(..records.min(self.unjournaled.len()));
        self.journal_len = journal_len;
    }

    /// The state of a restarted node's `main` before it runs again: nothing sent yet,
    /// the checkpoint's sends to skip, its replies (`journal`: the records of the
    /// image's journal prefix) to hand out again. Refused if they do not match.
    pub(crate) fn restored(image: MainImage, journal: Vec<(u64, Bytes)>) -> Result<Self, String> {
        if journal.len() as u64 != image.kept {
            return Err(format!(
                "the reply journal holds {} replies, the checkpoint kept {}",
                journal.len(),
                image.kept
            ));
        }
        Ok(MainReplay {
            sent: 0,
            replayed_upto: image.sent,
            awaiting_ask: journal.into_iter().collect(),
            unjournaled: Vec::new(),
            answered: image.answered,
            kept: image.kept,
            journal_len: image.journal_len,
            thread: None,
            off_thread_sends: 0,
            asked: BTreeMap::new(),
            diverged: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(request: Option<u64>, outcome: &Outcome) -> Envelope {
        let mut env = reply_envelope(
            ActorId::new(0, 1).unwrap(),
            ActorId::new(1, 1).unwrap(),
            0,
            outcome,
        )
        .unwrap();
        env.request = request;
        env
    }

    #[test]
    fn request_numbers_of_main_are_its_send_positions_and_never_a_process_counter() {
        assert!(is_main_request(request_number(1)));
        assert_eq!(request_number(7) & !MAIN_REQUEST, 7);
        assert!(!is_main_request(0));
        assert!(!is_main_request(u64::MAX >> 1));
    }

    /// What a restarted node reads back: the image, and the journal as its
    /// checkpoints appended it.
    fn restart(journal: &mut Vec<u8>, state: &mut MainReplay) -> MainReplay {
        let (mut image, pending) = state.image();
        crate::checkpoint::journal::encode_records(&pending, journal);
        state.journaled(pending.len(), journal.len() as u64);
        image.journal_len = journal.len() as u64;
        let records =
            crate::checkpoint::journal::decode_records(&Bytes::from(journal.clone())).unwrap();
        MainReplay::restored(image, records).unwrap()
    }

    #[test]
    fn a_restarted_main_skips_the_sends_its_checkpoint_contains_and_no_more() {
        let mut before = MainReplay::default();
        for _ in 0..3 {
            assert!(!before.count_send());
        }
        let mut after = restart(&mut Vec::new(), &mut before);
        assert!(after.count_send());
        assert!(after.count_send());
        assert!(after.count_send());
        assert!(
            !after.count_send(),
            "the fourth send was not in the checkpoint"
        );
    }

    #[test]
    fn replies_delivered_before_a_checkpoint_are_handed_out_again_after_a_restore() {
        let mut state = MainReplay::default();
        let answer: Outcome = Ok(vec![1, 2, 3]);
        let refused: Outcome = Err(RemoteError::NoReply(ActorId::new(1, 1).unwrap()));
        for _ in 0..5 {
            state.count_send();
        }
        assert_eq!(
            state.on_reply(&reply(Some(request_number(2)), &answer)),
            Ok((request_number(2), answer.clone()))
        );
        assert_eq!(
            state.on_reply(&reply(Some(request_number(5)), &refused)),
            Ok((request_number(5), refused.clone()))
        );
        let mut restored = restart(&mut Vec::new(), &mut state);
        assert_eq!(restored.reply(request_number(2)), Some(answer.clone()));
        assert_eq!(restored.reply(request_number(5)), Some(refused.clone()));
        assert_eq!(restored.reply(request_number(3)), None);
        assert_eq!(restored.replies_kept(), 2);
        assert!(
            restored
                .on_reply(&reply(Some(request_number(2)), &answer))
                .is_err(),
            "a restored actor answering again is refused: main has its answer"
        );
    }

    #[test]
    fn replies_stay_in_memory_only_until_journaled_and_every_journaled_one_comes_back() {
        let mut state = MainReplay::default();
        let mut journal = Vec::new();
        for round in 0..3u8 {
            for _ in 0..4 {
                state.count_send();
                let request = request_number(state.sent);
                assert_eq!(
                    state.keep(request, encode(&Ok(vec![round]))),
                    Ok(Ok(vec![round]))
                );
            }
            let (mut image, pending) = state.image();
            assert_eq!(
                pending.len(),
                4,
                "only the replies since the last checkpoint"
            );
            assert_eq!(image.journal_len, journal.len() as u64);
            crate::checkpoint::journal::encode_records(&pending, &mut journal);
            state.journaled(pending.len(), journal.len() as u64);
            image.journal_len = journal.len() as u64;
            assert_eq!(image.answered.ranges(), vec![(1, 4 * u64::from(round) + 5)]);
        }
        assert!(state.image().1.is_empty());
        let mut restored = restart(&mut journal, &mut state);
        for position in 1..=12u64 {
            let round = ((position - 1) / 4) as u8;
            restored.count_send();
            assert_eq!(
                restored.reply(request_number(position)),
                Some(Ok(vec![round]))
            );
        }
        let (image, _) = state.image();
        let two_records = journal.len() / 12 * 2;
        let records = crate::checkpoint::journal::decode_records(&Bytes::from(
            journal[..two_records].to_vec(),
        ))
        .unwrap();
        assert!(
            MainReplay::restored(image, records).is_err(),
            "a journal that lacks replies the checkpoint kept is refused"
        );
    }

    #[test]
    fn a_checkpoint_taken_while_a_restarted_main_still_skips_holds_every_skipped_send() {
        let mut first = MainReplay::default();
        for _ in 0..3 {
            first.count_send();
        }
        let mut second = restart(&mut Vec::new(), &mut first);
        assert!(second.count_send(), "the first of three skipped sends");
        // The restored actors hold the effects of all three: a second restart from
        // this checkpoint must skip all three again, not make two of them twice.
        let mut third = restart(&mut Vec::new(), &mut second);
        assert_eq!(third.replayed_upto, 3);
        assert!((0..3).all(|_| third.count_send()));
        assert!(!third.count_send());
    }

    #[test]
    fn a_timeout_is_kept_as_the_asks_outcome_and_a_reexecuted_main_times_out_the_same() {
        let to = ActorId::new(1, 1).unwrap();
        let mut state = MainReplay::default();
        state.count_send();
        state.count_send();
        assert!(state.keep_timeout(request_number(1), to));
        assert!(state.is_answered(request_number(1)));
        assert!(!state.keep_timeout(request_number(1), to), "once");
        assert!(
            state.keep(request_number(2), encode(&Ok(vec![2]))).is_ok(),
            "the reply to the other ask"
        );
        assert!(
            !state.keep_timeout(request_number(2), to),
            "a reply that won the race is the outcome, not the timeout"
        );
        assert!(
            state.keep(request_number(1), encode(&Ok(vec![1]))).is_err(),
            "the late reply is not kept"
        );
        let mut restored = restart(&mut Vec::new(), &mut state);
        assert_eq!(
            restored.reply(request_number(1)),
            Some(Err(RemoteError::TimedOut(to)))
        );
        assert_eq!(restored.reply(request_number(2)), Some(Ok(vec![2])));
    }

    #[test]
    fn a_reexecuted_main_that_asks_another_actor_than_before_is_caught() {
        let (a, b) = (ActorId::new(1, 1).unwrap(), ActorId::new(2, 1).unwrap());
        let mut state = MainReplay::default();
        for _ in 0..2 {
            state.count_send();
            let request = request_number(state.sent);
            assert_eq!(state.ask(request, a), None, "nothing kept yet");
            assert!(state.keep(request, encode(&Ok(vec![7]))).is_ok());
        }
        let mut restored = restart(&mut Vec::new(), &mut state);
        restored.count_send();
        assert_eq!(
            restored.ask(request_number(1), a),
            Some((Ok(vec![7]), None)),
            "the same question: the kept answer, nothing to report"
        );
        restored.count_send();
        assert_eq!(
            restored.ask(request_number(2), b),
            Some((Ok(vec![7]), Some(a))),
            "another actor asked at the same position: the lost incarnation's is named"
        );
        assert_eq!(restored.diverged, 1);
    }

    #[test]
    fn a_reply_too_large_for_a_journal_record_is_refused_when_kept() {
        let mut state = MainReplay::default();
        state.count_send();
        // Zeroed pages, never touched: the length is checked first.
        let huge = Bytes::from(vec![0u8; crate::checkpoint::journal::MAX_REPLY + 1]);
        let err = state.insert(request_number(1), huge).unwrap_err();
        assert!(err.contains("at most"), "{err}");
        assert_eq!(state.replies_kept(), 0);
    }

    #[test]
    fn a_reply_that_arrives_before_the_reexecuted_main_asks_waits_for_the_ask() {
        let mut state = MainReplay::default();
        state.count_send();
        let mut restored = restart(&mut Vec::new(), &mut state);
        // A restored replier answers the second ask before the re-executed main made it.
        assert!(restored
            .keep(request_number(2), encode(&Ok(vec![2])))
            .is_ok());
        restored.count_send();
        restored.count_send();
        assert_eq!(restored.reply(request_number(2)), Some(Ok(vec![2])));
        assert_eq!(restored.reply(request_number(2)), None, "handed out once");
        // One that arrives after the ask goes to the waiting ask, not into memory.
        assert!(restored
            .keep(request_number(1), encode(&Ok(vec![1])))
            .is_ok());
        assert_eq!(restored.reply(request_number(1)), None);
    }

    impl MainReplay {
        /// What `main`'s ask `request` gets at once (asked of an actor no test checks).
        fn reply(&mut self, request: u64) -> Option<Outcome> {
            self.ask(request, ActorId::from_u64(0)).map(|(o, _)| o)
        }
    }

    fn encode(outcome: &Outcome) -> Bytes {
        encode_outcome(outcome).unwrap()
    }

    #[test]
    fn a_reply_that_is_not_one_to_main_or_does_not_decode_is_refused_and_not_kept() {
        let mut state = MainReplay::default();
        let answer: Outcome = Ok(vec![9]);
        assert!(state.on_reply(&reply(None, &answer)).is_err());
        assert!(state.on_reply(&reply(Some(4), &answer)).is_err());
        let mut garbage = reply(Some(request_number(1)), &answer);
        garbage.payload = bytes::Bytes::from_static(&[0xff, 0xff, 0xff]);
        assert!(state.on_reply(&garbage).is_err());
        assert_eq!(state.replies_kept(), 0);
        assert_eq!(
            state.on_reply(&reply(Some(request_number(1)), &answer)),
            Ok((request_number(1), answer.clone()))
        );
        assert!(
            state
                .on_reply(&reply(Some(request_number(1)), &Ok(vec![8])))
                .is_err(),
            "a second reply to one request does not replace the first"
        );
        let mut restored = restart(&mut Vec::new(), &mut state);
        assert_eq!(restored.reply(request_number(1)), Some(answer.clone()));
    }
}
