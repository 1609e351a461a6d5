//! The UDP socket under a node's QUIC endpoint, with kernel buffers sized for bursts.
//!
//! QUIC sends a large message as a burst of datagrams. With the kernel's default receive
//! buffer (208 KiB on Linux) a receiver whose network thread is off its core for a few
//! milliseconds overflows it: the kernel drops datagrams (`RcvbufErrors` in
//! `/proc/net/snmp`), the sender's loss recovery resends them and its congestion window
//! shrinks. Measured on a 2-core VM, `pingpong` 1 MiB between two nodes on loopback:
//! 3,300-4,700 datagrams dropped per 9 s run and 316 MB/s; with a 4 MiB buffer, none
//! dropped and 390-440 MB/s.

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Receive buffer asked for: a few milliseconds of a fast link, and several 1 MiB
/// messages with their per-datagram overhead. `LAZARUS_UDP_RECEIVE_BUFFER` (bytes)
/// overrides it; 0 leaves the system's default.
pub const RECEIVE_BUFFER: usize = 16 << 20;
/// Environment variable overriding [`RECEIVE_BUFFER`].
pub const RECEIVE_BUFFER_ENV: &str = "LAZARUS_UDP_RECEIVE_BUFFER";
/// Send buffer asked for.
pub const SEND_BUFFER: usize = 4 << 20;
/// Gauge: the receive buffer the kernel gave the node's socket, in bytes (as the kernel
/// reports it: it counts its own overhead in, so Linux reports twice the size set).
pub const RECEIVE_BUFFER_BYTES: &str = "lazarus_transport_udp_receive_buffer_bytes";

/// What the kernel granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffers {
    /// Receive buffer in bytes, as `SO_RCVBUF` reports it.
    pub receive: usize,
    /// Send buffer in bytes, as `SO_SNDBUF` reports it.
    pub send: usize,
    /// The receive buffer asked for ([`wanted_receive_buffer`] when bound; `None`: the
    /// system's default).
    pub asked: Option<usize>,
}

impl Buffers {
    /// Whether the receive buffer is at least the size asked for. Linux reports double
    /// the size set; other systems the size itself.
    pub fn receive_as_asked(&self) -> bool {
        self.receive >= self.asked.unwrap_or(0)
    }
}

/// The receive buffer to ask for: [`RECEIVE_BUFFER`], or `LAZARUS_UDP_RECEIVE_BUFFER`;
/// `None` for the system's default (the variable set to 0).
pub fn wanted_receive_buffer() -> Option<usize> {
    receive_buffer_from(std::env::var(RECEIVE_BUFFER_ENV).ok().as_deref())
}

/// [`wanted_receive_buffer`] for the variable's value `setting`. A value that is not a
/// number of bytes is reported and ignored.
fn receive_buffer_from(setting: Option<&str>) -> Option<usize> {
    let Some(text) = setting else {
        return Some(RECEIVE_BUFFER);
    };
    match text.trim().parse::<usize>() {
        Ok(0) => None,
        Ok(bytes) => Some(bytes),
        Err(_) => {
            tracing::warn!(
                "{RECEIVE_BUFFER_ENV}={text:?} is not a number of bytes; using {RECEIVE_BUFFER}"
            );
            Some(RECEIVE_BUFFER)
        }
    }
}

/// Binds a UDP socket at `addr` with [`RECEIVE_BUFFER`] and [`SEND_BUFFER`], as far as the
/// system allows. An unprivileged process gets at most `net.core.rmem_max`; a privileged
/// one (`CAP_NET_ADMIN`) gets the size asked for. A smaller buffer is not an error: the
/// node runs, with a warning and the [`RECEIVE_BUFFER_BYTES`] gauge saying what it got.
pub fn bind(addr: SocketAddr) -> io::Result<(UdpSocket, Buffers)> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // Accept IPv4-mapped peers too, as std's bind does by default on Linux.
        let _ = socket.set_only_v6(false);
    }
    let wanted = wanted_receive_buffer();
    if let Some(wanted) = wanted {
        // Best effort: a refusal leaves the default, which works, only slower.
        let _ = socket.set_recv_buffer_size(wanted);
        let _ = socket.set_send_buffer_size(SEND_BUFFER);
        if socket.recv_buffer_size()? < wanted {
            force_receive_buffer(&socket, wanted);
        }
    }
    socket.bind(&SockAddr::from(addr))?;
    let buffers = Buffers {
        receive: socket.recv_buffer_size()?,
        send: socket.send_buffer_size()?,
        asked: wanted,
    };
    metrics::gauge!(RECEIVE_BUFFER_BYTES).set(buffers.receive as f64);
    if let Some(wanted) = wanted.filter(|_| !buffers.receive_as_asked()) {
        tracing::warn!(
            got_kib = buffers.receive / 1024,
            wanted_kib = wanted / 1024,
            "small UDP receive buffer: bursts of large messages may be dropped and resent \
             (raise net.core.rmem_max, e.g. sysctl -w net.core.rmem_max={wanted})"
        );
    }
    Ok((socket.into(), buffers))
}

/// A quinn endpoint on a socket from [`bind`] at `addr`, accepting connections if
/// `server` is given. Must be called inside a Tokio runtime.
pub fn endpoint(
    addr: SocketAddr,
    server: Option<quinn::ServerConfig>,
) -> io::Result<(quinn::Endpoint, Buffers)> {
    endpoint_with(addr, server, quinn::EndpointConfig::default())
}

/// [`endpoint`] with its own endpoint settings (a stateless-reset key that survives a
/// restart, say).
pub fn endpoint_with(
    addr: SocketAddr,
    server: Option<quinn::ServerConfig>,
    config: quinn::EndpointConfig,
) -> io::Result<(quinn::Endpoint, Buffers)> {
    let (socket, buffers) = bind(addr)?;
    let runtime = quinn::default_runtime()
        .ok_or_else(|| io::Error::other("no async runtime for quinn (not inside Tokio)"))?;
    let endpoint = quinn::Endpoint::new(config, server, socket, runtime)?;
    Ok((endpoint, buffers))
}

/// Sets the receive buffer past `net.core.rmem_max` (`SO_RCVBUFFORCE`), which only a
/// privileged process may; the error of an unprivileged one is ignored.
#[cfg(target_os = "linux")]
fn force_receive_buffer(socket: &Socket, wanted: usize) {
    use std::os::fd::AsRawFd;
    let size = libc::c_int::try_from(wanted).unwrap_or(libc::c_int::MAX);
    // SAFETY: the descriptor is the open socket `socket` owns for the whole call; the
    // option value points to a live c_int whose size is passed with it.
    let _ = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

#[cfg(not(target_os = "linux"))]
fn force_receive_buffer(_socket: &Socket, _wanted: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_socket_has_at_least_the_default_buffers_and_its_address() {
        let (socket, buffers) = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = socket.local_addr().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0);
        // Whatever the privileges, never less than the kernel's default of 208 KiB.
        assert!(buffers.receive >= 200 << 10, "{buffers:?}");
        assert!(buffers.send > 0);
    }

    #[test]
    fn the_receive_buffer_setting_is_bytes_zero_for_the_default_and_garbage_is_ignored() {
        assert_eq!(receive_buffer_from(None), Some(RECEIVE_BUFFER));
        assert_eq!(receive_buffer_from(Some("4194304")), Some(4 << 20));
        assert_eq!(receive_buffer_from(Some(" 0 ")), None);
        assert_eq!(receive_buffer_from(Some("16M")), Some(RECEIVE_BUFFER));
        assert_eq!(receive_buffer_from(Some("-1")), Some(RECEIVE_BUFFER));
    }

    #[test]
    fn a_privileged_process_gets_the_receive_buffer_it_asks_for() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            // Only root may pass net.core.rmem_max; scripts/test.sh runs as root.
            assert!(
                std::env::var("LAZARUS_TEST_REQUIRE_ALL").as_deref() != Ok("1"),
                "LAZARUS_TEST_REQUIRE_ALL=1 but not running as root"
            );
            eprintln!("skipping: needs root");
            return;
        }
        let (_, buffers) = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        assert!(buffers.receive_as_asked(), "{buffers:?}");
    }

    #[test]
    fn a_buffer_is_as_asked_when_it_is_at_least_the_size_asked_for() {
        let got = |receive, asked| Buffers {
            receive,
            send: 0,
            asked,
        };
        assert!(got(32 << 20, Some(RECEIVE_BUFFER)).receive_as_asked());
        assert!(!got(416 << 10, Some(RECEIVE_BUFFER)).receive_as_asked());
        assert!(got(416 << 10, None).receive_as_asked(), "the default asked");
    }
}
