//! Heartbeat failure detection (sans-IO): who has been silent for too long.
//!
//! The transport feeds it every frame received from a peer and a clock reading; it answers
//! which peers have crossed the silence timeout. No sockets, threads or clocks inside: the
//! time type is the caller's ([`Moment`]: `Instant` in the runtime, a virtual clock in
//! tests).
//!
//! A detector that was not polled for a long while cannot tell silence from its own
//! pause: a node whose process or network thread did not run (an overloaded host, a
//! stolen VM, a stop signal) finds every peer's heartbeats still unread on waking. Such a
//! poll suspects nobody; it restarts every peer's clock and reports the pause instead
//! ([`FailureDetector::take_pause`]). Otherwise one paused node would declare every
//! healthy peer failed, and with fail-stop each would be killed and rolled back. Peers
//! that did run keep their clocks: they declare the paused node failed as before.

use crate::time::Moment;
use std::time::Duration;

/// A peer's liveness as far as the detector knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerLiveness {
    /// Heard from within the timeout (or not yet expected).
    Alive,
    /// Silent past the timeout: presumed dead.
    Failed,
    /// Said goodbye: gone on purpose, not a failure.
    Departed,
}

/// A silence-timeout failure detector over `n` peers, reading time as `T`.
#[derive(Debug)]
pub struct FailureDetector<T: Moment> {
    timeout: Duration,
    last_seen: Vec<Option<T>>,
    liveness: Vec<PeerLiveness>,
    /// When `poll` last ran.
    last_poll: Option<T>,
    /// The longest gap between two polls that still counts as watching.
    pause_limit: Duration,
    /// The last pause found and not yet taken.
    pause: Option<Duration>,
}

/// A peer newly found failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Suspicion {
    /// The peer's rank.
    pub rank: u16,
    /// How long it had been silent when declared failed.
    pub silent_for: Duration,
}

impl<T: Moment> FailureDetector<T> {
    /// A detector for ranks `0..n`; nobody is watched until first heard from. It is meant
    /// to be polled often (every heartbeat interval): polls more than half the `timeout`
    /// apart mean this node was paused, and suspect nobody.
    pub fn new(n: usize, timeout: Duration) -> Self {
        FailureDetector {
            timeout,
            last_seen: vec![None; n],
            liveness: vec![PeerLiveness::Alive; n],
            last_poll: None,
            pause_limit: timeout / 2,
            pause: None,
        }
    }

    /// Something arrived from `rank` at `now`.
    pub fn observe(&mut self, rank: u16, now: T) {
        if let Some(slot) = self.last_seen.get_mut(rank as usize) {
            *slot = Some(now);
        }
    }

    /// `rank` announced a clean departure.
    pub fn departed(&mut self, rank: u16) {
        if let Some(l) = self.liveness.get_mut(rank as usize) {
            *l = PeerLiveness::Departed;
        }
    }

    /// `rank` is known dead by other means (its connection broke).
    pub fn failed(&mut self, rank: u16) -> bool {
        match self.liveness.get_mut(rank as usize) {
            Some(l) if *l == PeerLiveness::Alive => {
                *l = PeerLiveness::Failed;
                true
            }
            _ => false,
        }
    }

    /// `rank` is alive again (a replacement process joined).
    pub fn revived(&mut self, rank: u16, now: T) {
        if let Some(l) = self.liveness.get_mut(rank as usize) {
            *l = PeerLiveness::Alive;
            self.last_seen[rank as usize] = Some(now);
        }
    }

    /// The liveness of `rank`.
    pub fn liveness(&self, rank: u16) -> PeerLiveness {
        self.liveness
            .get(rank as usize)
            .copied()
            .unwrap_or(PeerLiveness::Failed)
    }

    /// Peers that crossed the timeout since the last poll. After a pause of this node
    /// (the previous poll more than half the timeout ago) nobody: every watched peer gets
    /// a whole timeout again from `now`, and the pause is kept for [`Self::take_pause`].
    pub fn poll(&mut self, now: T) -> Vec<Suspicion> {
        let mut out = Vec::new();
        let previous = self.last_poll.replace(now);
        if let Some(gap) = previous.map(|p| now.since(p)) {
            if gap > self.pause_limit {
                self.pause = Some(gap);
                for seen in self.last_seen.iter_mut().flatten() {
                    *seen = now;
                }
                return out;
            }
        }
        for (rank, (seen, live)) in self
            .last_seen
            .iter()
            .zip(self.liveness.iter_mut())
            .enumerate()
        {
            if let (Some(seen), PeerLiveness::Alive) = (seen, *live) {
                let silent_for = now.since(*seen);
                if silent_for > self.timeout {
                    *live = PeerLiveness::Failed;
                    out.push(Suspicion {
                        rank: rank as u16,
                        silent_for,
                    });
                }
            }
        }
        out
    }

    /// How long this node had not polled when a poll last found it paused; `None` if no
    /// pause was found since the last call.
    pub fn take_pause(&mut self) -> Option<Duration> {
        self.pause.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_silent_past_the_timeout_is_reported_once() {
        let t0 = Duration::ZERO;
        let ms = Duration::from_millis;
        let mut d = FailureDetector::new(3, ms(500));
        d.observe(1, t0);
        d.observe(2, t0);
        d.observe(2, t0 + ms(400));
        assert!(d.poll(t0 + ms(450)).is_empty());
        let s = d.poll(t0 + ms(600));
        assert_eq!(
            s,
            vec![Suspicion {
                rank: 1,
                silent_for: ms(600)
            }]
        );
        assert!(d.poll(t0 + ms(700)).is_empty(), "reported once");
        assert_eq!(d.poll(t0 + ms(901))[0].rank, 2);
        assert_eq!(d.liveness(1), PeerLiveness::Failed);
    }

    #[test]
    fn departed_and_unheard_peers_are_never_suspected() {
        let t0 = Duration::ZERO;
        let mut d = FailureDetector::new(3, Duration::from_millis(10));
        d.observe(1, t0);
        d.departed(1);
        assert!(d.poll(t0 + Duration::from_secs(5)).is_empty());
        assert_eq!(d.liveness(1), PeerLiveness::Departed);
    }

    #[test]
    fn a_revived_peer_is_watched_again() {
        let t0 = Duration::ZERO;
        let ms = Duration::from_millis;
        let mut d = FailureDetector::new(2, ms(10));
        d.observe(1, t0);
        // Polled every 2 ms, as a heartbeat tick would.
        let suspected = |d: &mut FailureDetector<Duration>, from: u64, to: u64| {
            (from..=to)
                .step_by(2)
                .map(|t| d.poll(t0 + ms(t)).len())
                .sum::<usize>()
        };
        assert_eq!(suspected(&mut d, 2, 20), 1);
        d.revived(1, t0 + ms(30));
        assert_eq!(suspected(&mut d, 22, 40), 0);
        assert_eq!(suspected(&mut d, 42, 50), 1);
    }

    #[test]
    fn a_node_that_was_paused_suspects_nobody_on_waking_and_says_how_long_it_slept() {
        // Polled every 100 ms, then not for 5 s: the peers' heartbeats are unread, not
        // missing. Nobody is suspected; a peer still silent a whole timeout later is.
        let t0 = Duration::ZERO;
        let ms = Duration::from_millis;
        let mut d = FailureDetector::new(3, ms(1000));
        d.observe(1, t0);
        d.observe(2, t0);
        for k in 1..=5 {
            assert!(d.poll(t0 + ms(100 * k)).is_empty());
        }
        assert!(d.take_pause().is_none(), "regular polls are no pause");
        assert!(d.poll(t0 + ms(5500)).is_empty(), "a pause suspects nobody");
        assert_eq!(d.take_pause(), Some(ms(5000)));
        assert_eq!(d.take_pause(), None, "taken once");
        // The backlog is read: node 2's heartbeat arrives, node 1 stays silent.
        d.observe(2, t0 + ms(5510));
        let mut t = ms(5500);
        let mut found = Vec::new();
        while found.is_empty() {
            t += ms(100);
            found = d.poll(t0 + t);
            d.observe(2, t0 + t);
        }
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].rank, 1);
        assert!(t > ms(6500), "a whole timeout after waking: {t:?}");
        assert_eq!(d.liveness(2), PeerLiveness::Alive);
    }
}
