//! Summaries of repeated measurements: every value the benches and the report show is a
//! median over repetitions.

/// The median of `values` (the mean of the two middle ones for an even count); `None`
/// for no values. NaN values sort last.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A distribution-free confidence interval for the median of `values`: the order
/// statistics x(k) and x(n+1-k) with the largest k for which the binomial(n, 1/2) tail
/// below k holds at most (1 - `confidence`) / 2. It assumes only independent values
/// (the paired rounds of a shared machine, whose noise is neither normal nor symmetric:
/// a neighbour's burst slows one run by 50%, never speeds one up). `None` when there are
/// too few values for that confidence (fewer than 6 for 95%).
pub fn median_interval(values: &[f64], confidence: f64) -> Option<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let alpha_half = (1.0 - confidence) / 2.0;
    // tail = P(X < k) for X ~ binomial(n, 1/2), grown while it stays within alpha/2.
    let (mut k, mut tail, mut term) = (0usize, 0.0f64, 0.5f64.powi(n as i32));
    while k < n / 2 && tail + term <= alpha_half {
        tail += term;
        // P(X = k + 1) from P(X = k).
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    // k values below the interval's low end: it is x(k) in 1-based order, v[k - 1].
    (k >= 1).then(|| (v[k - 1], v[n - k]))
}

/// Where a measured ratio stands against a target it must not exceed, judged by the
/// confidence interval of its median rather than by the median alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The whole interval is at or below the target.
    Pass,
    /// The whole interval is above the target.
    Miss,
    /// The interval holds the target: more rounds (or a quieter machine) are needed.
    Inconclusive,
}

impl Verdict {
    /// The verdict on an interval `(low, high)` against `target`.
    pub fn of(interval: (f64, f64), target: f64) -> Verdict {
        match interval {
            (_, high) if high <= target => Verdict::Pass,
            (low, _) if low > target => Verdict::Miss,
            _ => Verdict::Inconclusive,
        }
    }

    /// The word the reports print.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_medians_interval_uses_the_binomial_order_statistics() {
        // Known table values for 95%: n=6 gives (x1, x6), n=10 (x2, x9), n=20 (x6, x15),
        // n=40 (x14, x27).
        let ranks = |n: usize| {
            let v: Vec<f64> = (1..=n).map(|i| i as f64).collect();
            median_interval(&v, 0.95)
        };
        assert_eq!(ranks(5), None, "5 values cannot give 95%");
        assert_eq!(ranks(6), Some((1.0, 6.0)));
        assert_eq!(ranks(10), Some((2.0, 9.0)));
        assert_eq!(ranks(20), Some((6.0, 15.0)));
        assert_eq!(ranks(40), Some((14.0, 27.0)));
        // Order of the input does not matter.
        assert_eq!(
            median_interval(&[9.0, 1.0, 5.0, 3.0, 7.0, 2.0], 0.95),
            Some((1.0, 9.0))
        );
    }

    #[test]
    fn a_verdict_needs_the_whole_interval_on_one_side_of_the_target() {
        assert_eq!(Verdict::of((0.98, 1.02), 1.03), Verdict::Pass);
        assert_eq!(Verdict::of((0.98, 1.03), 1.03), Verdict::Pass);
        assert_eq!(Verdict::of((1.01, 1.05), 1.03), Verdict::Inconclusive);
        assert_eq!(Verdict::of((1.04, 1.10), 1.03), Verdict::Miss);
    }

    #[test]
    fn medians_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
    }
}
