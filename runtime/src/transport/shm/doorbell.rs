//! Doorbells: how one node wakes another's sleeping ring reader or writer.
//!
//! Each node binds one Unix datagram socket in the abstract namespace (no file to clean
//! up after a SIGKILL) under a name derived from the cluster's secret. A peer that
//! commits bytes to a sleeping reader, or releases room to a sleeping writer, sends a
//! six-byte datagram (its rank and incarnation); the bound node's network task wakes that
//! peer's reader and writer. The socket is in the network engine's poll set, so a wake-up
//! costs one datagram and no extra thread.
//!
//! Abstract names belong to a network namespace: two nodes in different namespaces that
//! still share `/dev/shm` cannot ring each other, and the acceptor, which tries before it
//! accepts a segment, declines it (the pair keeps QUIC).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// What a doorbell datagram carries.
pub const RING_LEN: usize = 6;

/// A node's own doorbell, before it is handed to the network runtime.
#[derive(Debug)]
pub struct Doorbell {
    socket: UnixDatagram,
}

impl Doorbell {
    /// Binds the abstract name `name`.
    pub fn bind(name: &str) -> io::Result<Doorbell> {
        let socket = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        socket.set_nonblocking(true)?;
        Ok(Doorbell { socket })
    }

    /// The socket, for the network runtime to poll (call inside it).
    pub fn into_tokio(self) -> io::Result<tokio::net::UnixDatagram> {
        tokio::net::UnixDatagram::from_std(self.socket)
    }
}

/// Decodes a doorbell datagram: the ringing peer's rank and incarnation.
pub fn decode(datagram: &[u8]) -> Option<(u16, u32)> {
    let d: &[u8; RING_LEN] = datagram.try_into().ok()?;
    Some((
        u16::from_le_bytes([d[0], d[1]]),
        u32::from_le_bytes([d[2], d[3], d[4], d[5]]),
    ))
}

/// The way to ring one peer's doorbell.
#[derive(Debug)]
pub struct Bell {
    socket: UnixDatagram,
    datagram: [u8; RING_LEN],
}

impl Bell {
    /// Connects to the doorbell named `name`, ringing as `rank`, `incarnation`. Fails if no
    /// such doorbell is bound (another host or network namespace, or a dead node).
    pub fn connect(name: &str, rank: u16, incarnation: u32) -> io::Result<Bell> {
        let socket = UnixDatagram::unbound()?;
        socket.connect_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        socket.set_nonblocking(true)?;
        let mut datagram = [0u8; RING_LEN];
        datagram[..2].copy_from_slice(&rank.to_le_bytes());
        datagram[2..].copy_from_slice(&incarnation.to_le_bytes());
        Ok(Bell { socket, datagram })
    }

    /// Rings. A full socket buffer means the peer has doorbells unread already: it is
    /// awake or about to be, so the ring is dropped. Other errors (the peer died) are left
    /// to the failure detector.
    pub fn ring(&self) {
        let _ = self.socket.send(&self.datagram);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bell_reaches_the_bound_doorbell_with_who_rang() {
        let name = format!("lazarus-test-doorbell-{}", std::process::id());
        let door = Doorbell::bind(&name).unwrap();
        let bell = Bell::connect(&name, 3, 9).unwrap();
        bell.ring();
        let mut buf = [0u8; 16];
        let n = door.socket.recv(&mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Some((3, 9)));
        assert_eq!(
            decode(&buf[..n - 1]),
            None,
            "short datagrams are not doorbells"
        );
    }

    #[test]
    fn no_bell_connects_to_an_unbound_name() {
        let name = format!("lazarus-test-nobody-{}", std::process::id());
        assert!(Bell::connect(&name, 0, 0).is_err());
    }
}
