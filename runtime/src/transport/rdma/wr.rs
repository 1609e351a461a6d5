//! Work requests and queue-pair attributes, built as plain verbs structures: what is
//! posted and how a queue pair is moved from RESET to ready-to-send. Nothing here
//! touches a device, so every field is checked by the unit tests.

use super::super::frame::RdmaEndpoint;
use rdma_sys::{
    ibv_access_flags, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, ibv_recv_wr, ibv_send_flags,
    ibv_send_wr, ibv_sge, ibv_wr_opcode, imm_data_invalidated_rkey_union_t, rdma_t, wr_t,
};

/// A send work request with its scatter entry; [`SendWr::post_ready`] points the
/// request at the entry right before posting (the value may have moved since).
pub struct SendWr {
    wr: ibv_send_wr,
    sge: ibv_sge,
}

impl SendWr {
    /// An RDMA write of `len` bytes at `addr` (local key `lkey`) to `remote_addr`
    /// (remote key `rkey`); with `imm`, a write with immediate, which completes a
    /// receive at the peer. Always signaled: its completion frees a send-queue slot and,
    /// for a batch, the staging bytes it read.
    pub fn write(
        wr_id: u64,
        (addr, len, lkey): (u64, u32, u32),
        (remote_addr, rkey): (u64, u32),
        imm: Option<u32>,
    ) -> SendWr {
        // SAFETY: `ibv_send_wr` is a plain C structure (integers, raw pointers and
        // unions of those) for which all-zero bytes are a valid value.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = wr_id;
        wr.num_sge = 1;
        wr.opcode = match imm {
            Some(_) => ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM,
            None => ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        };
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        // Verbs take the immediate value in network order.
        wr.imm_data_invalidated_rkey_union = imm_data_invalidated_rkey_union_t {
            imm_data: imm.unwrap_or(0).to_be(),
        };
        wr.wr = wr_t {
            rdma: rdma_t { remote_addr, rkey },
        };
        SendWr {
            wr,
            sge: ibv_sge {
                addr,
                length: len,
                lkey,
            },
        }
    }

    /// The same write with its bytes copied into the request when posted (for the
    /// 8-byte credit and finish words: the source may change right after the post).
    pub fn inline(mut self) -> SendWr {
        self.wr.send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
        self
    }

    /// The request, pointing at its scatter entry, for `ibv_post_send`.
    pub fn post_ready(&mut self) -> *mut ibv_send_wr {
        self.wr.sg_list = &mut self.sge;
        self.wr.next = std::ptr::null_mut();
        &mut self.wr
    }

    /// The request as built (for inspection).
    #[cfg(test)]
    pub fn wr(&self) -> &ibv_send_wr {
        &self.wr
    }

    /// Its scatter entry.
    #[cfg(test)]
    pub fn sge(&self) -> &ibv_sge {
        &self.sge
    }
}

/// A receive work request without a buffer: writes with immediate place their bytes
/// where the writer said and only consume the receive for their completion.
pub fn empty_recv(wr_id: u64) -> ibv_recv_wr {
    ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: std::ptr::null_mut(),
        num_sge: 0,
    }
}

fn zeroed_attr() -> ibv_qp_attr {
    // SAFETY: `ibv_qp_attr` holds integers and plain structures of integers: all-zero
    // bytes are a valid value (the state RESET, no flags).
    unsafe { std::mem::zeroed() }
}

/// RESET -> INIT: the port, and remote writes allowed into this side's registrations.
pub fn to_init(port: u8) -> (ibv_qp_attr, ibv_qp_attr_mask) {
    let mut a = zeroed_attr();
    a.qp_state = ibv_qp_state::IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags =
        (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE).0;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE
        | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX
        | ibv_qp_attr_mask::IBV_QP_PORT
        | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS;
    (a, mask)
}

/// INIT -> RTR: connected to `peer`'s queue pair at path MTU `mtu`. With `global` (an
/// Ethernet port, RoCE, or a peer without a LID) packets carry a global header from this
/// port's GID `gid_index` to the peer's GID; otherwise the peer's LID is the destination
/// (InfiniBand within a subnet).
pub fn to_rtr(
    peer: &RdmaEndpoint,
    mtu: u8,
    port: u8,
    gid_index: u8,
    global: bool,
) -> (ibv_qp_attr, ibv_qp_attr_mask) {
    let mut a = zeroed_attr();
    a.qp_state = ibv_qp_state::IBV_QPS_RTR;
    a.path_mtu = u32::from(mtu);
    a.dest_qp_num = peer.qpn;
    a.rq_psn = peer.psn;
    a.max_dest_rd_atomic = 1;
    // 12: 0.64 ms before a receiver-not-ready retry.
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.port_num = port;
    if global {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid.raw = peer.gid;
        a.ah_attr.grh.sgid_index = gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    let mask = ibv_qp_attr_mask::IBV_QP_STATE
        | ibv_qp_attr_mask::IBV_QP_AV
        | ibv_qp_attr_mask::IBV_QP_PATH_MTU
        | ibv_qp_attr_mask::IBV_QP_DEST_QPN
        | ibv_qp_attr_mask::IBV_QP_RQ_PSN
        | ibv_qp_attr_mask::IBV_QP_MAX_DEST_RD_ATOMIC
        | ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER;
    (a, mask)
}

/// RTR -> RTS: this side's first sequence number; transport retries bounded (a dead
/// peer errors the queue pair out after about four seconds: a short fabric hiccup must
/// not break the link, since a broken link closes the connection), receiver-not-ready
/// retries unbounded (a slow reader is back-pressure, not a failure; QUIC decides
/// failures).
pub fn to_rts(psn: u32) -> (ibv_qp_attr, ibv_qp_attr_mask) {
    let mut a = zeroed_attr();
    a.qp_state = ibv_qp_state::IBV_QPS_RTS;
    a.sq_psn = psn;
    // 4.096 µs * 2^17 = 0.54 s per try, 8 tries.
    a.timeout = 17;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    let mask = ibv_qp_attr_mask::IBV_QP_STATE
        | ibv_qp_attr_mask::IBV_QP_TIMEOUT
        | ibv_qp_attr_mask::IBV_QP_RETRY_CNT
        | ibv_qp_attr_mask::IBV_QP_RNR_RETRY
        | ibv_qp_attr_mask::IBV_QP_SQ_PSN
        | ibv_qp_attr_mask::IBV_QP_MAX_QP_RD_ATOMIC;
    (a, mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_with_immediate_carries_the_count_in_network_order() {
        let mut w = SendWr::write(7, (0x1000, 512, 11), (0x9000, 22), Some(512));
        let wr = w.wr();
        assert_eq!(wr.wr_id, 7);
        assert_eq!(wr.opcode, ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wr.send_flags, ibv_send_flags::IBV_SEND_SIGNALED.0);
        // SAFETY: the unions were written with these members just above.
        let (imm, rdma) = unsafe { (wr.imm_data_invalidated_rkey_union.imm_data, wr.wr.rdma) };
        assert_eq!(u32::from_be(imm), 512);
        assert_eq!((rdma.remote_addr, rdma.rkey), (0x9000, 22));
        let sge = *w.sge();
        assert_eq!((sge.addr, sge.length, sge.lkey), (0x1000, 512, 11));
        let p = w.post_ready();
        // SAFETY: `p` points into `w`, alive here.
        let posted = unsafe { &*p };
        assert_eq!(posted.num_sge, 1);
        assert_eq!(posted.sg_list as *const ibv_sge, w.sge() as *const ibv_sge);
        assert!(posted.next.is_null());
    }

    #[test]
    fn a_plain_write_has_no_immediate() {
        let w = SendWr::write(1, (0x1000, 8, 1), (0x2000, 2), None);
        assert_eq!(w.wr().opcode, ibv_wr_opcode::IBV_WR_RDMA_WRITE);
    }

    #[test]
    fn an_inline_write_stays_signaled() {
        let w = SendWr::write(1, (0x1000, 8, 1), (0x2000, 2), Some(0)).inline();
        let flags = w.wr().send_flags;
        assert_ne!(flags & ibv_send_flags::IBV_SEND_INLINE.0, 0);
        assert_ne!(flags & ibv_send_flags::IBV_SEND_SIGNALED.0, 0);
    }

    #[test]
    fn receives_carry_no_buffer() {
        let r = empty_recv(3);
        assert_eq!((r.wr_id, r.num_sge), (3, 0));
        assert!(r.sg_list.is_null() && r.next.is_null());
    }

    #[test]
    fn queue_pair_transitions_set_what_verbs_require() {
        let (a, m) = to_init(1);
        assert_eq!((a.qp_state, a.port_num), (ibv_qp_state::IBV_QPS_INIT, 1));
        assert_ne!(
            a.qp_access_flags & ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0,
            0
        );
        assert_ne!(m.0 & ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0, 0);

        let peer = RdmaEndpoint {
            lid: 0,
            gid: [1; 16],
            qpn: 0x42,
            psn: 0x99,
            mtu: 5,
            ring_addr: 0x1000,
            ring_rkey: 1,
            ring_bytes: 1 << 20,
            credit_addr: 0x2000,
            credit_rkey: 2,
        };
        let (a, m) = to_rtr(&peer, 3, 1, 2, true);
        assert_eq!(a.qp_state, ibv_qp_state::IBV_QPS_RTR);
        assert_eq!((a.dest_qp_num, a.rq_psn, a.path_mtu), (0x42, 0x99, 3));
        assert_eq!(a.ah_attr.is_global, 1);
        // SAFETY: `raw` is the member written by `to_rtr`.
        assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, [1; 16]);
        assert_eq!(a.ah_attr.grh.sgid_index, 2);
        for bit in [
            ibv_qp_attr_mask::IBV_QP_AV,
            ibv_qp_attr_mask::IBV_QP_DEST_QPN,
            ibv_qp_attr_mask::IBV_QP_RQ_PSN,
        ] {
            assert_ne!(m.0 & bit.0, 0);
        }
        // InfiniBand without a GID: routed by LID, no global header.
        let (a, _) = to_rtr(
            &RdmaEndpoint {
                lid: 7,
                gid: [0; 16],
                ..peer
            },
            5,
            1,
            0,
            false,
        );
        assert_eq!((a.ah_attr.is_global, a.ah_attr.dlid), (0, 7));

        let (a, m) = to_rts(0x1234);
        assert_eq!(
            (a.qp_state, a.sq_psn, a.rnr_retry),
            (ibv_qp_state::IBV_QPS_RTS, 0x1234, 7)
        );
        assert_ne!(m.0 & ibv_qp_attr_mask::IBV_QP_SQ_PSN.0, 0);
    }
}
