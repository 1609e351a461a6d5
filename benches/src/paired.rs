//! Paired measurements: a baseline and a candidate timed in alternating turns, round after
//! round, so that the drift of a shared machine (other tenants, frequency changes, a
//! background checkpoint) hits both alike. The ratio reported is the median of the
//! per-round ratios, not the ratio of two medians taken minutes apart.

use crate::stats::{median, median_interval, Verdict};

/// Medians of a paired measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// Median of the baseline's values.
    pub baseline: f64,
    /// Median of the candidate's values.
    pub candidate: f64,
    /// Median over rounds of candidate / baseline.
    pub ratio: f64,
    /// 95% confidence interval of that median (distribution-free, see
    /// [`median_interval`]); `None` with fewer than 6 rounds.
    pub interval: Option<(f64, f64)>,
    /// Rounds measured.
    pub rounds: usize,
}

impl Paired {
    /// The verdict on "the ratio is at most `target`", from the interval (a median alone
    /// passes or misses by chance on a shared machine); inconclusive without one.
    pub fn verdict(&self, target: f64) -> Verdict {
        self.interval
            .map_or(Verdict::Inconclusive, |i| Verdict::of(i, target))
    }
}

/// Measures `baseline` and `candidate` once per round for `rounds` rounds, the baseline
/// first in even rounds and second in odd ones (so neither always runs on a warm or a
/// cold machine). Each closure returns one value (a time per operation, say).
pub fn paired(
    rounds: usize,
    mut baseline: impl FnMut() -> f64,
    mut candidate: impl FnMut() -> f64,
) -> Paired {
    let (mut base, mut cand, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (b, c) = if round % 2 == 0 {
            let b = baseline();
            (b, candidate())
        } else {
            let c = candidate();
            (baseline(), c)
        };
        base.push(b);
        cand.push(c);
        ratios.push(c / b);
    }
    Paired {
        baseline: median(&base).unwrap_or(f64::NAN),
        candidate: median(&cand).unwrap_or(f64::NAN),
        ratio: median(&ratios).unwrap_or(f64::NAN),
        interval: median_interval(&ratios, 0.95),
        rounds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn turns_alternate_and_the_ratio_is_a_median_of_rounds() {
        let order = std::cell::RefCell::new(String::new());
        // The machine slows down 10× halfway; the candidate is always 2× the baseline.
        let clock = Cell::new(0u32);
        let speed = || if clock.get() <= 4 { 1.0 } else { 10.0 };
        let p = paired(
            4,
            || {
                order.borrow_mut().push('b');
                clock.set(clock.get() + 1);
                speed()
            },
            || {
                order.borrow_mut().push('c');
                clock.set(clock.get() + 1);
                2.0 * speed()
            },
        );
        assert_eq!(order.into_inner(), "bccbbccb");
        assert_eq!(p.ratio, 2.0, "drift cancels within a round");
        assert_eq!(p.rounds, 4);
        assert_eq!((p.baseline, p.candidate), (5.5, 11.0));
        assert_eq!(
            p.interval, None,
            "four rounds are too few for a 95% interval"
        );
        assert_eq!(p.verdict(3.0), Verdict::Inconclusive);
    }

    #[test]
    fn the_verdict_needs_the_whole_interval_on_one_side_of_the_target() {
        // Candidate / baseline over 11 rounds: 1.00, 1.01, ..., 1.10.
        let round = Cell::new(0u32);
        let p = paired(
            11,
            || 1.0,
            || {
                round.set(round.get() + 1);
                1.0 + 0.01 * f64::from(round.get() - 1)
            },
        );
        let (low, high) = p.interval.expect("11 rounds give a 95% interval");
        assert!(low < p.ratio && p.ratio < high);
        assert_eq!(p.verdict(high + 1e-9), Verdict::Pass);
        assert_eq!(p.verdict(p.ratio), Verdict::Inconclusive);
        assert_eq!(p.verdict(low - 1e-9), Verdict::Miss);
    }
}
