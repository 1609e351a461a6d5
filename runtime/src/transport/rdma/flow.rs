//! The byte accounting of one direction of an RDMA link, without a device: where the
//! writer puts its next bytes in the reader's ring, how much room its credit leaves,
//! what an immediate value means, and when the reader returns credit.
//!
//! The ring is the reader's registered memory; the writer places bytes at
//! `sent % len` with RDMA writes, the last of which carries the number of bytes in its
//! immediate value. The reader learns of the bytes only from that completion, after the
//! adapter placed all of them (a reliable-connected queue pair completes a write with
//! immediate after every earlier write on it): a writer killed in the middle of a batch
//! leaves bytes nobody is told about, never a torn frame. The reader returns how far it
//! read with a write with immediate of its own into the writer's credit word.

/// The immediate value of a credit write (the reader's position is in the credit word).
/// Data writes carry their byte count, always below it.
pub const CREDIT_IMM: u32 = 0x8000_0000;
/// The immediate value of the writer's last write: it finished its stream (the node
/// closes its transport).
pub const FINISH_IMM: u32 = 0xc000_0000;

/// What an immediate value announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imm {
    /// `n` more bytes are in the ring.
    Data(u32),
    /// The credit word holds a new position.
    Credit,
    /// The writer finished its stream: nothing follows the bytes announced before.
    Finish,
}

impl Imm {
    /// Decodes an immediate value (in host order).
    pub fn decode(imm: u32) -> Imm {
        if imm == FINISH_IMM {
            Imm::Finish
        } else if imm & CREDIT_IMM != 0 {
            Imm::Credit
        } else {
            Imm::Data(imm)
        }
    }

    /// Encodes it.
    pub fn encode(self) -> u32 {
        match self {
            Imm::Data(n) => n & !CREDIT_IMM,
            Imm::Credit => CREDIT_IMM,
            Imm::Finish => FINISH_IMM,
        }
    }
}

/// One RDMA write of a batch: `len` bytes from offset `offset` of the writer's staging
/// ring to the same offset of the reader's ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Offset in both rings.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
}

/// The writer's view of the reader's ring.
#[derive(Debug)]
pub struct SendWindow {
    len: usize,
    /// Bytes written since the link started.
    sent: u64,
}

/// Why a batch cannot be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not enough room before the reader's credit: wait for a credit write.
    Wait,
    /// The reader's credit is beyond what was sent: the peer damaged its credit word.
    BadCredit,
}

impl SendWindow {
    /// A window on a ring of `len` bytes.
    pub fn new(len: usize) -> SendWindow {
        SendWindow { len, sent: 0 }
    }

    /// The position the bytes placed so far end at.
    pub fn end(&self) -> u64 {
        self.sent
    }

    /// Bytes written since the link started.
    #[cfg(test)]
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Free bytes given the reader's `credit` (how far it read).
    pub fn room(&self, credit: u64) -> Result<usize, Place> {
        let used = self.sent.checked_sub(credit).ok_or(Place::BadCredit)?;
        let used = usize::try_from(used).map_err(|_| Place::BadCredit)?;
        self.len.checked_sub(used).ok_or(Place::BadCredit)
    }

    /// Places `n` bytes if the ring has room: the chunks to write (two when they wrap
    /// around the ring's end), in order; the last carries the immediate value.
    pub fn place(&mut self, n: usize, credit: u64) -> Result<([Chunk; 2], usize), Place> {
        if n == 0 || n > self.len || n as u64 >= u64::from(CREDIT_IMM) {
            return Err(Place::Wait);
        }
        if self.room(credit)? < n {
            return Err(Place::Wait);
        }
        let offset = (self.sent % self.len as u64) as usize;
        let first = n.min(self.len - offset);
        self.sent += n as u64;
        let chunks = [
            Chunk { offset, len: first },
            Chunk {
                offset: 0,
                len: n - first,
            },
        ];
        Ok((chunks, if first == n { 1 } else { 2 }))
    }

    /// The largest batch this ring takes at once.
    pub fn max_batch(&self) -> usize {
        self.len.min(CREDIT_IMM as usize - 1)
    }
}

/// The reader's view of its own ring.
#[derive(Debug)]
pub struct RecvCursor {
    len: usize,
    /// Bytes announced by data completions.
    received: u64,
    /// Bytes handed to the frame decoder.
    consumed: u64,
    /// The position last written to the writer's credit word.
    credited: u64,
}

impl RecvCursor {
    /// A cursor on a ring of `len` bytes.
    pub fn new(len: usize) -> RecvCursor {
        RecvCursor {
            len,
            received: 0,
            consumed: 0,
            credited: 0,
        }
    }

    /// A data completion announced `n` bytes. False if they overflow the ring (the
    /// writer ignored its credit): the link is broken.
    pub fn announced(&mut self, n: u32) -> bool {
        let received = self.received + u64::from(n);
        if received - self.consumed > self.len as u64 {
            return false;
        }
        self.received = received;
        true
    }

    /// The announced bytes not yet consumed, as at most two ranges of the ring.
    pub fn readable(&self) -> [Chunk; 2] {
        let n = (self.received - self.consumed) as usize;
        let offset = (self.consumed % self.len as u64) as usize;
        let first = n.min(self.len - offset);
        [
            Chunk { offset, len: first },
            Chunk {
                offset: 0,
                len: n - first,
            },
        ]
    }

    /// Announced bytes not consumed yet.
    pub fn pending(&self) -> usize {
        (self.received - self.consumed) as usize
    }

    /// The decoder took `n` bytes.
    pub fn consume(&mut self, n: usize) {
        self.consumed = (self.consumed + n as u64).min(self.received);
    }

    /// The position to write into the writer's credit word now, if any: once a quarter
    /// of the ring was read since the last credit, or everything announced was read
    /// (the writer may be waiting for exactly that room).
    pub fn credit_due(&mut self) -> Option<u64> {
        let fresh = self.consumed - self.credited;
        if fresh == 0 {
            return None;
        }
        if fresh >= (self.len / 4) as u64 || self.consumed == self.received {
            self.credited = self.consumed;
            return Some(self.consumed);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn immediate_values_tell_data_from_credit() {
        assert_eq!(Imm::decode(Imm::Data(4096).encode()), Imm::Data(4096));
        assert_eq!(Imm::decode(Imm::Credit.encode()), Imm::Credit);
        assert_eq!(Imm::decode(Imm::Finish.encode()), Imm::Finish);
        assert_eq!(Imm::decode(0), Imm::Data(0));
    }

    #[test]
    fn a_batch_that_crosses_the_ring_end_is_written_in_two_chunks() {
        let mut w = SendWindow::new(100);
        let (c, n) = w.place(70, 0).unwrap();
        assert_eq!((c[0], n), (Chunk { offset: 0, len: 70 }, 1));
        // 30 bytes left before credit: 40 must wait.
        assert_eq!(w.place(40, 0), Err(Place::Wait));
        // The reader read 50: 80 free, 30 at the end and 50 from the start.
        let (c, n) = w.place(40, 50).unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            c[0],
            Chunk {
                offset: 70,
                len: 30
            }
        );
        assert_eq!(c[1], Chunk { offset: 0, len: 10 });
        assert_eq!(w.sent(), 110);
    }

    #[test]
    fn a_credit_beyond_what_was_sent_is_refused() {
        let mut w = SendWindow::new(100);
        w.place(10, 0).unwrap();
        assert_eq!(w.place(10, 11), Err(Place::BadCredit));
        assert_eq!(w.room(10), Ok(100));
    }

    #[test]
    fn the_reader_sees_exactly_the_announced_bytes_in_ring_order() {
        let mut r = RecvCursor::new(100);
        assert!(r.announced(90));
        r.consume(80);
        assert!(r.announced(30));
        let c = r.readable();
        assert_eq!(
            c[0],
            Chunk {
                offset: 80,
                len: 20
            }
        );
        assert_eq!(c[1], Chunk { offset: 0, len: 20 });
        // More than the ring holds beyond what was read: the writer broke its credit.
        assert!(!r.announced(61));
    }

    #[test]
    fn credit_is_returned_after_a_quarter_of_the_ring_or_when_drained() {
        let mut r = RecvCursor::new(100);
        assert!(r.announced(60));
        r.consume(10);
        assert_eq!(r.credit_due(), None);
        r.consume(20);
        assert_eq!(r.credit_due(), Some(30));
        r.consume(30);
        // Everything read: the writer may wait for this room.
        assert_eq!(r.credit_due(), Some(60));
        assert_eq!(r.credit_due(), None);
    }

    #[test]
    fn writer_and_reader_agree_on_every_byte_over_many_wraps() {
        // The writer's chunks land at the reader's offsets; the reader's ranges read
        // them back in order; credit flows back as the reader returns it.
        let len = 64;
        let mut ring = vec![0u8; len];
        let (mut w, mut r) = (SendWindow::new(len), RecvCursor::new(len));
        let (mut credit, mut next_out, mut next_in) = (0u64, 0u8, 0u8);
        for step in 0..10_000usize {
            let n = 1 + (step * 7919) % 40;
            match w.place(n, credit) {
                Ok((chunks, k)) => {
                    for c in &chunks[..k] {
                        for b in &mut ring[c.offset..c.offset + c.len] {
                            *b = next_out;
                            next_out = next_out.wrapping_add(1);
                        }
                    }
                    assert!(r.announced(n as u32));
                }
                Err(Place::Wait) => {}
                Err(Place::BadCredit) => panic!("credit beyond sent"),
            }
            let take = (step * 31) % 50;
            let mut taken = 0;
            for c in r.readable() {
                for &b in ring[c.offset..c.offset + c.len].iter().take(take - taken) {
                    assert_eq!(b, next_in);
                    next_in = next_in.wrapping_add(1);
                    taken += 1;
                }
            }
            r.consume(taken);
            if let Some(c) = r.credit_due() {
                credit = c;
            }
        }
        assert!(w.sent() > 100_000, "the rings wrapped many times");
    }
}
