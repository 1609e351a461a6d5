//! A node's side of its connections to the logger nodes: blocking requests that any
//! thread may make (also a network task: the client runs on its own thread and runtime,
//! so a request never waits for the caller's runtime), one QUIC connection per logger,
//! made on first use and again after it broke. Each connection starts with a `Hello`
//! that names the logger process: a new name on a later connection means the logger was
//! restarted and holds none of the blocks sent to it before.

use super::wire::{LoggerRequest, LoggerResponse, ALPN, MAX_MESSAGE};
use super::{quic_transport_config, server_name};
use crate::transport::credentials::Credentials;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, Mutex as AsyncMutex};

/// Why a request to a logger failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No logger with that number.
    #[error("no logger {0}")]
    NoSuchLogger(u16),
    /// The logger could not be reached or the exchange broke.
    #[error("logger {logger} at {addr}: {why}")]
    Unreachable {
        /// Which.
        logger: u16,
        /// Where.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
    /// No answer in time.
    #[error("logger {0} did not answer in time")]
    Timeout(u16),
    /// The client's thread is gone.
    #[error("the logger client has stopped")]
    Stopped,
}

struct Job {
    logger: u16,
    request: LoggerRequest,
    answer: std_mpsc::Sender<Result<LoggerResponse, RequestError>>,
}

/// What the client learnt of each logger process from its `Hello`s.
#[derive(Default)]
struct Instances {
    /// The instance number of the logger process last connected to.
    current: Mutex<Option<u64>>,
    /// Set when a connection found another process than the one before.
    restarted: AtomicBool,
    /// Set when a request timed out: the next one does not trust the connection.
    stale: AtomicBool,
}

impl Instances {
    /// Notes the instance a new connection found.
    fn connected_to(&self, instance: u64) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.is_some_and(|before| before != instance) {
            self.restarted.store(true, Ordering::Release);
        }
        *current = Some(instance);
    }
}

/// The node's connections to the loggers.
pub struct LoggerClient {
    addrs: Vec<SocketAddr>,
    jobs: mpsc::UnboundedSender<Job>,
    instances: Arc<Vec<Instances>>,
}

impl LoggerClient {
    /// A client for the loggers at `addrs`, authenticated as `creds` (the node's).
    pub fn start(addrs: Vec<SocketAddr>, creds: &Credentials) -> Result<Self, String> {
        let mut tls = creds.client_config().map_err(|e| e.to_string())?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        let crypto =
            quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
        let mut config = quinn::ClientConfig::new(Arc::new(crypto));
        config.transport_config(quic_transport_config());
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let bind: SocketAddr = match addrs.first() {
            Some(a) if a.is_ipv6() => "[::]:0".parse().map_err(|e| format!("{e}"))?,
            _ => "0.0.0.0:0".parse().map_err(|e| format!("{e}"))?,
        };
        let (ready_tx, ready_rx) = std_mpsc::channel::<Result<(), String>>();
        let targets = addrs.clone();
        let instances: Arc<Vec<Instances>> =
            Arc::new(addrs.iter().map(|_| Instances::default()).collect());
        let seen = Arc::clone(&instances);
        std::thread::Builder::new()
            .name("lazarus-logger-client".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let endpoint = match crate::transport::udp_socket::endpoint(bind, None) {
                        Ok((mut e, _)) => {
                            e.set_default_client_config(config);
                            e
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.to_string()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    let conns: Arc<Vec<AsyncMutex<Option<quinn::Connection>>>> =
                        Arc::new(targets.iter().map(|_| AsyncMutex::new(None)).collect());
                    while let Some(job) = rx.recv().await {
                        let endpoint = endpoint.clone();
                        let conns = Arc::clone(&conns);
                        let targets = targets.clone();
                        let seen = Arc::clone(&seen);
                        tokio::spawn(async move {
                            let at = Target {
                                endpoint: &endpoint,
                                conns: &conns,
                                addrs: &targets,
                                instances: &seen,
                            };
                            let result = at.exchange(job.logger, &job.request).await;
                            let _ = job.answer.send(result);
                        });
                    }
                });
            })
            .map_err(|e| e.to_string())?;
        ready_rx
            .recv()
            .map_err(|_| "the logger client did not start".to_string())??;
        Ok(LoggerClient {
            addrs,
            jobs,
            instances,
        })
    }

    /// The number of the process of logger `logger` last connected to (`None` before
    /// the first connection).
    pub fn instance(&self, logger: u16) -> Option<u64> {
        let i = self.instances.get(usize::from(logger))?;
        *i.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a connection to logger `logger` found another process than the one
    /// before since the last call (a restarted logger: the blocks sent to it are gone);
    /// clears the mark.
    pub fn take_restarted(&self, logger: u16) -> bool {
        self.instances
            .get(usize::from(logger))
            .is_some_and(|i| i.restarted.swap(false, Ordering::AcqRel))
    }

    /// How many loggers there are.
    pub fn loggers(&self) -> u16 {
        self.addrs.len() as u16
    }

    /// Sends `request` to logger `logger` and waits up to `timeout` for its answer.
    pub fn request(
        &self,
        logger: u16,
        request: LoggerRequest,
        timeout: Duration,
    ) -> Result<LoggerResponse, RequestError> {
        if usize::from(logger) >= self.addrs.len() {
            return Err(RequestError::NoSuchLogger(logger));
        }
        let (answer, rx) = std_mpsc::channel();
        self.jobs
            .send(Job {
                logger,
                request,
                answer,
            })
            .map_err(|_| RequestError::Stopped)?;
        match rx.recv_timeout(timeout) {
            Ok(r) => r,
            Err(std_mpsc::RecvTimeoutError::Timeout) => {
                self.instances[usize::from(logger)]
                    .stale
                    .store(true, Ordering::Release);
                Err(RequestError::Timeout(logger))
            }
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(RequestError::Stopped),
        }
    }
}

/// Where the client's requests go: its endpoint, connections and what it knows of the
/// loggers.
struct Target<'a> {
    endpoint: &'a quinn::Endpoint,
    conns: &'a [AsyncMutex<Option<quinn::Connection>>],
    addrs: &'a [SocketAddr],
    instances: &'a [Instances],
}

impl Target<'_> {
    /// `request` to logger `logger`, over its connection (made first, with its `Hello`,
    /// if there is none or it broke).
    async fn exchange(
        &self,
        logger: u16,
        request: &LoggerRequest,
    ) -> Result<LoggerResponse, RequestError> {
        let addr = self.addrs[usize::from(logger)];
        let fail = |why: String| RequestError::Unreachable { logger, addr, why };
        let (conn, cached) = self.connection(logger).await.map_err(fail)?;
        match round_trip(&conn, request).await {
            Ok(answer) => Ok(answer),
            // A connection that broke since its last use (its logger was restarted and
            // reset it, say): once more on a new one.
            Err(_) if cached && conn.close_reason().is_some() => {
                let (conn, _) = self.connection(logger).await.map_err(fail)?;
                round_trip(&conn, request).await.map_err(fail)
            }
            Err(why) => Err(fail(why)),
        }
    }

    /// The connection to logger `logger`, and whether it is one made before: a new one
    /// is made, with its `Hello`, if there is none or it broke.
    async fn connection(&self, logger: u16) -> Result<(quinn::Connection, bool), String> {
        let addr = self.addrs[usize::from(logger)];
        {
            let mut slot = self.conns[usize::from(logger)].lock().await;
            if self.instances[usize::from(logger)]
                .stale
                .swap(false, Ordering::AcqRel)
            {
                if let Some(c) = slot.take() {
                    c.close(0u32.into(), b"timed out");
                }
            }
            match slot.as_ref().filter(|c| c.close_reason().is_none()) {
                Some(c) => Ok((c.clone(), true)),
                None => {
                    let c = self
                        .endpoint
                        .connect(addr, &server_name(logger))
                        .map_err(|e| e.to_string())?
                        .await
                        .map_err(|e| e.to_string())?;
                    match round_trip(&c, &LoggerRequest::Hello).await? {
                        LoggerResponse::Hello { index, instance } if index == logger => {
                            self.instances[usize::from(logger)].connected_to(instance);
                        }
                        other => return Err(format!("answered hello with {other:?}")),
                    }
                    *slot = Some(c.clone());
                    Ok((c, false))
                }
            }
        }
    }
}

/// One request and its answer on a new stream of `conn`.
async fn round_trip(
    conn: &quinn::Connection,
    request: &LoggerRequest,
) -> Result<LoggerResponse, String> {
    let bytes = postcard::to_allocvec(request).map_err(|e| e.to_string())?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(&bytes).await.map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    let answer = recv
        .read_to_end(MAX_MESSAGE)
        .await
        .map_err(|e| e.to_string())?;
    postcard::from_bytes(&answer).map_err(|e| format!("malformed answer: {e}"))
}
