//! NPB EP ("embarrassingly parallel"): Gaussian deviates by the Marsaglia polar method
//! from the NPB generator, tallied in square annuli (NPB 3.x `ep.c`).
//!
//! The `2^M` pairs are cut into `2^(M - 16)` batches of `2^16` pairs; batch `k` starts at
//! seed `S * A^(2^17 k)`, so any worker can compute any batch alone. [`batch`] computes
//! one batch's [`Tally`]; [`combine`] adds tallies in batch order, which makes the result
//! independent of how batches were spread over workers.

use super::random::{randlc, vranlc};
use super::Class;
use serde::{Deserialize, Serialize};

/// log2 of the pairs per batch (`MK` in `ep.c`).
pub const MK: u32 = 16;
/// Pairs per batch (`NK`).
pub const NK: usize = 1 << MK;
/// Annuli counted (`NQ`).
pub const NQ: usize = 10;
/// Relative tolerance of the verification (`epsilon`).
pub const EPSILON: f64 = 1.0e-8;
/// The generator's multiplier (`A`).
pub const A: f64 = 1220703125.0;
/// The generator's starting seed (`S`).
pub const S: f64 = 271828183.0;

/// log2 of the number of pairs (`M`) for `class`.
pub fn m(class: Class) -> u32 {
    match class {
        Class::S => 24,
        Class::W => 25,
        Class::A => 28,
    }
}

/// Number of batches for `class`.
pub fn batches(class: Class) -> u64 {
    1 << (m(class) - MK)
}

/// The official `(sx, sy)` of `class` (`sx_verify_value`, `sy_verify_value`).
// The literals are written exactly as `ep.c` publishes them, trailing zero included.
#[allow(clippy::excessive_precision)]
pub fn reference(class: Class) -> (f64, f64) {
    match class {
        Class::S => (-3.247834652034740e+3, -6.958407078382297e+3),
        Class::W => (-2.863319731645753e+3, -6.320053679109499e+3),
        Class::A => (-4.295875165629892e+3, -1.580732573678431e+4),
    }
}

/// Relative errors of `sx` and `sy` against the reference, and whether both are within
/// [`EPSILON`], exactly as `ep.c` decides.
pub fn verify(class: Class, sx: f64, sy: f64) -> (f64, f64, bool) {
    let (rx, ry) = reference(class);
    let ex = ((sx - rx) / rx).abs();
    let ey = ((sy - ry) / ry).abs();
    (ex, ey, ex <= EPSILON && ey <= EPSILON)
}

/// Millions of random numbers per second, as NPB reports EP's "Mop/s".
pub fn mops(class: Class, seconds: f64) -> f64 {
    2f64.powi(m(class) as i32 + 1) / seconds / 1e6
}

/// What one batch (or a sequence of batches) contributes: the sums of the accepted
/// deviates and how many pairs fell in each annulus `max(|X|, |Y|) in [l, l+1)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Sum of the X deviates.
    pub sx: f64,
    /// Sum of the Y deviates.
    pub sy: f64,
    /// Pairs per annulus.
    pub q: [u64; NQ],
}

impl Tally {
    /// Number of Gaussian pairs (`gc`).
    pub fn pairs(&self) -> u64 {
        self.q.iter().sum()
    }
}

/// `A^(2 NK) mod 2^46` (`an`): the multiplier from one batch's seed to the next's.
pub fn batch_multiplier() -> f64 {
    // `ep.c` squares A MK + 1 times.
    let mut t1 = A;
    for _ in 0..=MK {
        let t = t1;
        randlc(&mut t1, t);
    }
    t1
}

/// Batch `k` (0-based), computed exactly as one pass of `ep.c`'s main loop. `an` is
/// [`batch_multiplier`]; `x` is scratch space, resized as needed.
pub fn batch(k: u64, an: f64, x: &mut Vec<f64>) -> Tally {
    // The seed of batch k is S * an^k, found by binary powering as in ep.c.
    let (mut t1, mut t2, mut kk) = (S, an, k);
    for _ in 0..100 {
        let ik = kk / 2;
        if 2 * ik != kk {
            randlc(&mut t1, t2);
        }
        if ik == 0 {
            break;
        }
        let t = t2;
        randlc(&mut t2, t);
        kk = ik;
    }
    x.resize(2 * NK, 0.0);
    vranlc(&mut t1, A, x);
    let mut tally = Tally::default();
    for pair in x.chunks_exact(2) {
        let x1 = 2.0 * pair[0] - 1.0;
        let x2 = 2.0 * pair[1] - 1.0;
        let t1 = x1 * x1 + x2 * x2;
        if t1 <= 1.0 {
            let t2 = (-2.0 * t1.ln() / t1).sqrt();
            let t3 = x1 * t2;
            let t4 = x2 * t2;
            let l = t3.abs().max(t4.abs()) as usize;
            tally.q[l] += 1;
            tally.sx += t3;
            tally.sy += t4;
        }
    }
    tally
}

/// The total of `tallies` taken in the given order (callers pass them in batch order, so
/// the floating-point sums do not depend on which worker computed which batch).
pub fn combine<'a>(tallies: impl IntoIterator<Item = &'a Tally>) -> Tally {
    tallies.into_iter().fold(Tally::default(), |mut acc, t| {
        acc.sx += t.sx;
        acc.sy += t.sy;
        for (a, b) in acc.q.iter_mut().zip(&t.q) {
            *a += b;
        }
        acc
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_batch_multiplier_is_a_to_the_2_nk() {
        assert_eq!(
            batch_multiplier(),
            super::super::random::power(A, 2 * NK as u64)
        );
    }

    #[test]
    fn batches_start_where_the_previous_one_ended() {
        // Batch 1 continues the stream of batch 0: its first uniform is the one after the
        // last of batch 0.
        let an = batch_multiplier();
        let mut seed = S;
        let mut all = vec![0.0; 4 * NK];
        vranlc(&mut seed, A, &mut all);
        let mut x = Vec::new();
        let second = batch(1, an, &mut x);
        let mut expected = Tally::default();
        for pair in all[2 * NK..].chunks_exact(2) {
            let (x1, x2) = (2.0 * pair[0] - 1.0, 2.0 * pair[1] - 1.0);
            let t1 = x1 * x1 + x2 * x2;
            if t1 <= 1.0 {
                let t2 = (-2.0 * t1.ln() / t1).sqrt();
                expected.q[(x1 * t2).abs().max((x2 * t2).abs()) as usize] += 1;
                expected.sx += x1 * t2;
                expected.sy += x2 * t2;
            }
        }
        assert_eq!(second, expected);
    }
}
