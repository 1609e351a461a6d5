//! Paired measurements: a baseline and a candidate timed in alternating turns, round after
//! round, so that the drift of a shared machine (other tenants, frequency changes, a
//! background checkpoint) hits both alike. The ratio reported is the median of the
//! per-round ratios, not the ratio of two medians taken minutes apart.

use crate::stats::median;

/// Medians of a paired measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// Median of the baseline's values.
    pub baseline: f64,
    /// Median of the candidate's values.
    pub candidate: f64,
    /// Median over rounds of candidate / baseline.
    pub ratio: f64,
    /// Rounds measured.
    pub rounds: usize,
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
    }
}
