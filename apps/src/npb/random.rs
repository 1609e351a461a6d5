//! The NPB pseudorandom number generator: the linear congruential generator
//! `x_{k+1} = a * x_k (mod 2^46)` of `randlc`/`vranlc` (NPB `common/randdp.c`).
//!
//! NPB carries seeds and multipliers as doubles holding odd integers below 2^46 and
//! computes the product exactly by splitting it into 23-bit halves. The product modulo
//! 2^46 only depends on the low 64 bits of the integer product, so a wrapping 64-bit
//! multiply gives the very same sequence, bit for bit, much faster; the unit tests compare
//! both. Returned values are `x * 2^-46`, which is exact in a double.

/// `2^46 - 1`: the modulus mask.
const MASK: u64 = (1 << 46) - 1;
/// `2^-46`: scales a seed to a value in (0, 1) exactly.
const R46: f64 = 1.0 / (1u64 << 46) as f64;

/// The integer a double seed or multiplier holds. NPB only ever passes integers in
/// `[0, 2^46)`; anything else is a bug in the caller.
fn int(v: f64) -> u64 {
    debug_assert!(
        (0.0..(1u64 << 46) as f64).contains(&v) && v.fract() == 0.0,
        "{v} is not an integer in [0, 2^46)"
    );
    v as u64
}

/// One step: replaces `x` by `a * x mod 2^46` and returns the new `x * 2^-46`.
pub fn randlc(x: &mut f64, a: f64) -> f64 {
    let next = int(*x).wrapping_mul(int(a)) & MASK;
    *x = next as f64;
    next as f64 * R46
}

/// `y.len()` steps: fills `y` with the next values of the sequence and leaves `x` at the
/// last seed (NPB's `vranlc(n, &x, a, y)` with `n = y.len()`).
pub fn vranlc(x: &mut f64, a: f64, y: &mut [f64]) {
    let a = int(a);
    let mut s = int(*x);
    for v in y.iter_mut() {
        s = s.wrapping_mul(a) & MASK;
        *v = s as f64 * R46;
    }
    *x = s as f64;
}

/// `a^n mod 2^46` (NPB MG's `power`): the multiplier that advances a seed by `n` steps.
pub fn power(a: f64, n: u64) -> f64 {
    let (mut result, mut base, mut n) = (1u64, int(a), n);
    while n != 0 {
        if n & 1 == 1 {
            result = result.wrapping_mul(base) & MASK;
        }
        base = base.wrapping_mul(base) & MASK;
        n >>= 1;
    }
    result as f64
}

/// The seed `n` steps after `seed`: `seed * a^n mod 2^46`. This is how a worker starts its
/// share of a sequence without generating what comes before (NPB's `find_my_seed` and
/// EP's seed search compute the same number by the same binary powering).
pub fn skip(seed: f64, a: f64, n: u64) -> f64 {
    let mut s = seed;
    randlc(&mut s, power(a, n));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NPB's own double-precision `randlc`, transcribed from `randdp.c`.
    fn randlc_npb(x: &mut f64, a: f64) -> f64 {
        let r23 = 0.5f64.powi(23);
        let r46 = r23 * r23;
        let t23 = 2.0f64.powi(23);
        let t46 = t23 * t23;
        let t1 = r23 * a;
        let a1 = (t1 as i32) as f64;
        let a2 = a - t23 * a1;
        let t1 = r23 * *x;
        let x1 = (t1 as i32) as f64;
        let x2 = *x - t23 * x1;
        let t1 = a1 * x2 + a2 * x1;
        let t2 = ((r23 * t1) as i32) as f64;
        let z = t1 - t23 * t2;
        let t3 = t23 * z + a2 * x2;
        let t4 = ((r46 * t3) as i32) as f64;
        *x = t3 - t46 * t4;
        r46 * *x
    }

    #[test]
    fn integer_generator_matches_npbs_double_precision_one_bit_for_bit() {
        for (seed, a) in [
            (314159265.0, 1220703125.0),
            (271828183.0, 1220703125.0),
            (1.0, 1220703125.0),
            (70368744177663.0, 70368744177661.0),
        ] {
            let (mut x, mut y) = (seed, seed);
            for _ in 0..100_000 {
                assert_eq!(randlc(&mut x, a).to_bits(), randlc_npb(&mut y, a).to_bits());
                assert_eq!(x.to_bits(), y.to_bits());
            }
        }
        // Squaring the multiplier, as EP and find_my_seed do.
        let (mut x, mut y) = (1220703125.0, 1220703125.0);
        for _ in 0..60 {
            let (cx, cy) = (x, y);
            randlc(&mut x, cx);
            randlc_npb(&mut y, cy);
            assert_eq!(x.to_bits(), y.to_bits());
        }
    }

    #[test]
    fn vranlc_continues_the_randlc_sequence() {
        let (mut x, mut y) = (314159265.0, 314159265.0);
        let mut out = vec![0.0; 1000];
        vranlc(&mut x, 1220703125.0, &mut out);
        for v in &out {
            assert_eq!(randlc(&mut y, 1220703125.0), *v);
        }
        assert_eq!(x, y);
    }

    #[test]
    fn skip_equals_stepping() {
        let a = 1220703125.0;
        for n in [0, 1, 2, 7, 1000, 4096] {
            let mut x = 314159265.0;
            for _ in 0..n {
                randlc(&mut x, a);
            }
            assert_eq!(skip(314159265.0, a, n), x, "n = {n}");
        }
    }
}
