//! Deterministic simulation of the recovery protocol core over thousands of random seeds,
//! plus hand-written scenarios.
//!
//! Replay one seed with its event trace:
//! `LAZARUS_SIM_SEED=1234 cargo test -p lazarus-tests --test recovery_simulator -- --nocapture`
//! Run more seeds: `LAZARUS_SIM_SEEDS=100000` (and `LAZARUS_SIM_SEED_BASE` to start
//! elsewhere than 0). `LAZARUS_SIM_RULE=strict` replays a seed with Algorithm 1's
//! dependency rule taken literally (see docs/recovery.md, "Concurrent recoveries").
//! What the simulator models and checks: `runtime/sim` (`lazarus-sim`) and docs/recovery.md.

use lazarus::recovery::DependencyRule;
use lazarus_sim::world::{run_counting, run_seed, Mutation, SimConfig, SimStats};
use std::time::Instant;
use support::env_u64;

mod support;

#[test]
fn random_seeds_recover_to_the_failure_free_result() {
    let total = sweep(SimConfig::random, 2000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        // The contract checker compared regenerations with the delivered copies, and
        // (the sweep fails otherwise) never cried wolf.
        assert!(total.proto.regenerations_checked > 0, "{total:?}");
        // Half the seeds run with a log quota: their sets asked for checkpoints.
        assert!(total.proto.checkpoint_requests > 0, "{total:?}");
        // Half dump their logs to a logger node, and resends came from there.
        assert!(total.resends_from_logger > 0, "{total:?}");
    }
}

/// Logger nodes, on in every seed: sets dump blocks of their logs at random moments
/// (acknowledged later, or never when a crash comes first), the logger lets go of a block
/// once no logged entry points into it and, after a restore, of those the restored log
/// does not point into. Every resend of a dumped message must find its block (the run
/// fails otherwise), and every run ends with the failure-free result.
#[test]
fn logs_dumped_to_a_logger_node_are_resent_from_it_exactly() {
    let stats = dump_sweep(0);
    let (dumped, served) = (stats.blocks_dumped, stats.resends_from_logger);
    println!(
        "{dumped} blocks dumped, {served} resends served from the logger, {} resends of \
         released blocks skipped (not needed)",
        stats.resends_missing
    );
    assert!(dumped > 1000, "sets dumped often: {dumped} blocks");
    assert!(served > 100, "resends came from the logger: {served}");
}

/// A logger node restarts (empty) at a random step of each run, while every block is
/// also kept by a second logger: each set learns of the restart at a later step, a set
/// restored afterwards finds the blocks it retains missing there, resends fall back to
/// the copies, and every run ends with the failure-free result. No block was lost with
/// the restart, so no receiver is asked to checkpoint for it.
#[test]
fn a_restarted_logger_loses_nothing_that_has_a_copy() {
    let stats = dump_sweep(1);
    let (restarts, from_copy) = (stats.logger_restarts, stats.resends_from_copy);
    println!("{restarts} logger restarts, {from_copy} resends from copies");
    assert!(restarts > 300, "loggers restarted: {restarts}");
    assert!(from_copy > 50, "resends came from copies: {from_copy}");
    assert_eq!(
        stats.lost_block_requests, 0,
        "a block with a copy is not lost"
    );
}

/// Both loggers restart, one after the other: the sets copy what the first restart lost
/// back to it from the second logger (`refillable_blocks`, `block_restored`) before the
/// second one restarts, so the second restart loses nothing either, whatever the
/// crashes of sets around them; every run ends with the failure-free result.
#[test]
fn after_refilling_a_restarted_logger_a_second_restart_loses_nothing() {
    let stats = dump_sweep(2);
    let (restarts, refilled) = (stats.logger_restarts, stats.blocks_refilled);
    println!(
        "{restarts} logger restarts, {refilled} blocks refilled, {} resends from copies",
        stats.resends_from_copy
    );
    assert!(
        restarts > 600,
        "both loggers restarted in most runs: {restarts}"
    );
    assert!(refilled > 200, "blocks were copied back: {refilled}");
}

/// A restarted logger with no room for some of its lost blocks: the sets copy those to
/// a third logger instead (`block_relocated`), and the references name it; the second
/// restart still loses nothing, and every run ends with the failure-free result.
#[test]
fn blocks_a_restarted_logger_has_no_room_for_are_relocated_and_a_second_restart_loses_nothing() {
    let stats = dump_sweep_with(2, true);
    let (relocated, refilled) = (stats.blocks_relocated, stats.blocks_refilled);
    println!(
        "{relocated} of {refilled} refilled blocks relocated, {} resends from copies",
        stats.resends_from_copy
    );
    assert!(
        relocated > 100,
        "blocks went to the third logger: {relocated}"
    );
    assert!(
        relocated < refilled,
        "others went back to the restarted logger"
    );
}

/// Seeds 0..500 with every set dumping to logger nodes and `logger_restarts` of them
/// (0, 1, or 2 one after the other) restarting; the runs' counters summed. Fails with
/// the replay command of the first seed that does not end with the failure-free result.
fn dump_sweep(logger_restarts: u64) -> SimStats {
    dump_sweep_with(logger_restarts, false)
}

/// [`dump_sweep`], with about half the refills relocated to a third logger.
fn dump_sweep_with(logger_restarts: u64, relocate: bool) -> SimStats {
    let mut total = SimStats::default();
    for seed in 0..500 {
        let mut cfg = SimConfig::random(seed);
        cfg.log_dump = true;
        cfg.logger_restart = logger_restarts >= 1;
        cfg.second_logger_restart = logger_restarts >= 2;
        cfg.relocate_refills = relocate;
        let stats = run_seed(cfg, false).0.unwrap_or_else(|e| {
            panic!(
                "seed {seed} (replay: LAZARUS_SIM_SEED={seed} LAZARUS_SIM_DUMP=1 \
                 LAZARUS_SIM_LOGGER_RESTART={logger_restarts} \
                 LAZARUS_SIM_RELOCATE={}): {e}",
                u8::from(relocate)
            )
        });
        total.absorb(&stats);
    }
    total
}

/// The log's memory quota, on in every seed with a quota of about two messages: sets
/// ask their receivers for checkpoints all the time, the receivers take them in between
/// other events (crashes included, mid-checkpoint and mid-recovery), and every run still
/// ends with the failure-free result (`run_seed` fails otherwise). That the quota bounds
/// the log is shown with real processes (`log_quota.rs`): here the logs are a few
/// messages long and mostly hold messages not delivered yet, which no checkpoint releases.
#[test]
fn checkpoints_requested_by_logs_over_their_quota_keep_every_result_exact() {
    let mut requests = 0;
    for seed in 0..500 {
        let mut cfg = SimConfig::random(seed);
        cfg.log_quota = Some(24);
        let stats = run_seed(cfg, false).0.unwrap_or_else(|e| {
            panic!("seed {seed} (replay: LAZARUS_SIM_SEED={seed} LAZARUS_SIM_QUOTA=24): {e}")
        });
        requests += stats.proto.checkpoint_requests;
    }
    assert!(
        requests > 500,
        "the quota was passed often: {requests} requests"
    );
}

/// The determinism contract's checker: when every incarnation sends its own variant of
/// each message, each run in which a restarted set regenerates a message its receiver had
/// delivered reports the difference (found by the sender, or by the receiver when the
/// regeneration arrives as a duplicate). Replay one seed: `LAZARUS_SIM_SEED=N` with
/// `LAZARUS_SIM_BREAK=1` on `random_seeds_recover_to_the_failure_free_result`.
#[test]
fn the_contract_checker_reports_regenerations_that_differ_from_the_delivered_copies() {
    let (mut caught, mut checked, mut violations) = (0u64, 0, 0);
    for seed in 0..500 {
        let mut cfg = SimConfig::random(seed);
        cfg.break_contract = true;
        let (stats, _) = run_counting(cfg);
        let p = stats.proto;
        assert!(
            p.suppressed == 0 || p.contract_violations > 0,
            "seed {seed}: a regeneration of a delivered message went unreported: {p:?}"
        );
        caught += u64::from(p.contract_violations > 0);
        checked += p.regenerations_checked;
        violations += p.contract_violations;
    }
    println!(
        "{caught} of 500 seeds reported violations; {violations} of {checked} regenerations \
         checked differed (the others were resends of the logged copies)"
    );
    assert!(
        caught > 100,
        "the crashes regenerate delivered messages often"
    );
}

/// Runs with order-sensitive actors (their sends depend on arrival order, random numbers,
/// clock reads, mailbox probes and where their timers are handled): after any crash schedule, no message that left a set is contradicted
/// by its regeneration, and every receiver saw exactly what its sender ended up sending.
#[test]
fn order_sensitive_actors_replay_their_determinants_exactly() {
    let total = sweep(SimConfig::random_order_sensitive, 1000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        // The sweep exercised what it claims to: determinants logged and replayed after
        // crashes, and selective receives (which log nothing) in original runs and replays.
        assert!(total.determinants_replayed > 0, "{total:?}");
        assert!(total.selected_deliveries > 0, "{total:?}");
        // Timers rang, some after a cancel, and replays handled timers at their logged
        // points.
        assert!(total.timers_handled > 0, "{total:?}");
        assert!(total.timers_dropped > 0, "{total:?}");
        assert!(total.timers_replayed > 0, "{total:?}");
        // Loggers answered restored sets in parts.
        assert!(total.stored_parts > 0, "{total:?}");
    }
}

/// Order-sensitive actors that feed order-sensitive actors: servers whose deliveries
/// decide whether to answer or forward a request to another server (on another set, on
/// their own, or themselves), with deterministic clients keeping one request outstanding
/// in between (`Program::service`). Every crash schedule ends with every request answered
/// exactly once, no regeneration contradicting what left a set, and every receiver
/// holding exactly what its sender sent (clients keep an early answer until its turn).
#[test]
fn order_sensitive_chains_recover_and_every_request_is_answered_once() {
    let total = sweep(SimConfig::random_chains, 1000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        assert!(total.determinants_replayed > 0, "{total:?}");
        assert!(total.crashes > 0, "{total:?}");
    }
}

/// The same programs, one failure at a time, with clients that refuse an answer to a
/// request they have not sent (again): a replay delivers an answer only after the
/// restored set has made again the request a peer delivered (docs/recovery.md, "Sends
/// made again"); without that rule about 1 seed in 80 fails.
#[test]
fn when_one_set_fails_at_a_time_no_answer_overtakes_its_request() {
    let total = sweep(SimConfig::random_chains_one_at_a_time, 1000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        assert!(total.determinants_replayed > 0, "{total:?}");
        assert!(total.crashes > 0, "{total:?}");
    }
}

/// Async handlers (`Program::awaiting`): servers whose calls ask other servers and await
/// their results (a join, then sometimes one more ask the results chose), on other sets
/// and their own, taking no other message while suspended. Checkpoints keep a suspended
/// call as the state it started from and its record, and a restore re-executes it,
/// skipping what the checkpoint holds. Every crash schedule ends in the failure-free run's
/// states: every request answered once, every ask handled once.
#[test]
fn suspended_async_handlers_are_re_executed_and_end_as_the_failure_free_run() {
    let total = sweep(SimConfig::random_awaiting, 1000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        assert!(total.suspensions > 0, "{total:?}");
        assert!(total.suspended_checkpointed > 0, "{total:?}");
        assert!(total.reexecuted > 0, "{total:?}");
        assert!(total.results_replayed > 0, "{total:?}");
    }
}

/// The same with order-sensitive servers asked by every client and every server before
/// them: which request and which result comes first is logged as a determinant, and a
/// replay, re-executions included, repeats it.
#[test]
fn order_sensitive_async_handlers_recover_with_their_awaits_logged() {
    let total = sweep(SimConfig::random_awaiting_order_sensitive, 1000);
    if env_u64("LAZARUS_SIM_SEED").is_none() {
        assert!(total.reexecuted > 0, "{total:?}");
        assert!(total.determinants_replayed > 0, "{total:?}");
    }
}

/// The sweep above can fail: with the re-execution started from the state the handler
/// left instead of the one it started from, or with the effects the checkpoint holds made
/// again, seeds fail.
#[test]
fn breaking_the_re_execution_rule_fails_seeds() {
    for mutation in [
        Mutation::ReexecuteFromLiveState,
        Mutation::MakeRecordedEffectsAgain,
    ] {
        let failed = (0..300)
            .filter(|&seed| {
                let mut cfg = SimConfig::random_awaiting(seed);
                cfg.mutation = Some(mutation);
                run_seed(cfg, false).0.is_err()
            })
            .count();
        println!("{mutation:?}: {failed} of 300 seeds fail");
        assert!(failed > 0, "{mutation:?} failed no seed");
    }
}

/// Runs `default_seeds` seeds (or `LAZARUS_SIM_SEEDS` from `LAZARUS_SIM_SEED_BASE`), or
/// replays `LAZARUS_SIM_SEED` alone with its trace (`LAZARUS_SIM_QUOTA=BYTES` forces a
/// log quota, `LAZARUS_SIM_DUMP=1` dumps to a logger node, `LAZARUS_SIM_LOGGER_RESTART=1`
/// with a copy at a second logger, one of which restarts, `=2` then the other one too,
/// `LAZARUS_SIM_RELOCATE=1` with half the refills relocated to a third logger).
fn sweep(config: fn(u64) -> SimConfig, default_seeds: u64) -> SimStats {
    if let Some(seed) = env_u64("LAZARUS_SIM_SEED") {
        let mut cfg = config(seed);
        if std::env::var("LAZARUS_SIM_RULE").is_ok_and(|r| r == "strict") {
            cfg.rule = DependencyRule::Strict;
        }
        cfg.break_contract = std::env::var("LAZARUS_SIM_BREAK").is_ok_and(|b| b == "1");
        if let Some(quota) = env_u64("LAZARUS_SIM_QUOTA") {
            cfg.log_quota = Some(quota as usize);
        }
        if env_u64("LAZARUS_SIM_DUMP") == Some(1) {
            cfg.log_dump = true;
        }
        let restarts = env_u64("LAZARUS_SIM_LOGGER_RESTART").unwrap_or(0);
        cfg.logger_restart = restarts >= 1;
        cfg.second_logger_restart = restarts >= 2;
        cfg.relocate_refills = env_u64("LAZARUS_SIM_RELOCATE").is_some_and(|r| r > 0);
        println!("seed {seed}: {cfg:?}");
        let (result, trace) = run_seed(cfg, true);
        for line in &trace {
            println!("{line}");
        }
        return match result {
            Ok(stats) => {
                println!("seed {seed} ok: {stats:#?}");
                stats
            }
            Err(e) => panic!("seed {seed} failed: {e}"),
        };
    }
    let seeds = env_u64("LAZARUS_SIM_SEEDS").unwrap_or(default_seeds);
    let base = env_u64("LAZARUS_SIM_SEED_BASE").unwrap_or(0);
    let started = Instant::now();
    let mut total = SimStats::default();
    let mut failures = Vec::new();
    for seed in base..base + seeds {
        match run_seed(config(seed), false).0 {
            Ok(stats) => total.absorb(&stats),
            Err(e) => failures.push((seed, e)),
        }
    }
    println!(
        "{seeds} seeds in {:.1?}: {} crashes ({} simultaneous, {} mid-checkpoint, {} during a \
         recovery), {} checkpoints, {} packets lost\n{:#?}\npeak log {} entries / {} bytes\n\
         determinants: {} recorded, {} replayed ({} loggers' answers came in parts before \
         their last); {} selective receives\n\
         timers: {} armed, {} cancelled, {} rang, {} dropped (cancelled after ringing), {} \
         handled, {} forced at their logged point by a replay\n\
         async handlers: {} suspended, {} kept suspended by checkpoints, {} re-executed with \
         {} results handed back",
        started.elapsed(),
        total.crashes,
        total.simultaneous_crashes,
        total.crashes_mid_checkpoint,
        total.crashes_during_recovery,
        total.checkpoints,
        total.packets_lost,
        total.proto,
        total.peak_log_entries,
        total.peak_log_bytes,
        total.determinants,
        total.determinants_replayed,
        total.stored_parts,
        total.selected_deliveries,
        total.timers_armed,
        total.timers_cancelled,
        total.timers_fired,
        total.timers_dropped,
        total.timers_handled,
        total.timers_replayed,
        total.suspensions,
        total.suspended_checkpointed,
        total.reexecuted,
        total.results_replayed,
    );
    support::assert_no_failed_seeds(seeds, &failures);
    total
}

// ---------------------------------------------------------------------------------------
// Scenarios. One actor per set; `net.send(a, b, "x")` is set a's actor sending "x" to set
// b's actor; links move only when a scenario flushes them.
// ---------------------------------------------------------------------------------------

use lazarus_sim::net::{channel, Net};

#[test]
fn a_crashed_set_replays_logged_messages_in_dependency_order() {
    let mut net = Net::new(3);
    // S1 -> S0 "a"; S0 delivers it and, in that interval, asks S2 "r"; S2 answers "m".
    net.send(1, 0, "a");
    net.flush_all();
    assert_eq!(net.deliver(0), ["a"]);
    net.send(0, 2, "r");
    net.flush_all();
    assert_eq!(net.deliver(2), ["r"]);
    net.send(2, 0, "m");
    net.flush_all();
    assert_eq!(net.deliver(0), ["m"]);
    assert_eq!(net.set(0).interval(), 2);

    // S0 crashes before any checkpoint and restarts from its initial state.
    net.crash(0);
    net.restart(0);
    // S2 answers first: its logged "m" arrives before S1's logged "a".
    net.flush(0, 2);
    net.flush(2, 0);
    assert_eq!(net.set(0).queued(), 1);
    assert!(
        net.deliver(0).is_empty(),
        "m depends on S0's first interval: it waits for a"
    );
    assert_eq!(net.set(0).blocked(), 1);
    net.flush(0, 1);
    net.flush(1, 0);
    assert_eq!(
        net.deliver(0),
        ["a"],
        "m also waits for r, which S2 delivered, to be made again"
    );
    // The replay asks again (suppressed: S2 has it); now m may follow.
    net.send(0, 2, "r");
    assert_eq!(net.deliver(0), ["m"]);
    assert!(!net.set(0).is_recovering());
}

#[test]
fn regenerated_messages_already_delivered_by_survivors_are_suppressed() {
    let mut net = Net::new(2);
    for text in ["1", "2", "3"] {
        net.send(0, 1, text);
    }
    net.flush_all();
    assert_eq!(net.deliver(1), ["1", "2", "3"]);

    net.crash(0);
    net.restart(0);
    // Before S1's RESPONSE arrives, S0 cannot know: it transmits, S1 drops the duplicate.
    assert!(net.send(0, 1, "1"));
    net.flush_all();
    assert!(net.deliver(1).is_empty());
    assert_eq!(net.set(1).stats().duplicates, 1);
    // After the RESPONSE (delivered index 3), the rest of the roll-forward is suppressed,
    // and new messages flow again.
    assert!(!net.set(0).is_recovering());
    assert!(!net.send(0, 1, "2"));
    assert!(!net.send(0, 1, "3"));
    assert!(net.send(0, 1, "4"));
    net.flush_all();
    assert_eq!(net.deliver(1), ["4"]);
    assert_eq!(net.set(0).stats().suppressed, 2);
    // Suppressed messages stay logged: S1 may still roll back behind them.
    assert_eq!(net.set(0).log_stats().entries, 4);
}

#[test]
fn log_entries_are_released_when_the_receiver_checkpoints() {
    let mut net = Net::new(2);
    for text in ["aaaa", "bbbb", "cccc", "dddd", "eeee"] {
        net.send(0, 1, text);
    }
    let log = net.set(0).log_stats();
    assert_eq!((log.entries, log.payload_bytes), (5, 20));
    net.flush(0, 1);
    // S1 delivers three, checkpoints: CHECKPOINT_ADVANCE(3) releases three entries.
    for _ in 0..3 {
        assert!(net.set(1).poll_delivery().is_some());
    }
    net.checkpoint(1);
    assert_eq!(net.peek(1, 0), ["checkpoint_advance"]);
    net.flush(1, 0);
    let log = net.set(0).log_stats();
    assert_eq!((log.entries, log.payload_bytes), (2, 8));
    assert_eq!(log.released_entries, 3);
    // A checkpoint with nothing new to cover announces nothing.
    net.checkpoint(1);
    assert_eq!(net.in_flight(1, 0), 0);
    net.deliver(1);
    net.checkpoint(1);
    net.flush_all();
    assert_eq!(net.set(0).log_stats().entries, 0);
}

#[test]
fn an_uncommitted_checkpoint_is_never_announced_and_a_crash_falls_back_to_the_previous_one() {
    let mut net = Net::new(2);
    net.send(0, 1, "a");
    net.send(0, 1, "b");
    net.flush_all();
    assert_eq!(net.deliver(1), ["a", "b"]);
    net.checkpoint_uncommitted(1);
    assert_eq!(
        net.in_flight(1, 0),
        0,
        "no CHECKPOINT_ADVANCE before the commit"
    );
    assert_eq!(net.set(0).log_stats().entries, 2);
    net.crash(1);
    net.restart(1);
    net.flush_all();
    // Restored from the genesis checkpoint: both messages come again from S0's log.
    assert_eq!(net.deliver(1), ["a", "b"]);
}

#[test]
fn messages_lost_in_flight_from_a_crashed_set_are_resent_from_its_checkpointed_log() {
    // Algorithm 1 resends only from survivors' logs. A message the crashed set sent before
    // its checkpoint, still in flight when it died, is in no survivor's log and is not
    // regenerated either: it comes from the crashed set's own checkpointed log, resent when
    // the survivor's RESPONSE shows it never got it.
    let mut net = Net::new(2);
    net.send(0, 1, "early");
    net.checkpoint(0);
    net.lose(0, 1);
    net.crash(0);
    net.restart(0);
    net.flush(0, 1);
    assert_eq!(net.peek(1, 0), ["response"]);
    net.flush(1, 0);
    net.flush(0, 1);
    assert_eq!(net.deliver(1), ["early"]);
}

#[test]
fn entries_released_before_a_crash_are_released_again_from_the_recovery_exchange() {
    // S0's checkpoint holds "a" in its log; later S1's checkpoint covers "a" and S0
    // releases it. S0 crashes: the restored log has "a" again, and S1 will never send
    // that CHECKPOINT_ADVANCE again. S1's RESPONSE carries its checkpointed indices.
    let mut net = Net::new(2);
    net.send(0, 1, "a");
    net.checkpoint(0);
    net.flush_all();
    net.deliver(1);
    net.checkpoint(1);
    net.flush_all();
    assert_eq!(net.set(0).log_stats().entries, 0);
    net.crash(0);
    net.restart(0);
    assert_eq!(net.set(0).log_stats().entries, 1);
    net.flush_all();
    assert_eq!(net.set(0).log_stats().entries, 0);
}

#[test]
fn a_set_that_fails_again_during_its_recovery_recovers_and_ignores_stale_answers() {
    let mut net = Net::new(2);
    net.send(1, 0, "a");
    net.send(1, 0, "b");
    net.flush_all();
    assert_eq!(net.deliver(0), ["a", "b"]);

    net.crash(0);
    net.restart(0); // incarnation 1
    net.flush(0, 1); // S1 answers incarnation 1: resends a, b, then RESPONSE
    let answers_to_1 = net.hold(1, 0);
    assert_eq!(answers_to_1.len(), 3);
    net.crash(0);
    net.restart(0); // incarnation 2, before the answers to 1 arrived
    net.flush(0, 1);
    // The old connection's answers arrive last (no ordering across connections).
    net.inject(1, 0, answers_to_1);
    net.flush(1, 0);
    assert_eq!(net.deliver(0), ["a", "b"], "each message delivered once");
    assert!(!net.set(0).is_recovering());
    assert_eq!(net.set(0).stats().duplicates, 2);
}

#[test]
fn a_rollback_from_an_older_incarnation_arriving_late_is_ignored() {
    let mut net = Net::new(2);
    net.send(0, 1, "a");
    net.flush_all();
    net.deliver(1);
    net.crash(1);
    net.restart(1);
    let first = net.hold(1, 0); // ROLLBACK of incarnation 1, delayed
    net.crash(1);
    net.restart(1); // incarnation 2
    net.flush(1, 0);
    net.inject(1, 0, first);
    net.flush(1, 0);
    assert_eq!(net.set(0).stats().stale_control, 1);
    net.flush_all();
    assert_eq!(net.deliver(1), ["a"]);
}

#[test]
fn two_sets_recovering_at_once_rebuild_each_others_lost_messages() {
    // S0 and S1 both crash; each message between them exists only in the crashed
    // sender's lost log and is regenerated during the roll-forward.
    let mut net = Net::new(3);
    net.send(0, 1, "x");
    net.flush_all();
    net.deliver(1);
    net.send(1, 0, "y");
    net.flush_all();
    net.deliver(0);
    net.crash(0);
    net.crash(1);
    net.restart(0);
    net.restart(1);
    net.flush_all();
    // Both re-execute their sends (the application does that during roll-forward).
    assert!(net.send(0, 1, "x"));
    net.flush_all();
    assert_eq!(net.deliver(1), ["x"]);
    assert!(net.send(1, 0, "y"));
    net.flush_all();
    assert_eq!(net.deliver(0), ["y"]);
    assert!(!net.set(0).is_recovering() && !net.set(1).is_recovering());
}

/// The scenario behind the dependency-rule choice (docs/recovery.md, "Concurrent
/// recoveries"): S1's original "x" to S0 needed nothing; S0's delivery of it led, via S2,
/// to "y" for S1. S0 and S1 both crash. S1's roll-forward delivers "y" (it needs nothing of
/// S1) *before* regenerating "x", so the regenerated "x" carries "S0 has delivered 1": a
/// dependency on its own original delivery. Honouring it, S0 never delivers "x".
fn regenerated_vector_scenario(rule: DependencyRule) -> Vec<String> {
    let mut net = Net::with_rule(3, rule);
    net.send(1, 0, "x");
    net.flush_all();
    assert_eq!(net.deliver(0), ["x"]);
    net.send(0, 2, "x'");
    net.flush_all();
    assert_eq!(net.deliver(2), ["x'"]);
    net.send(2, 1, "y");
    net.flush_all();
    assert_eq!(net.deliver(1), ["y"]);

    net.crash(0);
    net.crash(1);
    net.restart(0);
    net.restart(1);
    net.flush_all();
    assert_eq!(
        net.deliver(1),
        ["y"],
        "S2's log resends y; S1 may deliver it at once"
    );
    assert_eq!(net.set(1).depend().get(lazarus::recovery::SetId(0)), 1);
    net.send(1, 0, "x");
    net.flush_all();
    assert_eq!(
        net.set(0)
            .last_sent(lazarus::recovery::SetId(2), &channel(0, 2)),
        0
    );
    net.deliver(0)
}

#[test]
fn strict_algorithm_1_deadlocks_when_two_recovering_sets_regenerate_for_each_other() {
    assert!(regenerated_vector_scenario(DependencyRule::Strict).is_empty());
}

#[test]
fn requirements_of_regenerated_messages_do_not_bind_so_concurrent_recoveries_progress() {
    assert_eq!(
        regenerated_vector_scenario(DependencyRule::OriginalSenders),
        ["x"]
    );
}

#[test]
fn strict_dependency_rule_deadlocks_some_random_seeds_the_default_rule_does_not() {
    // The same finding on random runs: search the first seeds for one where the strict
    // rule leaves a message blocked forever, and check the default rule recovers it.
    // (Rare: once a peer drops what a replaced incarnation left queued, the first such
    // seed is in the thousands.)
    let found = (0..10_000u64).find(|&seed| {
        let mut cfg = SimConfig::random(seed);
        cfg.rule = DependencyRule::Strict;
        run_seed(cfg, false).0.is_err_and(|e| {
            e.contains("blocked on the dependency rule") && !e.contains(" 0 channels")
        })
    });
    let seed = found.expect("some seed deadlocks under the strict rule");
    assert!(run_seed(SimConfig::random(seed), false).0.is_ok());
}

#[test]
fn piggyback_size_is_bounded_by_sets_not_actors() {
    // Failure-free runs of the same kind of program at several scales. The vector has at
    // most one entry per set, each a varint pair; the number of actors only makes the
    // counters (and so the varints) larger.
    let measure = |sets: u16, actors: u64| {
        let cfg = SimConfig {
            seed: 7,
            sets,
            max_actors: actors,
            max_degree: 3,
            rounds: 6,
            crashes: 0,
            max_down: 1,
            lossy_crash: false,
            reorder_connections: false,
            checkpoint_weight: 2,
            rule: DependencyRule::default(),
            order_sensitive: false,
            loggers: 1,
            break_contract: false,
            log_quota: None,
            log_dump: false,
            event_parts: None,
            logger_restart: false,
            second_logger_restart: false,
            relocate_refills: false,
            service: false,
            causal_clients: false,
            one_at_a_time: false,
            awaiting: false,
            mutation: None,
        };
        let stats = run_seed(cfg, false).0.expect("failure-free run");
        let msgs = stats.proto.sent + stats.proto.resent;
        let avg = stats.proto.piggyback_bytes as f64 / msgs as f64;
        println!(
            "{sets:>3} sets, up to {actors} actors each: {msgs:>5} messages, piggyback avg \
             {avg:>5.1} B, max {:>3} B (a dense u64 vector: {} B)",
            stats.proto.max_piggyback,
            8 * sets
        );
        (avg, stats.proto.max_piggyback)
    };
    for (sets, actors) in [(4, 1), (4, 4), (16, 1), (16, 4), (32, 1), (32, 4)] {
        let (_, max) = measure(sets, actors);
        // index + incarnation + length + per set (id <= 1 byte, counter <= 3 bytes).
        assert!(max <= 3 + 4 * u64::from(sets), "{sets} sets: {max} bytes");
    }
}
