//! [`Payload`]: a byte buffer that crosses nodes as one block.
//!
//! A plain `Vec<u8>` field is serialized element by element; a `Payload` is written as one
//! length-prefixed byte string, so large buffers cost a memcpy, not a loop. Locally it is
//! moved like any message field: no copy at all.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::ops::{Deref, DerefMut};

/// A byte buffer for messages, encoded as a single byte string on the wire.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Payload(pub Vec<u8>);

impl Payload {
    /// The buffer.
    pub fn into_inner(self) -> Vec<u8> {
        self.0
    }
}

impl crate::recovery::LogPayload for Payload {
    fn byte_len(&self) -> usize {
        self.len()
    }

    fn digest(&self) -> u32 {
        crate::recovery::replay_check::digest(0, self)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(v: Vec<u8>) -> Self {
        Payload(v)
    }
}

impl Deref for Payload {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

impl DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.0
    }
}

impl Serialize for Payload {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'a> serde::de::Visitor<'a> for V {
            type Value = Payload;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Payload, E> {
                Ok(Payload(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Payload, E> {
                Ok(Payload(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'a>>(
                self,
                mut seq: A,
            ) -> Result<Payload, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(Payload(out))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_is_one_length_prefixed_block_on_the_wire() {
        let p = Payload(vec![7u8; 1000]);
        let bytes = crate::wire::encode(&p).unwrap();
        assert_eq!(bytes.len(), 1000 + 2, "varint length + raw bytes");
        assert_eq!(crate::wire::decode::<Payload>(&bytes).unwrap(), p);
    }
}
