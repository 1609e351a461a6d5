//! Deterministic simulation of one-sided windows under crashes, over many random seeds:
//! puts, gets, accumulates and fetch-and-ops in fenced epochs on the real window machine
//! (`lazarus_proto::window::Member`) and gate words, with same-host origins writing into
//! their targets' memory themselves, checkpoints copied a piece at a time and nodes killed
//! at any step. Every run must end with the parts, program states and get answers of the
//! failure-free run of its seed; taking the gate out, or keeping no answers for a
//! restarted `main`, must fail seeds.
//!
//! Replay one seed with its trace:
//! `LAZARUS_SIM_SEED=1234 cargo test -p lazarus-tests --test window_simulator -- --nocapture`
//! More seeds: `LAZARUS_SIM_SEEDS=100000` (from `LAZARUS_SIM_SEED_BASE`).

mod support;

use lazarus_sim::windows::{run_window_seed, WindowMutation, WindowSimConfig, WindowSimStats};
use std::time::Instant;
use support::env_u64;

/// Runs `default_seeds` seeds of `config` (or the environment's), or replays one.
fn sweep(config: fn(u64) -> WindowSimConfig, default_seeds: u64) -> WindowSimStats {
    if let Some(seed) = env_u64("LAZARUS_SIM_SEED") {
        let cfg = config(seed);
        println!("seed {seed}: {cfg:?}");
        let (result, trace) = run_window_seed(cfg, true);
        for line in &trace {
            println!("{line}");
        }
        match result {
            Ok(stats) => {
                println!("seed {seed} ok: {stats:#?}");
                return stats;
            }
            Err(e) => panic!("seed {seed} failed: {e}"),
        }
    }
    let seeds = env_u64("LAZARUS_SIM_SEEDS").unwrap_or(default_seeds);
    let base = env_u64("LAZARUS_SIM_SEED_BASE").unwrap_or(0);
    let started = Instant::now();
    let mut total = WindowSimStats::default();
    let mut failures = Vec::new();
    for seed in base..base + seeds {
        match run_window_seed(config(seed), false).0 {
            Ok(stats) => total.absorb(&stats),
            Err(e) => failures.push((seed, e)),
        }
    }
    println!("{seeds} seeds in {:.1?}: {total:#?}", started.elapsed());
    support::assert_no_failed_seeds(seeds, &failures);
    total
}

#[test]
fn one_sided_operations_recover_to_the_failure_free_result() {
    let total = sweep(WindowSimConfig::random, 4000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        // The sweep reaches what it is for: direct operations, the gate refusing some for
        // a checkpoint and for an epoch, crashes, and answers from a target's log.
        assert!(total.direct > 0 && total.messages > 0, "{total:?}");
        assert!(total.refused_checkpointing > 0, "{total:?}");
        assert!(total.refused_epoch > 0, "{total:?}");
        assert!(total.crashes > 0 && total.checkpoints > 0, "{total:?}");
        assert!(total.held > 0 && total.answers_from_log > 0, "{total:?}");
        // Restarted `main`s ran again from their start over what their images had.
        assert!(total.replayed > 0, "{total:?}");
    }
}

#[test]
fn taking_a_rule_out_fails_seeds() {
    if env_u64("LAZARUS_SIM_SEED").is_some() {
        return;
    }
    for mutation in [
        WindowMutation::IgnoreCheckpointGate,
        WindowMutation::IgnoreEpochGate,
        WindowMutation::ReleaseMainAnswers,
    ] {
        let failed = (0..600)
            .filter(|&seed| {
                let mut cfg = WindowSimConfig::random(seed);
                cfg.mutation = Some(mutation);
                if mutation == WindowMutation::ReleaseMainAnswers {
                    cfg.main_reruns = true;
                }
                run_window_seed(cfg, false).0.is_err()
            })
            .count();
        println!("{mutation:?}: {failed} of 600 seeds fail");
        assert!(failed > 0, "{mutation:?} failed no seed");
    }
}
