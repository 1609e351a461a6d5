//! How a node takes part in recovery: the settings the launcher passes in environment
//! variables (`LAZARUS_*`), parsed and checked once at start.

use std::path::PathBuf;
use std::time::Duration;

/// How a node takes part in recovery.
#[derive(Clone, Debug)]
pub struct RecoveryConfig {
    /// Period of the node's coordinated checkpoints (`None`: on demand only).
    pub checkpoint_every: Option<Duration>,
    /// Memory quota of the node's sender-based log in bytes (`LAZARUS_LOG_QUOTA`): above
    /// it the node asks the receivers holding the largest shares to checkpoint early
    /// (see [`crate::recovery::Config::log_quota`]). `None`: no quota.
    pub log_quota: Option<usize>,
    /// Logger nodes (`LAZARUS_LOGGERS`, `host:port,...`): with a quota, the part of the
    /// log over three quarters of it is dumped to them (see `log_offload`).
    pub loggers: Vec<std::net::SocketAddr>,
    /// Loggers that keep each dumped block (`LAZARUS_LOGGER_COPIES`, default 1; 2 makes
    /// the loss of one logger harmless).
    pub logger_copies: u16,
    /// Directory of the checkpoint store (shared by the nodes of a host).
    pub dir: PathBuf,
    /// This process's incarnation of its rank: 0 at launch, one more per restart.
    pub incarnation: u32,
    /// Also keep each checkpoint in the memory of the next node (rank + 1).
    /// `LAZARUS_BUDDY=on|off`; unset or `auto` resolves to [`Buddy::Auto`], which the
    /// cluster turns into on exactly when that node lives on another host (see
    /// [`Buddy::resolve`]).
    pub buddy: bool,
    /// How `buddy` was chosen.
    pub buddy_mode: Buddy,
    /// For measurements: log and piggyback every message, also those inside the node.
    pub log_everything: bool,
    /// Event loggers per node: the nodes that keep this node's determinants.
    pub event_loggers: u16,
    /// A supervisor restarts this rank when it dies and talks to the node on its standard
    /// input (`LAZARUS_SUPERVISOR=stdin`, set by the `lazarus` launcher; see
    /// `cluster::supervisor_channel`): at shutdown the node announces that it has
    /// finished, then waits, still answering its peers, until the supervisor says every
    /// node has finished. A node that left could not resend its log to a peer that dies
    /// after it.
    pub supervised: bool,
}

impl RecoveryConfig {
    /// The protocol's tunables that this configuration sets.
    pub(crate) fn protocol(&self) -> crate::recovery::Config {
        crate::recovery::Config {
            log_quota: self.log_quota,
            ..Default::default()
        }
    }

    /// What the recovery machine of node `nodes`' member starts or restores with.
    pub(crate) fn node(&self, nodes: u16) -> crate::recovery::NodeConfig {
        crate::recovery::NodeConfig {
            nodes,
            event_loggers: self.event_loggers,
            protocol: self.protocol(),
        }
    }

    /// A configuration for unit tests: no periodic checkpoints, images in `dir`,
    /// incarnation 0, no buddy replica, one event logger.
    #[cfg(test)]
    pub(crate) fn for_tests(dir: std::path::PathBuf) -> Self {
        RecoveryConfig {
            checkpoint_every: None,
            log_quota: None,
            loggers: Vec::new(),
            logger_copies: 1,
            dir,
            incarnation: 0,
            buddy: false,
            buddy_mode: Buddy::Off,
            log_everything: false,
            event_loggers: 1,
            supervised: false,
        }
    }

    /// Reads `LAZARUS_FT` (`on`/`off`), `LAZARUS_CHECKPOINT_EVERY_MS`, `LAZARUS_LOG_QUOTA`
    /// (bytes, 0 or unset: none), `LAZARUS_LOGGERS`, `LAZARUS_LOGGER_COPIES`,
    /// `LAZARUS_CHECKPOINT_DIR`, `LAZARUS_INCARNATION`, `LAZARUS_BUDDY` and
    /// `LAZARUS_EVENT_LOGGERS` (default 2) and `LAZARUS_SUPERVISOR`; `None` when recovery
    /// is off.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        match var("LAZARUS_FT").as_deref().map(str::trim) {
            None | Some("off") | Some("") => return Ok(None),
            Some("on") => {}
            Some(other) => return Err(format!("LAZARUS_FT={other}: expected on or off")),
        }
        let num = |k: &str| -> Result<Option<u64>, String> {
            var(k)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| format!("{k}={v} is not a number"))
                })
                .transpose()
        };
        let every = num("LAZARUS_CHECKPOINT_EVERY_MS")?.unwrap_or(1000);
        let supervised = match var("LAZARUS_SUPERVISOR").as_deref().map(str::trim) {
            None | Some("") | Some("none") => false,
            Some("stdin") => true,
            Some(other) => {
                return Err(format!(
                    "LAZARUS_SUPERVISOR={other}: expected stdin or none"
                ))
            }
        };
        let buddy_mode = match var("LAZARUS_BUDDY").as_deref().map(str::trim) {
            None | Some("") | Some("auto") => Buddy::Auto,
            Some("on") => Buddy::On,
            Some("off") => Buddy::Off,
            Some(other) => return Err(format!("LAZARUS_BUDDY={other}: expected auto, on or off")),
        };
        Ok(Some(RecoveryConfig {
            checkpoint_every: (every > 0).then(|| Duration::from_millis(every)),
            log_quota: match num("LAZARUS_LOG_QUOTA")? {
                None | Some(0) => None,
                Some(q) => Some(
                    usize::try_from(q).map_err(|_| "LAZARUS_LOG_QUOTA is too large".to_string())?,
                ),
            },
            loggers: match var("LAZARUS_LOGGERS") {
                None => Vec::new(),
                Some(list) => list
                    .split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(|a| {
                        a.parse()
                            .map_err(|_| format!("LAZARUS_LOGGERS: {a} is not host:port"))
                    })
                    .collect::<Result<_, _>>()?,
            },
            logger_copies: match num("LAZARUS_LOGGER_COPIES")?.unwrap_or(1) {
                c @ 1..=2 => c as u16,
                c => return Err(format!("LAZARUS_LOGGER_COPIES={c}: expected 1 or 2")),
            },
            dir: var("LAZARUS_CHECKPOINT_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join("lazarus-checkpoints")),
            incarnation: u32::try_from(num("LAZARUS_INCARNATION")?.unwrap_or(0))
                .map_err(|_| "LAZARUS_INCARNATION is too large".to_string())?,
            buddy_mode,
            buddy: buddy_mode == Buddy::On,
            log_everything: var("LAZARUS_LOG_EVERYTHING").is_some_and(|v| v.trim() == "on"),
            event_loggers: u16::try_from(num("LAZARUS_EVENT_LOGGERS")?.unwrap_or(2))
                .map_err(|_| "LAZARUS_EVENT_LOGGERS is too large".to_string())?,
            supervised,
        }))
    }
}

/// Whether a node's checkpoints are also replicated into its buddy's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buddy {
    /// Always.
    On,
    /// Never: the checkpoint directory alone.
    Off,
    /// When the buddy runs on another host: a replica on the same host dies with the
    /// host, so it would cost a copy over the network per checkpoint and protect nothing
    /// a lost directory does not also lose (except a directory deleted under a live host).
    Auto,
}

impl Buddy {
    /// Whether node `rank` of the cluster at `addrs` keeps replicas at its buddy
    /// (rank + 1 mod N).
    pub fn resolve(self, addrs: &[std::net::SocketAddr], rank: u16) -> bool {
        match self {
            Buddy::On => true,
            Buddy::Off => false,
            Buddy::Auto => {
                let n = addrs.len();
                let me = usize::from(rank);
                n > 1 && me < n && addrs[me].ip() != addrs[(me + 1) % n].ip()
            }
        }
    }
}
