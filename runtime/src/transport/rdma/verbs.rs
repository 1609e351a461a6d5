//! The verbs this data path calls, each behind an owner that releases it once: the
//! opened device with its protection domain, memory registrations, a completion queue
//! with its event channel, a reliable-connected queue pair.
//!
//! libibverbs objects may be used from several threads (its providers lock what they
//! share), which is why the owners are `Send + Sync`.

use super::exchange::Settings;
use super::registry::{Access, Keys, Register};
use super::wr::SendWr;
use rdma_sys::{
    ___ibv_query_port, ibv_access_flags, ibv_ack_cq_events, ibv_alloc_pd, ibv_close_device,
    ibv_comp_channel, ibv_context, ibv_cq, ibv_create_comp_channel, ibv_create_cq, ibv_create_qp,
    ibv_dealloc_pd, ibv_dereg_mr, ibv_destroy_comp_channel, ibv_destroy_cq, ibv_destroy_qp,
    ibv_free_device_list, ibv_get_cq_event, ibv_get_device_list, ibv_get_device_name, ibv_gid,
    ibv_modify_qp, ibv_mr, ibv_open_device, ibv_pd, ibv_poll_cq, ibv_port_attr, ibv_port_state,
    ibv_post_recv, ibv_post_send, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_init_attr,
    ibv_qp_type, ibv_query_gid, ibv_recv_wr, ibv_reg_mr, ibv_req_notify_cq, ibv_wc,
};
use std::ffi::CStr;
use std::io;
use std::os::fd::RawFd;
use std::ptr;

/// An opened device, its protection domain and what its port says about it.
pub struct Device {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    /// The device's name (`mlx5_0`).
    pub name: String,
    /// The port the queue pairs use.
    pub port: u8,
    /// The GID index they route with.
    pub gid_index: u8,
    /// The port's LID (InfiniBand).
    pub lid: u16,
    /// The port's GID at `gid_index`.
    pub gid: [u8; 16],
    /// The port's active MTU code.
    pub mtu: u8,
    /// The port is Ethernet (RoCE): packets are routed by GID.
    pub ethernet: bool,
}

/// `IBV_LINK_LAYER_ETHERNET` (an anonymous enum in verbs.h, not in the bindings).
const LINK_LAYER_ETHERNET: u8 = 2;

// SAFETY: verbs objects are safe to use from any thread (libibverbs locks inside); the
// pointers are owned by this value and released once in `Drop`.
unsafe impl Send for Device {}
// SAFETY: as above; every method takes `&self` and calls thread-safe verbs.
unsafe impl Sync for Device {}

fn last_error(what: &str) -> String {
    format!("{what}: {}", io::Error::last_os_error())
}

impl Device {
    /// Opens the device `settings` name (or the first one), allocates a protection
    /// domain and reads its port. `Err` says why this node has no RDMA path.
    pub fn open(settings: &Settings) -> Result<Device, String> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer; the list is freed below.
        let list = unsafe { ibv_get_device_list(&mut n) };
        if list.is_null() {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENOSYS) => {
                    "no RDMA device (the kernel has no RDMA support: no /sys/class/infiniband)"
                        .into()
                }
                _ => format!("no RDMA device (ibv_get_device_list: {e})"),
            });
        }
        let devices: Vec<_> = (0..n.max(0) as usize)
            // SAFETY: the list holds `n` device pointers.
            .map(|i| unsafe { *list.add(i) })
            .collect();
        let named = devices.iter().map(|&d| {
            // SAFETY: `d` is a device of the list, alive until the list is freed; the
            // name is a C string owned by it.
            let name = unsafe { CStr::from_ptr(ibv_get_device_name(d)) };
            (d, name.to_string_lossy().into_owned())
        });
        let chosen: Vec<_> = named
            .filter(|(_, name)| settings.device.as_ref().is_none_or(|want| want == name))
            .take(1)
            .collect();
        let opened = chosen.first().map(|(d, name)| {
            // SAFETY: `d` is alive until the list is freed; the context outlives it.
            (unsafe { ibv_open_device(*d) }, name.clone())
        });
        // SAFETY: obtained from `ibv_get_device_list` above, freed once.
        unsafe { ibv_free_device_list(list) };
        let (ctx, name) = match opened {
            None if devices.is_empty() => {
                return Err("no RDMA device (ibv_get_device_list found none)".into())
            }
            None => {
                return Err(format!(
                    "no RDMA device named {} (LAZARUS_RDMA_DEVICE)",
                    settings.device.as_deref().unwrap_or("")
                ))
            }
            Some((ctx, name)) if ctx.is_null() => {
                return Err(last_error(&format!("cannot open RDMA device {name}")))
            }
            Some(opened) => opened,
        };
        // SAFETY: `ctx` is an open context.
        let pd = unsafe { ibv_alloc_pd(ctx) };
        if pd.is_null() {
            let e = last_error(&format!("cannot allocate a protection domain on {name}"));
            // SAFETY: opened above, closed once.
            unsafe { ibv_close_device(ctx) };
            return Err(e);
        }
        let mut device = Device {
            ctx,
            pd,
            name,
            port: settings.port,
            gid_index: settings.gid_index,
            lid: 0,
            gid: [0; 16],
            mtu: 0,
            ethernet: false,
        };
        // SAFETY: all-zero is a valid `ibv_port_attr`; the call fills it.
        let mut port: ibv_port_attr = unsafe { std::mem::zeroed() };
        // SAFETY: `ctx` is open and `port` a valid out-pointer.
        let e = unsafe { ___ibv_query_port(ctx, settings.port, &mut port) };
        if e != 0 {
            return Err(format!(
                "cannot query port {} of {}: {}",
                settings.port,
                device.name,
                io::Error::from_raw_os_error(e)
            ));
        }
        if port.state != ibv_port_state::IBV_PORT_ACTIVE {
            return Err(format!(
                "port {} of {} is not active (state {})",
                settings.port, device.name, port.state
            ));
        }
        // SAFETY: all-zero is a valid GID; the call fills it.
        let mut gid: ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { ibv_query_gid(ctx, settings.port, settings.gid_index.into(), &mut gid) } != 0 {
            return Err(last_error(&format!(
                "cannot read GID {} of {} port {}",
                settings.gid_index, device.name, settings.port
            )));
        }
        device.lid = port.lid;
        // SAFETY: `raw` covers the whole union.
        device.gid = unsafe { gid.raw };
        device.mtu = port.active_mtu as u8;
        device.ethernet = port.link_layer == LINK_LAYER_ETHERNET;
        Ok(device)
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: allocated in `open`, released once, after every registration, queue
        // pair and completion queue (they hold an `Arc<Device>`).
        unsafe {
            ibv_dealloc_pd(self.pd);
            ibv_close_device(self.ctx);
        }
    }
}

/// Registers memory in a device's protection domain.
pub struct PdRegister(pub std::sync::Arc<Device>);

/// A memory registration.
pub struct Mr(*mut ibv_mr);

// SAFETY: only deregistered, once, by the registry that owns it.
unsafe impl Send for Mr {}

impl Register for PdRegister {
    type Handle = Mr;
    fn register(&mut self, addr: usize, len: usize, access: Access) -> Result<(Keys, Mr), String> {
        let flags = match access {
            Access::Local => ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
            Access::RemoteWrite => {
                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            }
        };
        // SAFETY: the registry registers memory its link keeps mapped until the
        // registration is dropped; the protection domain is alive (`self.0`).
        let mr = unsafe { ibv_reg_mr(self.0.pd, addr as *mut _, len, flags.0 as i32) };
        if mr.is_null() {
            return Err(last_error(&format!("cannot register {len} B")));
        }
        // SAFETY: a registration the call just returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok((Keys { lkey, rkey }, Mr(mr)))
    }

    fn deregister(&mut self, mr: Mr) {
        // SAFETY: registered above, deregistered once.
        unsafe { ibv_dereg_mr(mr.0) };
    }
}

/// A completion queue and the event channel that says it has completions.
pub struct CompletionQueue {
    channel: *mut ibv_comp_channel,
    cq: *mut ibv_cq,
    _device: std::sync::Arc<Device>,
}

// SAFETY: verbs on a completion queue are thread-safe; the link polls it under a lock.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}

impl CompletionQueue {
    /// A queue of `depth` entries with its own event channel (non-blocking).
    pub fn new(device: &std::sync::Arc<Device>, depth: i32) -> Result<CompletionQueue, String> {
        // SAFETY: the context is open.
        let channel = unsafe { ibv_create_comp_channel(device.ctx) };
        if channel.is_null() {
            return Err(last_error("cannot create a completion channel"));
        }
        // SAFETY: as above; `channel` was just created.
        let cq = unsafe { ibv_create_cq(device.ctx, depth, ptr::null_mut(), channel, 0) };
        if cq.is_null() {
            let e = last_error("cannot create a completion queue");
            // SAFETY: created above, destroyed once.
            unsafe { ibv_destroy_comp_channel(channel) };
            return Err(e);
        }
        let q = CompletionQueue {
            channel,
            cq,
            _device: std::sync::Arc::clone(device),
        };
        // The link waits for the channel's file descriptor with the reactor.
        let fd = q.fd();
        // SAFETY: `fd` is the channel's open descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(last_error(
                "cannot make the completion channel non-blocking",
            ));
        }
        q.arm()?;
        Ok(q)
    }

    /// The event channel's descriptor: readable once an armed queue has a completion.
    pub fn fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as `self`.
        unsafe { (*self.channel).fd }
    }

    /// Asks for an event at the next completion.
    pub fn arm(&self) -> Result<(), String> {
        // SAFETY: the queue lives as long as `self`.
        match unsafe { ibv_req_notify_cq(self.cq, 0) } {
            0 => Ok(()),
            e => Err(format!("cannot arm the completion queue: error {e}")),
        }
    }

    /// Takes the channel's pending events (acknowledging them); false if there were none.
    pub fn take_events(&self) -> bool {
        let mut taken = 0;
        loop {
            let (mut cq, mut ctx) = (ptr::null_mut(), ptr::null_mut());
            // SAFETY: non-blocking channel; valid out-pointers.
            if unsafe { ibv_get_cq_event(self.channel, &mut cq, &mut ctx) } != 0 {
                break;
            }
            taken += 1;
        }
        if taken > 0 {
            // SAFETY: acknowledges exactly the events taken from this queue.
            unsafe { ibv_ack_cq_events(self.cq, taken) };
        }
        taken > 0
    }

    /// Polls up to `out.len()` completions; returns how many were written.
    pub fn poll(&self, out: &mut [ibv_wc]) -> Result<usize, String> {
        // SAFETY: `out` has room for `out.len()` entries.
        let n = unsafe { ibv_poll_cq(self.cq, out.len() as i32, out.as_mut_ptr()) };
        usize::try_from(n).map_err(|_| format!("polling the completion queue failed: {n}"))
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once, after the queue pair using it (the
        // link drops its queue pair first).
        unsafe {
            ibv_destroy_cq(self.cq);
            ibv_destroy_comp_channel(self.channel);
        }
    }
}

/// A reliable-connected queue pair.
pub struct QueuePair {
    qp: *mut ibv_qp,
    _device: std::sync::Arc<Device>,
}

// SAFETY: posting to a queue pair is thread-safe in libibverbs.
unsafe impl Send for QueuePair {}
// SAFETY: as above.
unsafe impl Sync for QueuePair {}

impl QueuePair {
    /// A queue pair in RESET whose sends and receives complete on `cq`, with room for
    /// `depth` outstanding sends and receives.
    pub fn new(
        device: &std::sync::Arc<Device>,
        cq: &CompletionQueue,
        depth: u32,
    ) -> Result<QueuePair, String> {
        // SAFETY: all-zero is a valid `ibv_qp_init_attr` (null pointers, no flags).
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        init.send_cq = cq.cq;
        init.recv_cq = cq.cq;
        init.qp_type = ibv_qp_type::IBV_QPT_RC;
        init.cap.max_send_wr = depth;
        init.cap.max_recv_wr = depth;
        init.cap.max_send_sge = 1;
        init.cap.max_recv_sge = 1;
        // The 8-byte credit and finish words go inline.
        init.cap.max_inline_data = 16;
        // SAFETY: the protection domain and the queue are alive.
        let qp = unsafe { ibv_create_qp(device.pd, &mut init) };
        if qp.is_null() {
            return Err(last_error("cannot create a queue pair"));
        }
        Ok(QueuePair {
            qp,
            _device: std::sync::Arc::clone(device),
        })
    }

    /// Its number, for the peer.
    pub fn qpn(&self) -> u32 {
        // SAFETY: alive as long as `self`.
        unsafe { (*self.qp).qp_num }
    }

    /// Moves it to the state `attr` says.
    pub fn modify(&self, mut attr: ibv_qp_attr, mask: ibv_qp_attr_mask) -> Result<(), String> {
        // SAFETY: `attr` is a valid attribute set for `mask`.
        match unsafe { ibv_modify_qp(self.qp, &mut attr, mask.0 as i32) } {
            0 => Ok(()),
            e => Err(format!(
                "cannot move the queue pair to state {}: {}",
                attr.qp_state,
                io::Error::from_raw_os_error(e)
            )),
        }
    }

    /// Posts one send request.
    pub fn post_send(&self, wr: &mut SendWr) -> Result<(), String> {
        let mut bad = ptr::null_mut();
        // SAFETY: `wr` and its scatter entry stay alive during the call; the memory
        // they name is registered and is not reused before the completion.
        match unsafe { ibv_post_send(self.qp, wr.post_ready(), &mut bad) } {
            0 => Ok(()),
            e => Err(format!(
                "posting a write failed: {}",
                io::Error::from_raw_os_error(e)
            )),
        }
    }

    /// Posts one receive request.
    pub fn post_recv(&self, mut wr: ibv_recv_wr) -> Result<(), String> {
        let mut bad = ptr::null_mut();
        // SAFETY: a request without buffers, alive during the call.
        match unsafe { ibv_post_recv(self.qp, &mut wr, &mut bad) } {
            0 => Ok(()),
            e => Err(format!(
                "posting a receive failed: {}",
                io::Error::from_raw_os_error(e)
            )),
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once.
        unsafe { ibv_destroy_qp(self.qp) };
    }
}
