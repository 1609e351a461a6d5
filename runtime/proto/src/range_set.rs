//! A set of `u64`s stored as disjoint half-open ranges: what grows by mostly consecutive
//! numbers over a whole run (the positions of `main`'s answered asks, the ids of exited
//! actors `main` spawned, the operations a window's part has applied per channel) takes a
//! few ranges, not one entry per number.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Disjoint, non-adjacent half-open ranges `start..end`, by start. `u64::MAX` is never a
/// member (no half-open range ends after it).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<(u64, u64)>", into = "Vec<(u64, u64)>")]
pub struct RangeSet(BTreeMap<u64, u64>);

impl RangeSet {
    /// Adds `p`; false if it was there already (or is `u64::MAX`).
    pub fn insert(&mut self, p: u64) -> bool {
        if p == u64::MAX || self.contains(p) {
            return false;
        }
        self.insert_range(p, p + 1);
        true
    }

    /// Adds every number of `start..end`, merging with the ranges it touches.
    pub fn insert_range(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut start, mut end) = (start, end);
        if let Some((&s, &e)) = self.0.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.0.remove(&s);
            }
        }
        while let Some((&s, &e)) = self.0.range(start..=end).next() {
            end = end.max(e);
            self.0.remove(&s);
        }
        self.0.insert(start, end);
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Adds every member of `other`.
    pub fn union_with(&mut self, other: &RangeSet) {
        for (&s, &e) in &other.0 {
            self.insert_range(s, e);
        }
    }

    /// Whether `p` is in the set.
    pub fn contains(&self, p: u64) -> bool {
        self.0.range(..=p).next_back().is_some_and(|(_, e)| p < *e)
    }

    /// The ranges, by start.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        self.0.iter().map(|(s, e)| (*s, *e)).collect()
    }

    /// How many ranges hold the set.
    pub fn range_count(&self) -> usize {
        self.0.len()
    }

    /// Every member, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().flat_map(|(s, e)| *s..*e)
    }
}

impl From<Vec<(u64, u64)>> for RangeSet {
    /// Any list of ranges, even overlapping, unsorted or empty ones (as read from a
    /// checkpoint file): the set is their union.
    fn from(ranges: Vec<(u64, u64)>) -> Self {
        let mut set = RangeSet::default();
        for (s, e) in ranges {
            set.insert_range(s, e);
        }
        set
    }
}

impl From<RangeSet> for Vec<(u64, u64)> {
    fn from(set: RangeSet) -> Self {
        set.0.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn consecutive_numbers_take_one_range_whatever_order_they_come_in() {
        let mut set = RangeSet::default();
        for p in [5, 3, 4, 7, 6, 2] {
            assert!(set.insert(p));
        }
        assert!(!set.insert(4), "a second insert of a member is refused");
        assert_eq!(set.ranges(), vec![(2, 8)]);
        assert!(set.contains(2) && set.contains(7) && !set.contains(8) && !set.contains(1));
    }

    #[test]
    fn a_range_bridging_several_merges_them_all() {
        let mut set = RangeSet::from(vec![(10, 12), (1, 3), (5, 6), (20, 21)]);
        set.insert_range(2, 11);
        assert_eq!(set.ranges(), vec![(1, 12), (20, 21)]);
        assert!(!set.insert(u64::MAX) && !set.contains(u64::MAX));
    }

    #[test]
    fn overlapping_or_empty_ranges_read_from_a_file_decode_to_their_union() {
        let bytes = postcard::to_allocvec(&vec![(8u64, 9u64), (1, 4), (3, 6), (7, 7)]).unwrap();
        let set: RangeSet = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(set.ranges(), vec![(1, 6), (8, 9)]);
        let again: RangeSet = postcard::from_bytes(&postcard::to_allocvec(&set).unwrap()).unwrap();
        assert_eq!(again, set);
    }

    proptest! {
        #[test]
        fn holds_exactly_what_a_set_of_numbers_holds(
            ops in prop::collection::vec((0u64..64, 0u64..4), 0..80)
        ) {
            let mut set = RangeSet::default();
            let mut model = BTreeSet::new();
            for (start, len) in ops {
                if len == 0 {
                    prop_assert_eq!(set.insert(start), model.insert(start));
                } else {
                    set.insert_range(start, start + len);
                    model.extend(start..start + len);
                }
            }
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
            let ranges = set.ranges();
            for pair in ranges.windows(2) {
                prop_assert!(pair[0].1 < pair[1].0, "disjoint and not adjacent: {:?}", ranges);
            }
            for p in 0..70 {
                prop_assert_eq!(set.contains(p), model.contains(&p));
            }
        }
    }
}
