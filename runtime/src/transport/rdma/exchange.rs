//! What two nodes exchange in their Hellos to connect a queue pair, checked before a
//! single verb uses it, and the node's RDMA settings (`LAZARUS_RDMA_*`).
//!
//! The values come from a peer that authenticated over mutual TLS, but a bug or a
//! version skew must end in a declined offer with the reason, never in a queue pair
//! pointed at a nonsense address.

use super::super::frame::RdmaEndpoint;
use super::flow::CREDIT_IMM;
use crate::transport::shm::{MAX_RING_BYTES, MIN_RING_BYTES};

/// Path MTUs as verbs encode them: 1 = 256 B ... 5 = 4096 B.
pub const MTU_CODES: std::ops::RangeInclusive<u8> = 1..=5;

/// Which device, port and GID a node's queue pairs use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The device's name (`mlx5_0`); `None`: the first one found.
    pub device: Option<String>,
    /// The port (from 1).
    pub port: u8,
    /// The index of the GID in the port's table (RoCE v2 is usually at 1 or 3).
    pub gid_index: u8,
}

impl Settings {
    /// Reads `LAZARUS_RDMA_DEVICE`, `LAZARUS_RDMA_PORT` (default 1) and
    /// `LAZARUS_RDMA_GID_INDEX` (default 0) through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let number = |key: &str, default: u8, min: u8| -> Result<u8, String> {
            match var(key) {
                None => Ok(default),
                Some(v) => match v.trim().parse::<u8>() {
                    Ok(n) if n >= min => Ok(n),
                    _ => Err(format!(
                        "{key}={v}: expected a whole number from {min} to 255"
                    )),
                },
            }
        };
        Ok(Settings {
            device: var("LAZARUS_RDMA_DEVICE").filter(|d| !d.trim().is_empty()),
            port: number("LAZARUS_RDMA_PORT", 1, 1)?,
            gid_index: number("LAZARUS_RDMA_GID_INDEX", 0, 0)?,
        })
    }
}

/// Checks a peer's endpoint: numbers in range, a ring this node may write into. Returns
/// the path MTU both sides can use.
pub fn check(peer: &RdmaEndpoint, own_mtu: u8) -> Result<u8, String> {
    if peer.qpn == 0 || peer.qpn > 0x00ff_ffff {
        return Err(format!("queue pair number {:#x} is not 24 bits", peer.qpn));
    }
    if peer.psn > 0x00ff_ffff {
        return Err(format!(
            "packet sequence number {:#x} is not 24 bits",
            peer.psn
        ));
    }
    if !MTU_CODES.contains(&peer.mtu) {
        return Err(format!("path MTU code {} is not one of 1..=5", peer.mtu));
    }
    let bytes = peer.ring_bytes as usize;
    if !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&bytes) || bytes >= CREDIT_IMM as usize {
        return Err(format!(
            "ring of {bytes} B (expected {MIN_RING_BYTES} to {MAX_RING_BYTES})"
        ));
    }
    if peer.ring_addr == 0 || peer.ring_addr.checked_add(peer.ring_bytes.into()).is_none() {
        return Err(format!("ring address {:#x}", peer.ring_addr));
    }
    if peer.credit_addr == 0 || peer.credit_addr % 8 != 0 {
        return Err(format!("credit word address {:#x}", peer.credit_addr));
    }
    if peer.lid == 0 && peer.gid == [0; 16] {
        return Err("neither a LID nor a GID to reach it".into());
    }
    Ok(own_mtu.min(peer.mtu))
}

/// A queue pair's first packet sequence number: 24 random bits, so that packets of an
/// earlier queue pair with the same number are not taken for this one's.
pub fn first_psn(random: [u8; 4]) -> u32 {
    u32::from_le_bytes(random) & 0x00ff_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint() -> RdmaEndpoint {
        RdmaEndpoint {
            lid: 0,
            gid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
            qpn: 0x11,
            psn: 0x22,
            mtu: 5,
            ring_addr: 0x7000_0000,
            ring_rkey: 9,
            ring_bytes: 1 << 20,
            credit_addr: 0x6000_0000,
            credit_rkey: 10,
        }
    }

    #[test]
    fn a_valid_endpoint_gives_the_smaller_mtu() {
        assert_eq!(check(&endpoint(), 3), Ok(3));
        assert_eq!(check(&endpoint(), 5), Ok(5));
    }

    #[test]
    fn out_of_range_values_are_refused_with_the_reason() {
        type Damage = fn(&mut RdmaEndpoint);
        let cases: Vec<(Damage, &str)> = vec![
            (|e| e.qpn = 0, "queue pair"),
            (|e| e.qpn = 1 << 24, "queue pair"),
            (|e| e.psn = 1 << 24, "sequence"),
            (|e| e.mtu = 6, "MTU"),
            (|e| e.mtu = 0, "MTU"),
            (|e| e.ring_bytes = 16, "ring of"),
            (|e| e.ring_bytes = u32::MAX, "ring of"),
            (|e| e.ring_addr = 0, "ring address"),
            (|e| e.ring_addr = u64::MAX - 10, "ring address"),
            (|e| e.credit_addr = 0x6000_0004, "credit"),
            (|e| e.gid = [0; 16], "neither"),
        ];
        for (damage, why) in cases {
            let mut e = endpoint();
            damage(&mut e);
            let err = check(&e, 5).unwrap_err();
            assert!(err.contains(why), "{err} should say {why}");
        }
    }

    #[test]
    fn settings_default_to_the_first_device_port_1_gid_0() {
        let s = Settings::from_vars(|_| None).unwrap();
        assert_eq!((s.device, s.port, s.gid_index), (None, 1, 0));
        let s = Settings::from_vars(|k| match k {
            "LAZARUS_RDMA_DEVICE" => Some("mlx5_1".into()),
            "LAZARUS_RDMA_PORT" => Some("2".into()),
            "LAZARUS_RDMA_GID_INDEX" => Some("3".into()),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            (s.device.as_deref(), s.port, s.gid_index),
            (Some("mlx5_1"), 2, 3)
        );
    }

    #[test]
    fn bad_settings_are_refused() {
        for (key, value) in [
            ("LAZARUS_RDMA_PORT", "0"),
            ("LAZARUS_RDMA_PORT", "x"),
            ("LAZARUS_RDMA_GID_INDEX", "300"),
        ] {
            let err = Settings::from_vars(|k| (k == key).then(|| value.to_string()));
            assert!(err.unwrap_err().contains(key));
        }
    }

    #[test]
    fn sequence_numbers_are_24_bits() {
        assert_eq!(first_psn([0xff; 4]), 0x00ff_ffff);
        assert_eq!(first_psn([1, 0, 0, 0]), 1);
    }
}
