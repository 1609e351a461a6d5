//! A logger node on the network: it keeps and serves back the blocks a node of its
//! cluster stores, answers a malformed request with an error and goes on serving, and
//! refuses connections from outside the cluster.

use lazarus::logger_node::{LoggerClient, LoggerRequest, LoggerResponse};
use lazarus::recovery::{BlockId, Incarnation};
use lazarus::transport::credentials::Credentials;
use lazarus_cli::logger_server::{serve_until, LoggerOptions};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

const SECRET: &[u8] = b"logger node test secret 0123456789";
const WAIT: Duration = Duration::from_secs(10);

/// Starts a logger on a free port; dropping the sender stops it.
fn start_logger(capacity: u64) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let (addr, stop, _) = start_logger_at("127.0.0.1:0".parse().unwrap(), capacity);
    (addr, stop)
}

/// Starts a logger listening at `listen`; dropping the sender stops it, and its thread
/// ends once it let go of its socket.
fn start_logger_at(
    listen: SocketAddr,
    capacity: u64,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    std::thread::JoinHandle<()>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let options = LoggerOptions {
            index: 0,
            listen,
            capacity,
            secret: SECRET.to_vec(),
        };
        serve_until(options, stop_rx, move |a| {
            let _ = addr_tx.send(a);
        })
        .expect("the logger runs");
    });
    (
        addr_rx.recv_timeout(WAIT).expect("the logger listens"),
        stop_tx,
        thread,
    )
}

#[test]
fn a_logger_started_again_at_its_address_is_known_for_empty() {
    let (addr, stop, thread) = start_logger_at("127.0.0.1:0".parse().unwrap(), 1 << 20);
    let client =
        LoggerClient::start(vec![addr], &Credentials::for_node(SECRET, 1).unwrap()).unwrap();
    let store = LoggerRequest::Store {
        rank: 1,
        block: block(0),
        bytes: vec![7u8; 1000].into(),
    };
    assert_eq!(
        client.request(0, store, WAIT).unwrap(),
        LoggerResponse::Stored
    );
    assert!(!client.take_restarted(0), "the first process");
    drop(stop);
    thread.join().unwrap();
    let (_, _stop, _) = start_logger_at(addr, 1 << 20);
    // The client's connection belonged to the dead process; the new one resets it (same
    // reset key), the client reconnects and its hello names another process.
    let fetch = LoggerRequest::Fetch {
        rank: 1,
        block: block(0),
    };
    assert_eq!(
        client.request(0, fetch, WAIT).unwrap(),
        LoggerResponse::Missing,
        "the block went with the first process"
    );
    assert!(client.take_restarted(0), "the client noticed the restart");
    assert!(!client.take_restarted(0), "once");
    // A restored node asking it to keep that block learns it is gone.
    let retain = LoggerRequest::Retain {
        rank: 1,
        blocks: vec![block(0)],
    };
    assert_eq!(
        client.request(0, retain, WAIT).unwrap(),
        LoggerResponse::Retained {
            missing: vec![block(0)]
        }
    );
}

fn block(seq: u64) -> BlockId {
    BlockId {
        incarnation: Incarnation(0),
        seq,
    }
}

#[test]
fn a_logger_keeps_a_nodes_blocks_and_serves_them_back() {
    let (addr, _stop) = start_logger(1 << 20);
    let creds = Credentials::for_node(SECRET, 3).unwrap();
    let client = LoggerClient::start(vec![addr], &creds).unwrap();
    let store = |seq, len| {
        client
            .request(
                0,
                LoggerRequest::Store {
                    rank: 3,
                    block: block(seq),
                    bytes: vec![seq as u8; len].into(),
                },
                WAIT,
            )
            .unwrap()
    };
    assert_eq!(store(0, 600 << 10), LoggerResponse::Stored);
    assert!(
        matches!(store(1, 600 << 10), LoggerResponse::Declined { .. }),
        "1 MiB of room: the second block does not fit"
    );
    let fetch = LoggerRequest::Fetch {
        rank: 3,
        block: block(0),
    };
    assert_eq!(
        client.request(0, fetch.clone(), WAIT).unwrap(),
        LoggerResponse::Block(vec![0u8; 600 << 10].into())
    );
    client
        .request(
            0,
            LoggerRequest::Release {
                rank: 3,
                blocks: vec![block(0)],
            },
            WAIT,
        )
        .unwrap();
    assert_eq!(
        client.request(0, fetch, WAIT).unwrap(),
        LoggerResponse::Missing
    );
    assert_eq!(store(1, 600 << 10), LoggerResponse::Stored, "room again");
}

/// A QUIC connection to `addr` authenticated with `secret`, speaking the logger's ALPN.
async fn connect(addr: SocketAddr, secret: &[u8]) -> Result<quinn::Connection, String> {
    let creds = Credentials::for_node(secret, 1).map_err(|e| e.to_string())?;
    let mut tls = creds.client_config().map_err(|e| e.to_string())?;
    tls.alpn_protocols = vec![lazarus::logger_node::wire::ALPN.to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).map_err(|e| e.to_string())?;
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
    let connecting = endpoint
        .connect(addr, "logger0.lazarus")
        .map_err(|e| e.to_string())?;
    let conn = connecting.await.map_err(|e| e.to_string())?;
    // The server may still refuse us after the handshake (client certificate): a round
    // trip tells.
    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(&[0xff]).await.map_err(|e| e.to_string())?;
    send.finish().map_err(|e| e.to_string())?;
    recv.read_to_end(1 << 16).await.map_err(|e| e.to_string())?;
    Ok(conn)
}

#[test]
fn a_malformed_request_gets_an_error_and_the_logger_keeps_serving() {
    let (addr, _stop) = start_logger(1 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let conn = connect(addr, SECRET).await.expect("a member connects");
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&[200, 1, 2, 3]).await.unwrap();
        send.finish().unwrap();
        let answer = recv.read_to_end(1 << 16).await.unwrap();
        let answer: LoggerResponse = postcard::from_bytes(&answer).unwrap();
        assert!(
            matches!(&answer, LoggerResponse::Refused(why) if why.contains("malformed")),
            "{answer:?}"
        );
    });
    // Still serving.
    let client =
        LoggerClient::start(vec![addr], &Credentials::for_node(SECRET, 2).unwrap()).unwrap();
    let answer = client
        .request(
            0,
            LoggerRequest::Fetch {
                rank: 2,
                block: block(9),
            },
            WAIT,
        )
        .unwrap();
    assert_eq!(answer, LoggerResponse::Missing);
}

#[test]
fn a_client_from_another_cluster_is_refused() {
    let (addr, _stop) = start_logger(1 << 20);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outsider = rt.block_on(async {
        tokio::time::timeout(WAIT, connect(addr, b"another cluster's secret, 0123456789")).await
    });
    assert!(
        !matches!(outsider, Ok(Ok(_))),
        "a client with another secret got through"
    );
}
