//! The logger process (`lazarus logger`): a QUIC endpoint, authenticated with the
//! cluster's secret like the nodes, that answers each request stream from its
//! [`BlockStore`]. It reports what it holds on standard output once a second when that
//! changed, and leaves when its standard input closes (the launcher holds it).

use lazarus::logger_node::wire::{ALPN, MAX_MESSAGE};
use lazarus::logger_node::{
    quic_transport_config, BlockStore, LoggerRequest, LoggerResponse, StoreStats,
};
use lazarus::transport::credentials::Credentials;
use metrics::counter;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Requests a logger could not read or answer, by reason.
pub const BAD_REQUESTS: &str = "lazarus_logger_bad_requests_total";

/// How a logger runs.
#[derive(Clone, Debug)]
pub struct LoggerOptions {
    /// Its number among the run's loggers (its certificate's name).
    pub index: u16,
    /// Where it listens.
    pub listen: SocketAddr,
    /// The most bytes of blocks it keeps.
    pub capacity: u64,
    /// The cluster's secret.
    pub secret: Vec<u8>,
}

/// Errors that stop a logger.
#[derive(Debug, thiserror::Error)]
pub enum LoggerError {
    /// The credentials could not be made from the secret.
    #[error("credentials: {0}")]
    Credentials(#[from] lazarus::transport::credentials::CredentialError),
    /// The endpoint could not be set up.
    #[error("cannot listen at {addr}: {why}")]
    Listen {
        /// Where.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
}

/// Runs a logger until its standard input closes.
pub fn serve(mut options: LoggerOptions) -> Result<(), LoggerError> {
    if lazarus::failpoint::logger_full(options.index) {
        eprintln!(
            "failpoint: logger {} declines every block (no capacity)",
            options.index
        );
        options.capacity = 0;
    }
    // Leave when the launcher closes our standard input (or dies).
    let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        let _ = eof_tx.send(());
    });
    serve_until(options, eof_rx, |_| {})
}

/// Runs a logger until `stop` is sent or dropped; `bound` is told where it listens.
pub fn serve_until(
    options: LoggerOptions,
    stop: tokio::sync::oneshot::Receiver<()>,
    bound: impl FnOnce(SocketAddr),
) -> Result<(), LoggerError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| LoggerError::Listen {
            addr: options.listen,
            why: e.to_string(),
        })?;
    runtime.block_on(run(options, stop, bound))
}

async fn run(
    options: LoggerOptions,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    bound: impl FnOnce(SocketAddr),
) -> Result<(), LoggerError> {
    let creds = Credentials::for_name(
        &options.secret,
        &lazarus::logger_node::server_name(options.index),
    )?;
    let mut tls = creds.server_config()?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let listen_error = |why: String| LoggerError::Listen {
        addr: options.listen,
        why,
    };
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| listen_error(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    server.transport_config(quic_transport_config());
    let (endpoint, _) = lazarus::transport::udp_socket::endpoint_with(
        options.listen,
        Some(server),
        restart_proof(&options.secret, options.index),
    )
    .map_err(|e| listen_error(e.to_string()))?;
    let store = Arc::new(Mutex::new(BlockStore::new(options.capacity)));
    let local = endpoint
        .local_addr()
        .map_err(|e| listen_error(e.to_string()))?;
    println!(
        "logger {} listening at {local} capacity={}",
        options.index, options.capacity
    );
    bound(local);
    let index = options.index;
    let instance = instance_id();
    let reporter = {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let mut last = StoreStats::default();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = lock(&store).stats();
                if now != last {
                    println!("{}", describe(index, &now));
                    last = now;
                }
            }
        })
    };
    loop {
        tokio::select! {
            _ = &mut stop => break,
            incoming = endpoint.accept() => {
                let Some(incoming) = incoming else { break };
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    match incoming.await {
                        Ok(conn) => serve_connection(conn, store, index, instance).await,
                        Err(e) => {
                            counter!(BAD_REQUESTS, "reason" => "handshake").increment(1);
                            tracing::warn!("logger refused a connection: {e}");
                        }
                    }
                });
            }
        }
    }
    reporter.abort();
    println!("{} final", describe(index, &lock(&store).stats()));
    endpoint.close(0u32.into(), b"logger leaves");
    Ok(())
}

fn describe(index: u16, s: &StoreStats) -> String {
    format!(
        "logger {index} blocks={} bytes={} peak_bytes={} stored={} declined={} fetched={} dropped={}",
        s.blocks, s.bytes, s.peak_bytes, s.stored, s.declined, s.fetched, s.dropped
    )
}

fn lock(store: &Mutex<BlockStore>) -> std::sync::MutexGuard<'_, BlockStore> {
    store.lock().unwrap_or_else(|e| e.into_inner())
}

/// Endpoint settings that are the same in each of logger `index`'s processes: the key
/// of its stateless resets and of its connection ids. A restarted logger at the same
/// address then recognises the ids of the nodes' connections to its dead predecessor and
/// resets them at their next packet, so the nodes reconnect (and find it empty) at once
/// instead of after a timeout.
fn restart_proof(secret: &[u8], index: u16) -> quinn::EndpointConfig {
    let master = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret);
    let derived = ring::hmac::sign(&master, format!("lazarus logger {index} reset").as_bytes());
    let bytes = derived.as_ref();
    let reset = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes[..16]);
    let mut cid_key = [0u8; 8];
    cid_key.copy_from_slice(&bytes[16..24]);
    let cid_key = u64::from_le_bytes(cid_key);
    let mut config = quinn::EndpointConfig::new(Arc::new(reset));
    config.cid_generator(move || {
        Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(cid_key))
    });
    config
}

/// A random number naming this logger process, so that a node can tell a restarted
/// logger (empty) from the one it dumped to.
fn instance_id() -> u64 {
    let mut bytes = [0u8; 8];
    if ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes).is_err() {
        // No system randomness: the start time still differs between restarts.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return now.as_nanos() as u64 ^ u64::from(std::process::id());
    }
    u64::from_le_bytes(bytes)
}

async fn serve_connection(
    conn: quinn::Connection,
    store: Arc<Mutex<BlockStore>>,
    index: u16,
    instance: u64,
) {
    while let Ok((mut send, mut recv)) = conn.accept_bi().await {
        let store = Arc::clone(&store);
        tokio::spawn(async move {
            let answer = match recv.read_to_end(MAX_MESSAGE).await {
                Err(e) => {
                    counter!(BAD_REQUESTS, "reason" => "read").increment(1);
                    LoggerResponse::Refused(format!("cannot read the request: {e}"))
                }
                Ok(bytes) => match postcard::from_bytes::<LoggerRequest>(&bytes) {
                    Err(e) => {
                        counter!(BAD_REQUESTS, "reason" => "decode").increment(1);
                        tracing::warn!("logger refused a malformed request: {e}");
                        LoggerResponse::Refused(format!("malformed request: {e}"))
                    }
                    Ok(LoggerRequest::Hello) => LoggerResponse::Hello { index, instance },
                    Ok(request) => lock(&store).handle(request),
                },
            };
            if let Ok(bytes) = postcard::to_allocvec(&answer) {
                let _ = send.write_all(&bytes).await;
                let _ = send.finish();
            }
        });
    }
}
