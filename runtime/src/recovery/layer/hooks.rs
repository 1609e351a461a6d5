//! The layer's side of the seam: [`RecoveryHooks`] for [`RecoveryLayer`], and what the
//! app's `main` does through it (its tells and asks, counted and numbered under the
//! layer's lock).

use super::{main_replay, turn_begins, RecoveryLayer};
use crate::actor::lifecycle::Control;
use crate::actor::mailbox::Stamp;
use crate::actor::supervision::SupervisionEvent;
use crate::actor_id::ActorId;
use crate::executor::CoreQueue;
use crate::node::NodeHandle;
use crate::recovery::hooks::{MainAsk, MainAskSend, Outcome, RecoveryHooks};
use crate::recovery::Dependence;
use crate::transport::frame::{Envelope, FrameBody, RecoveryFrame};
use crate::transport::Transport;
use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

impl RecoveryLayer {
    /// The recovery layer of `node`, if it runs with recovery on.
    pub fn of(node: &NodeHandle) -> Option<&RecoveryLayer> {
        node.recovery()?.as_any().downcast_ref::<RecoveryLayer>()
    }

    /// `main`'s tell, ask or other input to the set: what the set's actors send after it
    /// (and so the answers coming back) depends on it, and a restarted node replays those
    /// answers only once `main` has made it again. Counted like an actor's message inside
    /// the node from a sender that depends on every determinant recorded so far (`main`
    /// is not tracked): messages leaving the node then wait for them, so the input is
    /// one a replay makes again (`NodeRecovery::on_local_deliveries`).
    fn main_input(state: &mut super::LayerState) {
        state.recovery.on_local_deliveries(1, None);
    }
}

impl RecoveryHooks for RecoveryLayer {
    fn logs_everything(&self) -> bool {
        self.config.log_everything
    }

    fn log_local(&self, from: ActorId, to: ActorId, payload: bytes::Bytes) {
        RecoveryLayer::log_local(self, from, to, payload)
    }

    fn local_delivery(&self, node: &NodeHandle, receiver: &CoreQueue, sender: Dependence) {
        RecoveryLayer::local_delivery(self, node, receiver, sender)
    }

    fn stamp_local(&self, from: ActorId, to: ActorId) -> Stamp {
        RecoveryLayer::stamp_local(self, from, to)
    }

    fn turn_begins(&self) {
        turn_begins()
    }

    fn admit(&self, actor: ActorId, stamp: Stamp) -> bool {
        RecoveryLayer::admit(self, actor, stamp)
    }

    fn admit_selected(&self, actor: ActorId, stamp: Stamp) -> bool {
        RecoveryLayer::admit_selected(self, actor, stamp)
    }

    fn note_waiting(&self, actor: ActorId) {
        RecoveryLayer::note_waiting(self, actor)
    }

    fn value(&self, actor: ActorId, fresh: &mut dyn FnMut() -> u64) -> u64 {
        RecoveryLayer::value(self, actor, fresh)
    }

    fn probe(&self, actor: ActorId, fresh: &mut dyn FnMut() -> bool) -> bool {
        RecoveryLayer::probe(self, actor, fresh)
    }

    fn send_remote(&self, node: &NodeHandle, from: ActorId, env: Envelope) -> Result<(), String> {
        RecoveryLayer::send_remote(self, node, from, env)
    }

    fn on_frame(
        &self,
        node: &NodeHandle,
        from: u16,
        via: u32,
        frame: RecoveryFrame,
    ) -> Option<(ActorId, usize)> {
        RecoveryLayer::on_frame(self, node, from, via, frame)
    }

    fn peer_connected(&self, peer: u16, incarnation: u32, addr: std::net::SocketAddr) {
        RecoveryLayer::peer_connected(self, peer, incarnation, addr)
    }

    fn main_tell_local(&self, node: &NodeHandle, push: &mut dyn FnMut()) {
        // Pushed while the layer is locked: a checkpoint sees the count and the message
        // together or neither; logged messages the tell let through go in after it.
        let (mut state, skip) = self.main_turn(node, true);
        if skip {
            return;
        }
        Self::main_input(&mut state);
        push();
        Self::deliver_ready(&mut state, node);
    }

    fn main_tell_remote(&self, node: &NodeHandle, env: Envelope) {
        let (mut state, skip) = self.main_turn(node, true);
        if skip {
            return;
        }
        Self::main_input(&mut state);
        self.main_send_logged(state, node, env);
    }

    fn main_ask(
        &self,
        node: &NodeHandle,
        tr: &Arc<Transport>,
        to: ActorId,
        send: MainAskSend<'_>,
    ) -> MainAsk {
        let (mut state, skip) = self.main_turn(node, true);
        let request = main_replay::request_number(state.main_replay.sent);
        let reply = tr.expect_reply(request, to.rank());
        if let Some((outcome, diverged)) = state.main_replay.ask(request, to) {
            if let Some(before) = diverged {
                self.report_diverged_ask(request, to, before);
            }
            tr.complete_request(request, outcome);
        }
        let mut failed = None;
        if !skip {
            Self::main_input(&mut state);
            match send {
                // Pushed while the layer is locked, like a tell (a checkpoint sees the
                // count and the message together or neither). The slot answers `main`
                // through the layer.
                MainAskSend::Local(push) => {
                    let refused = main_replay::without_drop_replies(|| push(request));
                    let mut answer = None;
                    if refused {
                        // Kept like an answer: a re-executed `main` that skips this ask
                        // gets the same.
                        let outcome: Outcome =
                            Err(crate::transport::frame::RemoteError::ActorGone(to));
                        answer = state.main_replay.keep_outcome(request, &outcome).ok();
                    }
                    Self::deliver_ready(&mut state, node);
                    drop(state);
                    if let Some(outcome) = answer {
                        tr.complete_request(request, outcome);
                    }
                }
                MainAskSend::Remote(envelope) => match envelope(request) {
                    Ok(env) => self.main_send_logged(state, node, env),
                    Err((refusal, reason)) => {
                        // Kept like an answer (the ask is counted): a re-executed `main`
                        // that skips this ask gets the same refusal.
                        let outcome: Outcome = Err(refusal);
                        let answer = state.main_replay.keep_outcome(request, &outcome).ok();
                        drop(state);
                        match answer {
                            Some(outcome) => {
                                tr.complete_request(request, outcome);
                            }
                            None => failed = Some(reason),
                        }
                    }
                },
            }
        }
        if failed.is_some() {
            tr.cancel_request(request);
        }
        MainAsk {
            request,
            reply,
            failed,
        }
    }

    fn main_ask_timed_out(&self, request: u64, to: ActorId) -> bool {
        RecoveryLayer::main_ask_timed_out(self, request, to)
    }

    fn main_waits(&self, node: &NodeHandle) {
        drop(self.main_turn(node, false));
    }

    fn reply_to_main(
        &self,
        node: &NodeHandle,
        rank: u16,
        request: u64,
        outcome: &Outcome,
    ) -> Result<bool, String> {
        RecoveryLayer::reply_to_main(self, node, rank, request, outcome)
    }

    fn holds_lock(&self) -> bool {
        super::holds_state()
    }

    fn send_reply_unblocking(&self, rank: u16, request: u64, outcome: Outcome) {
        self.send_unblocking(rank, FrameBody::Reply { request, outcome });
    }

    fn child_spawned(&self, node: &NodeHandle, id: ActorId) {
        RecoveryLayer::child_spawned(self, node, id)
    }

    fn defer_start(&self, cell: Arc<dyn Control>) -> bool {
        RecoveryLayer::defer_start(self, cell)
    }

    fn actor_failed(&self, failure: &SupervisionEvent) {
        RecoveryLayer::actor_failed(self, failure)
    }

    fn incarnation_number(&self) -> u32 {
        self.config.incarnation
    }

    fn stall_report(&self, node: &NodeHandle, patience: Duration) -> String {
        RecoveryLayer::stall_report(self, node, patience)
    }

    fn log_size(&self) -> Option<(u64, u64)> {
        // A sample never waits: a checkpoint or a replay may hold the lock a while.
        let state = self.state.try_lock().ok()?;
        let stats = state.recovery.protocol()?.log_stats();
        Some((stats.bytes() as u64, stats.entries as u64))
    }

    fn announce_finished(&self) {
        RecoveryLayer::announce_finished(self)
    }

    fn shutdown(&self) {
        RecoveryLayer::shutdown(self)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
