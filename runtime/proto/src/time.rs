//! Time as the sans-IO core takes it: passed in by the caller, never read here.

use std::time::Duration;

/// A point in time of the caller's clock.
pub trait Moment: Copy + std::fmt::Debug {
    /// How long after `earlier` this moment is (zero if it is not after it).
    fn since(self, earlier: Self) -> Duration;
}

/// Real time. Only the type is named here; the caller reads the clock.
#[allow(clippy::disallowed_types)]
impl Moment for std::time::Instant {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Virtual time: how long after a run's start (the simulator's and the tests' clock).
impl Moment for Duration {
    fn since(self, earlier: Self) -> Duration {
        self.saturating_sub(earlier)
    }
}
