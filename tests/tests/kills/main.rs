//! The suites that run a cluster of real processes under `lazarus run` and SIGKILL its
//! nodes from outside, in one test binary (one link instead of nine). Every test takes
//! `support::one_at_a_time()`: they share the machine's cores and ports, so they run one
//! after the other, as they would in binaries of their own.

#[path = "../support/mod.rs"]
mod support;

mod actor_asks_kill;
mod bank_kill;
mod checkpoint_storage;
mod determinants_kill;
mod driver_asks_kill;
mod kvstore_kill;
mod log_quota;
mod logger_nodes;
mod payments_kill;
mod spawned_actors_kill;
mod transfer_kill;
mod windows_kill;
