//! Forming a cluster: who this node is, where its peers are, and the one call an app's
//! `main` makes to get a running node that is part of it.
//!
//! [`Cluster::start`] reads the environment and works the same way whether the app was
//! started by `lazarus run`, by Slurm's `srun`, from a static host list, or alone:
//!
//! | started by | what it reads |
//! |---|---|
//! | `lazarus run` / static list | `LAZARUS_RANK`, `LAZARUS_PEERS` (`host:port,...`) or `LAZARUS_HOSTFILE`, `LAZARUS_SECRET` |
//! | `srun` | `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_STEP_NODELIST`, `SLURM_STEP_TASKS_PER_NODE`, `SLURM_JOB_ID`, `SLURM_STEP_ID` |
//! | nothing | one node on all cores |
//!
//! Optional everywhere: `LAZARUS_CORES` (cores for this node), `LAZARUS_CORE_OFFSET`
//! (first core), `LAZARUS_IDLE_SPIN_US`, `LAZARUS_NET` (`thread` or `core0`: see
//! [`NetMode`]), `LAZARUS_TRANSPORT` (`auto`, `shm`, `rdma` or `quic`: see
//! [`DataPath`]), `LAZARUS_SHM_RING_KIB`, `LAZARUS_RDMA_DEVICE`, `LAZARUS_RDMA_PORT`,
//! `LAZARUS_RDMA_GID_INDEX` (with the `rdma` feature), `LAZARUS_FAILURE_TIMEOUT_MS` (see [`ClusterSpec::failure_timeout`]),
//! `LAZARUS_BASE_PORT` (Slurm). Under Slurm the
//! secret comes from `LAZARUS_SECRET` if exported, else from `~/.lazarus/cluster-secret`
//! (created on first use, mode 0600; on a cluster, home directories are shared).

pub mod ending;
pub mod slurm;
pub mod supervisor_channel;

use crate::node::{Node, NodeBuilder, NodeHandle, ShutdownReport};
use crate::recovery::hooks::RecoveryHooks;
use crate::recovery::layer::{RecoveryConfig, RecoveryLayer};
use crate::transport::shm::{segment, DataPath};
use crate::transport::{NetMode, NodeFailure, Transport, TransportConfig, TransportError};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Why a cluster could not be formed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The environment describes the cluster inconsistently.
    #[error("bad cluster environment: {0}")]
    Environment(String),
    /// The local node could not start.
    #[error(transparent)]
    Node(#[from] crate::error::NodeError),
    /// The transport could not start.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The secret file could not be read or created.
    #[error("cluster secret: {0}")]
    Secret(String),
    /// Recovery is on but checkpoints cannot be written where they go.
    #[error("checkpoint directory {} is not usable: {source}", dir.display())]
    CheckpointDir {
        /// The directory.
        dir: PathBuf,
        /// What went wrong creating it or writing in it.
        source: std::io::Error,
    },
}

/// Where the description of the cluster came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// No launcher: one node.
    Alone,
    /// `lazarus run` or a static host list (`LAZARUS_*` variables).
    Lazarus,
    /// Slurm (`SLURM_*` variables).
    Slurm,
}

/// Everything a node needs to join its cluster.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Who started us.
    pub launcher: Launcher,
    /// This node's rank.
    pub rank: u16,
    /// Every node's address by rank (empty when alone).
    pub addrs: Vec<SocketAddr>,
    /// Shared secret (empty when alone).
    pub secret: Vec<u8>,
    /// Cores this node should use (`None`: all allowed).
    pub cores: Option<usize>,
    /// First allowed core this node should use.
    pub core_offset: usize,
    /// Idle spin of the core executors (`None`: the default).
    pub idle_spin: Option<Duration>,
    /// Where the network runs (`None`: [`NetMode::default_for`] the node's core count).
    pub net: Option<NetMode>,
    /// Shared memory, RDMA or QUIC (`LAZARUS_TRANSPORT`: `auto`, the default, `shm`,
    /// `rdma` or `quic`).
    pub data_path: DataPath,
    /// Size of each direction's shared-memory ring (`LAZARUS_SHM_RING_KIB`).
    pub shm_ring_bytes: usize,
    /// Recovery settings (`LAZARUS_FT=on` and friends); `None` when recovery is off.
    pub recovery: Option<RecoveryConfig>,
    /// Silence after which a peer is declared failed (`LAZARUS_FAILURE_TIMEOUT_MS`; `None`:
    /// 1 s, or [`RECOVERY_FAILURE_TIMEOUT`] with recovery on). Raise it on an
    /// oversubscribed host or for single-core nodes whose handlers run for seconds: there
    /// the network runs between core 0's handlers, and a long one silences the node.
    pub failure_timeout: Option<Duration>,
    /// Where this node serves its metrics for Prometheus (`LAZARUS_METRICS_ADDR`; see
    /// [`crate::telemetry::serve_prometheus`]); `None`: nowhere.
    pub metrics_addr: Option<SocketAddr>,
    /// Whether the metrics label each actor's mailbox depth with its id
    /// (`LAZARUS_METRICS_PER_ACTOR=1`; see [`crate::telemetry::set_per_actor_labels`]).
    pub per_actor_metrics: bool,
}

/// `HOST:PORT` of `LAZARUS_METRICS_ADDR`, resolved.
fn metrics_addr(v: &str) -> Result<SocketAddr, ClusterError> {
    use std::net::ToSocketAddrs;
    let bad = |why: String| {
        ClusterError::Environment(format!(
            "{}={v}: {why} (expected HOST:PORT, e.g. 127.0.0.1:9100)",
            crate::telemetry::METRICS_ADDR_VAR
        ))
    };
    v.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("resolves to no address".into()))
}

impl ClusterSpec {
    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.addrs.len().max(1)
    }

    /// Reads the spec from the process environment.
    pub fn from_env() -> Result<ClusterSpec, ClusterError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads the spec from `var` (the environment, or a map in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ClusterSpec, ClusterError> {
        let num = |k: &str| -> Result<Option<usize>, ClusterError> {
            var(k)
                .map(|v| {
                    v.trim()
                        .parse::<usize>()
                        .map_err(|_| ClusterError::Environment(format!("{k}={v} is not a number")))
                })
                .transpose()
        };
        let mut spec = ClusterSpec {
            launcher: Launcher::Alone,
            rank: 0,
            addrs: Vec::new(),
            secret: Vec::new(),
            cores: num("LAZARUS_CORES")?,
            core_offset: num("LAZARUS_CORE_OFFSET")?.unwrap_or(0),
            idle_spin: num("LAZARUS_IDLE_SPIN_US")?.map(|us| Duration::from_micros(us as u64)),
            net: var("LAZARUS_NET")
                .map(|v| v.parse::<NetMode>())
                .transpose()
                .map_err(ClusterError::Environment)?,
            data_path: var("LAZARUS_TRANSPORT")
                .map(|v| v.parse::<DataPath>())
                .transpose()
                .map_err(ClusterError::Environment)?
                .unwrap_or_default(),
            shm_ring_bytes: match num("LAZARUS_SHM_RING_KIB")? {
                None => crate::transport::shm::DEFAULT_RING_BYTES,
                Some(kib) => {
                    let bytes = kib.saturating_mul(1024);
                    if !bytes.is_power_of_two()
                        || !(segment::MIN_RING_BYTES..=segment::MAX_RING_BYTES).contains(&bytes)
                    {
                        return Err(ClusterError::Environment(format!(
                            "LAZARUS_SHM_RING_KIB={kib}: expected a power of two from {} to {}",
                            segment::MIN_RING_BYTES >> 10,
                            segment::MAX_RING_BYTES >> 10
                        )));
                    }
                    bytes
                }
            },
            recovery: RecoveryConfig::from_vars(&var).map_err(ClusterError::Environment)?,
            failure_timeout: num("LAZARUS_FAILURE_TIMEOUT_MS")?
                .map(|ms| usable_failure_timeout(Duration::from_millis(ms as u64)))
                .transpose()
                .map_err(|e| {
                    ClusterError::Environment(format!("LAZARUS_FAILURE_TIMEOUT_MS: {e}"))
                })?,
            metrics_addr: var(crate::telemetry::METRICS_ADDR_VAR)
                .filter(|v| !v.trim().is_empty())
                .map(|v| metrics_addr(v.trim()))
                .transpose()?,
            per_actor_metrics: var("LAZARUS_METRICS_PER_ACTOR").is_some_and(|v| v.trim() == "1"),
        };
        if let Some(rank) = var("LAZARUS_RANK") {
            spec.launcher = Launcher::Lazarus;
            spec.rank = parse_rank(&rank)?;
            let peers = match (var("LAZARUS_PEERS"), var("LAZARUS_HOSTFILE")) {
                (Some(p), _) => p,
                (None, Some(file)) => std::fs::read_to_string(&file)
                    .map_err(|e| {
                        ClusterError::Environment(format!("LAZARUS_HOSTFILE {file}: {e}"))
                    })?
                    .lines()
                    .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
                    .join(","),
                (None, None) => {
                    return Err(ClusterError::Environment(
                        "LAZARUS_RANK is set but neither LAZARUS_PEERS nor LAZARUS_HOSTFILE".into(),
                    ))
                }
            };
            spec.addrs = peers
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| resolve(p.trim()))
                .collect::<Result<_, _>>()?;
            spec.secret = match var("LAZARUS_SECRET") {
                Some(s) => decode_secret(&s)?,
                None => secret_from_file()?,
            };
        } else if let Some(procid) = var("SLURM_PROCID") {
            spec.launcher = Launcher::Slurm;
            spec.rank = parse_rank(&procid)?;
            let ntasks = num("SLURM_NTASKS")?
                .or(num("SLURM_NPROCS")?)
                .ok_or_else(|| {
                    ClusterError::Environment("SLURM_PROCID is set but SLURM_NTASKS is not".into())
                })?;
            let nodelist = var("SLURM_STEP_NODELIST")
                .or_else(|| var("SLURM_JOB_NODELIST"))
                .ok_or_else(|| {
                    ClusterError::Environment("SLURM_STEP_NODELIST is not set".into())
                })?;
            let hosts = slurm::expand_hostlist(&nodelist).map_err(ClusterError::Environment)?;
            let per_node = var("SLURM_STEP_TASKS_PER_NODE")
                .or_else(|| var("SLURM_TASKS_PER_NODE"))
                .ok_or_else(|| {
                    ClusterError::Environment("SLURM_STEP_TASKS_PER_NODE is not set".into())
                })?;
            let per_node =
                slurm::expand_tasks_per_node(&per_node).map_err(ClusterError::Environment)?;
            if ntasks > slurm::MAX_TASKS {
                return Err(ClusterError::Environment(format!(
                    "SLURM_NTASKS={ntasks}: a cluster has at most {} nodes",
                    slurm::MAX_TASKS
                )));
            }
            if per_node.len() != hosts.len() || per_node.iter().sum::<usize>() != ntasks {
                return Err(ClusterError::Environment(format!(
                    "Slurm says {ntasks} tasks on {} hosts but tasks-per-node is {per_node:?}",
                    hosts.len()
                )));
            }
            // Each step gets its own port range so steps of one job do not collide.
            let job = num("SLURM_JOB_ID")?.unwrap_or(0);
            let step = num("SLURM_STEP_ID")?.unwrap_or(0);
            // And its own checkpoints: several jobs may share a host's temporary directory.
            if let (Some(rc), None) = (spec.recovery.as_mut(), var("LAZARUS_CHECKPOINT_DIR")) {
                rc.dir = std::env::temp_dir()
                    .join("lazarus-checkpoints")
                    .join(format!("slurm-{job}.{step}"));
            }
            let base = match num("LAZARUS_BASE_PORT")? {
                Some(p) => p,
                None => 20_000 + (job.wrapping_mul(7).wrapping_add(step) % 1_000) * 32,
            };
            // Block distribution (srun's default): ranks fill hosts in order.
            let mut addrs = Vec::with_capacity(ntasks.min(slurm::MAX_TASKS));
            let mut local = (0, 0); // (tasks on my host, my index on it)
            for (host, &count) in hosts.iter().zip(&per_node) {
                let ip = resolve(&format!("{host}:0"))?.ip();
                for i in 0..count {
                    if addrs.len() == spec.rank as usize {
                        local = (count, i);
                    }
                    let port = base
                        .checked_add(i)
                        .and_then(|p| u16::try_from(p).ok())
                        .ok_or_else(|| {
                            ClusterError::Environment(format!(
                                "port {base} + {i} out of range (LAZARUS_BASE_PORT)"
                            ))
                        })?;
                    addrs.push(SocketAddr::new(ip, port));
                }
            }
            spec.addrs = addrs;
            spec.secret = match var("LAZARUS_SECRET") {
                Some(s) => decode_secret(&s)?,
                None => secret_from_file()?,
            };
            // Share this host's cores among its tasks; with more tasks than cores, park
            // idle executors at once instead of spinning against each other.
            if spec.cores.is_none() && local.0 > 1 {
                let allowed = crate::executor::topology::allowed_cores()?.len();
                let per_task = (allowed / local.0).max(1);
                spec.cores = Some(per_task);
                spec.core_offset = (local.1 * per_task) % allowed;
                if local.0 > allowed && spec.idle_spin.is_none() {
                    spec.idle_spin = Some(Duration::ZERO);
                }
            }
        }
        if spec.addrs.len() > slurm::MAX_TASKS {
            // Ranks and cluster sizes are 16-bit on the wire.
            return Err(ClusterError::Environment(format!(
                "{} nodes: a cluster has at most {}",
                spec.addrs.len(),
                slurm::MAX_TASKS
            )));
        }
        if let Some(rc) = spec.recovery.as_mut() {
            rc.buddy = rc.buddy_mode.resolve(&spec.addrs, spec.rank);
        }
        if spec.launcher != Launcher::Alone && spec.rank as usize >= spec.addrs.len() {
            return Err(ClusterError::Environment(format!(
                "rank {} is outside a cluster of {} nodes",
                spec.rank,
                spec.addrs.len()
            )));
        }
        Ok(spec)
    }
}

/// Where a node records when its rank began the timed part, for an incarnation that
/// rolls back in place (the same process re-executed: the launcher cannot pass it on).
fn timed_part_file(dir: &Path, rank: u16) -> PathBuf {
    dir.join(format!("timed-part-start-{rank}"))
}

fn parse_rank(v: &str) -> Result<u16, ClusterError> {
    v.trim()
        .parse()
        .map_err(|_| ClusterError::Environment(format!("rank `{v}` is not a number below 65536")))
}

fn resolve(addr: &str) -> Result<SocketAddr, ClusterError> {
    addr.to_socket_addrs()
        .map_err(|e| ClusterError::Environment(format!("cannot resolve `{addr}`: {e}")))?
        .find(|a| a.is_ipv4())
        .or_else(|| addr.to_socket_addrs().ok()?.next())
        .ok_or_else(|| ClusterError::Environment(format!("`{addr}` has no address")))
}

/// Parses a hex-encoded secret.
pub fn decode_secret(hex: &str) -> Result<Vec<u8>, ClusterError> {
    let hex = hex.trim();
    if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ClusterError::Secret(
            "LAZARUS_SECRET must be hex digits".into(),
        ));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| ClusterError::Secret(e.to_string()))
        })
        .collect()
}

/// A fresh random secret, hex-encoded.
pub fn new_secret_hex() -> Result<String, ClusterError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| ClusterError::Secret("no randomness available".into()))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn secret_from_file() -> Result<Vec<u8>, ClusterError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let home = std::env::var("HOME").map_err(|_| ClusterError::Secret("HOME is not set".into()))?;
    let dir = std::path::Path::new(&home).join(".lazarus");
    let path = dir.join("cluster-secret");
    std::fs::create_dir_all(&dir)
        .map_err(|e| ClusterError::Secret(format!("{}: {e}", dir.display())))?;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            let tmp = new_secret_hex()?;
            f.write_all(tmp.as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(|e| ClusterError::Secret(format!("{}: {e}", path.display())))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(ClusterError::Secret(format!("{}: {e}", path.display()))),
    }
    // Another task may have just created it: wait for its content.
    for _ in 0..100 {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ClusterError::Secret(format!("{}: {e}", path.display())))?;
        if text.trim().len() >= 64 {
            return decode_secret(&text);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(ClusterError::Secret(format!(
        "{} stays empty",
        path.display()
    )))
}

/// Silence after which a peer is declared failed when recovery is on (1 s without).
pub const RECOVERY_FAILURE_TIMEOUT: Duration = Duration::from_secs(3);

/// The shortest failure timeout accepted: a few heartbeat intervals (100 ms), so that one
/// late heartbeat is not a failure.
pub const MIN_FAILURE_TIMEOUT: Duration = Duration::from_millis(300);

/// `timeout` if it is a usable failure timeout (at least [`MIN_FAILURE_TIMEOUT`]), else
/// why not.
pub fn usable_failure_timeout(timeout: Duration) -> Result<Duration, String> {
    if timeout < MIN_FAILURE_TIMEOUT {
        return Err(format!(
            "a failure timeout of {} ms is below {} ms: heartbeats (every 100 ms) that are merely late would count as failures",
            timeout.as_millis(),
            MIN_FAILURE_TIMEOUT.as_millis()
        ));
    }
    Ok(timeout)
}

/// Checks that checkpoints can be stored in `dir`: creates it (and its parents) and
/// writes and removes a small file in it. A node with recovery on checks this before it
/// starts, and so does `lazarus run --ft on`: a directory that cannot take a checkpoint
/// would leave the run unprotected with nothing to show for it until a failure.
pub fn check_checkpoint_dir(dir: &Path) -> std::io::Result<()> {
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(std::io::Error::other("it exists and is not a directory"));
    }
    std::fs::create_dir_all(dir)?;
    // Nodes on one host check the same directory at once: one probe name per process.
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let probe = dir.join(format!(".lazarus-probe-{}-{nanos}", std::process::id()));
    std::fs::write(&probe, b"lazarus")?;
    std::fs::remove_file(&probe)
}

/// The variable in which `lazarus run` hands a restarted node the wall-clock time (Unix
/// milliseconds) at which its rank began the app's timed part the first time (see
/// [`Cluster::begin_timed_part`]).
pub const TIMED_PART_START_VAR: &str = "LAZARUS_TIMED_PART_START_MS";

/// The node event (`lazarus-event ... timed-part-started`) by which a supervised node
/// tells the launcher that it began the app's timed part.
pub const TIMED_PART_EVENT: &str = "timed-part-started";

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// A running node that is part of a cluster (possibly of one).
pub struct Cluster {
    node: Node,
    transport: Option<Arc<Transport>>,
    spec: ClusterSpec,
    /// What a restarting supervisor says on standard input (recovery on, supervised).
    supervisor: Option<Arc<supervisor_channel::SupervisorChannel>>,
    /// Where the app's timed part began (see [`Cluster::begin_timed_part`]).
    timed_start: OnceLock<Instant>,
}

/// Set to `1` by `lazarus run` for a node it starts through a remote command: the node
/// then reports its process id and host (the `process` event of the timeline).
pub const REPORT_PROCESS_VAR: &str = "LAZARUS_REPORT_PROCESS";

/// This host's name (`/proc/sys/kernel/hostname`), if it can be read.
fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

impl Cluster {
    /// Forms the cluster described by the environment, with default node settings.
    pub fn start() -> Result<Cluster, ClusterError> {
        Self::start_with(ClusterSpec::from_env()?, Node::builder())
    }

    /// Forms the cluster described by `spec`, starting the local node from `builder`.
    pub fn start_with(spec: ClusterSpec, builder: NodeBuilder) -> Result<Cluster, ClusterError> {
        crate::telemetry::set_per_actor_labels(spec.per_actor_metrics);
        if std::env::var(REPORT_PROCESS_VAR).is_ok_and(|v| v.trim() == "1") {
            // Started through a remote command (`ssh`, an `srun` step): the launcher's
            // child is that command, so the node says which process it is, and where.
            supervisor_channel::event(
                spec.rank,
                &format!(
                    "process pid={} host={}",
                    std::process::id(),
                    host_name().unwrap_or_else(|| "unknown".into())
                ),
            );
        }
        if let Some(addr) = spec.metrics_addr {
            // Metrics are for watching: a node that cannot serve them says so and runs on.
            match crate::telemetry::serve_prometheus(addr, spec.rank) {
                Ok(()) => {
                    tracing::info!(rank = spec.rank, %addr, "metrics served at http://{addr}/metrics")
                }
                Err(e) => {
                    tracing::error!(rank = spec.rank, %addr, "cannot serve metrics at {addr}: {e}");
                    eprintln!("node {}: cannot serve metrics at {addr}: {e}", spec.rank);
                }
            }
        }
        let mut builder = builder.rank(spec.rank).core_offset(spec.core_offset);
        if let Some(c) = spec.cores {
            builder = builder.cores(c);
        }
        if let Some(s) = spec.idle_spin {
            builder = builder.idle_spin(s);
        }
        let protected = spec.launcher != Launcher::Alone && spec.addrs.len() > 1;
        if let Some(rc) = spec.recovery.as_ref().filter(|_| protected) {
            // Refused now rather than found out at the first checkpoint, which would only
            // say so while the node runs on unprotected.
            check_checkpoint_dir(&rc.dir).map_err(|source| ClusterError::CheckpointDir {
                dir: rc.dir.clone(),
                source,
            })?;
            if rc.incarnation == 0 {
                // What an earlier run with this directory left must not date this one.
                let _ = std::fs::remove_file(timed_part_file(&rc.dir, spec.rank));
            }
        }
        let node = builder.build()?;
        let mut supervisor = None;
        let transport = if !protected {
            None
        } else {
            let mut config =
                TransportConfig::new(spec.rank, spec.addrs.clone(), spec.secret.clone());
            // With recovery on too: a checkpoint stops core 0's network (heartbeats
            // included) only while it reads the set's states (milliseconds for tens of MB;
            // storing happens after the cores resume), far below the failure timeout, and
            // the network on core 0 saves a thread hand-off per message.
            config.net_mode = spec
                .net
                .unwrap_or_else(|| NetMode::default_for(node.num_cores()));
            config.data_path = spec.data_path;
            config.shm_ring_bytes = spec.shm_ring_bytes;
            // The layer exists before the first frame can arrive.
            if let Some(fp) = std::env::var("LAZARUS_FAILPOINT")
                .ok()
                .filter(|v| !v.is_empty())
            {
                let points = crate::failpoint::parse_all(&fp).map_err(ClusterError::Environment)?;
                for point in points {
                    crate::failpoint::arm(
                        point,
                        spec.rank,
                        spec.recovery.as_ref().map_or(0, |r| r.incarnation),
                    );
                }
            }
            let layer = spec.recovery.clone().map(|rc| {
                config.incarnation = rc.incarnation;
                config.reconnect = true;
                // With recovery on, a dead node is restarted by its supervisor and its peers
                // learn of it from the replacement's Hello; silence only has to catch what
                // nobody restarts. A false suspicion, on the other hand, costs the frames of
                // the connection it closes (a live peer is not resynchronised): on a node
                // whose core 0 pauses for checkpoints of hundreds of MB while its cores are
                // oversubscribed, heartbeats can be a second late.
                config.failure_timeout = RECOVERY_FAILURE_TIMEOUT;
                let layer = RecoveryLayer::new(spec.rank, spec.addrs.len() as u16, rc);
                node.handle()
                    .set_recovery(Arc::clone(&layer) as Arc<dyn RecoveryHooks>);
                layer
            });
            if let Some(timeout) = spec.failure_timeout {
                config.failure_timeout = timeout;
            }
            crate::failpoint::before_joining();
            let t = Transport::start(config, node.handle().clone())?;
            supervisor_channel::event(
                spec.rank,
                &format!(
                    "connected peers={} shared_memory={} rdma={}",
                    t.size() - 1,
                    t.shared_memory_peers(),
                    t.rdma_peers()
                ),
            );
            node.handle().set_transport(Arc::clone(&t));
            let supervised = match &spec.recovery {
                Some(r) => r.supervised,
                // Recovery off: the launcher's channel only carries `report`, for its
                // stall watchdog.
                None => {
                    spec.launcher == Launcher::Lazarus
                        && std::env::var("LAZARUS_SUPERVISOR").is_ok_and(|v| v.trim() == "stdin")
                }
            };
            if supervised {
                supervisor = Some(
                    supervisor_channel::SupervisorChannel::start(
                        Arc::clone(&t),
                        node.handle().clone(),
                    )
                    .map_err(|e| ClusterError::Environment(format!("supervisor channel: {e}")))?,
                );
            }
            if let Some(layer) = layer {
                layer
                    .attach(Arc::clone(&t))
                    .map_err(|e| ClusterError::Environment(format!("recovery layer: {e}")))?;
                layer
                    .start_log_offload(&spec.secret)
                    .map_err(|e| ClusterError::Environment(format!("logger nodes: {e}")))?;
                if layer.config().incarnation > 0 {
                    layer
                        .begin_restore(node.handle())
                        .map_err(|e| ClusterError::Environment(format!("restore: {e}")))?;
                }
                layer.start_checkpointer(node.handle().clone());
            }
            Some(t)
        };
        Ok(Cluster {
            node,
            transport,
            spec,
            supervisor,
            timed_start: OnceLock::new(),
        })
    }

    /// Marks the start of the app's timed part and returns it, for `elapsed` times that
    /// cover the whole run whatever restarted. Call it where the timed part starts, in
    /// every incarnation: a restarted node re-runs `main` up to there.
    ///
    /// The first time this rank gets there (normally its first incarnation) it is now.
    /// In a later incarnation of the rank (recovery on) it is the instant of that first
    /// time, so `started.elapsed()` counts the work lost to failures and the recovery too,
    /// and a failure-free run still counts only its timed part. The instant comes from
    /// the launcher (`lazarus run --ft on`, which learns it from the node's
    /// `timed-part-started` event and passes it in [`TIMED_PART_START_VAR`] to a
    /// restart, also on another host), or, for a node that rolled back in place, from a
    /// file in its checkpoint directory. Hosts' wall clocks are taken to agree. Without
    /// recovery, or with neither source, it is now. Later calls in the same process
    /// return the first call's instant.
    pub fn begin_timed_part(&self) -> Instant {
        *self.timed_start.get_or_init(|| {
            let now = Instant::now();
            let Some(rc) = self.spec.recovery.as_ref() else {
                return now;
            };
            let file = timed_part_file(&rc.dir, self.spec.rank);
            let recorded = (rc.incarnation > 0)
                .then(|| {
                    std::env::var(TIMED_PART_START_VAR)
                        .ok()
                        .or_else(|| std::fs::read_to_string(&file).ok())
                        .and_then(|v| v.trim().parse::<u128>().ok())
                })
                .flatten();
            if let Some(ms) = recorded {
                // Back-dated on this process's monotonic clock by the wall-clock time since.
                let since = u64::try_from(unix_ms().saturating_sub(ms)).unwrap_or(u64::MAX);
                return now.checked_sub(Duration::from_millis(since)).unwrap_or(now);
            }
            // Only a restart reads them, and only with recovery on is there one.
            if rc.supervised {
                crate::cluster::supervisor_channel::event(self.spec.rank, TIMED_PART_EVENT);
            }
            // A node without a recovery layer keeps no checkpoint directory.
            if self.transport.is_some() {
                if let Err(e) = std::fs::write(&file, unix_ms().to_string()) {
                    tracing::debug!(
                        "cannot record the timed part's start in {}: {e}",
                        file.display()
                    );
                }
            }
            now
        })
    }

    /// This node's rank.
    pub fn rank(&self) -> u16 {
        self.spec.rank
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        self.spec.size()
    }

    /// How the cluster was formed.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The local node.
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// A handle to the local node.
    pub fn handle(&self) -> &NodeHandle {
        self.node.handle()
    }

    /// Calls `hook` (on the network thread) when a node is detected dead.
    pub fn on_node_failure(&self, hook: impl Fn(&NodeFailure) + Send + Sync + 'static) {
        if let Some(t) = &self.transport {
            t.on_node_failure(Arc::new(hook));
        }
    }

    /// Creates the cluster's next one-sided window: `len` elements of `T` on every node.
    /// Every node's `main` creates the same windows in the same order (a window is named
    /// by its order); operations from nodes that got there first wait for it.
    ///
    /// With recovery on, windows are refused for now: their checkpoints and restart are
    /// not in the runtime yet (the rules are, in `lazarus_proto::window`).
    pub fn window<T: crate::window::Element>(
        &self,
        len: usize,
    ) -> Result<crate::window::Window<T>, crate::window::WindowError> {
        let node = self.node.handle();
        let members = u16::try_from(self.size()).map_err(|_| {
            crate::window::WindowError::Unsupported("more than 65,535 nodes".into())
        })?;
        let shared = node.windows().create(node, members, T::TYPE, len as u64)?;
        Ok(crate::window::Window::new(shared))
    }

    /// Blocks until every node has reached this barrier.
    pub fn barrier(&self) -> Result<(), ClusterError> {
        match &self.transport {
            None => Ok(()),
            Some(t) => Ok(self.node.block_on(t.barrier())?),
        }
    }

    /// Leaves the cluster cleanly: drains the local mailboxes, flushes everything queued
    /// for other nodes and says goodbye (while the cores, which may drive the network,
    /// still run), then stops the local node.
    ///
    /// Under a supervisor that restarts failed nodes (recovery on, `lazarus run`) this has
    /// two phases: the node drains, says it has finished and keeps serving its peers
    /// until the supervisor has seen every node finish; only then does it leave. A node
    /// that left early could not answer the rollback of a peer that dies after it.
    pub fn shutdown(self) -> ShutdownReport {
        if let Some(layer) = self.node.handle().recovery() {
            if let Some(supervisor) = &self.supervisor {
                self.node.drain();
                layer.announce_finished();
                supervisor.wait_for_leave();
            }
            layer.shutdown();
        }
        self.node.drain();
        if let Some(t) = &self.transport {
            t.close();
        }
        self.node.handle().windows().close();
        self.node.shutdown()
    }
}

impl std::ops::Deref for Cluster {
    type Target = Node;
    fn deref(&self) -> &Node {
        &self.node
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn spec(vars: &[(&str, &str)]) -> Result<ClusterSpec, ClusterError> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ClusterSpec::from_vars(|k| map.get(k).cloned())
    }

    #[test]
    fn no_launcher_means_one_node() {
        let s = spec(&[]).unwrap();
        assert_eq!((s.launcher, s.rank, s.size()), (Launcher::Alone, 0, 1));
    }

    #[test]
    fn lazarus_variables_give_rank_peers_and_secret() {
        let s = spec(&[
            ("LAZARUS_RANK", "1"),
            ("LAZARUS_PEERS", "127.0.0.1:4000,127.0.0.1:4001"),
            ("LAZARUS_SECRET", "00112233445566778899aabbccddeeff"),
        ])
        .unwrap();
        assert_eq!(s.launcher, Launcher::Lazarus);
        assert_eq!(s.rank, 1);
        assert_eq!(s.addrs[1], "127.0.0.1:4001".parse().unwrap());
        assert_eq!(s.secret.len(), 16);
    }

    #[test]
    fn the_failure_timeout_is_read_in_milliseconds_and_refused_below_three_heartbeats() {
        assert_eq!(spec(&[]).unwrap().failure_timeout, None);
        let s = spec(&[("LAZARUS_FAILURE_TIMEOUT_MS", "5000")]).unwrap();
        assert_eq!(s.failure_timeout, Some(Duration::from_secs(5)));
        let err = spec(&[("LAZARUS_FAILURE_TIMEOUT_MS", "100")])
            .expect_err("100 ms is refused")
            .to_string();
        assert!(
            err.contains("LAZARUS_FAILURE_TIMEOUT_MS") && err.contains("100 ms is below 300 ms"),
            "{err}"
        );
        assert!(spec(&[("LAZARUS_FAILURE_TIMEOUT_MS", "soon")]).is_err());
    }

    #[test]
    fn the_log_quota_is_read_in_bytes_zero_meaning_none_and_garbage_refused() {
        let quota = |v: &str| {
            spec(&[("LAZARUS_FT", "on"), ("LAZARUS_LOG_QUOTA", v)])
                .map(|s| s.recovery.expect("recovery on").log_quota)
        };
        assert_eq!(quota("67108864").unwrap(), Some(64 << 20));
        assert_eq!(quota("0").unwrap(), None);
        let err = quota("64MiB").expect_err("bytes only").to_string();
        assert!(
            err.contains("LAZARUS_LOG_QUOTA=64MiB is not a number"),
            "{err}"
        );
        let unset = spec(&[("LAZARUS_FT", "on")]).unwrap();
        assert_eq!(unset.recovery.expect("recovery on").log_quota, None);
    }

    #[test]
    fn logger_nodes_are_read_as_addresses_and_garbage_refused() {
        let loggers = |v: &str| {
            spec(&[("LAZARUS_FT", "on"), ("LAZARUS_LOGGERS", v)])
                .map(|s| s.recovery.expect("recovery on").loggers)
        };
        assert_eq!(
            loggers("127.0.0.1:7000,127.0.0.1:7001").unwrap(),
            vec![
                "127.0.0.1:7000".parse().unwrap(),
                "127.0.0.1:7001".parse().unwrap()
            ]
        );
        assert!(loggers("").unwrap().is_empty());
        let err = loggers("127.0.0.1:7000,nowhere")
            .expect_err("not an address")
            .to_string();
        assert!(
            err.contains("LAZARUS_LOGGERS: nowhere is not host:port"),
            "{err}"
        );
    }

    #[test]
    fn a_static_host_file_lists_one_node_per_line() {
        let file = std::env::temp_dir().join(format!("lazarus-hosts-{}", std::process::id()));
        std::fs::write(
            &file,
            "# the cluster\n127.0.0.1:5000\n\n127.0.0.1:5001  # second\n",
        )
        .unwrap();
        let s = spec(&[
            ("LAZARUS_RANK", "1"),
            ("LAZARUS_HOSTFILE", file.to_str().unwrap()),
            ("LAZARUS_SECRET", "00112233445566778899aabbccddeeff"),
        ])
        .unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(s.size(), 2);
        assert_eq!(s.addrs[1], "127.0.0.1:5001".parse().unwrap());
    }

    #[test]
    fn slurm_variables_place_ranks_on_hosts_in_blocks() {
        let s = spec(&[
            ("SLURM_PROCID", "3"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_STEP_NODELIST", "localhost"),
            ("SLURM_STEP_TASKS_PER_NODE", "4"),
            ("SLURM_JOB_ID", "12"),
            ("SLURM_STEP_ID", "0"),
            ("LAZARUS_SECRET", "00112233445566778899aabbccddeeff"),
        ])
        .unwrap();
        assert_eq!(s.launcher, Launcher::Slurm);
        assert_eq!(s.rank, 3);
        assert_eq!(s.size(), 4);
        let ports: Vec<u16> = s.addrs.iter().map(|a| a.port()).collect();
        let base = 20_000 + 12 * 7 * 32; // job 12, step 0
        assert_eq!(ports, [base, base + 1, base + 2, base + 3]);
    }

    #[test]
    fn each_slurm_step_keeps_its_checkpoints_apart_unless_told_where() {
        let dir = |job: &'static str, step: &'static str, explicit: Option<&'static str>| {
            let mut vars = vec![
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_STEP_NODELIST", "localhost"),
                ("SLURM_STEP_TASKS_PER_NODE", "2"),
                ("SLURM_JOB_ID", job),
                ("SLURM_STEP_ID", step),
                ("LAZARUS_SECRET", "00112233445566778899aabbccddeeff"),
                ("LAZARUS_FT", "on"),
            ];
            vars.extend(explicit.map(|d| ("LAZARUS_CHECKPOINT_DIR", d)));
            spec(&vars).unwrap().recovery.expect("recovery is on").dir
        };
        assert_ne!(dir("12", "0", None), dir("13", "0", None), "another job");
        assert_ne!(dir("12", "0", None), dir("12", "1", None), "another step");
        assert!(dir("12", "0", None).ends_with("slurm-12.0"));
        assert_eq!(
            dir("12", "0", Some("/scratch/ckpt")),
            std::path::PathBuf::from("/scratch/ckpt")
        );
    }

    #[test]
    fn the_buddy_replica_is_kept_by_default_only_when_the_buddy_is_on_another_host() {
        let buddy = |rank: &str, peers: &str, mode: Option<&str>| {
            let mut vars = vec![
                ("LAZARUS_RANK", rank),
                ("LAZARUS_PEERS", peers),
                ("LAZARUS_SECRET", "00112233445566778899aabbccddeeff"),
                ("LAZARUS_FT", "on"),
            ];
            vars.extend(mode.map(|m| ("LAZARUS_BUDDY", m)));
            spec(&vars).map(|s| s.recovery.expect("recovery is on").buddy)
        };
        let one_host = "127.0.0.1:4000,127.0.0.1:4001";
        let two_hosts = "127.0.0.1:4000,127.0.0.1:4001,127.0.0.2:4000";
        assert!(!buddy("0", one_host, None).unwrap());
        assert!(!buddy("0", one_host, Some("auto")).unwrap());
        assert!(buddy("0", one_host, Some("on")).unwrap());
        // Rank 1's buddy (rank 2) is on the other host, rank 0's (rank 1) is not.
        assert!(buddy("1", two_hosts, None).unwrap());
        assert!(!buddy("0", two_hosts, None).unwrap());
        assert!(buddy("2", two_hosts, None).unwrap());
        assert!(!buddy("1", two_hosts, Some("off")).unwrap());
        let err = buddy("0", one_host, Some("sometimes")).unwrap_err();
        assert!(err.to_string().contains("LAZARUS_BUDDY=sometimes"), "{err}");
    }

    #[test]
    fn a_checkpoint_directory_must_be_one_that_can_be_created_and_written() {
        let root = std::env::temp_dir().join(format!("lazarus-ckpt-dir-{}", std::process::id()));
        let dir = root.join("run").join("nodes");
        check_checkpoint_dir(&dir).expect("created with its parents");
        assert!(dir.is_dir());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "the probe file is gone"
        );
        let file = root.join("file");
        std::fs::write(&file, "not a directory").unwrap();
        let err = check_checkpoint_dir(&file).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
        assert!(check_checkpoint_dir(Path::new("/proc/nope")).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_metrics_address_is_host_and_port_or_a_clear_error() {
        let s = spec(&[("LAZARUS_METRICS_ADDR", "127.0.0.1:9105")]).unwrap();
        assert_eq!(s.metrics_addr, Some("127.0.0.1:9105".parse().unwrap()));
        assert!(!s.per_actor_metrics);
        let s = spec(&[("LAZARUS_METRICS_PER_ACTOR", "1")]).unwrap();
        assert!(s.per_actor_metrics && s.metrics_addr.is_none());
        for bad in ["9105", "localhost", "127.0.0.1:port"] {
            let err = spec(&[("LAZARUS_METRICS_ADDR", bad)])
                .unwrap_err()
                .to_string();
            assert!(err.contains("expected HOST:PORT"), "{bad}: {err}");
        }
    }

    #[test]
    fn inconsistent_environments_are_clear_errors() {
        let err = spec(&[
            ("LAZARUS_RANK", "5"),
            ("LAZARUS_PEERS", "127.0.0.1:1"),
            ("LAZARUS_SECRET", "aa"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("outside a cluster of 1"), "{err}");
        assert!(spec(&[("LAZARUS_RANK", "x")]).is_err());
        assert!(spec(&[("LAZARUS_RANK", "0")])
            .unwrap_err()
            .to_string()
            .contains("LAZARUS_PEERS"));
        let err = spec(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_STEP_NODELIST", "localhost"),
            ("SLURM_STEP_TASKS_PER_NODE", "4"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("3 tasks"), "{err}");
        // Sizes beyond 16-bit ranks are refused before anything is built for them.
        let err = spec(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "99999999"),
            ("SLURM_STEP_NODELIST", "localhost"),
            ("SLURM_STEP_TASKS_PER_NODE", "1"),
        ])
        .unwrap_err()
        .to_string();
        assert!(err.contains("at most 65535 nodes"), "{err}");
        assert!(decode_secret("xyz").is_err());
    }
}
