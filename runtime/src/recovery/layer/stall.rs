//! The stall watch: tells when a node has held messages back for longer than a bound
//! (default [`STALL_BOUND`], `LAZARUS_STALL_AFTER`) without delivering or sending
//! anything, so that a replay or a delivery that cannot go on is never silent. No clock
//! or I/O inside: the caller passes the time, a progress count and what the node waits
//! for, and prints the report it gets back (a timeline event and a warning).

use std::time::{Duration, Instant};

/// How long a node may hold messages back without any progress before it says so.
pub const STALL_BOUND: Duration = Duration::from_secs(10);

/// The bound from `LAZARUS_STALL_AFTER` (a duration such as `10s` or `500ms`), else
/// [`STALL_BOUND`]. A value that does not parse is reported and the default used.
pub(crate) fn bound_from_env() -> Duration {
    match std::env::var("LAZARUS_STALL_AFTER") {
        Ok(v) => match humantime::parse_duration(v.trim()) {
            Ok(d) if !d.is_zero() => d,
            _ => {
                tracing::warn!("LAZARUS_STALL_AFTER={v:?} is not a duration; using 10s");
                STALL_BOUND
            }
        },
        Err(_) => STALL_BOUND,
    }
}

/// Watches one node (see the module documentation).
#[derive(Debug)]
pub(crate) struct StallWatch {
    bound: Duration,
    /// Since when the node has held messages back without progress, at which progress
    /// count, and whether that stall was reported.
    since: Option<(Instant, u64, bool)>,
}

/// A stall to report.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Stall {
    /// How long nothing moved.
    pub(crate) for_: Duration,
    /// What the node waits for.
    pub(crate) waiting: String,
}

impl StallWatch {
    pub(crate) fn new(bound: Duration) -> Self {
        StallWatch { bound, since: None }
    }

    /// The node's state at `now`: `progress` moves whenever it delivers, receives or
    /// sends; `waiting` is what it holds back and why, `None` when it holds nothing (an
    /// idle node is not stalled). Returns a stall the first time the same wait has lasted
    /// the bound; again only after progress and a new stall.
    pub(crate) fn observe(
        &mut self,
        now: Instant,
        progress: u64,
        waiting: Option<String>,
    ) -> Option<Stall> {
        let Some(waiting) = waiting else {
            self.since = None;
            return None;
        };
        match &mut self.since {
            Some((start, at, reported)) if *at == progress => {
                let for_ = now.saturating_duration_since(*start);
                if *reported || for_ < self.bound {
                    return None;
                }
                *reported = true;
                Some(Stall { for_, waiting })
            }
            _ => {
                self.since = Some((now, progress, false));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held() -> Option<String> {
        Some("channel 1:0->2:0 requires interval 7".into())
    }

    #[test]
    fn a_node_holding_messages_without_progress_is_reported_once_after_the_bound() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(Duration::from_secs(10));
        assert_eq!(w.observe(t0, 5, held()), None);
        assert_eq!(w.observe(t0 + Duration::from_secs(9), 5, held()), None);
        let s = w
            .observe(t0 + Duration::from_secs(10), 5, held())
            .expect("reported at the bound");
        assert_eq!(s.for_, Duration::from_secs(10));
        assert!(s.waiting.contains("requires interval 7"));
        assert_eq!(
            w.observe(t0 + Duration::from_secs(30), 5, held()),
            None,
            "once"
        );
    }

    #[test]
    fn progress_or_an_empty_inbox_starts_the_count_again() {
        let t0 = Instant::now();
        let mut w = StallWatch::new(Duration::from_secs(10));
        w.observe(t0, 5, held());
        // It delivered something: a new wait starts.
        assert_eq!(w.observe(t0 + Duration::from_secs(9), 6, held()), None);
        assert_eq!(w.observe(t0 + Duration::from_secs(15), 6, held()), None);
        assert!(w.observe(t0 + Duration::from_secs(19), 6, held()).is_some());
        // Nothing held: idle, not stalled; a later stall is reported again.
        assert_eq!(w.observe(t0 + Duration::from_secs(40), 6, None), None);
        w.observe(t0 + Duration::from_secs(41), 6, held());
        assert!(w.observe(t0 + Duration::from_secs(51), 6, held()).is_some());
    }
}
