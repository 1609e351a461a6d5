//! NAS Parallel Benchmark (NPB 3.x) kernels for the `npb-*` apps: the pieces that do not
//! involve actors.
//!
//! This module owns what the four kernel apps share: the problem [`Class`], the NPB random
//! number generator ([`random`]), the way workers are laid out over nodes and cores
//! ([`Placement`]), the `main` that runs a kernel's collector and workers on a cluster
//! ([`driver`]), the bookkeeping of numbered all-to-all exchanges ([`exchange`]), and per
//! kernel the class parameters, the sequential numerical building
//! blocks and the official verification values and tolerances ([`ep`], [`cg`], [`is`],
//! [`mg`]). The apps in `src/bin/npb_*.rs` only add the distribution over actors.

pub mod cg;
pub mod driver;
pub mod ep;
pub mod exchange;
pub mod is;
pub mod mg;
pub mod random;

use lazarus::{Actor, ActorId, ActorRef, NodeHandle};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;

/// An NPB problem class. Only the classes small enough for a workstation are offered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
pub enum Class {
    /// Sample size: seconds on one core.
    #[value(name = "S")]
    S,
    /// Workstation size.
    #[value(name = "W")]
    W,
    /// The smallest of the "real" sizes.
    #[value(name = "A")]
    A,
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Class::S => "S",
            Class::W => "W",
            Class::A => "A",
        })
    }
}

/// Part `k` of `0..n` split into `parts` near-equal contiguous blocks (earlier parts are
/// never larger than later ones; parts may be empty when `parts > n`).
pub fn split(n: usize, parts: usize, k: usize) -> Range<usize> {
    k * n / parts..(k + 1) * n / parts
}

/// The part of [`split`]`(n, parts, _)` that holds `i` (`i < n`).
pub fn part_of(n: usize, parts: usize, i: usize) -> usize {
    // `split` boundaries are floor(k * n / parts); the part holding i is the largest k
    // whose start is <= i. The estimate below is off by at most one either way.
    let mut k = ((i * parts) / n.max(1)).min(parts - 1);
    while k > 0 && split(n, parts, k).start > i {
        k -= 1;
    }
    while k + 1 < parts && split(n, parts, k + 1).start <= i {
        k += 1;
    }
    k
}

/// Where every worker of an app lives, computed identically on every node so that any
/// node can name any worker's actor without a lookup service.
///
/// Workers are numbered `0..workers`; node `r` owns the contiguous range
/// [`Placement::on_node`]`(r)`. Rank 0 spawns the app's collector first (id `0:0`), then
/// its workers; every other node spawns only its workers, in increasing order. A worker's
/// id therefore follows from its position in its node's range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// Workers in the whole cluster.
    pub workers: usize,
    /// Nodes in the cluster.
    pub nodes: usize,
}

impl Placement {
    /// The workers node `rank` owns (empty when there are more nodes than workers).
    pub fn on_node(&self, rank: usize) -> Range<usize> {
        split(self.workers, self.nodes, rank)
    }

    /// The node that owns worker `w`.
    pub fn node_of(&self, w: usize) -> usize {
        // Nodes may own no worker, so search rather than invert the split.
        (0..self.nodes)
            .find(|&r| self.on_node(r).contains(&w))
            .expect("every worker has a node")
    }

    /// The collector's id: rank 0 spawns it before anything else.
    pub fn collector() -> ActorId {
        ActorId::new(0, 0).expect("0:0 is a valid id")
    }

    /// Worker `w`'s id.
    pub fn worker(&self, w: usize) -> ActorId {
        let rank = self.node_of(w);
        let seq = w - self.on_node(rank).start + usize::from(rank == 0);
        ActorId::new(rank as u16, seq as u64).expect("ranks and sequence numbers fit")
    }

    /// Every worker, as seen from `node`: for a worker's `Start` handler (all workers exist
    /// by then). Panics if one is missing, which the apps' failure hook turns into the end
    /// of the node.
    pub fn peers<W: Actor>(&self, node: &NodeHandle) -> Vec<ActorRef<W>> {
        (0..self.workers)
            .map(|w| {
                node.actor_ref(self.worker(w))
                    .unwrap_or_else(|e| panic!("worker {w}: {e}"))
            })
            .collect()
    }

    /// The collector, as seen from `node`; panics like [`Placement::peers`].
    pub fn collector_on<C: Actor>(node: &NodeHandle) -> ActorRef<C> {
        node.actor_ref(Placement::collector())
            .unwrap_or_else(|e| panic!("the collector: {e}"))
    }

    /// The core of a node with `cores` cores that the `k`-th of its `local` workers runs
    /// on: contiguous workers share a core, so neighbours mostly talk locally.
    pub fn core(k: usize, local: usize, cores: usize) -> usize {
        k * cores / local.max(1)
    }
}

/// Formats a float so that it parses back to the same bits (shortest round-trip form, in
/// scientific notation): the RESULT lines report verification quantities this way.
pub fn exact(v: f64) -> String {
    format!("{v:e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_everything_once_and_part_of_inverts_it() {
        for n in [0, 1, 5, 32, 100] {
            for parts in 1..9 {
                let mut next = 0;
                for k in 0..parts {
                    let r = split(n, parts, k);
                    assert_eq!(r.start, next);
                    for i in r.clone() {
                        assert_eq!(part_of(n, parts, i), k, "n={n} parts={parts} i={i}");
                    }
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn placement_gives_distinct_ids_and_keeps_0_0_for_the_collector() {
        for nodes in 1..6 {
            for workers in 1..10 {
                let p = Placement { workers, nodes };
                let mut ids: Vec<ActorId> = (0..workers).map(|w| p.worker(w)).collect();
                assert!(ids.iter().all(|&id| id != Placement::collector()));
                ids.sort();
                ids.dedup();
                assert_eq!(ids.len(), workers);
            }
        }
    }

    #[test]
    fn exact_round_trips() {
        for v in [-3.247834652034742e+3, 0.1, 1.0 / 3.0, 5.307707005734e-05] {
            assert_eq!(exact(v).parse::<f64>().unwrap().to_bits(), v.to_bits());
        }
    }
}
