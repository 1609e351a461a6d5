//! `lazarus`: the launcher. `lazarus run -n N -- <app> [args]` starts N node processes of
//! an app on this host, wires them into one authenticated cluster, prefixes their output
//! with their rank, and exits with the app's status.

use clap::{Parser, Subcommand};
use std::io::{BufRead, BufReader, Write};
use std::net::UdpSocket;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(name = "lazarus", version, about = "Launch Lazarus actor applications")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run N nodes of an app on this host as one cluster.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Number of nodes (processes).
    #[arg(short = 'n', long = "nodes")]
    nodes: u16,
    /// Cores per node (default: this host's cores divided among the nodes, at least 1).
    #[arg(long)]
    cores_per_node: Option<usize>,
    /// First UDP port (default: free ports chosen by the OS).
    #[arg(long)]
    base_port: Option<u16>,
    /// Seconds to let surviving nodes report after one dies before they are stopped.
    #[arg(long, default_value_t = 3.0)]
    grace: f64,
    /// The app binary and its arguments.
    #[arg(last = true, required = true)]
    app: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Run(args) => match run(args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("lazarus: error: {e}");
                ExitCode::from(2)
            }
        },
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
    child: Child,
    status: Option<ExitStatus>,
}

fn run(args: RunArgs) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let n = args.nodes as usize;
    if n == 0 {
        return Err("-n must be at least 1".into());
    }
    let ports = match args.base_port {
        Some(p) => (0..n as u16).map(|i| p.saturating_add(i)).collect(),
        None => free_ports(n)?,
    };
    let peers = ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect::<Vec<_>>()
        .join(",");
    let secret = lazarus::cluster::new_secret_hex()?;
    let host_cores = lazarus::topology::allowed_cores()?.len();
    let per_node = args.cores_per_node.unwrap_or((host_cores / n).max(1));
    let oversubscribed = per_node * n > host_cores;

    let out = Arc::new(Mutex::new(()));
    let last_result: Arc<Mutex<Option<String>>> = Arc::default();
    let mut nodes = Vec::with_capacity(n);
    for rank in 0..n as u16 {
        let mut cmd = Command::new(&args.app[0]);
        cmd.args(&args.app[1..])
            .env("LAZARUS_RANK", rank.to_string())
            .env("LAZARUS_PEERS", &peers)
            .env("LAZARUS_SECRET", &secret)
            .env("LAZARUS_CORES", per_node.to_string())
            .env(
                "LAZARUS_CORE_OFFSET",
                ((rank as usize * per_node) % host_cores).to_string(),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if oversubscribed {
            // More executor threads than cores: spinning would steal the cores others need.
            cmd.env("LAZARUS_IDLE_SPIN_US", "0");
        }
        // SAFETY: the closure runs in the forked child before exec and only calls prctl,
        // which is async-signal-safe; it allocates nothing and touches no locks.
        unsafe {
            cmd.pre_exec(|| {
                // Die with the launcher: no orphaned nodes if it is killed.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", args.app[0]))?;
        let pid = child.id();
        {
            let _g = out.lock().unwrap_or_else(|e| e.into_inner());
            println!("node {rank} pid {pid}");
            let _ = std::io::stdout().flush();
        }
        if let Some(stdout) = child.stdout.take() {
            pump(
                stdout,
                rank,
                Arc::clone(&out),
                Some(Arc::clone(&last_result)),
                false,
            );
        }
        if let Some(stderr) = child.stderr.take() {
            pump(stderr, rank, Arc::clone(&out), None, true);
        }
        nodes.push(Node {
            rank,
            pid,
            child,
            status: None,
        });
    }

    let grace = Duration::from_secs_f64(args.grace.max(0.0));
    let mut first_failure: Option<(u16, ExitStatus, Instant)> = None;
    loop {
        for node in nodes.iter_mut().filter(|n| n.status.is_none()) {
            if let Some(status) = node.child.try_wait()? {
                node.status = Some(status);
                if !status.success() {
                    eprintln!(
                        "lazarus: node {} (pid {}) {}",
                        node.rank,
                        node.pid,
                        describe(status)
                    );
                    if first_failure.is_none() {
                        first_failure = Some((node.rank, status, Instant::now()));
                    }
                }
            }
        }
        if nodes.iter().all(|n| n.status.is_some()) {
            break;
        }
        if let Some((rank, _, at)) = first_failure {
            if at.elapsed() > grace {
                eprintln!(
                    "lazarus: stopping the remaining nodes: node {rank} failed and recovery is off"
                );
                for node in nodes.iter_mut().filter(|n| n.status.is_none()) {
                    let _ = node.child.kill();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the output pumps finish.
    std::thread::sleep(Duration::from_millis(50));
    let _g = out.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(line) = last_result.lock().unwrap_or_else(|e| e.into_inner()).take() {
        println!("{line}");
    }
    Ok(match first_failure {
        None => ExitCode::SUCCESS,
        Some((_, status, _)) => ExitCode::from(exit_code(status)),
    })
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
/// the launcher can repeat the final one as its own last line.
fn pump(
    stream: impl std::io::Read + Send + 'static,
    rank: u16,
    lock: Arc<Mutex<()>>,
    results: Option<Arc<Mutex<Option<String>>>>,
    to_stderr: bool,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(r) = &results {
                if line.starts_with("RESULT ") {
                    *r.lock().unwrap_or_else(|e| e.into_inner()) = Some(line.clone());
                }
            }
            let _g = lock.lock().unwrap_or_else(|e| e.into_inner());
            if to_stderr {
                eprintln!("[{rank}] {line}");
            } else {
                println!("[{rank}] {line}");
            }
        }
    });
}
