//! The reply journal: the replies to the app's `main`'s asks, kept beside a node's
//! checkpoints instead of inside every one of them.
//!
//! A re-executed `main` needs every reply it ever got, so they cannot be released like
//! logged messages. Written into each checkpoint image they made images grow with the
//! run (session 15: 33 MB to 55 MB over 48,000 replies). The journal is append-only: a
//! checkpoint appends the replies kept since the previous one and records the journal's
//! length in its image; the image is written only after the journal is durable, so every
//! intact image's prefix of the journal is there. A longer journal (appended by a
//! checkpoint that did not commit) is cut back to the image's length at the next append.
//!
//! A record is `len: u32` (of `request` and the reply), `crc: u32` (CRC-32C of them),
//! `request: u64`, then the encoded reply, all little-endian.

use bytes::Bytes;

/// Bytes of a record before the reply: length, checksum, request number.
const RECORD_HEADER: usize = 4 + 4 + 8;

/// The largest record accepted when reading (a frame never carries more).
const MAX_RECORD: usize = 1 << 30;

/// The largest encoded reply a record holds; a larger one is refused when it is kept,
/// not written unreadable. A record's length counts the request number (8 bytes) and
/// what the driver keeps: the asked actor's id (8 bytes), then the encoded reply.
pub const MAX_REPLY: usize = MAX_RECORD - 8 - 8;

/// Appends the records of `replies` (request number, encoded reply) to `out`.
pub fn encode_records(replies: &[(u64, Bytes)], out: &mut Vec<u8>) {
    for (request, reply) in replies {
        let len = 8 + reply.len();
        let mut crc = crc32c::crc32c(&request.to_le_bytes());
        crc = crc32c::crc32c_append(crc, reply);
        out.reserve(RECORD_HEADER + reply.len());
        out.extend_from_slice(&(len as u32).to_le_bytes());
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&request.to_le_bytes());
        out.extend_from_slice(reply);
    }
}

/// The bytes `replies` take in the journal.
pub fn encoded_len(replies: &[(u64, Bytes)]) -> u64 {
    replies
        .iter()
        .map(|(_, r)| (RECORD_HEADER + r.len()) as u64)
        .sum()
}

/// The records in `journal`, in order, each checked; `Err` says where and why the
/// journal is not whole (it must end exactly after its last record).
pub fn decode_records(journal: &Bytes) -> Result<Vec<(u64, Bytes)>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < journal.len() {
        let header = journal
            .get(at..at + 8)
            .ok_or_else(|| format!("record at byte {at} is cut short"))?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
        if !(8..=MAX_RECORD).contains(&len) {
            return Err(format!(
                "record at byte {at} has an impossible length {len}"
            ));
        }
        let start = at + 8;
        let end = start
            .checked_add(len)
            .filter(|e| *e <= journal.len())
            .ok_or_else(|| format!("record at byte {at} is cut short"))?;
        let body = &journal[start..end];
        if crc32c::crc32c(body) != crc {
            return Err(format!("record at byte {at} does not verify"));
        }
        let mut request = [0u8; 8];
        request.copy_from_slice(&body[..8]);
        out.push((u64::from_le_bytes(request), journal.slice(start + 8..end)));
        at = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies() -> Vec<(u64, Bytes)> {
        vec![
            (1 << 63 | 3, Bytes::from_static(b"first answer")),
            (1 << 63 | 9, Bytes::new()),
            (1 << 63 | 10, Bytes::from(vec![7u8; 3000])),
        ]
    }

    #[test]
    fn records_read_back_as_written_and_their_length_is_known_in_advance() {
        let mut journal = Vec::new();
        encode_records(&replies()[..1], &mut journal);
        encode_records(&replies()[1..], &mut journal);
        assert_eq!(journal.len() as u64, encoded_len(&replies()));
        assert_eq!(decode_records(&Bytes::from(journal)), Ok(replies()));
    }

    #[test]
    fn a_journal_cut_short_or_damaged_is_refused_with_the_place() {
        let mut journal = Vec::new();
        encode_records(&replies(), &mut journal);
        let cut = Bytes::from(journal[..journal.len() - 1].to_vec());
        assert!(decode_records(&cut).unwrap_err().contains("cut short"));
        let mut damaged = journal.clone();
        damaged[20] ^= 1;
        let err = decode_records(&Bytes::from(damaged)).unwrap_err();
        assert!(err.contains("byte 0") && err.contains("verify"), "{err}");
        let mut absurd = journal;
        absurd[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_records(&Bytes::from(absurd))
            .unwrap_err()
            .contains("impossible length"));
    }
}
