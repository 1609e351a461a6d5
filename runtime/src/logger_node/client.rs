//! A node's side of its connections to the logger nodes: blocking requests that any
//! thread may make (also a network task: the client runs on its own thread and runtime,
//! so a request never waits for the caller's runtime), one QUIC connection per logger,
//! made on first use and again after it broke.

use super::server::{quic_transport_config, server_name};
use super::wire::{LoggerRequest, LoggerResponse, ALPN, MAX_MESSAGE};
use crate::transport::credentials::Credentials;
use std::net::SocketAddr;
use std::sync::{mpsc as std_mpsc, Arc};
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

/// The node's connections to the loggers.
pub struct LoggerClient {
    addrs: Vec<SocketAddr>,
    jobs: mpsc::UnboundedSender<Job>,
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
                        tokio::spawn(async move {
                            let result =
                                exchange(&endpoint, &conns, &targets, job.logger, &job.request)
                                    .await;
                            let _ = job.answer.send(result);
                        });
                    }
                });
            })
            .map_err(|e| e.to_string())?;
        ready_rx
            .recv()
            .map_err(|_| "the logger client did not start".to_string())??;
        Ok(LoggerClient { addrs, jobs })
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
            Err(std_mpsc::RecvTimeoutError::Timeout) => Err(RequestError::Timeout(logger)),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(RequestError::Stopped),
        }
    }
}

async fn exchange(
    endpoint: &quinn::Endpoint,
    conns: &[AsyncMutex<Option<quinn::Connection>>],
    addrs: &[SocketAddr],
    logger: u16,
    request: &LoggerRequest,
) -> Result<LoggerResponse, RequestError> {
    let addr = addrs[usize::from(logger)];
    let fail = |why: String| RequestError::Unreachable { logger, addr, why };
    let conn = {
        let mut slot = conns[usize::from(logger)].lock().await;
        match slot.as_ref().filter(|c| c.close_reason().is_none()) {
            Some(c) => c.clone(),
            None => {
                let c = endpoint
                    .connect(addr, &server_name(logger))
                    .map_err(|e| fail(e.to_string()))?
                    .await
                    .map_err(|e| fail(e.to_string()))?;
                *slot = Some(c.clone());
                c
            }
        }
    };
    let bytes = postcard::to_allocvec(request).map_err(|e| fail(e.to_string()))?;
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| fail(e.to_string()))?;
    send.write_all(&bytes)
        .await
        .map_err(|e| fail(e.to_string()))?;
    send.finish().map_err(|e| fail(e.to_string()))?;
    let answer = recv
        .read_to_end(MAX_MESSAGE)
        .await
        .map_err(|e| fail(e.to_string()))?;
    postcard::from_bytes(&answer).map_err(|e| fail(format!("malformed answer: {e}")))
}
