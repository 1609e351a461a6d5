//! The `lazarus` command's library: what the launcher decides without touching a
//! process, so that it can be tested (and read by the benchmarks' report) on its own.
//!
//! - [`supervisor`]: kill plans, the restart policy, the recovery timeline built from the
//!   nodes' `lazarus-event` lines, the stall watchdog;
//! - [`placement`]: where each rank runs (`--hosts`, `--hostfile`, spare slots) and on which
//!   address;
//! - [`slurm_launch`]: the hosts and `srun` steps of the Slurm allocation `lazarus run` is in;
//! - [`logger_server`]: the logger process (`lazarus logger`);
//! - [`timeline`]: the run's events as data (`--timeline FILE`, a Chrome/Perfetto trace);
//! - [`dashboard`]: the live web page of a run (`--dashboard HOST:PORT`).
//!
//! The binary (`src/main.rs`) owns the processes, the command line and the output.

pub mod dashboard;
pub mod logger_server;
pub mod placement;
pub mod slurm_launch;
pub mod supervisor;
pub mod timeline;
