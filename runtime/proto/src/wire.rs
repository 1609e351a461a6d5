//! The byte encoding of values that cross nodes or go into checkpoints: postcard over serde.

use serde::{de::DeserializeOwned, Serialize};

/// A value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("wire encoding: {0}")]
pub struct WireError(#[from] postcard::Error);

/// A vector to serialize into whose byte strings are copied with one `memcpy`.
/// postcard's own `to_extend` pushes them through an iterator, byte by byte: at 1 MiB
/// that loop costs more than the copy it stands for.
struct VecOutput(Vec<u8>);

impl postcard::ser_flavors::Flavor for VecOutput {
    type Output = Vec<u8>;

    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// Appends `value`'s encoding to `out`.
fn extend<T: Serialize + ?Sized>(value: &T, out: Vec<u8>) -> Result<Vec<u8>, WireError> {
    Ok(postcard::serialize_with_flavor(value, VecOutput(out))?)
}

/// Encodes `value` into a new buffer.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    // Sized first: a buffer grown while encoding is reallocated about log2(size) times
    // and keeps up to twice its length, and with recovery on it lives on in the sender
    // log (one pass that only adds lengths is cheaper than either).
    let size = postcard::experimental::serialized_size(value)?;
    extend(value, Vec::with_capacity(size))
}

/// Messages up to this size are encoded into the sending thread's arena.
const ARENA_MESSAGE_MAX: usize = 16 << 10;
/// Size of one arena chunk.
const ARENA_CHUNK: usize = 256 << 10;

thread_local! {
    /// The free end of the chunk this thread encodes small messages into.
    static ARENA: std::cell::RefCell<bytes::BytesMut> = std::cell::RefCell::new(bytes::BytesMut::new());
}

/// Encodes `value` into shared bytes, as a message that crosses nodes. Small ones are
/// cut from a chunk of the thread's arena (one allocation per chunk instead of one per
/// message; the chunk is freed when its last message is, and with recovery on messages
/// leave the sender log in about the order they entered it).
pub fn encode_bytes<T: Serialize + ?Sized>(value: &T) -> Result<bytes::Bytes, WireError> {
    let size = postcard::experimental::serialized_size(value)?;
    if size > ARENA_MESSAGE_MAX {
        return Ok(extend(value, Vec::with_capacity(size))?.into());
    }
    ARENA.with(|arena| {
        let mut arena = arena.borrow_mut();
        if arena.capacity() < size {
            *arena = bytes::BytesMut::with_capacity(ARENA_CHUNK);
        }
        arena.resize(size, 0);
        match postcard::to_slice(value, &mut arena[..]) {
            Ok(_) => Ok(arena.split().freeze()),
            Err(e) => {
                arena.clear();
                Err(WireError(e))
            }
        }
    })
}

/// Encodes `value` into `buffer`, replacing its contents and keeping its memory: a
/// caller that encodes large values repeatedly (checkpoint images) touches fresh pages
/// only when a value outgrows every earlier one by more than an eighth.
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    buffer: &mut Vec<u8>,
) -> Result<(), WireError> {
    let mut reused = std::mem::take(buffer);
    reused.clear();
    let size = postcard::experimental::serialized_size(value)?;
    if reused.capacity() < size {
        // Room to grow: a value a little larger than the last one (a tile with one more
        // halo waiting) must not move the whole buffer to fresh memory every time.
        reused.reserve(size + size / 8);
    }
    *buffer = extend(value, reused)?;
    Ok(())
}

/// Encodes `value` into `writer` as it goes (a checkpoint image straight into its file).
pub fn encode_to<T: Serialize + ?Sized>(
    value: &T,
    writer: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    postcard::to_io(value, writer)
        .map(|_| ())
        .map_err(std::io::Error::other)
}

/// Decodes a whole buffer into a `T`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, WireError> {
    let (value, rest) = postcard::take_from_bytes(bytes)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(WireError(postcard::Error::DeserializeBadEncoding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cut_from_one_arena_chunk_stay_intact_and_separate() {
        let rows: Vec<Vec<f64>> = (0..300)
            .map(|k| (0..100).map(|i| f64::from(k * 1000 + i)).collect())
            .collect();
        // 300 rows of ~800 bytes: several chunks, messages that end chunks included.
        let encoded: Vec<bytes::Bytes> = rows.iter().map(|r| encode_bytes(r).unwrap()).collect();
        for (row, bytes) in rows.iter().zip(&encoded) {
            assert_eq!(bytes.len(), encode(row).unwrap().len());
            assert_eq!(&decode::<Vec<f64>>(bytes).unwrap(), row);
        }
        let big: Vec<u8> = vec![7; ARENA_MESSAGE_MAX * 2];
        assert_eq!(
            decode::<Vec<u8>>(&encode_bytes(&big).unwrap()).unwrap(),
            big
        );
    }

    #[test]
    fn the_encoding_is_postcards() {
        // Strings and byte strings go through `try_extend`, sequences byte by byte.
        let value = (
            "a string".to_string(),
            vec![1u8, 2, 3],
            vec![1.5f64; 40],
            300u64,
        );
        assert_eq!(
            encode(&value).unwrap(),
            postcard::to_allocvec(&value).unwrap()
        );
        let mut reused = vec![9; 4];
        encode_into(&value, &mut reused).unwrap();
        assert_eq!(reused, postcard::to_allocvec(&value).unwrap());
    }

    #[test]
    fn an_encoded_message_takes_exactly_its_length_in_memory() {
        // A halo row: with recovery on the buffer stays in the sender log, so spare
        // capacity would be log memory held for nothing.
        let row: Vec<f64> = (0..513).map(f64::from).collect();
        let bytes = encode(&row).expect("encodes");
        assert_eq!(bytes.capacity(), bytes.len());
        assert_eq!(decode::<Vec<f64>>(&bytes).expect("decodes"), row);
    }
}

/// `#[serde(with = "lazarus_proto::wire::byte_string")]`: a `Vec<u8>` as one byte string
/// (one length prefix, then the bytes) instead of a sequence of `u8`, a call each.
pub mod byte_string {
    use serde::{Deserializer, Serializer};

    /// Writes the bytes as one byte string.
    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(v)
    }

    /// Reads a byte string.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        d.deserialize_byte_buf(V)
    }
}
