//! The dependency-interval vector (`depend_interval` of Algorithm 1): per correlated set,
//! the index of that set's state interval that a state or a message depends on, kept and
//! encoded sparsely.
//!
//! A set's own entry counts the inter-set messages it has delivered: delivering one starts
//! a new state interval. A message piggybacks its sender's vector; the receiver merges it
//! into its own. During replay a logged message is delivered only once the recovering set's
//! own entry has reached the message's entry for that set.
//!
//! The vector has one entry per *set*, never per actor, so its size is bounded by the
//! number of nodes whatever the number of actors. Only non-zero entries are stored and
//! encoded: `(set, value)` pairs in increasing set order, each number a postcard varint.

use super::ids::SetId;
use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use smallvec::SmallVec;

/// Entries kept inline: a vector over up to this many sets needs no heap allocation, and
/// every message sent, logged and delivered copies or merges one.
const INLINE: usize = 4;

/// The non-zero entries, in increasing set order.
type Entries = SmallVec<[(SetId, u64); INLINE]>;

/// A sparse dependency-interval vector: absent entries are 0.
///
/// Invariant: entries are sorted by strictly increasing set id and no value is 0. Decoding
/// refuses anything else (see [`DepVectorError`]), so a vector from the network is always
/// canonical.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct DepVector {
    entries: Entries,
}

/// Encoded as its entries, a sequence of `(set, value)` pairs, like the `Vec` it decodes
/// from; written straight from the entries (a derived `into` would copy the vector for
/// every message sent).
impl Serialize for DepVector {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.entries.as_slice().serialize(serializer)
    }
}

/// Decoded from a sequence of `(set, value)` pairs, refused unless canonical.
impl<'de> Deserialize<'de> for DepVector {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs;
        impl<'de> Visitor<'de> for Pairs {
            type Value = DepVector;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a sequence of (set, interval) pairs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<DepVector, A::Error> {
                let mut entries = Entries::new();
                while let Some(pair) = seq.next_element::<(SetId, u64)>()? {
                    entries.push(pair);
                }
                DepVector::from_entries(entries).map_err(A::Error::custom)
            }
        }
        deserializer.deserialize_seq(Pairs)
    }
}

/// A vector that is not in canonical sparse form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DepVectorError {
    /// Entries must be listed in strictly increasing set order.
    #[error("dependency vector entries are not in strictly increasing set order")]
    Unordered,
    /// Zero entries are implicit and must not be listed.
    #[error("dependency vector lists a zero entry for {0}")]
    ZeroEntry(SetId),
}

impl TryFrom<Vec<(SetId, u64)>> for DepVector {
    type Error = DepVectorError;

    fn try_from(entries: Vec<(SetId, u64)>) -> Result<Self, DepVectorError> {
        DepVector::from_entries(entries.into())
    }
}

impl DepVector {
    /// The vector of `entries`, if they are canonical.
    fn from_entries(entries: Entries) -> Result<Self, DepVectorError> {
        for (i, &(set, value)) in entries.iter().enumerate() {
            if value == 0 {
                return Err(DepVectorError::ZeroEntry(set));
            }
            if i > 0 && entries[i - 1].0 >= set {
                return Err(DepVectorError::Unordered);
            }
        }
        Ok(DepVector { entries })
    }
}

impl From<DepVector> for Vec<(SetId, u64)> {
    fn from(v: DepVector) -> Self {
        v.entries.into_vec()
    }
}

impl DepVector {
    /// The all-zero vector.
    pub fn new() -> Self {
        DepVector::default()
    }

    /// The entry for `set` (0 when absent).
    pub fn get(&self, set: SetId) -> u64 {
        match self.entries.binary_search_by_key(&set, |e| e.0) {
            Ok(i) => self.entries[i].1,
            Err(_) => 0,
        }
    }

    /// Sets the entry for `set` (0 removes it).
    pub fn set(&mut self, set: SetId, value: u64) {
        match self.entries.binary_search_by_key(&set, |e| e.0) {
            Ok(i) if value == 0 => {
                self.entries.remove(i);
            }
            Ok(i) => self.entries[i].1 = value,
            Err(_) if value == 0 => {}
            Err(i) => self.entries.insert(i, (set, value)),
        }
    }

    /// Adds one to the entry for `set` and returns the new value (saturating: a set would
    /// need 2^64 deliveries to get there).
    pub fn increment(&mut self, set: SetId) -> u64 {
        let next = self.get(set).saturating_add(1);
        self.set(set, next);
        next
    }

    /// Raises every entry to at least `other`'s, except the entry for `except` (a set
    /// never learns its own interval from others: Algorithm 1, lines 22-24).
    pub fn merge_from(&mut self, other: &DepVector, except: SetId) {
        if other.entries.is_empty() {
            return;
        }
        let mut merged = Entries::with_capacity(self.entries.len().max(other.entries.len()));
        let (mut a, mut b) = (
            self.entries.iter().peekable(),
            other.entries.iter().peekable(),
        );
        loop {
            match (a.peek(), b.peek()) {
                (Some(&&(sa, va)), Some(&&(sb, vb))) => {
                    if sa < sb {
                        merged.push((sa, va));
                        a.next();
                    } else if sb < sa {
                        if sb != except {
                            merged.push((sb, vb));
                        }
                        b.next();
                    } else {
                        merged.push((sa, if sa == except { va } else { va.max(vb) }));
                        a.next();
                        b.next();
                    }
                }
                (Some(&&e), None) => {
                    merged.push(e);
                    a.next();
                }
                (None, Some(&&(sb, vb))) => {
                    if sb != except {
                        merged.push((sb, vb));
                    }
                    b.next();
                }
                (None, None) => break,
            }
        }
        self.entries = merged;
    }

    /// Whether every entry of `self` is at most the matching entry of `other`.
    pub fn le(&self, other: &DepVector) -> bool {
        self.entries.iter().all(|&(s, v)| v <= other.get(s))
    }

    /// The non-zero entries in increasing set order.
    pub fn entries(&self) -> impl Iterator<Item = (SetId, u64)> + '_ {
        self.entries.iter().copied()
    }

    /// Number of non-zero entries.
    pub fn non_zero(&self) -> usize {
        self.entries.len()
    }

    /// The largest set id with a non-zero entry.
    pub fn max_set(&self) -> Option<SetId> {
        self.entries.last().map(|e| e.0)
    }

    /// Bytes of the postcard encoding of this vector (what a message piggybacks).
    pub fn encoded_len(&self) -> usize {
        varint_len(self.entries.len() as u64)
            + self
                .entries
                .iter()
                .map(|&(s, v)| varint_len(u64::from(s.0)) + varint_len(v))
                .sum::<usize>()
    }
}

/// Bytes of the postcard (LEB128) varint encoding of `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(pairs: &[(u16, u64)]) -> DepVector {
        let mut d = DepVector::new();
        for &(s, x) in pairs {
            d.set(SetId(s), x);
        }
        d
    }

    #[test]
    fn absent_entries_are_zero_and_zero_is_not_stored() {
        let mut d = v(&[(3, 7), (1, 2)]);
        assert_eq!(d.get(SetId(0)), 0);
        assert_eq!(d.get(SetId(1)), 2);
        assert_eq!(d.get(SetId(3)), 7);
        d.set(SetId(1), 0);
        assert_eq!(d.non_zero(), 1);
        assert_eq!(d.entries().collect::<Vec<_>>(), vec![(SetId(3), 7)]);
    }

    #[test]
    fn increment_counts_own_intervals() {
        let mut d = DepVector::new();
        assert_eq!(d.increment(SetId(2)), 1);
        assert_eq!(d.increment(SetId(2)), 2);
        assert_eq!(d.get(SetId(2)), 2);
    }

    #[test]
    fn merge_takes_the_maximum_except_the_own_entry() {
        // Example of the paper: P1 at (0,2,1,0) merges m5's (0,2,2,1).
        let mut mine = v(&[(1, 2), (2, 1)]);
        let m5 = v(&[(1, 2), (2, 2), (3, 1)]);
        mine.merge_from(&m5, SetId(1));
        assert_eq!(mine, v(&[(1, 2), (2, 2), (3, 1)]));

        // The own entry is never raised by someone else's view of it.
        let mut mine = v(&[(0, 1)]);
        mine.merge_from(&v(&[(0, 9), (4, 3)]), SetId(0));
        assert_eq!(mine, v(&[(0, 1), (4, 3)]));
        // ... and not introduced either.
        let mut mine = DepVector::new();
        mine.merge_from(&v(&[(0, 9)]), SetId(0));
        assert_eq!(mine, DepVector::new());
    }

    #[test]
    fn merge_is_commutative_and_idempotent_on_other_entries() {
        let a = v(&[(0, 5), (2, 1), (7, 4)]);
        let b = v(&[(1, 3), (2, 6), (9, 1)]);
        let mut ab = a.clone();
        ab.merge_from(&b, SetId(100));
        let mut ba = b.clone();
        ba.merge_from(&a, SetId(100));
        assert_eq!(ab, ba);
        let again = {
            let mut x = ab.clone();
            x.merge_from(&b, SetId(100));
            x
        };
        assert_eq!(again, ab);
        assert!(a.le(&ab) && b.le(&ab));
        assert!(!ab.le(&a));
    }

    #[test]
    fn encoded_len_matches_postcard_and_grows_with_non_zero_entries_only() {
        for d in [
            DepVector::new(),
            v(&[(0, 1)]),
            v(&[(3, 127), (4, 128), (300, 1 << 40)]),
            v(&[(65535, u64::MAX)]),
        ] {
            let bytes = postcard::to_allocvec(&d).unwrap();
            assert_eq!(bytes.len(), d.encoded_len(), "{d:?}");
            assert_eq!(
                bytes,
                postcard::to_allocvec(&Vec::from(d.clone())).unwrap(),
                "encoded exactly as the list of entries it decodes from"
            );
            let back: DepVector = postcard::from_bytes(&bytes).unwrap();
            assert_eq!(back, d);
        }
        // A vector over 1000 sets that depends on 3 of them costs ~10 bytes, not 1000 words.
        let sparse = v(&[(10, 40), (500, 7), (999, 2)]);
        assert!(sparse.encoded_len() <= 10, "{}", sparse.encoded_len());
    }

    #[test]
    fn decoding_rejects_non_canonical_vectors() {
        let unordered = postcard::to_allocvec(&vec![(SetId(2), 1u64), (SetId(1), 1)]).unwrap();
        assert!(postcard::from_bytes::<DepVector>(&unordered).is_err());
        let repeated = postcard::to_allocvec(&vec![(SetId(1), 1u64), (SetId(1), 2)]).unwrap();
        assert!(postcard::from_bytes::<DepVector>(&repeated).is_err());
        let zero = postcard::to_allocvec(&vec![(SetId(1), 0u64)]).unwrap();
        assert!(postcard::from_bytes::<DepVector>(&zero).is_err());
        assert_eq!(
            DepVector::try_from(vec![(SetId(1), 0)]),
            Err(DepVectorError::ZeroEntry(SetId(1)))
        );
    }

    #[test]
    fn varint_lengths() {
        assert_eq!(varint_len(0), 1);
        assert_eq!(varint_len(127), 1);
        assert_eq!(varint_len(128), 2);
        assert_eq!(varint_len(u64::MAX), 10);
    }
}
