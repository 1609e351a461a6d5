//! The `main` every NPB kernel app shares.
//!
//! An app parses and checks its command line, then hands its [`Kernel`] to [`run`], which
//! forms the cluster, spawns rank 0's collector and this node's workers (in the order that
//! gives them the ids [`Placement`] computes), lines every node up on a barrier, starts
//! the workers, waits on rank 0 for the collector's outcome, and ends the run as every app
//! does ([`crate::ending`]): rank 0 reports and verifies the outcome, the others wait for it
//! and leave. [`check_count`] and [`one_per_core`] check and default the apps' counts.
//!
//! With recovery on, a restarted node re-runs all of this: the same spawns in the same
//! order, the same `Start` tells (those its checkpoint covers are skipped) and barriers.

use super::Placement;
use crate::ending::{self, Verdict};
use crate::expect_id;
use lazarus::{Actor, ActorRef, Cluster, ClusterSpec, CoreId, Message, Node};
use std::error::Error;

/// The parts of a kernel app that the driver puts together.
pub trait Kernel {
    /// Lives on rank 0 (id `0:0`): gathers the workers' results into the outcome.
    type Collector: Actor;
    /// Owns a part of the problem; every node spawns its share of the workers.
    type Worker: Actor;
    /// Starts a worker: each node's main sends it once to each of its workers.
    type Start: Message<Self::Worker>;
    /// Asks the collector for the outcome, which it answers once every result is in.
    type Wait: Message<Self::Collector>;

    /// The `Start` message.
    const START: Self::Start;
    /// The `Wait` message.
    const WAIT: Self::Wait;
    /// What a worker is called in errors.
    const WORKER: &'static str = "worker";

    /// Workers in a cluster of `nodes` nodes with `cores` cores each. Every node must
    /// come to the same number.
    fn workers(&self, nodes: usize, cores: usize) -> usize;

    /// Rank 0's collector.
    fn collector(&self, placement: &Placement) -> Self::Collector;

    /// Worker `w`, one of this node's (called for each in increasing order).
    fn worker(&mut self, w: usize, placement: &Placement) -> Self::Worker;
}

/// Checks an optional count from an app's command line: when given, `flag`'s `value`
/// must be between 1 and `most`.
pub fn check_count(flag: &str, value: Option<usize>, most: usize) -> Result<(), String> {
    if value.is_some_and(|v| v == 0 || v > most) {
        return Err(format!("{flag} must be between 1 and {most}"));
    }
    Ok(())
}

/// The usual worker count: `chosen` (an app's `--workers`), or else one per core of every
/// node, at most `most`. Every node must come to the same count, and the default assumes
/// that every node has this node's core count (as under `lazarus run`): pass `--workers`
/// when nodes differ.
pub fn one_per_core(chosen: Option<usize>, nodes: usize, cores: usize, most: usize) -> usize {
    chosen.unwrap_or(cores * nodes).min(most)
}

/// The collector's answer to `Wait`.
pub type Outcome<K> = <<K as Kernel>::Wait as Message<<K as Kernel>::Collector>>::Reply;

/// What rank 0 gets back from [`run`].
#[derive(Debug)]
pub struct Done<O> {
    /// The collector's outcome.
    pub outcome: O,
    /// Seconds from starting the workers to the outcome: the part NPB times.
    pub elapsed: f64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Workers in the whole cluster.
    pub workers: usize,
}

/// Runs `kernel` on this node of the cluster described by the environment, with `cores`
/// cores (default: all this process may use). On rank 0, `report` gets the outcome once
/// the other nodes are released and before the cluster shuts down (a node killed while it
/// waits to leave would otherwise take the answer with it): it may print what comes before
/// the RESULT line, and its verdict ends the run ([`ending::report_and_leave`]).
pub fn run<K: Kernel>(
    mut kernel: K,
    cores: Option<usize>,
    report: impl FnOnce(Done<Outcome<K>>) -> Verdict,
) -> Result<(), Box<dyn Error>> {
    let mut spec = ClusterSpec::from_env()?;
    if let Some(c) = cores {
        spec.cores = Some(c);
    }
    // A failed actor means the run can never finish: end the process (the launcher then
    // stops the other nodes) instead of leaving everyone waiting for what it owed them.
    let builder = Node::builder().on_failure(|event| {
        eprintln!("error: {event}");
        std::process::exit(1);
    });
    let cluster = Cluster::start_with(spec, builder)?;
    let (rank, nodes) = (cluster.rank() as usize, cluster.size());
    let cores = cluster.num_cores();
    let placement = Placement {
        workers: kernel.workers(nodes, cores),
        nodes,
    };

    let collector = if rank == 0 {
        let c = cluster.spawn_on(CoreId(0), kernel.collector(&placement))?;
        Some(expect_id(c, Placement::collector(), "the collector")?)
    } else {
        None
    };
    let mine = placement.on_node(rank);
    let mut local: Vec<ActorRef<K::Worker>> = Vec::with_capacity(mine.len());
    for (k, w) in mine.clone().enumerate() {
        let worker = cluster.spawn_on(
            CoreId(Placement::core(k, mine.len(), cores)),
            kernel.worker(w, &placement),
        )?;
        local.push(expect_id(
            worker,
            placement.worker(w),
            format!("{} {w}", K::WORKER),
        )?);
    }
    // What the kernel kept to build the workers is not needed any more.
    drop(kernel);
    // Nobody sends to an actor that does not exist yet.
    cluster.barrier()?;
    let started = cluster.begin_timed_part();
    for w in &local {
        w.tell(K::START).map_err(|e| e.to_string())?;
    }
    let Some(collector) = collector else {
        // Rank 0 has the outcome; wait for it to release everyone.
        return ending::leave_after_rank0(cluster);
    };
    let outcome = cluster.block_on(collector.ask(K::WAIT).no_timeout())?;
    let elapsed = started.elapsed().as_secs_f64();
    ending::report_and_leave(cluster, || {
        report(Done {
            outcome,
            elapsed,
            nodes,
            workers: placement.workers,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_count_accepts_1_to_most_or_nothing() {
        assert_eq!(check_count("--workers", None, 4), Ok(()));
        assert_eq!(check_count("--workers", Some(1), 4), Ok(()));
        assert_eq!(check_count("--workers", Some(4), 4), Ok(()));
        for bad in [0, 5] {
            assert_eq!(
                check_count("--workers", Some(bad), 4),
                Err("--workers must be between 1 and 4".to_string())
            );
        }
    }
}
