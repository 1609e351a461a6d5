//! The app's `main` (the driver) under recovery: which of its sends a restarted node's
//! re-executed `main` skips, and the replies to its asks.
//!
//! `main` is not checkpointed: a restarted node runs it again from the top. Its sends are
//! counted in one sequence (tells and asks, to any node); those the restored checkpoint
//! already contains are skipped, the others are made again and regenerate the same
//! messages. An ask needs its reply in every incarnation, so with recovery on:
//! - its request number is its position in that sequence (with [`DRIVER_REQUEST`] set),
//!   the same in every incarnation, instead of a per-process counter, and its reply slot
//!   is checkpointed as that route (in the asked actor's mailbox or state);
//! - a reply from another node travels back as a logged message on the channel from the
//!   replying actor to the driver (sender-based log, dependency vector, replay and
//!   suppression like any message between sets), not as an unlogged reply frame; a
//!   reply from `main`'s own node is kept directly;
//! - every reply delivered to `main` is kept for the whole run and goes into the node's
//!   checkpoints, so a re-executed `main` gets each answer again, whether it arrived
//!   before the checkpoint (kept in it) or after (made again by a restored actor, or
//!   resent by the replier's node).

use crate::actor_id::ActorId;
use crate::node::NodeHandle;
use crate::transport::frame::{Envelope, RemoteError};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Set in the request number of an ask that `main` makes to another node with recovery
/// on; the other bits are the ask's position among `main`'s sends. Per-process request
/// numbers count up from 0 and never reach it.
pub(crate) const DRIVER_REQUEST: u64 = 1 << 63;

/// Message type tag of a reply to `main`'s ask carried as a logged message ("LZREPLY").
pub(crate) const REPLY_TAG: u64 = 0x4C5A_5245_504C_5900;

/// A reply as the asker receives it: the encoded value, or why there is none.
pub(crate) type Outcome = Result<Vec<u8>, RemoteError>;

/// The request number of the ask that is `main`'s `position`-th send.
pub(crate) fn request_number(position: u64) -> u64 {
    DRIVER_REQUEST | position
}

/// Whether `request` is the number of an ask by `main` with recovery on.
pub(crate) fn is_driver_request(request: u64) -> bool {
    request & DRIVER_REQUEST != 0
}

/// The logged message that carries the reply to `main`'s ask `request` on node
/// `rank`, from actor `from`.
pub(crate) fn reply_envelope(
    to: ActorId,
    from: ActorId,
    request: u64,
    outcome: &Outcome,
) -> Result<Envelope, String> {
    let payload = crate::wire::encode_bytes(outcome).map_err(|e| e.to_string())?;
    Ok(Envelope {
        to,
        from,
        type_tag: REPLY_TAG,
        request: Some(request),
        payload,
    })
}

/// A reply to `main` made while its thread held the layer's lock (see
/// [`super::CoreGuard`]).
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
    static DROPS_SILENT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
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
                r.node
                    .recovery_layer()
                    .is_some_and(|l| std::ptr::eq(Arc::as_ptr(l), layer))
            });
        *all = others;
        mine
    })
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

/// Sends the replies deferred on this thread (its layer lock was just released), in the
/// order they were made.
pub(crate) fn send_deferred() {
    let deferred = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
    for d in deferred {
        let Some(layer) = d.node.recovery_layer() else {
            continue;
        };
        let sent = layer.send_reply_to_driver(&d.node, d.from, d.rank, d.request, &d.outcome);
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
pub(crate) struct DriverState {
    /// Sends (tells, asks) `main` has made in this incarnation.
    pub(crate) sent: u64,
    /// In a restarted node: sends up to this count are in the restored checkpoint and
    /// are not made again.
    pub(crate) replayed_upto: u64,
    /// Every reply delivered to `main`'s asks so far, by request number, encoded (shared:
    /// a checkpoint's paused instant copies references, not the replies).
    replies: BTreeMap<u64, Bytes>,
}

/// What a checkpoint keeps of [`DriverState`].
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct DriverImage {
    /// Sends `main` had made.
    pub(crate) sent: u64,
    /// Replies delivered to `main`, by request number, encoded.
    #[serde(with = "encoded_replies")]
    pub(crate) replies: Vec<(u64, Bytes)>,
}

/// Encoded replies as `(request, bytes)` pairs (postcard writes a byte slice and a
/// `Vec<u8>` alike: a length, then the bytes).
mod encoded_replies {
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[(u64, Bytes)], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(v.iter().map(|(r, b)| (r, b.as_ref())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<(u64, Bytes)>, D::Error> {
        let v = Vec::<(u64, Vec<u8>)>::deserialize(d)?;
        Ok(v.into_iter().map(|(r, b)| (r, Bytes::from(b))).collect())
    }
}

fn decode_outcome(request: u64, encoded: &[u8]) -> Result<Outcome, String> {
    crate::wire::decode(encoded)
        .map_err(|e| format!("reply to request {request:#x} did not decode: {e}"))
}

impl DriverState {
    /// Counts one send of `main`; true if the restored checkpoint already contains it.
    pub(crate) fn count_send(&mut self) -> bool {
        self.sent += 1;
        self.sent <= self.replayed_upto
    }

    /// The reply delivered for `request`, if any.
    pub(crate) fn reply(&self, request: u64) -> Option<Outcome> {
        let encoded = self.replies.get(&request)?;
        // Kept replies decoded when they were kept; a restored one comes from an image
        // whose checksum was verified.
        Some(match decode_outcome(request, encoded) {
            Ok(outcome) => outcome,
            Err(e) => Err(RemoteError::Undecodable(ActorId::from_u64(0), e)),
        })
    }

    /// Replies kept (for the final totals).
    pub(crate) fn replies_kept(&self) -> usize {
        self.replies.len()
    }

    /// A logged reply to `main` was delivered: keeps it. Returns the request and the
    /// outcome to hand to the asker, or why the message is not a reply to `main`.
    pub(crate) fn on_reply(&mut self, env: &Envelope) -> Result<(u64, Outcome), String> {
        let request = match env.request {
            Some(r) if is_driver_request(r) => r,
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
        let encoded = crate::wire::encode_bytes(outcome).map_err(|e| e.to_string())?;
        self.insert(request, encoded)?;
        Ok(outcome.clone())
    }

    fn insert(&mut self, request: u64, encoded: Bytes) -> Result<(), String> {
        if self.replies.contains_key(&request) {
            return Err(format!(
                "a second reply to main's request {:#x}",
                request & !DRIVER_REQUEST
            ));
        }
        self.replies.insert(request, encoded);
        Ok(())
    }

    /// What a checkpoint keeps.
    pub(crate) fn image(&self) -> DriverImage {
        DriverImage {
            sent: self.sent,
            replies: self.replies.iter().map(|(r, b)| (*r, b.clone())).collect(),
        }
    }

    /// The state of a restarted node's `main` before it runs again: nothing sent yet,
    /// the checkpoint's sends to skip, its replies to hand out again.
    pub(crate) fn restored(image: DriverImage) -> Self {
        DriverState {
            sent: 0,
            replayed_upto: image.sent,
            replies: image.replies.into_iter().collect(),
        }
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
        assert!(is_driver_request(request_number(1)));
        assert_eq!(request_number(7) & !DRIVER_REQUEST, 7);
        assert!(!is_driver_request(0));
        assert!(!is_driver_request(u64::MAX >> 1));
    }

    #[test]
    fn a_restarted_main_skips_the_sends_its_checkpoint_contains_and_no_more() {
        let mut before = DriverState::default();
        for _ in 0..3 {
            assert!(!before.count_send());
        }
        let mut after = DriverState::restored(before.image());
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
        let mut state = DriverState::default();
        let answer: Outcome = Ok(vec![1, 2, 3]);
        let refused: Outcome = Err(RemoteError::NoReply(ActorId::new(1, 1).unwrap()));
        assert_eq!(
            state.on_reply(&reply(Some(request_number(2)), &answer)),
            Ok((request_number(2), answer.clone()))
        );
        assert_eq!(
            state.on_reply(&reply(Some(request_number(5)), &refused)),
            Ok((request_number(5), refused.clone()))
        );
        let restored = DriverState::restored(state.image());
        assert_eq!(restored.reply(request_number(2)), Some(answer.clone()));
        assert_eq!(restored.reply(request_number(5)), Some(refused.clone()));
        assert_eq!(restored.reply(request_number(3)), None);
    }

    #[test]
    fn a_reply_that_is_not_one_to_main_or_does_not_decode_is_refused_and_not_kept() {
        let mut state = DriverState::default();
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
        assert_eq!(state.reply(request_number(1)), Some(answer.clone()));
    }
}
