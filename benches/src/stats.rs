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

/// The effect of a treatment on a paired measurement at equal value of a covariate the
/// treatment does not change (analysis of covariance on the pairs' differences).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adjusted {
    /// The estimated difference (treatment minus baseline) where the covariate's
    /// difference is zero: the intercept of the least-squares line.
    pub effect: f64,
    /// Its 95% confidence interval (Student's t, n - 2 degrees of freedom).
    pub interval: (f64, f64),
    /// How much the measurement moves per unit of the covariate.
    pub slope: f64,
    /// The correlation of the two differences: how much of the spread the covariate
    /// explains.
    pub correlation: f64,
}

/// The difference `dy` (one per pair: treatment minus baseline) at equal covariate, from
/// the pairs' covariate differences `dx`: fits `dy = effect + slope * dx` by least squares
/// and gives `effect` with its 95% interval.
///
/// Why: on a shared VM the speed of a memory-bound kernel depends on which physical pages
/// a process happens to get (the same stencil, re-allocated in one process, ran 10.5 to
/// 16.9 ms per sweep here), so two runs of a pair differ by up to ±20% in wall time for a
/// reason the treatment has nothing to do with. Measuring the kernel's own CPU time in
/// each run and taking that part out leaves the spread of what the treatment changes
/// (session 23: 4.5 times narrower on jacobi2d). Valid only when the treatment does not
/// change the covariate: the caller says why it does not. `None` with fewer than 6 pairs,
/// lengths that differ, or a covariate that does not vary.
pub fn adjusted_difference(dy: &[f64], dx: &[f64]) -> Option<Adjusted> {
    let n = dy.len();
    if n < 6 || dx.len() != n {
        return None;
    }
    let nf = n as f64;
    let (mx, my) = (dx.iter().sum::<f64>() / nf, dy.iter().sum::<f64>() / nf);
    let sxx: f64 = dx.iter().map(|x| (x - mx).powi(2)).sum();
    let syy: f64 = dy.iter().map(|y| (y - my).powi(2)).sum();
    let sxy: f64 = dx.iter().zip(dy).map(|(x, y)| (x - mx) * (y - my)).sum();
    if sxx.is_nan() || sxx <= 0.0 || !syy.is_finite() {
        return None;
    }
    let slope = sxy / sxx;
    let effect = my - slope * mx;
    let residual_ss: f64 = dx
        .iter()
        .zip(dy)
        .map(|(x, y)| (y - effect - slope * x).powi(2))
        .sum();
    let s = (residual_ss / (nf - 2.0)).sqrt();
    // The intercept's standard error includes the slope's uncertainty (mx is not 0).
    let se = s * (1.0 / nf + mx * mx / sxx).sqrt();
    let half = student_t_975(n - 2) * se;
    Some(Adjusted {
        effect,
        interval: (effect - half, effect + half),
        slope,
        correlation: if syy > 0.0 {
            sxy / (sxx * syy).sqrt()
        } else {
            0.0
        },
    })
}

/// The 97.5% quantile of Student's t with `df` degrees of freedom (two-sided 95%): the
/// table up to 30, the Cornish-Fisher expansion beyond (within 0.001 there).
fn student_t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            let (z, v) = (1.959_964, df as f64);
            let (z3, z5) = (z * z * z, z * z * z * z * z);
            z + (z3 + z) / (4.0 * v) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v)
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

    #[test]
    fn a_covariate_that_explains_the_spread_narrows_the_interval_around_the_true_effect() {
        // Pairs whose difference is 0.7 plus half the kernel's difference, plus a little
        // noise of alternating sign: the kernel's difference swings by ±3 s.
        let dx = [-3.0, 2.5, -1.0, 0.5, 3.0, -2.0, 1.5, -0.5, 2.0, -2.5];
        let noise = [0.1, -0.1, 0.05, -0.05, 0.1, -0.1, 0.05, -0.05, 0.0, 0.0];
        let dy: Vec<f64> = dx
            .iter()
            .zip(noise)
            .map(|(x, e)| 0.7 + 0.5 * x + e)
            .collect();
        let a = adjusted_difference(&dy, &dx).expect("10 pairs");
        assert!((a.effect - 0.7).abs() < 0.05, "{a:?}");
        assert!((a.slope - 0.5).abs() < 0.05, "{a:?}");
        assert!(a.interval.0 < 0.7 && 0.7 < a.interval.1, "{a:?}");
        assert!(a.interval.1 - a.interval.0 < 0.2, "{a:?}");
        assert!(a.correlation > 0.99, "{a:?}");
        // The same pairs without the covariate: the median's interval spans seconds.
        let raw = median_interval(&dy, 0.95).unwrap();
        assert!(raw.1 - raw.0 > 2.0, "{raw:?}");
    }

    #[test]
    fn no_adjustment_from_too_few_pairs_or_a_constant_covariate() {
        let dy = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        assert_eq!(adjusted_difference(&dy[..5], &dy[..5]), None);
        assert_eq!(adjusted_difference(&dy, &[1.0; 6]), None);
        assert_eq!(adjusted_difference(&dy, &dy[..5]), None);
        assert!(adjusted_difference(&dy, &dy).is_some());
    }

    #[test]
    fn the_t_quantile_matches_the_table_and_tends_to_the_normal() {
        assert_eq!(student_t_975(10), 2.228);
        // t(0.975; 40) = 2.0211, t(0.975; 120) = 1.9799.
        assert!((student_t_975(40) - 2.0211).abs() < 0.001);
        assert!((student_t_975(120) - 1.9799).abs() < 0.001);
    }
}
