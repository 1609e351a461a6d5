//! Heartbeat failure detection (sans-IO): who has been silent for too long.
//!
//! The transport feeds it every frame received from a peer and a clock reading; it answers
//! which peers have crossed the silence timeout. No sockets, threads or clocks inside: the
//! time type is the caller's ([`Moment`]: `Instant` in the runtime, a virtual clock in
//! tests).

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
    /// A detector for ranks `0..n`; nobody is watched until first heard from.
    pub fn new(n: usize, timeout: Duration) -> Self {
        FailureDetector {
            timeout,
            last_seen: vec![None; n],
            liveness: vec![PeerLiveness::Alive; n],
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

    /// Peers that crossed the timeout since the last poll.
    pub fn poll(&mut self, now: T) -> Vec<Suspicion> {
        let mut out = Vec::new();
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
        assert_eq!(d.poll(t0 + ms(20)).len(), 1);
        d.revived(1, t0 + ms(30));
        assert!(d.poll(t0 + ms(35)).is_empty());
        assert_eq!(d.poll(t0 + ms(50)).len(), 1);
    }
}
