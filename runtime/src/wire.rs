//! The byte encoding of values that cross nodes or go into checkpoints: postcard over serde.

use serde::{de::DeserializeOwned, Serialize};

/// A value could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[error("wire encoding: {0}")]
pub struct WireError(#[from] postcard::Error);

/// Encodes `value` into a new buffer.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, WireError> {
    // Sized first: a buffer grown while encoding is reallocated about log2(size) times
    // and keeps up to twice its length, and with recovery on it lives on in the sender
    // log (one pass that only adds lengths is cheaper than either).
    let size = postcard::experimental::serialized_size(value)?;
    Ok(postcard::to_extend(value, Vec::with_capacity(size))?)
}

/// Encodes `value` into `buffer`, replacing its contents and keeping its memory: a
/// caller that encodes large values repeatedly (checkpoint images) touches fresh pages
/// only when a value outgrows every earlier one.
pub fn encode_into<T: Serialize + ?Sized>(
    value: &T,
    buffer: &mut Vec<u8>,
) -> Result<(), WireError> {
    let mut reused = std::mem::take(buffer);
    reused.clear();
    *buffer = postcard::to_extend(value, reused)?;
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
    fn an_encoded_message_takes_exactly_its_length_in_memory() {
        // A halo row: with recovery on the buffer stays in the sender log, so spare
        // capacity would be log memory held for nothing.
        let row: Vec<f64> = (0..513).map(f64::from).collect();
        let bytes = encode(&row).expect("encodes");
        assert_eq!(bytes.capacity(), bytes.len());
        assert_eq!(decode::<Vec<f64>>(&bytes).expect("decodes"), row);
    }
}
