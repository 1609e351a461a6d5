//! Exact recovery of a sharded key-value service with real processes: `kvstore` on 4
//! nodes under `lazarus run --ft on`, every node holding an order-sensitive shard and a
//! client that gets and puts keys of every shard. Nodes are SIGKILLed by PID from outside
//! while clients are mid-workload. The run must end with every request answered once, with
//! each client's chain of replies from each shard equal to the chain that shard's
//! (possibly recovered) state says it sent (`consistent=true`) and with a final store that
//! the puts' replies explain (`history=true`): no survivor holds a reply that the
//! recovered run contradicts.
//!
//! Runs go one at a time (4-node clusters on a 2-core machine are already
//! oversubscribed).

use crate::support;

use support::launched::{
    assert_only_restarted, assert_replayed_determinants, four_nodes_recovering, Finished, Launched,
};

/// Requests per client: a few seconds of work on this machine, so that a kill shortly
/// after the first checkpoints lands mid-run.
const OPS: &str = "8000";

/// Without event loggers a request costs no logger round trip: more requests keep the
/// run going for a few seconds too.
const OPS_WITHOUT_LOGGERS: &str = "20000";

fn launch(env: &[(&str, &str)]) -> Launched {
    launch_with_ops(OPS, env)
}

fn launch_with_ops(ops: &str, env: &[(&str, &str)]) -> Launched {
    let mut cmd = four_nodes_recovering("kvstore", &["--ops", ops, "--keys", "32"]);
    cmd.envs(env.iter().copied());
    Launched::spawn(cmd, 4)
}

/// SIGKILLs `victims` together mid-run: once each has started its clients and then
/// committed a checkpoint, a little later (the requests its shard serves after that
/// checkpoint are what the restored shard must reproduce).
/// Every killed node restarted alone and its shard replayed logged deliveries.
fn assert_recovered_by_replay(f: &Finished, killed: &[u16]) {
    let result = f.verified();
    assert_eq!(result["consistent"], "true", "{result:?}");
    assert_eq!(result["history"], "true", "{result:?}");
    let requests = 4 * OPS.parse::<u64>().unwrap();
    assert_eq!(
        result["answered"],
        requests.to_string(),
        "4 clients x {OPS}"
    );
    assert_only_restarted(f, killed);
    assert_replayed_determinants(f, killed, "shard");
}

#[test]
fn a_node_with_a_shard_and_a_client_sigkilled_mid_run_contradicts_no_reply() {
    let _one = support::one_at_a_time();
    let mut run = launch(&[]);
    run.kill_mid_run("kvstore", &[2]);
    assert_recovered_by_replay(&run.finish(), &[2]);
}

#[test]
fn the_coordinators_node_and_its_logger_killed_together_contradict_no_reply() {
    let _one = support::one_at_a_time();
    // Node 0 runs `main` and the coordinator besides its shard and client; its event
    // loggers are nodes 1 and 2 (the next two ranks): node 1 dies with it, node 2 and node
    // 1's journal keep its determinants.
    let mut run = launch(&[]);
    run.kill_mid_run("kvstore", &[0, 1]);
    assert_recovered_by_replay(&run.finish(), &[0, 1]);
}

#[test]
fn without_event_loggers_the_recovered_shard_contradicts_the_clients() {
    let _one = support::one_at_a_time();
    // The control experiment: the same kill with determinants kept nowhere. The restored
    // shard re-orders requests and re-draws versions, so replies the surviving clients
    // already hold no longer match what it says it sent.
    let mut run = launch_with_ops(OPS_WITHOUT_LOGGERS, &[("LAZARUS_EVENT_LOGGERS", "0")]);
    run.kill_mid_run("kvstore", &[2]);
    let f = run.finish();
    assert!(!f.success, "the launcher exits with the app's failure");
    let result = f.result.as_ref().expect("a RESULT line");
    assert_eq!(result["verified"], "false", "{result:?}");
    assert_eq!(result["consistent"], "false", "{}", f.lines.join("\n"));
}
