//! A single-producer, single-consumer byte ring in memory shared by two processes.
//!
//! The ring carries the same byte stream a QUIC stream would: encoded frames, one after
//! the other, a frame larger than the ring streaming through it in pieces. Positions are
//! byte counts that only grow (`write`: bytes committed by the writer; `read`: bytes the
//! reader is done with), so an index never wraps into ambiguity.
//!
//! The commit rule keeps a killed writer harmless: bytes are copied first and `write`
//! moves past them after, so the reader never sees bytes that were not completely
//! written. A writer killed in the middle of a frame leaves a frame that never completes;
//! its reader is dropped with the connection and that frame with it.
//!
//! Waking: a side that finds nothing to do sets its waiting word, looks again, and only
//! then sleeps; the other side, after moving its position, takes the word and rings the
//! doorbell if it was set. All four accesses are sequentially consistent, so one of the
//! two always sees the other (no lost wake-up).
//!
//! A peer can write anything into shared memory. Positions that do not make sense (more
//! bytes committed than the ring holds, a position going backwards) are reported as
//! [`RingCorrupt`]; bytes that make no sense are the frame decoder's to reject.

use std::sync::atomic::{AtomicU64, Ordering::*};

/// `reader_waiting`: the reader sleeps; ring the doorbell after a commit.
const SLEEPS: u64 = 1;
/// `reader_waiting`: the reader sleeps, but its core polls the ring while it spins.
const POLLED: u64 = 2;

/// One control word on its own cache line: the writer's and reader's words do not share
/// a line, so each side's stores do not slow the other's loads.
#[repr(C, align(64))]
struct Word(AtomicU64);

/// The control words of one ring, in shared memory.
#[repr(C)]
pub struct RingControl {
    write: Word,
    read: Word,
    reader_waiting: Word,
    writer_waiting: Word,
    finished: Word,
}

/// The ring's positions make no sense: the peer's memory is damaged or it is not a
/// Lazarus node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "shared ring positions are inconsistent (written {write}, read {read}, capacity {capacity})"
)]
pub struct RingCorrupt {
    /// Bytes committed by the writer.
    pub write: u64,
    /// Bytes released by the reader.
    pub read: u64,
    /// The ring's size.
    pub capacity: usize,
}

/// One direction of a segment. The writing process calls the writer's methods, the
/// reading process the reader's; each side has exactly one caller at a time.
pub struct Ring<'a> {
    control: &'a RingControl,
    data: *mut u8,
    capacity: usize,
}

// SAFETY: `Ring` only reaches shared memory through atomics and through byte copies of
// ranges its side owns under the commit rule; the mapping outlives `'a`.
unsafe impl Send for Ring<'_> {}

impl<'a> Ring<'a> {
    /// A ring over `control` and `capacity` bytes at `data`.
    ///
    /// # Safety
    /// `data..data + capacity` must be mapped, writable and live for `'a`, and `capacity`
    /// a power of two.
    pub(crate) unsafe fn new(control: &'a RingControl, data: *mut u8, capacity: usize) -> Self {
        Ring {
            control,
            data,
            capacity,
        }
    }

    fn corrupt(&self, write: u64, read: u64) -> RingCorrupt {
        RingCorrupt {
            write,
            read,
            capacity: self.capacity,
        }
    }

    /// Writer: copies as much of `bytes` as there is room for and commits it. Returns how
    /// many bytes were taken (0 when the ring is full).
    pub fn push(&mut self, bytes: &[u8]) -> Result<usize, RingCorrupt> {
        let c = self.control;
        let write = c.write.0.load(Relaxed);
        let read = c.read.0.load(Acquire);
        let used = write.wrapping_sub(read);
        if used > self.capacity as u64 {
            return Err(self.corrupt(write, read));
        }
        let n = (self.capacity - used as usize).min(bytes.len());
        if n == 0 {
            return Ok(0);
        }
        let at = (write as usize) & (self.capacity - 1);
        let first = n.min(self.capacity - at);
        // SAFETY: `at + first <= capacity` and `n - first <= at`, so both copies stay in
        // the data area. The bytes from `write` on (modulo the ring) are free: the reader
        // released them (`read`) and does not look past `write`, which moves only below.
        unsafe {
            self.data
                .add(at)
                .copy_from_nonoverlapping(bytes.as_ptr(), first);
            self.data
                .copy_from_nonoverlapping(bytes.as_ptr().add(first), n - first);
        }
        // Commit: the copied bytes happen-before any reader that sees the new position.
        c.write.0.store(write.wrapping_add(n as u64), SeqCst);
        Ok(n)
    }

    /// Reader: hands every committed, unread byte to `take` (in at most two slices, in
    /// order) and releases them to the writer. Returns how many bytes were handed over.
    pub fn pull(&mut self, mut take: impl FnMut(&[u8])) -> Result<usize, RingCorrupt> {
        let c = self.control;
        let read = c.read.0.load(Relaxed);
        let write = c.write.0.load(Acquire);
        let n = write.wrapping_sub(read);
        if n > self.capacity as u64 {
            return Err(self.corrupt(write, read));
        }
        let n = n as usize;
        if n == 0 {
            return Ok(0);
        }
        let at = (read as usize) & (self.capacity - 1);
        let first = n.min(self.capacity - at);
        // SAFETY: both slices lie in the data area (as in `push`). The writer committed
        // these bytes before moving `write` past them (acquired above) and does not write
        // them again until `read` moves past them, below, after `take` is done with them.
        unsafe {
            take(std::slice::from_raw_parts(self.data.add(at), first));
            if n > first {
                take(std::slice::from_raw_parts(self.data, n - first));
            }
        }
        c.read.0.store(read.wrapping_add(n as u64), SeqCst);
        Ok(n)
    }

    /// Reader, about to sleep: announces it and looks once more. True if bytes arrived
    /// meanwhile (do not sleep); otherwise the writer's next commit rings the doorbell,
    /// unless `polled`: then the reader's core looks at the ring itself while it spins
    /// ([`Ring::poll`]) and asks for the doorbell only before it blocks
    /// ([`Ring::reader_blocks`]).
    pub fn reader_sleeps(&self, polled: bool) -> bool {
        let c = self.control;
        c.reader_waiting
            .0
            .store(if polled { POLLED } else { SLEEPS }, SeqCst);
        let arrived = c.write.0.load(SeqCst) != c.read.0.load(Relaxed);
        if arrived {
            c.reader_waiting.0.store(0, Relaxed);
        }
        arrived || self.finished()
    }

    /// Writer, about to sleep for room: announces it and looks once more. True if room
    /// appeared meanwhile; otherwise the reader's next release rings the doorbell.
    pub fn writer_sleeps(&self) -> bool {
        let c = self.control;
        c.writer_waiting.0.store(1, SeqCst);
        let used = c.write.0.load(Relaxed).wrapping_sub(c.read.0.load(SeqCst));
        let room = used < self.capacity as u64;
        if room {
            c.writer_waiting.0.store(0, Relaxed);
        }
        room
    }

    /// Writer, after committing: whether the reader sleeps and must be woken (the word is
    /// taken, so one doorbell per sleep). A polled reader is not rung.
    pub fn take_sleeping_reader(&self) -> bool {
        let w = &self.control.reader_waiting.0;
        w.load(SeqCst) == SLEEPS && w.compare_exchange(SLEEPS, 0, SeqCst, SeqCst).is_ok()
    }

    /// Reader's core, spinning: whether committed bytes wait unread.
    pub fn poll(&self) -> bool {
        self.control.write.0.load(Acquire) != self.control.read.0.load(Relaxed)
    }

    /// Reader's core, about to block: a polled reader becomes a sleeping one (the next
    /// commit rings the doorbell). True if bytes wait already (do not block).
    pub fn reader_blocks(&self) -> bool {
        let w = &self.control.reader_waiting.0;
        let _ = w.compare_exchange(POLLED, SLEEPS, SeqCst, SeqCst);
        self.control.write.0.load(SeqCst) != self.control.read.0.load(Relaxed)
    }

    /// Reader, after releasing: whether the writer waits for room and must be woken.
    pub fn take_sleeping_writer(&self) -> bool {
        let w = &self.control.writer_waiting.0;
        w.load(SeqCst) != 0 && w.swap(0, SeqCst) != 0
    }

    /// Writer's side: whether the ring has room now.
    pub fn has_room(&self) -> bool {
        let c = self.control;
        c.write.0.load(SeqCst).wrapping_sub(c.read.0.load(SeqCst)) < self.capacity as u64
    }

    /// Writer: nothing more will be written (the node says goodbye).
    pub fn finish(&self) {
        self.control.finished.0.store(1, SeqCst);
    }

    /// Whether the writer finished the stream.
    pub fn finished(&self) -> bool {
        self.control.finished.0.load(SeqCst) != 0
    }

    /// Whether the reader has released everything committed.
    pub fn drained(&self) -> bool {
        self.control.read.0.load(SeqCst) == self.control.write.0.load(SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring in this process's memory.
    struct Local {
        control: Box<RingControl>,
        data: Vec<u8>,
    }

    impl Local {
        fn new(capacity: usize) -> Local {
            Local {
                control: Box::new(RingControl {
                    write: Word(AtomicU64::new(0)),
                    read: Word(AtomicU64::new(0)),
                    reader_waiting: Word(AtomicU64::new(0)),
                    writer_waiting: Word(AtomicU64::new(0)),
                    finished: Word(AtomicU64::new(0)),
                }),
                data: vec![0; capacity],
            }
        }
        fn ring(&self) -> Ring<'_> {
            // SAFETY: `data` is `capacity` bytes, a power of two, alive as long as `self`.
            // The test writes through the pointer from one thread at a time per range.
            unsafe {
                Ring::new(
                    &self.control,
                    self.data.as_ptr() as *mut u8,
                    self.data.len(),
                )
            }
        }
    }

    #[test]
    fn bytes_arrive_whole_and_in_order_through_a_small_ring() {
        let local = Local::new(4096);
        let (mut w, mut r) = (local.ring(), local.ring());
        let sent: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let mut got = Vec::new();
        std::thread::scope(|s| {
            let sent = &sent;
            s.spawn(move || {
                let mut off = 0;
                let mut step = 1;
                while off < sent.len() {
                    let end = (off + step).min(sent.len());
                    off += w.push(&sent[off..end]).unwrap();
                    step = step % 9000 + 37;
                }
                w.finish();
            });
            loop {
                let n = r.pull(|s| got.extend_from_slice(s)).unwrap();
                if n == 0 && r.finished() && r.drained() {
                    break;
                }
                std::hint::spin_loop();
            }
        });
        assert_eq!(got.len(), sent.len());
        assert!(got == sent, "bytes differ");
    }

    #[test]
    fn a_full_ring_takes_nothing_until_the_reader_releases() {
        let local = Local::new(4096);
        let (mut w, mut r) = (local.ring(), local.ring());
        assert_eq!(w.push(&[1; 5000]).unwrap(), 4096);
        assert_eq!(w.push(&[2; 10]).unwrap(), 0);
        assert!(!w.writer_sleeps(), "no room: the writer may sleep");
        assert_eq!(r.pull(|_| {}).unwrap(), 4096);
        assert!(
            r.take_sleeping_writer(),
            "the reader wakes the sleeping writer"
        );
        assert!(!r.take_sleeping_writer(), "once");
        assert_eq!(w.push(&[2; 10]).unwrap(), 10);
    }

    #[test]
    fn a_sleeping_reader_is_woken_by_the_next_commit_and_only_then() {
        let local = Local::new(4096);
        let (mut w, r) = (local.ring(), local.ring());
        assert!(!r.reader_sleeps(false));
        w.push(b"x").unwrap();
        assert!(w.take_sleeping_reader());
        assert!(!w.take_sleeping_reader());
        assert!(r.reader_sleeps(false), "data is there: no sleep");
    }

    #[test]
    fn a_polled_reader_is_not_rung_until_its_core_blocks() {
        let local = Local::new(4096);
        let (mut w, mut r) = (local.ring(), local.ring());
        assert!(!r.reader_sleeps(true));
        w.push(b"x").unwrap();
        assert!(!w.take_sleeping_reader(), "its core polls: no doorbell");
        assert!(r.poll(), "the spinning core sees the bytes");
        assert!(r.reader_blocks(), "bytes wait: do not block");
        r.pull(|_| {}).unwrap();
        assert!(!r.reader_sleeps(true));
        assert!(!r.reader_blocks(), "nothing waits: block");
        w.push(b"y").unwrap();
        assert!(w.take_sleeping_reader(), "a blocked core is rung");
    }

    #[test]
    fn positions_a_peer_damaged_are_reported_not_followed() {
        let local = Local::new(4096);
        let (mut w, mut r) = (local.ring(), local.ring());
        local.control.write.0.store(10_000, SeqCst);
        let err = r
            .pull(|_| panic!("no bytes from a damaged ring"))
            .unwrap_err();
        assert_eq!(err.write, 10_000);
        local.control.write.0.store(0, SeqCst);
        local.control.read.0.store(5, SeqCst);
        assert!(w.push(b"abc").is_err(), "read ahead of write");
    }
}
