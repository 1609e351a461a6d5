//! `lazarus`: the launcher and supervisor. `lazarus run -n N -- <app> [args]` starts N
//! node processes of an app on this host, wires them into one authenticated cluster,
//! prefixes their output with their rank, and exits with the app's status. With
//! `--ft on` it is also the supervisor: a node that dies is started again with the same
//! rank and the next incarnation, restores its last checkpoint and replays, and the
//! recovery timeline is printed as it happens. `lazarus demo` shows exactly that.
//!
//! Its output never stops a run: when whatever reads its standard output or error goes
//! away (`lazarus run ... | head -1`), it stops printing there, goes on supervising the
//! nodes (still reading their output, so that they never block on it) and exits with the
//! run's status.

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use lazarus_cli::dashboard::Dashboard;
use lazarus_cli::placement::{self, Slot};
use lazarus_cli::slurm_launch::Allocation;
use lazarus_cli::supervisor::{self, OnExit, PlannedKill};
use lazarus_cli::timeline::{RunEvent, Timeline};
use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Set once the launcher's standard output, or its standard error, is closed.
static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Writes `line` to standard error (`to_stderr`) or output. Unlike `println!` it never
/// panics: a stream whose reader went away (EPIPE) is not written to again, and the run
/// goes on.
fn write_line(line: &str, to_stderr: bool) {
    fn write_to(mut w: impl Write, gone: &AtomicBool, line: &str) {
        if gone.load(Ordering::Relaxed) {
            return;
        }
        if let Err(e) = writeln!(w, "{line}").and_then(|()| w.flush()) {
            // Any other error (a full disk) is not worth stopping the run for either.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                gone.store(true, Ordering::Relaxed);
            }
        }
    }
    if to_stderr {
        write_to(std::io::stderr().lock(), &STDERR_GONE, line);
    } else {
        write_to(std::io::stdout().lock(), &STDOUT_GONE, line);
    }
}

/// `println!` that never panics (see [`write_line`]).
macro_rules! outln {
    ($($arg:tt)*) => { write_line(&format!($($arg)*), false) };
}

/// `eprintln!` that never panics (see [`write_line`]).
macro_rules! errln {
    ($($arg:tt)*) => { write_line(&format!($($arg)*), true) };
}

#[derive(Parser)]
#[command(name = "lazarus", version, about = "Launch Lazarus actor applications")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run N nodes of an app on this host as one cluster.
    Run(Box<RunArgs>),
    /// The resilience demo: jacobi2d on 4 nodes, one SIGKILLed mid-run, recovered, and
    /// its answer compared with a failure-free run's.
    Demo(DemoArgs),
    /// A logger node (`lazarus run --loggers N` starts them): keeps blocks of the nodes'
    /// logs in memory and serves them back for recoveries. Reads the cluster secret from
    /// `LAZARUS_SECRET`; leaves when its standard input closes.
    Logger(LoggerArgs),
}

#[derive(clap::Args)]
struct LoggerArgs {
    /// Its number among the run's loggers.
    #[arg(long)]
    index: u16,
    /// Address to listen at (UDP).
    #[arg(long)]
    listen: std::net::SocketAddr,
    /// The most it keeps (e.g. 1GiB).
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    capacity: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Ft {
    On,
    Off,
}

/// Whether checkpoints are also kept in the memory of the next node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BuddyArg {
    /// When the next node runs on another host (never under `lazarus run`: one host).
    Auto,
    On,
    Off,
}

impl BuddyArg {
    fn as_env(self) -> &'static str {
        match self {
            BuddyArg::Auto => "auto",
            BuddyArg::On => "on",
            BuddyArg::Off => "off",
        }
    }
}

#[derive(clap::Args, Clone)]
struct RunArgs {
    /// Number of nodes (processes); in a Slurm allocation, one per task by default.
    #[arg(short = 'n', long = "nodes")]
    nodes: Option<u16>,
    /// Cores per node (default: this host's cores divided among the nodes, at least 1).
    #[arg(long)]
    cores_per_node: Option<usize>,
    /// First UDP port (default: free ports chosen by the OS).
    #[arg(long)]
    base_port: Option<u16>,
    /// Time to let surviving nodes report after one dies before they are stopped
    /// (recovery off), in seconds or as a duration (e.g. 3, 500ms, 1m).
    #[arg(long, default_value = "3", value_parser = supervisor::parse_duration)]
    grace: Duration,
    /// Silence after which a node's peers declare it failed (e.g. 5s; default 1 s, 3 s
    /// with `--ft on`; at least 300ms). Raise it on an oversubscribed host, or when
    /// single-core nodes run handlers for seconds: their network runs between handlers.
    #[arg(long, value_parser = parse_failure_timeout)]
    failure_timeout: Option<Duration>,
    /// Rollback recovery: checkpoints, sender-based logs, restart of dead nodes.
    #[arg(long, value_enum, default_value_t = Ft::Off)]
    ft: Ft,
    /// Period of each node's checkpoint (e.g. 1s, 500ms, 0.5s, 2min; 0 for none).
    #[arg(long, default_value = "1s", value_parser = supervisor::parse_duration)]
    checkpoint_every: Duration,
    /// Memory quota of each node's sender-based log, with `--ft on` (e.g. 64MiB, 1GB; 0
    /// for none): above it a node asks the nodes its logged messages went to, those
    /// holding the largest shares first, to checkpoint early, which releases them. The
    /// log exceeds it by what the node sends while they do.
    #[arg(long, default_value = "0", value_parser = parse_size)]
    log_quota: u64,
    /// Logger nodes, with `--log-quota` (on this host): processes that keep in their
    /// memory what a node's log holds over three quarters of its quota, dumped to them
    /// in blocks, and serve it back when a peer rolls back. While they take blocks, an
    /// actor whose send leaves the log over the quota waits (at most 100 ms) for the
    /// dump. A node whose loggers are gone or full falls back to asking its peers for
    /// checkpoints.
    #[arg(long, default_value_t = 0)]
    loggers: u16,
    /// Loggers that keep each block (1 or 2, at most `--loggers`): with 2, losing one
    /// logger loses nothing.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=2))]
    logger_copies: u16,
    /// With `--hosts`: the hosts the logger nodes run on (`NAME[=ADDRESS],...`; logger i
    /// on the i-th, round robin), started through `--remote` like the nodes, listening at
    /// the host's address from `--base-port` + 1000 up. Dedicated hosts, as in the
    /// logger-nodes paper.
    #[arg(long)]
    logger_hosts: Option<String>,
    /// Memory of each logger node (e.g. 2GiB): a full logger declines blocks and the
    /// node tries the next.
    #[arg(long, default_value = "1GiB", value_parser = parse_size)]
    logger_memory: u64,
    /// Where checkpoints are stored (default: a fresh directory under the temp dir).
    /// `{host}` in it is replaced by the node's host name (`local` on this host): each
    /// host then keeps its own, as with host-local disks.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Also keep each checkpoint in the memory of the next node (rank + 1), so a node
    /// whose checkpoint directory is lost restores from that copy.
    #[arg(long, value_enum, default_value_t = BuddyArg::Auto)]
    buddy: BuddyArg,
    /// Spare slots (an address and port each) for restarted nodes, with recovery on: a dead
    /// node's replacement starts on the next spare and its old slot is retired, as a
    /// failed host's would be; once the spares are used up, replacements start in place.
    #[arg(long, default_value_t = 0)]
    spares: u16,
    /// Run the nodes on these hosts instead of this one: `NAME[=ADDRESS],...`, ranks in
    /// blocks (the first host gets the first nodes). Each node listens at its host's
    /// address, ports from `--base-port` up.
    #[arg(long)]
    hosts: Option<String>,
    /// Run the nodes on the hosts a file lists, one per line: `NAME[=ADDRESS]`, and
    /// optionally `slots=N` after it (or `NAME:N`) for how many nodes the host takes
    /// (without slots, nodes are spread evenly); `#` starts a comment. Like `--hosts`
    /// otherwise.
    #[arg(long, value_name = "FILE", conflicts_with = "hosts")]
    hostfile: Option<PathBuf>,
    /// Inside a Slurm allocation (`salloc`, `sbatch`): `auto` (the default) runs the
    /// nodes on the allocation's hosts, as many per host as Slurm gave it tasks, each
    /// (and each replacement) started as an `srun` step; `off` runs them as without
    /// Slurm. Outside an allocation, `on` is an error.
    #[arg(long, value_enum, default_value_t = SlurmArg::Auto)]
    slurm: SlurmArg,
    /// Spare hosts for restarted nodes, with recovery on (`NAME[=ADDRESS],...`): a dead
    /// node's replacement starts on the next free slot of a spare host (the failed host is
    /// not trusted again); once they are used up, replacements start in place.
    #[arg(long)]
    spare_hosts: Option<String>,
    /// How to start a process on a host of `--hosts`: a command template in which
    /// `{host}` is the host's name (appended if absent), e.g. `ip netns exec {host}` or
    /// `ssh {host}`. It must pass the environment on (`ip netns exec` does; `ssh` needs
    /// `SendEnv`/`AcceptEnv LAZARUS_*`). Without it, processes start here.
    #[arg(long)]
    remote: Option<String>,
    /// SIGKILL nodes at given times: RANK@SECONDS[,RANK@SECONDS...] (a time may also be
    /// a duration, e.g. 1m).
    #[arg(long, value_parser = parse_kill_list)]
    kill: Option<KillList>,
    /// Stall watchdog: when no node has handled a message for this long (e.g. 30s, 5min)
    /// while nodes run and not all of them have finished their `main`, print what each
    /// node waits for; if nothing moves for as long again, stop the nodes and exit with
    /// status 124. A node busy computing (one long handler: its CPU time grows by a
    /// quarter of the wall time or more) counts as moving; a `main` that waits (a timer,
    /// its input) for longer does not: raise it then, or `off` for no watchdog. The
    /// launcher asks each node for its counts on its standard input every quarter of
    /// this (at most every 5 s); nothing is shown unless the run stalls.
    #[arg(long, default_value = "30s", value_parser = parse_stall_timeout)]
    stall_timeout: StallTimeout,
    /// Serve each node's metrics for Prometheus: node r at HOST:PORT+r (any path answers,
    /// `/metrics` by convention). With `--hosts` each node binds on its own host, so give
    /// 0.0.0.0 (or ::) and scrape every host. A node that cannot bind says so and runs on.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_metrics)]
    metrics: Option<MetricsBase>,
    #[command(flatten)]
    watch: WatchArgs,
    /// The app binary and its arguments.
    #[arg(last = true, required = true)]
    app: Vec<String>,
    /// The options given that only mean something with `--ft on` (filled in by `main`).
    #[arg(skip)]
    ft_options_given: Vec<&'static str>,
    /// How many nodes each host of `--hosts` takes (from `--hostfile` or Slurm; empty:
    /// spread evenly).
    #[arg(skip)]
    host_slots: Vec<usize>,
}

/// How a run can be watched besides its text timeline (`lazarus run` and `lazarus demo`).
#[derive(clap::Args, Clone, Debug, Default)]
struct WatchArgs {
    /// Serve a live web page of the run at HOST:PORT (e.g. 127.0.0.1:8080, or 0.0.0.0:8080
    /// to reach it from another host; port 0 picks a free one): each node's state,
    /// checkpoints, deaths, restore and replay on a timeline, message rates, log sizes
    /// and the verdict. The launcher prints its address.
    #[arg(long, value_name = "HOST:PORT")]
    dashboard: Option<std::net::SocketAddr>,
    /// Write the run's events to FILE as JSON lines while it runs, and a Chrome/Perfetto
    /// trace next to it when it ends (run.jsonl gives run.trace.json; open it in
    /// https://ui.perfetto.dev or chrome://tracing).
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
}

impl WatchArgs {
    /// The timeline its options ask for, and the dashboard serving it.
    fn start(&self) -> Result<Arc<Timeline>, Box<dyn std::error::Error>> {
        let timeline = Arc::new(
            Timeline::new(self.timeline.as_deref(), self.dashboard.is_some()).map_err(|e| {
                format!(
                    "--timeline {}: {e}",
                    self.timeline.as_deref().unwrap_or(Path::new("")).display()
                )
            })?,
        );
        if let Some(addr) = self.dashboard {
            let dashboard = Dashboard::start(addr, Arc::clone(&timeline))
                .map_err(|e| format!("--dashboard {addr}: {e}"))?;
            outln!("lazarus: dashboard at http://{}/", dashboard.addr());
        }
        Ok(timeline)
    }

    /// Writes the trace of `--timeline` and says where both files are; lets a dashboard's
    /// readers take the last events before the launcher exits.
    fn finish(&self, timeline: &Timeline) {
        match timeline.finish() {
            Ok(Some((events, trace))) => outln!(
                "lazarus: timeline in {} (JSON lines), trace in {} (open in \
                 https://ui.perfetto.dev or chrome://tracing)",
                events.display(),
                trace.display()
            ),
            Ok(None) => {}
            Err(e) => errln!("lazarus: {e}"),
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while timeline.readers() > 0 && !timeline.drained() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether `lazarus run` uses the Slurm allocation it runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SlurmArg {
    /// Inside an allocation, yes.
    Auto,
    /// Yes; outside an allocation, an error.
    On,
    /// No.
    Off,
}

/// The options of `lazarus run` that only mean something with `--ft on`: their argument
/// ids and how they are written.
const FT_ONLY_OPTIONS: [(&str, &str); 10] = [
    ("checkpoint_every", "--checkpoint-every"),
    ("log_quota", "--log-quota"),
    ("loggers", "--loggers"),
    ("logger_copies", "--logger-copies"),
    ("logger_hosts", "--logger-hosts"),
    ("logger_memory", "--logger-memory"),
    ("checkpoint_dir", "--checkpoint-dir"),
    ("buddy", "--buddy"),
    ("spares", "--spares"),
    ("spare_hosts", "--spare-hosts"),
];

#[derive(clap::Args)]
struct DemoArgs {
    /// Grid size of the stencil.
    #[arg(long, default_value_t = 1024)]
    n: usize,
    /// Iterations (the default lasts 4-6 s on a 2-core machine: several checkpoints
    /// before and after the kill at half the run).
    #[arg(long, default_value_t = 6000)]
    iters: u64,
    /// Node to kill.
    #[arg(long, default_value_t = 2)]
    kill_rank: u16,
    /// When to kill it, as a fraction of the failure-free run's time; later if the
    /// node has not committed a checkpoint by then, so that its replacement restores one.
    #[arg(long, default_value_t = 0.5, value_parser = parse_fraction)]
    kill_at: f64,
    #[command(flatten)]
    watch: WatchArgs,
}

/// The planned kills of a run.
#[derive(Clone, Debug)]
struct KillList(Vec<PlannedKill>);

/// `--stall-timeout`: `None` for no watchdog.
#[derive(Clone, Copy, Debug)]
struct StallTimeout(Option<Duration>);

/// Where node 0 serves its metrics (`--metrics HOST:PORT`); node r uses PORT + r.
#[derive(Clone, Debug)]
struct MetricsBase {
    host: String,
    port: u16,
}

impl MetricsBase {
    /// Node `rank`'s address (`None`: past port 65535).
    fn addr(&self, rank: u16) -> Option<String> {
        let port = self.port.checked_add(rank)?;
        Some(if self.host.contains(':') {
            format!("[{}]:{port}", self.host)
        } else {
            format!("{}:{port}", self.host)
        })
    }
}

fn parse_metrics(s: &str) -> Result<MetricsBase, String> {
    let (host, port) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("`{s}` is not HOST:PORT (e.g. 127.0.0.1:9100)"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(format!(
            "`{s}` has no host (e.g. 127.0.0.1:9100, 0.0.0.0:9100)"
        ));
    }
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("`{port}` is not a port (1-65535)"))?;
    Ok(MetricsBase {
        host: host.to_string(),
        port,
    })
}

fn parse_stall_timeout(s: &str) -> Result<StallTimeout, String> {
    supervisor::parse_stall_timeout(s).map(StallTimeout)
}

/// `--failure-timeout`: a duration no shorter than the nodes accept.
fn parse_failure_timeout(s: &str) -> Result<Duration, String> {
    lazarus::cluster::usable_failure_timeout(supervisor::parse_duration(s)?)
}

/// The most cores `--cores-per-node` may ask for.
const MAX_CORES_PER_NODE: usize = 1 << 16;

/// A fraction of a run, in (0, 1].
fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!(
            "`{s}` is not a fraction of the run (0 < f <= 1, e.g. 0.5)"
        )),
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| format!("`{s}` is not a size (examples: 64MiB, 512KB, 1GB): {e}"))
}

fn parse_kill_list(s: &str) -> Result<KillList, String> {
    supervisor::parse_kills(s).map(KillList)
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let (Cmd::Run(args), Some(("run", m))) = (&mut cli.command, matches.subcommand()) {
        // Defaults do not count: only what the user wrote.
        args.ft_options_given = FT_ONLY_OPTIONS
            .iter()
            .filter(|(id, _)| m.value_source(id) == Some(ValueSource::CommandLine))
            .map(|(_, flag)| *flag)
            .collect();
    }
    let outcome = match cli.command {
        Cmd::Run(args) => args.watch.start().and_then(|timeline| {
            let outcome = run(*args.clone(), &timeline).map(|r| r.code);
            args.watch.finish(&timeline);
            outcome
        }),
        Cmd::Demo(args) => args.watch.start().and_then(|timeline| {
            let outcome = demo(&args, &timeline);
            args.watch.finish(&timeline);
            outcome
        }),
        Cmd::Logger(args) => logger(args),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            errln!("lazarus: error: {e}");
            ExitCode::from(2)
        }
    }
}

/// `lazarus logger`: serves until its standard input closes.
fn logger(args: LoggerArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let secret = std::env::var("LAZARUS_SECRET")
        .map_err(|_| "LAZARUS_SECRET is not set: a logger needs the cluster's secret")?;
    lazarus_cli::logger_server::serve(lazarus_cli::logger_server::LoggerOptions {
        index: args.index,
        listen: args.listen,
        capacity: args.capacity,
        secret: lazarus::cluster::decode_secret(&secret)?,
    })?;
    Ok(ExitCode::SUCCESS)
}

/// The run's logger processes; dropping them closes their standard input (they print
/// their totals and leave) and kills those still there a second later. One that dies
/// while the nodes still need it is started again at its address (empty: the nodes
/// find it restarted and account for the blocks it lost).
struct Loggers {
    addrs: Vec<std::net::SocketAddr>,
    /// How to start each (its command line), and on which host.
    commands: Vec<Vec<String>>,
    secret: String,
    out: Output,
    running: Vec<RunningLogger>,
}

/// One logger process, its standard input (held open) and its output pumps.
struct RunningLogger {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    pumps: Vec<std::thread::JoinHandle<()>>,
    /// How many times it was started before this one.
    incarnation: u32,
    /// Set once it exited.
    status: Option<ExitStatus>,
}

/// Where a logger runs: its host (`None`: this one) and address.
type LoggerPlace = (Option<String>, std::net::SocketAddr);

impl Loggers {
    fn start(
        args: &RunArgs,
        secret: &str,
        out: &Output,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let mut loggers = Loggers {
            addrs: Vec::new(),
            commands: Vec::new(),
            secret: secret.to_string(),
            out: out.clone(),
            running: Vec::new(),
        };
        if args.loggers == 0 {
            return Ok(loggers);
        }
        let exe = std::env::current_exe()?.to_string_lossy().into_owned();
        for (i, (host, addr)) in Self::places(args)?.into_iter().enumerate() {
            let program: Vec<String> = vec![
                exe.clone(),
                "logger".into(),
                "--index".into(),
                i.to_string(),
                "--listen".into(),
                addr.to_string(),
                "--capacity".into(),
                args.logger_memory.to_string(),
            ];
            loggers.commands.push(placement::command_words(
                args.remote.as_deref(),
                host.as_deref(),
                &program,
            ));
            loggers.addrs.push(addr);
            let running = loggers.spawn(i, 0)?;
            loggers.running.push(running);
        }
        Ok(loggers)
    }

    /// Starts logger `i` (its `incarnation`-th start).
    fn spawn(
        &self,
        i: usize,
        incarnation: u32,
    ) -> Result<RunningLogger, Box<dyn std::error::Error>> {
        let words = &self.commands[i];
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .env("LAZARUS_SECRET", &self.secret)
            .env("LAZARUS_LOGGER_INCARNATION", incarnation.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        die_with_launcher(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start logger {i}: {e}"))?;
        let again = match incarnation {
            0 => String::new(),
            k => format!(" incarnation {k}"),
        };
        self.out.say(&format!(
            "logger {i} pid {} at {}{again}",
            child.id(),
            self.addrs[i]
        ));
        let label = format!("logger{i}");
        let mut pumps = Vec::new();
        if let Some(o) = child.stdout.take() {
            pumps.push(pump_labelled(o, label.clone(), self.out.clone(), false));
        }
        if let Some(e) = child.stderr.take() {
            pumps.push(pump_labelled(e, label, self.out.clone(), true));
        }
        Ok(RunningLogger {
            stdin: child.stdin.take(),
            child,
            pumps,
            incarnation,
            status: None,
        })
    }

    /// Restarts the loggers that died, unless `released` (the nodes are leaving and
    /// need them no more); one that died [`supervisor::MAX_RESTARTS_PER_RANK`] times
    /// stays dead (the nodes do without it).
    fn restart_dead(&mut self, at: Duration, released: bool) {
        for i in 0..self.running.len() {
            let logger = &mut self.running[i];
            if logger.status.is_some() {
                continue;
            }
            let Ok(Some(status)) = logger.child.try_wait() else {
                continue;
            };
            logger.status = Some(status);
            let incarnation = logger.incarnation + 1;
            if released {
                continue;
            }
            let died = RunEvent::new(at.as_millis() as u64, None, "logger-died")
                .field("logger", i)
                .field("status", describe(status));
            if incarnation > supervisor::MAX_RESTARTS_PER_RANK {
                self.out.record(died.text(format!(
                    "logger {i}: died ({}) {incarnation} times; not restarted again",
                    describe(status)
                )));
                continue;
            }
            self.out
                .record(died.field("restart", incarnation).text(format!(
                    "logger {i}: died ({}), restarting as incarnation {incarnation}",
                    describe(status)
                )));
            match self.spawn(i, incarnation) {
                // The old pumps end by themselves with the dead process's pipes.
                Ok(new) => self.running[i] = new,
                Err(e) => errln!("lazarus: {e}"),
            }
        }
    }

    /// Where each logger runs: on this host at free loopback ports, or on the logger
    /// hosts (round robin) from `--base-port` + 1000 up.
    fn places(args: &RunArgs) -> Result<Vec<LoggerPlace>, Box<dyn std::error::Error>> {
        let n = usize::from(args.loggers);
        let Some(spec) = &args.logger_hosts else {
            return Ok(free_ports(n)?
                .into_iter()
                .map(|port| (None, std::net::SocketAddr::from(([127, 0, 0, 1], port))))
                .collect());
        };
        let hosts = placement::parse_hosts(spec).map_err(|e| format!("--logger-hosts: {e}"))?;
        if hosts.is_empty() {
            return Err("--logger-hosts names no host".into());
        }
        let base = hosts_base_port(args)
            .checked_add(1_000)
            .ok_or("--base-port leaves no room for the loggers' ports (base + 1000 on)")?;
        ports_from(base, n, "loggers")?;
        Ok((0..n)
            .map(|i| {
                let host = &hosts[i % hosts.len()];
                let port = base + i as u16;
                (
                    Some(host.name.clone()),
                    std::net::SocketAddr::new(host.ip, port),
                )
            })
            .collect())
    }

    /// `LAZARUS_LOGGERS` for the nodes.
    fn env(&self) -> String {
        self.addrs
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for Loggers {
    fn drop(&mut self) {
        for logger in &mut self.running {
            logger.stdin.take();
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        for logger in &mut self.running {
            let child = &mut logger.child;
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let _ = child.kill();
            let _ = child.wait();
            for p in logger.pumps.drain(..) {
                let _ = p.join();
            }
        }
    }
}

/// Copies a logger's output line by line, prefixed with its label.
fn pump_labelled(
    stream: impl std::io::Read + Send + 'static,
    label: String,
    out: Output,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            out.prefixed(&label, &line, to_stderr);
        }
    })
}

/// Makes the process `cmd` starts die with the launcher: no orphaned nodes or loggers if
/// it is killed.
fn die_with_launcher(cmd: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and only calls prctl,
    // which is async-signal-safe; it allocates nothing and touches no locks.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The first port of a run's nodes on every host with `--hosts`: `--base-port`, else one
/// derived from the launcher's process id (per run, like Slurm steps).
fn hosts_base_port(args: &RunArgs) -> u16 {
    args.base_port
        .unwrap_or(20_000 + (std::process::id() % 1_000) as u16 * 32)
}

/// Checks that `count` consecutive ports from `base` exist (`what` they are for).
fn ports_from(base: u16, count: usize, what: &str) -> Result<(), String> {
    let last = usize::from(base) + count.saturating_sub(1);
    if last > usize::from(u16::MAX) {
        return Err(format!(
            "--base-port {base}: {count} {what} need ports {base}-{last}, past 65535"
        ));
    }
    Ok(())
}

/// The longest the launcher waits for a remote command to kill a node.
const REMOTE_KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `cmd` to its end, or kills it after `limit`.
fn run_for_at_most(cmd: &mut Command, limit: Duration) -> std::io::Result<ExitStatus> {
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {}", humantime::format_duration(limit)),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn free_ports(n: usize) -> std::io::Result<Vec<u16>> {
    // Hold all sockets until every port is known so the OS hands out distinct ones.
    let sockets: Vec<UdpSocket> = (0..n)
        .map(|_| UdpSocket::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    sockets
        .iter()
        .map(|s| s.local_addr().map(|a| a.port()))
        .collect()
}

struct Node {
    rank: u16,
    pid: u32,
    incarnation: u32,
    child: Child,
    status: Option<ExitStatus>,
    /// The threads copying its stdout and stderr.
    pumps: Vec<std::thread::JoinHandle<()>>,
}

impl Node {
    /// Waits (at most a second) until everything the exited process printed has been
    /// read: its last lines (failures, final totals) decide whether it is restarted.
    fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.pumps.iter().any(|p| !p.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// What the supervisor remembers of one rank across its processes.
#[derive(Clone, Debug, Default)]
struct RankHistory {
    /// How many times it was restarted (or is about to be): the back-off grows with it.
    restarts: u32,
    /// The exit status of its last process that ended (`None`: killed by a signal, or
    /// none ended yet).
    last_code: Option<i32>,
    /// A restart waiting for its back-off: when, and as which incarnation.
    pending: Option<(Instant, u32)>,
}

/// How a run ended.
struct RunOutcome {
    code: ExitCode,
    result: Option<String>,
    restarts: u32,
    elapsed: Duration,
    /// Regenerated messages compared with the copies delivered before a failure, and
    /// those that differed (the nodes' final totals).
    replay_check: (u64, u64),
}

/// Shared by the output pumps: the output lock, the last RESULT line, and the clock the
/// timeline counts from.
#[derive(Clone)]
struct Output {
    lock: Arc<Mutex<()>>,
    /// Actor failures reported by each rank, oldest first.
    failures: Arc<Mutex<std::collections::HashMap<u16, Vec<String>>>>,
    /// `(peer, incarnation, by)`: a node declared `peer`'s incarnation failed by its
    /// silence. Not yet acted on.
    suspicions: Arc<Mutex<Vec<(u16, u32, u16)>>>,
    /// `(rank, incarnation)` of nodes that announced their `main` had finished: when every
    /// running node has, they may leave.
    finished: Arc<Mutex<std::collections::HashSet<(u16, u32)>>>,
    /// `(rank, incarnation)`: a node rolled back in place after an actor failed; its
    /// process now runs as that incarnation. Not yet acted on.
    in_place: Arc<Mutex<Vec<(u16, u32)>>>,
    /// Ranks that have committed a checkpoint (in any incarnation).
    checkpointed: Arc<Mutex<std::collections::HashSet<u16>>>,
    /// The nodes' answers to the watchdog's `report` requests, and when each came. Not
    /// yet acted on; never printed as they come.
    reports: Arc<Mutex<Vec<(supervisor::NodeReport, Instant)>>>,
    /// The id of each rank's newest committed checkpoint (any incarnation).
    newest_checkpoint: Arc<Mutex<std::collections::HashMap<u16, u64>>>,
    /// Why a restarted node cannot be recovered (a peer's `recovery-impossible` event):
    /// the run is stopped at once. Not yet acted on.
    impossible: Arc<Mutex<Option<String>>>,
    /// Regenerated messages the nodes' final totals report compared with the copies
    /// delivered before a failure.
    checked: Arc<std::sync::atomic::AtomicU64>,
    /// Of those, the ones that differed (determinism contract broken).
    violations: Arc<std::sync::atomic::AtomicU64>,
    result: Arc<Mutex<Option<String>>>,
    start_unix_ms: u128,
    /// When each rank first began its app's timed part (Unix ms, from the node's
    /// `timed-part-started` event): handed to its restarts.
    timed_starts: Arc<Mutex<std::collections::HashMap<u16, u128>>>,
    /// For a node started through a remote command: the PID the node reported (its
    /// `process` event), by the PID of that command.
    remote_pids: Arc<Mutex<std::collections::HashMap<u32, u32>>>,
    /// The first [`STDERR_LINES_KEPT`] lines of standard error of each node process, by
    /// PID: a restart after a start-up failure does not print them again.
    stderr_lines: Arc<Mutex<std::collections::HashMap<u32, Vec<String>>>>,
    /// The run's events as data, for `--timeline` and `--dashboard`.
    events: Arc<Timeline>,
}

/// Lines of a node process's standard error kept to compare its restart's with.
const STDERR_LINES_KEPT: usize = 64;

impl Output {
    fn say(&self, line: &str) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        write_line(line, false);
    }

    /// A child's output line, `[label] line`, on the launcher's stdout or stderr.
    fn prefixed(&self, label: &str, line: &str, to_stderr: bool) {
        let _g = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        write_line(&format!("[{label}] {line}"), to_stderr);
    }

    fn timeline(&self, at: Duration, what: &str) {
        self.say(&format!("timeline {:>8.3}s  {what}", at.as_secs_f64()));
    }

    /// Records `e`, printing its text (if it has one) in the text timeline.
    fn record(&self, e: RunEvent) {
        if !e.text.is_empty() {
            self.timeline(Duration::from_millis(e.at_ms), &e.text);
        }
        self.events.record(e);
    }

    /// Milliseconds since the run started.
    fn now_ms(&self) -> u64 {
        unix_ms().saturating_sub(self.start_unix_ms) as u64
    }
}

/// How often the launcher asks its nodes for samples when the dashboard or
/// `--timeline` reads them.
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

struct Launch<'a> {
    args: &'a RunArgs,
    /// Where each rank runs now.
    slots: Mutex<Vec<Slot>>,
    /// Spare slots not used yet.
    spares: Mutex<std::collections::VecDeque<Slot>>,
    /// Nodes per host.
    per_host: usize,
    /// Each rank's current process's standard input (recovery on): the supervisor's
    /// channel to it (`lazarus::cluster::supervisor_channel`).
    channels: Mutex<std::collections::HashMap<u16, std::process::ChildStdin>>,
    /// Ranks that have moved to a spare slot.
    moved: Mutex<std::collections::BTreeSet<u16>>,
    secret: String,
    per_node: usize,
    host_cores: usize,
    oversubscribed: bool,
    checkpoint_dir: PathBuf,
    out: Output,
    /// `LAZARUS_LOGGERS` (empty without logger nodes).
    loggers: String,
    /// Lines of standard error not to print again for the next process of a rank: its
    /// previous one exited by itself before any checkpoint, and a restart that fails
    /// the same way prints the same error.
    hide: Mutex<std::collections::HashMap<u16, std::collections::HashSet<String>>>,
}

impl Launch<'_> {
    /// Says `line` to every node's current process but `except`'s. A process that died
    /// meanwhile cannot read it: its exit is handled on its own.
    fn tell_all(&self, except: Option<u16>, line: &str) {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        for (rank, stdin) in channels.iter_mut() {
            if Some(*rank) != except {
                let _ = writeln!(stdin, "{line}").and_then(|()| stdin.flush());
            }
        }
    }

    /// Asks `rank`'s current process for its progress report (`report`); false if it
    /// has no channel or its channel is closed.
    fn ask_report(&self, rank: u16) -> bool {
        self.ask(rank, "report")
    }

    /// Says `word` (`report`, `sample`) to `rank`'s current process; false if it has no
    /// channel or its channel is closed.
    fn ask(&self, rank: u16, word: &str) -> bool {
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        channels.get_mut(&rank).is_some_and(|stdin| {
            writeln!(stdin, "{word}")
                .and_then(|()| stdin.flush())
                .is_ok()
        })
    }

    /// Says again to `rank` where every peer that moved to a spare slot listens now.
    fn repeat_moves(&self, rank: u16) {
        let moved = self.moved.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut channels = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let Some(stdin) = channels.get_mut(&rank) else {
            return;
        };
        for peer in moved.into_iter().filter(|p| *p != rank) {
            let _ = writeln!(stdin, "moved {peer} {}", slots[usize::from(peer)].addr)
                .and_then(|()| stdin.flush());
        }
    }

    /// Moves `rank` to the next spare slot, if any is left, and tells the other nodes
    /// where it will listen. Returns where that is, for the timeline.
    fn move_to_spare(&self, rank: u16) -> Option<String> {
        let slot = self
            .spares
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()?;
        let addr = slot.addr;
        let place = match &slot.host {
            Some(host) => format!("spare host {host} at {addr}"),
            None => format!("spare slot {addr}"),
        };
        self.slots.lock().unwrap_or_else(|e| e.into_inner())[usize::from(rank)] = slot;
        self.moved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rank);
        self.tell_all(Some(rank), &format!("moved {rank} {addr}"));
        Some(place)
    }

    /// SIGKILLs `node`'s process; returns which (for the timeline). A node started
    /// through a remote command is killed where it runs, through the same command (`srun
    /// ... kill -9 PID`, `ssh HOST kill -9 PID`): killing the command here need not end
    /// the process there. The command is killed too, so that its end is seen.
    fn kill_node(&self, node: &Node) -> String {
        let own = (self.out.remote_pids.lock())
            .unwrap_or_else(|e| e.into_inner())
            .get(&node.pid)
            .copied();
        let host = self.slots.lock().unwrap_or_else(|e| e.into_inner())[usize::from(node.rank)]
            .host
            .clone();
        let said = match (own, host, self.args.remote.as_deref()) {
            (Some(own), Some(host), Some(remote)) => {
                let kill = ["kill".to_string(), "-9".into(), own.to_string()];
                let words = placement::command_words(Some(remote), Some(&host), &kill);
                let mut cmd = Command::new(&words[0]);
                cmd.args(&words[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                match run_for_at_most(&mut cmd, REMOTE_KILL_TIMEOUT) {
                    Ok(s) if s.success() => format!("pid {own} on {host}"),
                    Ok(s) => format!("pid {own} on {host}: `{}` {}", words.join(" "), describe(s)),
                    Err(e) => format!("pid {own} on {host}: `{}`: {e}", words.join(" ")),
                }
            }
            (None, Some(host), Some(_)) => {
                format!(
                    "the command that started it on {host}, pid {}: the node had not said its own",
                    node.pid
                )
            }
            _ => format!("pid {}", node.pid),
        };
        // SAFETY: kill(2) on a pid we own (our child, not yet reaped).
        unsafe {
            libc::kill(node.pid as i32, libc::SIGKILL);
        }
        said
    }

    fn start(&self, rank: u16, incarnation: u32) -> Result<Node, Box<dyn std::error::Error>> {
        let args = self.args;
        let (peers, host) = {
            let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            let peers: Vec<String> = slots.iter().map(|s| s.addr.to_string()).collect();
            (peers.join(","), slots[usize::from(rank)].host.clone())
        };
        let words = placement::command_words(args.remote.as_deref(), host.as_deref(), &args.app);
        let index_on_host = usize::from(rank) % self.per_host;
        let mut cmd = Command::new(&words[0]);
        cmd.args(&words[1..])
            .env("LAZARUS_RANK", rank.to_string())
            .env("LAZARUS_PEERS", peers)
            .env("LAZARUS_SECRET", &self.secret)
            .env("LAZARUS_CORES", self.per_node.to_string())
            .env(
                "LAZARUS_CORE_OFFSET",
                ((index_on_host * self.per_node) % self.host_cores).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(addr) = args.metrics.as_ref().and_then(|m| m.addr(rank)) {
            cmd.env(lazarus::telemetry::METRICS_ADDR_VAR, addr);
        }
        if words.len() > args.app.len() {
            // Started through a remote command: the PID below is that command's; the
            // node reports its own (the timeline's `process` line).
            cmd.env(lazarus::cluster::REPORT_PROCESS_VAR, "1");
        }
        if let Some(timeout) = args.failure_timeout {
            cmd.env(
                "LAZARUS_FAILURE_TIMEOUT_MS",
                timeout.as_millis().to_string(),
            );
        }
        if args.ft == Ft::On {
            cmd.env("LAZARUS_FT", "on")
                // 0 turns periodic checkpoints off (on demand only).
                .env(
                    "LAZARUS_CHECKPOINT_EVERY_MS",
                    args.checkpoint_every.as_millis().to_string(),
                )
                .env(
                    "LAZARUS_CHECKPOINT_DIR",
                    self.checkpoint_dir
                        .to_string_lossy()
                        .replace("{host}", host.as_deref().unwrap_or("local")),
                )
                .env("LAZARUS_BUDDY", args.buddy.as_env())
                .env("LAZARUS_LOG_QUOTA", args.log_quota.to_string())
                .env("LAZARUS_LOGGERS", &self.loggers)
                .env("LAZARUS_LOGGER_COPIES", args.logger_copies.to_string())
                .env("LAZARUS_INCARNATION", incarnation.to_string())
                // The node leaves only when told: see `supervisor::may_leave`.
                .env("LAZARUS_SUPERVISOR", "stdin")
                .stdin(Stdio::piped());
        } else if args.stall_timeout.0.is_some() {
            // Recovery off: the channel only carries the watchdog's `report` requests.
            cmd.env("LAZARUS_SUPERVISOR", "stdin").stdin(Stdio::piped());
        }
        let timed_start = match incarnation {
            0 => None,
            _ => {
                let starts = self.out.timed_starts.lock();
                starts
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&rank)
                    .copied()
            }
        };
        if let Some(ms) = timed_start {
            // Its `elapsed` counts from its rank's first timed part: see
            // `Cluster::begin_timed_part`.
            cmd.env(lazarus::cluster::TIMED_PART_START_VAR, ms.to_string());
        }
        if self.oversubscribed {
            // More executor threads than cores: spinning would steal the cores others need.
            cmd.env("LAZARUS_IDLE_SPIN_US", "0");
        }
        die_with_launcher(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args.app[0]))?;
        let pid = child.id();
        // On a list of hosts, where: the address its peers reach it at.
        let at = match &host {
            Some(host) => {
                let addr =
                    self.slots.lock().unwrap_or_else(|e| e.into_inner())[usize::from(rank)].addr;
                format!(" on {host} at {addr}")
            }
            None => String::new(),
        };
        let mut started = RunEvent::new(self.out.now_ms(), Some(rank), "started")
            .field("pid", pid)
            .field("incarnation", incarnation);
        if let Some(host) = &host {
            started = started.field("host", host);
        }
        self.out.events.record(started);
        if incarnation == 0 {
            self.out.say(&format!("node {rank} pid {pid}{at}"));
            if let Some(addr) = args.metrics.as_ref().and_then(|m| m.addr(rank)) {
                self.out
                    .say(&format!("node {rank} metrics at http://{addr}/metrics"));
            }
        } else {
            self.out.say(&format!(
                "node {rank} pid {pid} incarnation {incarnation}{at}"
            ));
        }
        let hide = self
            .hide
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&rank)
            .unwrap_or_default();
        let mut pumps = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            pumps.push(pump(
                stdout,
                (rank, pid),
                self.out.clone(),
                false,
                Default::default(),
            ));
        }
        if let Some(stderr) = child.stderr.take() {
            pumps.push(pump(stderr, (rank, pid), self.out.clone(), true, hide));
        }
        if let Some(stdin) = child.stdin.take() {
            self.channels
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(rank, stdin);
        }
        Ok(Node {
            rank,
            pid,
            incarnation,
            child,
            status: None,
            pumps,
        })
    }
}

/// Where the nodes run when the command line names no host: the hosts of `--hostfile`,
/// or of the Slurm allocation, turned into `--hosts` (and, for Slurm, `--remote`: an
/// `srun` step per node) with how many nodes each host takes.
fn resolve_hosts(mut args: RunArgs) -> Result<RunArgs, Box<dyn std::error::Error>> {
    if let Some(file) = &args.hostfile {
        let text = std::fs::read_to_string(file)
            .map_err(|e| format!("--hostfile {}: {e}", file.display()))?;
        let (hosts, slots) = placement::parse_hostfile(&text)
            .map_err(|e| format!("--hostfile {}: {e}", file.display()))?;
        args.hosts = Some(
            hosts
                .iter()
                .map(|h| format!("{}={}", h.name, h.ip))
                .collect::<Vec<_>>()
                .join(","),
        );
        args.host_slots = slots;
        return Ok(args);
    }
    if args.hosts.is_some() || args.slurm == SlurmArg::Off {
        return Ok(args);
    }
    let allocation = Allocation::detect(|k| std::env::var(k).ok())?;
    let Some(allocation) = allocation else {
        if args.slurm == SlurmArg::On {
            return Err(
                "--slurm on: not inside a Slurm allocation (no SLURM_JOB_ID and \
                        SLURM_JOB_NODELIST, or inside a task of an srun step)"
                    .into(),
            );
        }
        return Ok(args);
    };
    if args.spares > 0 {
        return Err(
            "--spares adds slots on this host; in a Slurm allocation use \
                    --spare-hosts with hosts of the allocation"
                .into(),
        );
    }
    let spare_names: Vec<String> = match &args.spare_hosts {
        Some(s) => placement::parse_hosts(s)
            .map_err(|e| format!("--spare-hosts: {e}"))?
            .into_iter()
            .map(|h| h.name)
            .collect(),
        None => Vec::new(),
    };
    // Spare hosts of the allocation run no node at first.
    let keep: Vec<usize> = (0..allocation.hosts.len())
        .filter(|&i| !spare_names.contains(&allocation.hosts[i]))
        .collect();
    if keep.is_empty() {
        return Err("--spare-hosts names every host of the Slurm allocation".into());
    }
    let hosts = Allocation {
        job: allocation.job.clone(),
        hosts: keep.iter().map(|&i| allocation.hosts[i].clone()).collect(),
        tasks_per_host: keep.iter().map(|&i| allocation.tasks_per_host[i]).collect(),
    };
    let tasks = hosts.tasks();
    let n = match args.nodes {
        Some(n) => usize::from(n),
        None => tasks,
    };
    args.nodes = Some(u16::try_from(n).map_err(|_| format!("{n} nodes: at most 65535"))?);
    // More nodes than tasks (`-n` larger than the allocation's): spread evenly.
    args.host_slots = if n <= tasks {
        hosts.tasks_per_host.clone()
    } else {
        Vec::new()
    };
    args.hosts = Some(hosts.host_spec());
    if args.remote.is_none() {
        args.remote = Some(hosts.remote_template());
    }
    errln!(
        "lazarus: Slurm job {}: {n} nodes on {} ({} host{}), each started as an srun step",
        hosts.job,
        hosts.hosts.join(","),
        hosts.hosts.len(),
        if hosts.hosts.len() == 1 { "" } else { "s" }
    );
    Ok(args)
}

fn run(args: RunArgs, events: &Arc<Timeline>) -> Result<RunOutcome, Box<dyn std::error::Error>> {
    let args = resolve_hosts(args)?;
    let Some(n) = args.nodes.map(usize::from) else {
        return Err("give the number of nodes with -n (or run inside a Slurm allocation)".into());
    };
    if n == 0 {
        return Err("-n must be at least 1".into());
    }
    match args.cores_per_node {
        Some(0) => return Err("--cores-per-node must be at least 1".into()),
        // No host has more; and the launcher multiplies it by the nodes per host.
        Some(c) if c > MAX_CORES_PER_NODE => {
            return Err(format!("--cores-per-node must be at most {MAX_CORES_PER_NODE}").into())
        }
        _ => {}
    }
    if let Some(k) = args
        .kill
        .iter()
        .flat_map(|k| k.0.iter())
        .find(|k| k.rank as usize >= n)
    {
        return Err(format!("--kill names node {} but there are {n} nodes", k.rank).into());
    }
    if let Some(m) = &args.metrics {
        let last = u16::try_from(n - 1).unwrap_or(u16::MAX);
        if m.addr(last).is_none() {
            return Err(format!(
                "--metrics {}:{}: {n} nodes need ports {} to {}, past 65535",
                m.host,
                m.port,
                m.port,
                u32::from(m.port) + u32::from(last)
            )
            .into());
        }
    }
    let ft = args.ft == Ft::On;
    if args.loggers > 0 {
        if !ft || args.log_quota == 0 {
            return Err(
                "--loggers goes with --ft on and a --log-quota: the quota says \
                        what goes to them"
                    .into(),
            );
        }
        if args.hosts.is_some() != args.logger_hosts.is_some() {
            return Err(
                "--logger-hosts goes with --hosts (without --hosts loggers run on this host)"
                    .into(),
            );
        }
        if args.logger_copies > args.loggers {
            return Err(format!(
                "--logger-copies {} needs at least as many --loggers (got {})",
                args.logger_copies, args.loggers
            )
            .into());
        }
    } else if args.logger_hosts.is_some() {
        return Err("--logger-hosts goes with --loggers".into());
    }
    let places = match &args.hosts {
        None => {
            if args.spare_hosts.is_some() || args.remote.is_some() {
                return Err("--spare-hosts and --remote go with --hosts".into());
            }
            let spares = if ft { usize::from(args.spares) } else { 0 };
            let ports = match args.base_port {
                Some(p) => {
                    ports_from(
                        p,
                        n + spares,
                        if spares > 0 {
                            "nodes and spares"
                        } else {
                            "nodes"
                        },
                    )?;
                    (0..n + spares).map(|i| p + i as u16).collect()
                }
                None => free_ports(n + spares)?,
            };
            placement::on_this_host(n, &ports)
        }
        Some(hosts) => {
            if args.remote.as_deref().is_some_and(|r| r.trim().is_empty()) {
                return Err("--remote is empty: give a command such as `ssh {host}`".into());
            }
            if args.spares > 0 {
                return Err(
                    "--spares adds slots on this host; with --hosts use --spare-hosts".into(),
                );
            }
            let hosts = placement::parse_hosts(hosts).map_err(|e| format!("--hosts: {e}"))?;
            let spare_hosts = match (&args.spare_hosts, ft) {
                (Some(s), true) => {
                    placement::parse_hosts(s).map_err(|e| format!("--spare-hosts: {e}"))?
                }
                _ => Vec::new(),
            };
            let base = hosts_base_port(&args);
            let per_host = match args.host_slots.iter().max() {
                Some(&most) => most.min(n),
                None => n.div_ceil(hosts.len().max(1)),
            };
            // Each host's nodes take consecutive ports from the base.
            ports_from(base, per_host, "nodes per host")?;
            placement::on_hosts(n, &hosts, &args.host_slots, &spare_hosts, base)?
        }
    };
    if !ft && !args.ft_options_given.is_empty() {
        let (means, them) = match args.ft_options_given.len() {
            1 => ("means", "it"),
            _ => ("mean", "them"),
        };
        return Err(format!(
            "{} only {means} something with --ft on (no checkpoint is taken and no node is \
             restarted without it): add --ft on, or leave {them} out",
            args.ft_options_given.join(", "),
        )
        .into());
    }
    let per_host = places.per_host;
    // Other hosts are taken to be like this one.
    let host_cores = lazarus::topology::allowed_cores()?.len();
    let per_node = args
        .cores_per_node
        .unwrap_or((host_cores / per_host).max(1));
    let checkpoint_dir = match &args.checkpoint_dir {
        Some(d) => d.clone(),
        None => {
            std::env::temp_dir().join(format!("lazarus-run-{}-{}", std::process::id(), unix_ms()))
        }
    };
    let recovery = args.ft == Ft::On;
    // On this host the launcher can see whether checkpoints can be stored; on other hosts
    // each node checks its own directory when it starts.
    if recovery && args.hosts.is_none() {
        let local = PathBuf::from(checkpoint_dir.to_string_lossy().replace("{host}", "local"));
        lazarus::cluster::check_checkpoint_dir(&local).map_err(|e| {
            format!(
                "checkpoint directory {} is not usable: {e}",
                local.display()
            )
        })?;
    }
    let out = Output {
        lock: Arc::default(),
        checked: Arc::default(),
        violations: Arc::default(),
        result: Arc::default(),
        failures: Arc::default(),
        suspicions: Arc::default(),
        finished: Arc::default(),
        in_place: Arc::default(),
        checkpointed: Arc::default(),
        reports: Arc::default(),
        newest_checkpoint: Arc::default(),
        impossible: Arc::default(),
        start_unix_ms: unix_ms(),
        timed_starts: Arc::default(),
        remote_pids: Arc::default(),
        stderr_lines: Arc::default(),
        events: Arc::clone(events),
    };
    let secret = lazarus::cluster::new_secret_hex()?;
    // Dropped when the run returns: the loggers leave after the nodes.
    let mut loggers = Loggers::start(&args, &secret, &out)?;
    let launch = Launch {
        args: &args,
        slots: Mutex::new(places.slots),
        spares: Mutex::new(places.spares.into()),
        per_host,
        channels: Mutex::default(),
        moved: Mutex::default(),
        secret,
        per_node,
        host_cores,
        oversubscribed: per_node * per_host > host_cores,
        checkpoint_dir: checkpoint_dir.clone(),
        out,
        loggers: loggers.env(),
        hide: Mutex::default(),
    };
    let started = Instant::now();
    // The launcher's own events, on the clock its text timeline has always used.
    let since_start = move || started.elapsed().as_millis() as u64;
    let app_name = Path::new(&args.app[0])
        .file_name()
        .map_or_else(|| args.app[0].clone(), |f| f.to_string_lossy().into_owned());
    launch.out.record(
        RunEvent::new(launch.out.now_ms(), None, "run")
            .field("nodes", n)
            .field("ft", if recovery { "on" } else { "off" })
            .field(
                "what",
                format!(
                    "{} on {n} nodes, recovery {}{}",
                    std::iter::once(app_name.as_str())
                        .chain(args.app[1..].iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" "),
                    if recovery { "on" } else { "off" },
                    if recovery {
                        format!(
                            ", checkpoint every {}",
                            humantime::format_duration(args.checkpoint_every)
                        )
                    } else {
                        String::new()
                    }
                ),
            ),
    );
    // Samples for the dashboard and `--timeline`, a few times a second.
    let mut next_sample = Instant::now();
    let mut nodes = Vec::with_capacity(n);
    for rank in 0..n as u16 {
        nodes.push(launch.start(rank, 0)?);
    }
    let mut kills: Vec<PlannedKill> = args.kill.clone().map(|k| k.0).unwrap_or_default();
    kills.sort_by_key(|k| k.at);
    let mut kills = kills.into_iter().peekable();
    let grace = args.grace;
    let mut app_error: Option<ExitStatus> = None;
    // Nodes killed after the cluster had finished (not restarted): whatever they had still
    // to print is lost; if the run's RESULT was among it, the run failed.
    let mut died_finished: Option<(u16, ExitStatus)> = None;
    let mut first_failure: Option<(u16, ExitStatus, Instant)> = None;
    // What the supervisor remembers of each rank across its processes.
    let mut history: Vec<RankHistory> = vec![RankHistory::default(); n];
    let mut stopping = false;
    // Why a restarted node could not be recovered, once the run is stopped for it.
    let mut impossible: Option<String> = None;
    let mut restarts = 0;
    // With recovery on, whether every node has finished and been told it may leave. Until
    // then no node leaves, so a node that dies can be restarted and replayed; after it no
    // node is needed any more, so none is restarted.
    let mut released = false;
    // Processes already killed because their peers declared them failed.
    let mut fenced: std::collections::HashSet<(u16, u32)> = std::collections::HashSet::new();
    // The stall watchdog (`--stall-timeout`), and whether it ended the run.
    let mut stall_watch = args.stall_timeout.0.map(StallWatch::new);
    let mut stalled = false;
    loop {
        // A node that rolled back in place is the same process as a new incarnation: its
        // `finished` and its peers' suspicions from now on name that one. A `moved` line
        // written while it re-executed may be lost with the old image: say them again.
        let rolled: Vec<(u16, u32)> = std::mem::take(
            &mut *launch
                .out
                .in_place
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (rank, incarnation) in rolled {
            if let Some(node) = nodes
                .iter_mut()
                .find(|x| x.rank == rank && x.status.is_none())
            {
                node.incarnation = node.incarnation.max(incarnation);
            }
            launch.repeat_moves(rank);
        }
        // Fail-stop: a node its peers have declared failed (silent for the failure timeout)
        // is killed if its process is still alive, frozen or overloaded, so that it
        // restarts from its checkpoint like a crashed one. Its peers closed their
        // connections to it and will not take it back as it was.
        let suspicions: Vec<(u16, u32, u16)> = std::mem::take(
            &mut *launch
                .out
                .suspicions
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (peer, incarnation, by) in suspicions {
            let Some(node) = nodes
                .iter_mut()
                .find(|x| x.rank == peer && x.incarnation == incarnation && x.status.is_none())
            else {
                continue;
            };
            if released || !fenced.insert((peer, incarnation)) {
                continue;
            }
            let pid = launch.kill_node(node);
            launch.out.record(
                RunEvent::new(since_start(), Some(peer), "fenced")
                    .field("by", by)
                    .field("incarnation", incarnation)
                    .text(format!(
                        "node {peer}: declared failed by node {by} while its process ({pid}) was alive; killed so that it restarts"
                    )),
            );
        }
        // A restarted node that cannot reach its lost state again (its newest checkpoint
        // was lost and its peers released the messages it needs) would wait for ever:
        // stop every node now and say why.
        let why = (launch.out.impossible.lock())
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(why) = why.filter(|_| !stopping && impossible.is_none()) {
            errln!("lazarus: recovery impossible: {why}; stopping the run");
            launch.out.record(
                RunEvent::new(since_start(), None, "impossible")
                    .field("why", &why)
                    .text("recovery impossible: every node is stopped"),
            );
            stopping = true;
            impossible = Some(why);
            for node in nodes.iter_mut().filter(|n| n.status.is_none()) {
                let _ = node.child.kill();
            }
        }
        let due = |k: &PlannedKill| {
            started.elapsed() >= k.at
                && (!k.after_a_checkpoint
                    || (launch.out.checkpointed.lock())
                        .unwrap_or_else(|e| e.into_inner())
                        .contains(&k.rank))
        };
        while let Some(k) = kills.next_if(due) {
            if let Some(node) = nodes
                .iter_mut()
                .find(|x| x.rank == k.rank && x.status.is_none())
            {
                let pid = launch.kill_node(node);
                launch.out.record(
                    RunEvent::new(since_start(), Some(k.rank), "killed")
                        .text(format!("node {}: SIGKILL ({pid}) as planned", k.rank)),
                );
            }
        }
        // Restarts whose back-off is over. None once the run is being stopped.
        for node in nodes.iter_mut() {
            let rank = usize::from(node.rank);
            let Some((at, incarnation)) = history[rank].pending else {
                continue;
            };
            if stopping {
                history[rank].pending = None;
            } else if Instant::now() >= at {
                history[rank].pending = None;
                *node = launch.start(node.rank, incarnation)?;
                restarts += 1;
            }
        }
        for node in nodes.iter_mut() {
            if node.status.is_some() {
                continue;
            }
            let Some(status) = node.child.try_wait()? else {
                continue;
            };
            node.status = Some(status);
            if !status.success() {
                errln!(
                    "lazarus: node {} (pid {}) {}",
                    node.rank,
                    node.pid,
                    describe(status)
                );
            }
            if recovery && !released && !status.success() {
                // Its peers drop its connection now rather than after the failure timeout,
                // whether or not they ever saw it (a replacement may die as it comes up),
                // and refuse it if its packets were still on their way.
                launch.tell_all(
                    Some(node.rank),
                    &format!("died {} {}", node.rank, node.incarnation),
                );
            }
            // Nodes the launcher itself stops after a fatal failure stay stopped.
            let mut recovery = recovery && !stopping;
            // The node's last words (failures, final totals) decide what follows.
            node.drain_output();
            if status.code() == Some(lazarus::cluster::supervisor_channel::ACTOR_FAILED_EXIT) {
                let failures = launch
                    .out
                    .failures
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let mine = failures.get(&node.rank).map(Vec::as_slice).unwrap_or(&[]);
                if recovery && supervisor::is_deterministic(mine) {
                    recovery = false;
                    errln!(
                        "lazarus: giving up: node {} rolled back {} times and the same actor failed the same way each time (a deterministic bug, not a transient fault): {}",
                        node.rank,
                        supervisor::MAX_SAME_FAILURE,
                        mine.last().map(String::as_str).unwrap_or("")
                    );
                }
            }
            // After the release every node had finished: this one is not needed any more
            // (and its peers may have left, so a replacement could not replay).
            let done = released;
            if done && !status.success() {
                if status.code().is_none() {
                    died_finished.get_or_insert((node.rank, status));
                }
                launch.out.record(
                    RunEvent::new(since_start(), Some(node.rank), "died")
                        .field("status", describe(status))
                        .field("incarnation", node.incarnation)
                        .text(format!(
                            "node {}: died ({}) after every node had finished; not restarted",
                            node.rank,
                            describe(status)
                        )),
                );
                // The others are leaving: they need not wait for its goodbye.
                launch.tell_all(Some(node.rank), &format!("gone {}", node.rank));
            }
            if done && status.code().is_some_and(|c| c != 0) {
                // It finished and then reported an error itself (its result did not
                // verify, say): not restarted, but the run's status is the app's.
                app_error.get_or_insert(status);
            }
            let rank = node.rank;
            let seen = &mut history[usize::from(rank)];
            let checkpointed = launch
                .out
                .checkpointed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&rank);
            let startup_failure = !checkpointed && status.code().is_some_and(|c| c != 0);
            let repeated =
                supervisor::repeats_startup_failure(seen.last_code, status.code(), checkpointed);
            seen.last_code = status.code();
            let mut decision =
                supervisor::on_exit(status.success() || done, recovery, node.incarnation);
            if repeated && matches!(decision, OnExit::Restart { .. }) {
                decision = OnExit::Fail;
                recovery = false;
                errln!(
                    "lazarus: giving up: node {rank} {} again before its first checkpoint, as its \
                     previous process did: a start-up failure (its error is above), not a fault \
                     a restart cures; not restarted again",
                    describe(status)
                );
            }
            match decision {
                OnExit::Done => {}
                OnExit::Restart { incarnation } => {
                    let delay = supervisor::restart_delay(seen.restarts);
                    seen.restarts += 1;
                    if startup_failure {
                        // It may fail the same way again: its error is shown once.
                        let said = launch
                            .out
                            .stderr_lines
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&node.pid)
                            .unwrap_or_default();
                        launch
                            .hide
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(rank, said.into_iter().collect());
                    }
                    let place = match launch.move_to_spare(rank) {
                        Some(place) => format!(" on {place}"),
                        None => String::new(),
                    };
                    let after = match delay.as_millis() {
                        0 => String::new(),
                        ms => format!(" in {ms} ms"),
                    };
                    launch.out.record(
                        RunEvent::new(since_start(), Some(rank), "died")
                            .field("status", describe(status))
                            .field("incarnation", node.incarnation)
                            .field("restart", incarnation)
                            .text(format!(
                                "node {rank}: died ({}), restarting as incarnation {incarnation}{place}{after}",
                                describe(status)
                            )),
                    );
                    if delay.is_zero() {
                        *node = launch.start(rank, incarnation)?;
                        restarts += 1;
                    } else {
                        seen.pending = Some((Instant::now() + delay, incarnation));
                    }
                }
                OnExit::Fail => {
                    if recovery {
                        errln!(
                            "lazarus: node {} failed {} times; giving up on the run",
                            node.rank,
                            node.incarnation + 1
                        );
                    }
                    if first_failure.is_none() {
                        first_failure = Some((node.rank, status, Instant::now()));
                    }
                }
            }
        }
        loggers.restart_dead(started.elapsed(), released || stopping);
        if nodes.iter().all(|n| n.status.is_some()) && history.iter().all(|h| h.pending.is_none()) {
            break;
        }
        if recovery && !released && first_failure.is_none() {
            let may_leave = {
                let finished = launch
                    .out
                    .finished
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let states: Vec<supervisor::NodeState> = nodes
                    .iter()
                    .map(|n| supervisor::NodeState {
                        rank: n.rank,
                        incarnation: n.incarnation,
                        exited_ok: n.status.map(|s| s.success()),
                    })
                    .collect();
                supervisor::may_leave(&states, &finished)
            };
            if may_leave {
                released = true;
                launch.out.record(
                    RunEvent::new(since_start(), None, "released")
                        .text("every node has finished: they may leave"),
                );
                launch.tell_all(None, "leave");
            }
        }
        if let Some((rank, _, at)) = first_failure {
            if at.elapsed() > grace && !stopping {
                stopping = true;
                errln!("lazarus: stopping the remaining nodes: node {rank} failed");
                for node in nodes.iter_mut().filter(|n| n.status.is_none()) {
                    let _ = node.child.kill();
                }
            }
        }
        if launch.out.events.wants_samples() && Instant::now() >= next_sample {
            next_sample = Instant::now() + SAMPLE_EVERY;
            for node in nodes.iter().filter(|n| n.status.is_none()) {
                launch.ask(node.rank, "sample");
            }
        }
        // Once the nodes are leaving (or being stopped), there is nothing to watch.
        if let Some(watch) = stall_watch.as_mut().filter(|_| !released && !stopping) {
            if watch.tick(&launch, &nodes, restarts) {
                stopping = true;
                stalled = true;
                for node in nodes.iter_mut().filter(|n| n.status.is_none()) {
                    let _ = node.child.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let elapsed = started.elapsed();
    // Let the output pumps finish.
    std::thread::sleep(Duration::from_millis(50));
    let result = launch
        .out
        .result
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(line) = &result {
        launch.out.say(line);
    }
    let violations = launch
        .out
        .violations
        .load(std::sync::atomic::Ordering::Relaxed);
    if violations > 0 {
        errln!(
            "lazarus: WARNING: {violations} regenerated message(s) differed from the copies \
             delivered before a failure: the app broke the determinism contract, and this \
             result may not be a failure-free run's (see the node errors above and \
             docs/recovery.md, \"The determinism contract\")"
        );
    }
    if args.checkpoint_dir.is_none() && recovery {
        let _ = std::fs::remove_dir_all(&checkpoint_dir);
    }
    // A run whose answer was lost did not succeed, even though every node's part of it was
    // done (a node killed between its final totals and printing the RESULT).
    let lost_answer = match (&result, died_finished) {
        (None, Some((rank, status))) => {
            errln!(
                "lazarus: node {rank} died ({}) after its part of the run was over but before \
                 the run printed its RESULT: the answer is lost",
                describe(status)
            );
            Some(status)
        }
        _ => None,
    };
    if let Some(why) = &impossible {
        // Last, where a reader of the output looks first.
        errln!("lazarus: recovery impossible: {why}");
    }
    let code = match (first_failure, app_error.or(lost_answer)) {
        _ if stalled => supervisor::STALLED_EXIT,
        _ if impossible.is_some() => supervisor::RECOVERY_IMPOSSIBLE_EXIT,
        (Some((_, status, _)), _) | (None, Some(status)) => exit_code(status),
        (None, None) => 0,
    };
    let mut verdict = RunEvent::new(launch.out.now_ms(), None, "verdict")
        .field("exit", code)
        .field("elapsed_s", format!("{:.2}", elapsed.as_secs_f64()))
        .field("restarts", restarts)
        .field(
            "verified",
            result
                .as_deref()
                .and_then(|r| field(r, "verified"))
                .unwrap_or("unknown"),
        );
    if let Some(line) = &result {
        verdict = verdict.field("result", line);
    }
    launch.out.events.record(verdict);
    Ok(RunOutcome {
        code: ExitCode::from(code),
        result,
        restarts,
        elapsed,
        replay_check: (
            launch
                .out
                .checked
                .load(std::sync::atomic::Ordering::Relaxed),
            violations,
        ),
    })
}

/// The launcher's side of the stall watchdog: asks the running nodes for their reports,
/// feeds them and what it sees of the processes to [`supervisor::Watchdog`], and prints
/// what each node waits for when the run stalls.
struct StallWatch {
    watchdog: supervisor::Watchdog,
    /// When to ask the nodes again.
    next_ask: Instant,
    /// Requests not answered yet, by rank and incarnation: a node is asked again only
    /// once it answered (a node that does not read its channel yet, or cannot answer,
    /// does not pile requests up).
    asked: std::collections::HashMap<(u16, u32), Instant>,
    /// Each rank's newest report and when it came.
    latest: std::collections::BTreeMap<u16, (supervisor::NodeReport, Instant)>,
    /// Restarts and ended processes so far: when it changes, something happened.
    seen: (u32, usize),
}

impl StallWatch {
    fn new(timeout: Duration) -> Self {
        let now = Instant::now();
        StallWatch {
            watchdog: supervisor::Watchdog::new(timeout, now),
            next_ask: now,
            asked: Default::default(),
            latest: Default::default(),
            seen: (0, 0),
        }
    }

    /// One turn of the launcher's loop; true when the run is to be ended (nothing moved
    /// for twice the timeout). `restarts` counts the restarts so far.
    fn tick(&mut self, launch: &Launch<'_>, nodes: &[Node], restarts: u32) -> bool {
        let now = Instant::now();
        let reports =
            std::mem::take(&mut *launch.out.reports.lock().unwrap_or_else(|e| e.into_inner()));
        let mut resumed = None;
        for (report, at) in reports {
            self.asked.remove(&(report.rank, report.incarnation));
            resumed = resumed.or(self.watchdog.observe(&report, at));
            self.latest.insert(report.rank, (report, at));
        }
        let running: Vec<&Node> = nodes.iter().filter(|n| n.status.is_none()).collect();
        let all_finished = {
            let finished = launch.out.finished.lock();
            let finished = finished.unwrap_or_else(|e| e.into_inner());
            running
                .iter()
                .all(|n| finished.contains(&(n.rank, n.incarnation)))
        };
        let seen = (restarts, nodes.len() - running.len());
        // Nodes that started or ended, or that have all finished and wait to leave (or
        // none running: a restart is due), are not a stalled run.
        if seen != self.seen || all_finished {
            self.seen = seen;
            resumed = resumed.or(self.watchdog.activity(now));
        }
        if let Some(idle) = resumed {
            errln!(
                "lazarus: the run moves again, after {:.1} s without a delivered message",
                idle.as_secs_f64()
            );
        }
        if now >= self.next_ask {
            self.next_ask = now + self.watchdog.ask_every();
            for n in &running {
                let key = (n.rank, n.incarnation);
                if !self.asked.contains_key(&key) && launch.ask_report(n.rank) {
                    self.asked.insert(key, now);
                }
            }
        }
        match self.watchdog.poll(now) {
            supervisor::Verdict::Fine => false,
            supervisor::Verdict::Stalled { idle } => {
                self.say_stalled(launch, &running, idle, now);
                false
            }
            supervisor::Verdict::GiveUp { idle } => {
                errln!(
                    "lazarus: still no message delivered after {:.0} s: stopping the nodes; \
                     the run ends with status {}",
                    idle.as_secs_f64(),
                    supervisor::STALLED_EXIT
                );
                true
            }
        }
    }

    /// Prints what each running node waits for, as its newest report says.
    fn say_stalled(&self, launch: &Launch<'_>, running: &[&Node], idle: Duration, now: Instant) {
        let finished = launch
            .out
            .finished
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // One block, not interleaved with the nodes' lines.
        let _g = launch.out.lock.lock().unwrap_or_else(|e| e.into_inner());
        write_line(
            &format!(
                "lazarus: no node delivered a message for {:.0} s; what each node waits for:",
                idle.as_secs_f64()
            ),
            true,
        );
        for n in running {
            let key = (n.rank, n.incarnation);
            let done = if finished.contains(&key) {
                ", main finished"
            } else {
                ""
            };
            let line = match self.latest.get(&n.rank) {
                Some((r, at)) if r.incarnation == n.incarnation => format!(
                    "lazarus:   node {} (incarnation {}, {} messages handled{done}, reported {:.1} s \
                     ago): {}",
                    n.rank,
                    n.incarnation,
                    r.handled,
                    now.saturating_duration_since(*at).as_secs_f64(),
                    r.state
                ),
                _ => match self.asked.get(&key) {
                    Some(at) => format!(
                        "lazarus:   node {} (incarnation {}{done}): no answer to the report \
                         asked {:.1} s ago",
                        n.rank,
                        n.incarnation,
                        now.saturating_duration_since(*at).as_secs_f64()
                    ),
                    None => format!(
                        "lazarus:   node {} (incarnation {}{done}): no report",
                        n.rank, n.incarnation
                    ),
                },
            };
            write_line(&line, true);
        }
        write_line(
            &format!(
                "lazarus: the run is stopped if nothing is delivered for another {:.0} s \
                 (--stall-timeout; a run that is only slow can raise it, or turn it off)",
                idle.as_secs_f64()
            ),
            true,
        );
    }
}

/// The value of `key` in a RESULT line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
}

fn demo(args: &DemoArgs, events: &Arc<Timeline>) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let me = std::env::current_exe()?;
    let dir = me.parent().ok_or("the launcher has no directory")?;
    let app = dir.join("jacobi2d");
    if !app.exists() {
        return Err(format!(
            "{} not found: build the apps first (cargo build --release -p lazarus-apps)",
            app.display()
        )
        .into());
    }
    let app_args = vec![
        app.display().to_string(),
        "--n".into(),
        args.n.to_string(),
        "--iters".into(),
        args.iters.to_string(),
    ];
    let base = RunArgs {
        nodes: Some(4),
        cores_per_node: None,
        base_port: None,
        grace: Duration::from_secs(3),
        ft: Ft::Off,
        failure_timeout: None,
        checkpoint_every: Duration::from_secs(1),
        log_quota: 0,
        loggers: 0,
        logger_hosts: None,
        logger_copies: 1,
        logger_memory: 0,
        checkpoint_dir: None,
        buddy: BuddyArg::Auto,
        spares: 0,
        hosts: None,
        hostfile: None,
        // The demo runs on this host, even inside an allocation.
        slurm: SlurmArg::Off,
        spare_hosts: None,
        remote: None,
        kill: None,
        stall_timeout: StallTimeout(Some(supervisor::DEFAULT_STALL_TIMEOUT)),
        metrics: None,
        watch: WatchArgs::default(),
        app: app_args,
        ft_options_given: Vec::new(),
        host_slots: Vec::new(),
    };
    outln!(
        "== 1. failure-free run: jacobi2d n={} iters={} on 4 nodes, recovery off",
        args.n,
        args.iters
    );
    let reference = run(base.clone(), events)?;
    let ref_line = reference
        .result
        .ok_or("the failure-free run printed no RESULT")?;
    let ref_sum = field(&ref_line, "checksum")
        .ok_or("no checksum in RESULT")?
        .to_string();
    let kill_at = reference.elapsed.as_secs_f64() * args.kill_at.clamp(0.05, 0.95);
    outln!(
        "\n== 2. same run with recovery on (checkpoint every 1s, one spare slot); node {} is SIGKILLed at {kill_at:.2}s, or once it has committed a checkpoint if that is later",
        args.kill_rank
    );
    let faulty = run(
        RunArgs {
            ft: Ft::On,
            // The replacement starts on a spare slot, as it would on a spare host.
            spares: 1,
            // On a fast machine half the run can end before the node's first checkpoint;
            // the demo is about restoring one.
            kill: Some(KillList(vec![PlannedKill {
                rank: args.kill_rank,
                at: Duration::from_secs_f64(kill_at),
                after_a_checkpoint: true,
            }])),
            ..base
        },
        events,
    )?;
    let line = faulty
        .result
        .ok_or("the run with a failure printed no RESULT")?;
    let sum = field(&line, "checksum").ok_or("no checksum in RESULT")?;
    outln!("\n== verdict");
    outln!(
        "failure-free checksum: {ref_sum}  ({:.2}s)",
        reference.elapsed.as_secs_f64()
    );
    outln!(
        "with a SIGKILL:        {sum}  ({:.2}s, {} restart(s))",
        faulty.elapsed.as_secs_f64(),
        faulty.restarts
    );
    let (checked, differed) = faulty.replay_check;
    outln!(
        "replay check:          {checked} regenerated message(s) compared with the copies \
         delivered before the kill, {differed} differed"
    );
    if sum == ref_sum && faulty.restarts > 0 {
        outln!("IDENTICAL: the killed node was restored and replayed; the answer is exactly the failure-free one");
        Ok(ExitCode::SUCCESS)
    } else if faulty.restarts == 0 {
        outln!("NO FAILURE HAPPENED: the run ended before the planned kill");
        Ok(ExitCode::FAILURE)
    } else {
        outln!("DIFFERENT: recovery did not reproduce the failure-free answer");
        Ok(ExitCode::FAILURE)
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(9)) => "was killed by SIGKILL".to_string(),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "ended".to_string(),
    }
}

fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c.clamp(1, 255) as u8,
        (None, Some(s)) => (128 + s).clamp(1, 255) as u8,
        _ => 1,
    }
}

/// Copies a child's output line by line, prefixed with its rank; remembers RESULT lines so
/// the launcher can repeat the final one as its own last line, and turns the nodes'
/// `lazarus-event` lines into timeline entries.
///
/// `source` names the process (its rank and PID). Lines of standard error in `hide` are
/// not printed: the process's previous incarnation printed them already (see
/// [`Launch::start`]).
fn pump(
    stream: impl std::io::Read + Send + 'static,
    source: (u16, u32),
    out: Output,
    to_stderr: bool,
    hide: std::collections::HashSet<String>,
) -> std::thread::JoinHandle<()> {
    let (rank, pid) = source;
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(report) = supervisor::parse_report(&line) {
                // For the stall watchdog; shown only if the run stalls.
                out.reports
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((report, Instant::now()));
                continue;
            }
            if let Some(sample) = supervisor::parse_sample(&line) {
                let mut e = RunEvent::new(out.now_ms(), Some(sample.rank), "sample")
                    .field("incarnation", sample.incarnation)
                    .field("handled", sample.handled)
                    .field("cpu_ms", sample.cpu_ms);
                if let Some((bytes, entries)) = sample.log {
                    e = e.field("log_bytes", bytes).field("log_entries", entries);
                }
                out.events.record(e);
                continue;
            }
            if let Some(e) = supervisor::parse_event(&line) {
                if e.kind == lazarus::cluster::TIMED_PART_EVENT {
                    // Bookkeeping for restarts, not a step of the recovery: no timeline.
                    out.timed_starts
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(e.rank)
                        .or_insert(e.unix_ms);
                    continue;
                }
                if let Some(own) = supervisor::process_pid(&e) {
                    out.remote_pids
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(pid, own);
                }
                if let Some(sig) = supervisor::failure_signature(&e) {
                    out.failures
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(e.rank)
                        .or_default()
                        .push(sig);
                }
                if let Some((peer, incarnation)) = supervisor::suspicion(&e) {
                    out.suspicions
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((peer, incarnation, e.rank));
                }
                if let Some(incarnation) = supervisor::in_place_incarnation(&e) {
                    out.in_place
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((e.rank, incarnation));
                }
                if let Some(n) = supervisor::final_total(&e, "regenerations_checked") {
                    out.checked
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                if let Some(n) = supervisor::final_total(&e, "contract_violations") {
                    out.violations
                        .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                }
                if supervisor::committed_a_checkpoint(&e) {
                    out.checkpointed
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(e.rank);
                }
                if let Some(id) = supervisor::checkpoint_id(&e) {
                    out.newest_checkpoint
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(e.rank, id);
                }
                let newest = |rank| {
                    let ids = out.newest_checkpoint.lock();
                    ids.unwrap_or_else(|e| e.into_inner()).get(&rank).copied()
                };
                if let Some((_, why)) = supervisor::recovery_impossible(&e, newest) {
                    out.impossible
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get_or_insert(why);
                }
                if let Some(incarnation) = supervisor::finished_incarnation(&e) {
                    out.finished
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert((e.rank, incarnation));
                }
                let at = e.unix_ms.saturating_sub(out.start_unix_ms) as u64;
                out.record(
                    RunEvent::new(at, Some(e.rank), &e.kind)
                        .fields_from(&e.details)
                        .text(supervisor::describe_event(&e)),
                );
                continue;
            }
            if !to_stderr && line.starts_with("RESULT ") {
                *out.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(line.clone());
            }
            if to_stderr {
                if hide.contains(&line) {
                    continue;
                }
                let mut said = out.stderr_lines.lock().unwrap_or_else(|e| e.into_inner());
                let mine = said.entry(pid).or_default();
                if mine.len() < STDERR_LINES_KEPT {
                    mine.push(line.clone());
                }
            }
            out.prefixed(&rank.to_string(), &line, to_stderr);
        }
    })
}
