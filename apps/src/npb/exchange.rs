//! Numbered all-to-all exchanges between workers, as CG's and IS's steps are: every worker
//! contributes once to each step, and a step can be handled once every contribution is
//! in. Contributions arrive tagged with their step and wait here until it comes (during a
//! recovery replay, contributions to many future steps may be waiting).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Contributions of a fixed set of workers to the steps not handled yet.
#[derive(Debug, Serialize, Deserialize)]
pub struct Exchanges<T> {
    workers: usize,
    /// By step, then by worker.
    pending: BTreeMap<u64, Vec<Option<T>>>,
}

impl<T> Exchanges<T> {
    /// No contributions yet, from `workers` workers.
    pub fn new(workers: usize) -> Self {
        Exchanges {
            workers,
            pending: BTreeMap::new(),
        }
    }

    /// Keeps worker `from`'s contribution to `step`. A second contribution of a worker to
    /// a step is a protocol bug: it panics, which the apps' failure hook turns into the end
    /// of the node rather than a silent hang.
    pub fn deposit(&mut self, step: u64, from: usize, contribution: T) {
        let workers = self.workers;
        let slot = &mut self
            .pending
            .entry(step)
            .or_insert_with(|| (0..workers).map(|_| None).collect())[from];
        assert!(slot.is_none(), "second share of step {step} from {from}");
        *slot = Some(contribution);
    }

    /// Every worker's contribution to `step`, in worker order, once all are in (they are
    /// forgotten then); `None` while some are missing.
    pub fn take(&mut self, step: u64) -> Option<Vec<T>> {
        let complete = self
            .pending
            .get(&step)
            .is_some_and(|s| s.iter().all(Option::is_some));
        if !complete {
            return None;
        }
        let shares = self.pending.remove(&step).expect("complete");
        Some(shares.into_iter().flatten().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_handed_out_once_complete_in_worker_order_whatever_the_arrival_order() {
        let mut x = Exchanges::new(3);
        x.deposit(1, 2, "early, for step 1");
        x.deposit(0, 2, "c");
        x.deposit(0, 0, "a");
        assert_eq!(x.take(0), None, "worker 1 is missing");
        x.deposit(0, 1, "b");
        assert_eq!(x.take(0), Some(vec!["a", "b", "c"]));
        assert_eq!(x.take(0), None, "handed out once");
        assert_eq!(x.take(1), None, "step 1 keeps its early share");
    }

    #[test]
    #[should_panic(expected = "second share of step 4 from 1")]
    fn a_second_share_from_the_same_worker_is_a_bug() {
        let mut x = Exchanges::new(2);
        x.deposit(4, 1, ());
        x.deposit(4, 1, ());
    }
}
