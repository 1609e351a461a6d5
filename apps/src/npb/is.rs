//! NPB IS: integer sort (ranking) of uniformly-summed random keys (NPB 3.x `is.c`).
//!
//! This module owns the class parameters, the key generator ([`generate`], `is.c`'s
//! `create_seq` for any slice of the key array), the per-iteration key modifications, the
//! bucket split used to spread the ranking over workers ([`bucket_ranges`]) and the
//! partial verification values (`test_index_array`, `test_rank_array` and the per-class
//! rule of `is.c`'s `rank`).

use super::random::{randlc, skip};
use super::Class;
use std::ops::Range;

/// Ranking iterations (`MAX_ITERATIONS`).
pub const MAX_ITERATIONS: usize = 10;
/// Keys checked by the partial verification each iteration (`TEST_ARRAY_SIZE`).
pub const TEST_ARRAY_SIZE: usize = 5;
/// Seed of the key sequence.
pub const SEED: f64 = 314159265.0;
/// Multiplier of the key sequence.
pub const MULTIPLIER: f64 = 1220703125.0;
/// Checks a successful run passes: 5 partial checks per iteration and the full one.
pub const PASSES: usize = TEST_ARRAY_SIZE * MAX_ITERATIONS + 1;

/// The parameters of one class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// log2 of the number of keys (`TOTAL_KEYS_LOG_2`).
    pub total_keys_log2: u32,
    /// log2 of the key range (`MAX_KEY_LOG_2`).
    pub max_key_log2: u32,
    /// log2 of the number of buckets (`NUM_BUCKETS_LOG_2`).
    pub buckets_log2: u32,
    /// Positions in the key array whose keys are ranked for the partial verification.
    pub test_index: [usize; TEST_ARRAY_SIZE],
    /// Their reference ranks, before the per-iteration adjustment of [`expected_rank`].
    pub test_rank: [u64; TEST_ARRAY_SIZE],
}

/// The parameters of `class`.
pub fn params(class: Class) -> Params {
    match class {
        Class::S => Params {
            total_keys_log2: 16,
            max_key_log2: 11,
            buckets_log2: 9,
            test_index: [48427, 17148, 23627, 62548, 4431],
            test_rank: [0, 18, 346, 64917, 65463],
        },
        Class::W => Params {
            total_keys_log2: 20,
            max_key_log2: 16,
            buckets_log2: 10,
            test_index: [357773, 934767, 875723, 898999, 404505],
            test_rank: [1249, 11698, 1039987, 1043896, 1048018],
        },
        Class::A => Params {
            total_keys_log2: 23,
            max_key_log2: 19,
            buckets_log2: 10,
            test_index: [2112377, 662041, 5336171, 3642833, 4250760],
            test_rank: [104, 17523, 123928, 8288932, 8388264],
        },
    }
}

impl Params {
    /// Number of keys.
    pub fn total_keys(&self) -> usize {
        1 << self.total_keys_log2
    }

    /// Keys lie in `0..max_key()`.
    pub fn max_key(&self) -> u32 {
        1 << self.max_key_log2
    }

    /// Number of buckets.
    pub fn buckets(&self) -> usize {
        1 << self.buckets_log2
    }

    /// A key's bucket is `key >> bucket_shift()`.
    pub fn bucket_shift(&self) -> u32 {
        self.max_key_log2 - self.buckets_log2
    }
}

/// Keys `range` of the key array, as `is.c`'s `create_seq` generates them: key `i` is
/// `MAX_KEY/4` times the sum of the uniforms `4i .. 4i+3` of the sequence, truncated.
pub fn generate(p: &Params, range: Range<usize>) -> Vec<u32> {
    let mut s = skip(SEED, MULTIPLIER, 4 * range.start as u64);
    let k = f64::from(p.max_key() / 4);
    range
        .map(|_| {
            let mut x = randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            x += randlc(&mut s, MULTIPLIER);
            (k * x) as u32
        })
        .collect()
}

/// The two keys `is.c`'s `rank(iteration)` overwrites before ranking, as
/// `(position, new key)`: the changes accumulate over the iterations.
pub fn modifications(p: &Params, iteration: usize) -> [(usize, u32); 2] {
    [
        (iteration, iteration as u32),
        (iteration + MAX_ITERATIONS, p.max_key() - iteration as u32),
    ]
}

/// The rank test key `i` must have in `iteration` (1-based), by `is.c`'s per-class rule.
pub fn expected_rank(class: Class, p: &Params, i: usize, iteration: usize) -> u64 {
    let (base, it) = (p.test_rank[i] as i64, iteration as i64);
    let rank = match class {
        Class::S if i <= 2 => base + it,
        Class::S => base - it,
        Class::W if i < 2 => base + (it - 2),
        Class::W => base - it,
        Class::A if i <= 2 => base + (it - 1),
        Class::A => base - (it - 1),
    };
    rank as u64
}

/// Whether `is.c` checks the rank of a test key with value `k` at all (`0 < k <= NUM_KEYS
/// - 1`); unchecked keys count as not passed.
pub fn checked(p: &Params, k: u32) -> bool {
    k > 0 && (k as usize) < p.total_keys()
}

/// Splits the buckets into `workers` contiguous ranges holding about equally many keys,
/// given the total size of every bucket: a range closes once the keys so far reach its
/// share of the total (as NPB's MPI IS does); the last range takes the rest. Ranges may be
/// empty when a single bucket holds several shares.
pub fn bucket_ranges(sizes: &[u64], workers: usize) -> Vec<Range<usize>> {
    let total: u64 = sizes.iter().sum();
    let mut ranges = Vec::with_capacity(workers);
    let (mut start, mut acc) = (0, 0u64);
    for (b, &size) in sizes.iter().enumerate() {
        acc += size;
        while ranges.len() + 1 < workers
            && u128::from(acc) * workers as u128 >= (ranges.len() as u128 + 1) * u128::from(total)
        {
            ranges.push(start..b + 1);
            start = b + 1;
        }
    }
    while ranges.len() < workers {
        ranges.push(start..sizes.len());
        start = sizes.len();
    }
    ranges
}

/// NPB's "Mop/s total" for IS (millions of keys ranked per second).
pub fn mops(p: &Params, seconds: f64) -> f64 {
    (MAX_ITERATIONS * p.total_keys()) as f64 / seconds / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `is.c`'s sequential ranking and checks: the number of passed verifications.
    fn sequential_passes(class: Class) -> usize {
        let p = params(class);
        let mut keys = generate(&p, 0..p.total_keys());
        let mut passed = 0;
        let mut counts = vec![0usize; p.max_key() as usize];
        for iteration in 1..=MAX_ITERATIONS {
            for (at, key) in modifications(&p, iteration) {
                keys[at] = key;
            }
            counts.fill(0);
            for &k in &keys {
                counts[k as usize] += 1;
            }
            for v in 1..counts.len() {
                counts[v] += counts[v - 1];
            }
            for i in 0..TEST_ARRAY_SIZE {
                let k = keys[p.test_index[i]];
                if checked(&p, k)
                    && counts[k as usize - 1] as u64 == expected_rank(class, &p, i, iteration)
                {
                    passed += 1;
                }
            }
        }
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        passed + usize::from(sorted.windows(2).all(|w| w[0] <= w[1]))
    }

    #[test]
    fn a_sequential_ranking_of_class_s_passes_every_check() {
        assert_eq!(sequential_passes(Class::S), PASSES);
    }

    #[test]
    fn slices_of_the_key_array_are_generated_consistently() {
        let p = params(Class::S);
        let all = generate(&p, 0..1000);
        assert_eq!(generate(&p, 337..1000), all[337..]);
        assert!(all.iter().all(|&k| k < p.max_key()));
    }

    #[test]
    fn bucket_ranges_tile_the_buckets_in_balanced_order() {
        let sizes = [5, 0, 3, 9, 1, 1, 1, 20, 0, 2];
        for workers in 1..14 {
            let ranges = bucket_ranges(&sizes, workers);
            assert_eq!(ranges.len(), workers);
            let mut next = 0;
            for r in &ranges {
                assert_eq!(r.start, next);
                next = r.end;
            }
            assert_eq!(next, sizes.len());
        }
        assert_eq!(bucket_ranges(&[1, 1, 1, 1], 2), vec![0..2, 2..4]);
    }
}
