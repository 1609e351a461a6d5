//! Dense numeric arrays in messages and checkpoints, encoded as one block of bytes.
//!
//! serde writes a `Vec<f64>` one element at a time, a call and a capacity check per
//! value. A stencil's tile is millions of values and is encoded while its node's cores
//! are paused for a checkpoint, so that pause grows with it. With
//! `#[serde(with = "lazarus::dense")]` on a `Vec` of a primitive number type the values
//! are written as one length-prefixed byte string, their little-endian bytes, in one
//! copy, and read back in one pass:
//!
//! ```
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, PartialEq, Debug)]
//! struct Tile {
//!     #[serde(with = "lazarus::dense")]
//!     values: Vec<f64>,
//! }
//!
//! let tile = Tile { values: vec![0.5, -1.0, f64::MAX] };
//! let bytes = lazarus::wire::encode(&tile).unwrap();
//! assert_eq!(lazarus::wire::decode::<Tile>(&bytes).unwrap(), tile);
//! ```
//!
//! The encoding differs from serde's default for the same field (a byte length, not an
//! element count), so a field keeps one of them for good.
//!
//! Where no field attribute fits (a message handler's parameter, values inside a map or
//! an `Option`), [`DenseVec`] wraps the `Vec` and encodes it the same way.

use serde::de::Visitor;
use serde::{Deserializer, Serializer};
use std::fmt;
use std::marker::PhantomData;

mod sealed {
    pub trait Sealed {}
}

/// A primitive number type whose values are plain bytes: no padding, every bit pattern
/// valid. Implemented for the integer and floating-point types only.
pub trait Dense: Copy + sealed::Sealed {
    /// Size of one value in bytes.
    const SIZE: usize;
    /// Appends the value's little-endian bytes.
    fn put(self, out: &mut Vec<u8>);
    /// The value from its `SIZE` little-endian bytes.
    fn take(bytes: &[u8]) -> Self;
}

macro_rules! dense {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Dense for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn take(bytes: &[u8]) -> Self {
                let mut le = [0u8; std::mem::size_of::<$t>()];
                le.copy_from_slice(bytes);
                <$t>::from_le_bytes(le)
            }
        }
    )*};
}

dense!(f64, f32, u64, i64, u32, i32, u16, i16);

/// Writes `values` as one byte string of their little-endian bytes.
pub fn serialize<T: Dense, S: Serializer>(values: &[T], s: S) -> Result<S::Ok, S::Error> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: `T` is one of the primitive number types (the trait is sealed): no
        // padding, so every byte of the slice is initialised, and `u8` has alignment 1.
        // The byte slice covers exactly the values' memory and lives as long as
        // `values`. On a little-endian target that memory is the little-endian encoding.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        s.serialize_bytes(bytes)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let mut bytes = Vec::with_capacity(values.len() * T::SIZE);
        for v in values {
            v.put(&mut bytes);
        }
        s.serialize_bytes(&bytes)
    }
}

/// Reads values written by [`serialize`]. A byte length that is not a whole number of
/// values is an error, not a panic: the bytes may come from the network or a damaged
/// file.
pub fn deserialize<'de, T: Dense, D: Deserializer<'de>>(d: D) -> Result<Vec<T>, D::Error> {
    d.deserialize_bytes(DenseVisitor(PhantomData))
}

struct DenseVisitor<T>(PhantomData<T>);

impl<'de, T: Dense> Visitor<'de> for DenseVisitor<T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a byte string of {}-byte numbers", T::SIZE)
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<T>, E> {
        if bytes.len() % T::SIZE != 0 {
            return Err(E::invalid_length(bytes.len(), &self));
        }
        Ok(bytes.chunks_exact(T::SIZE).map(T::take).collect())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        // Formats without byte strings hand them over as a sequence of bytes.
        // The hint comes from the input: capped, as in `payload.rs`.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 20));
        while let Some(b) = seq.next_element::<u8>()? {
            bytes.push(b);
        }
        self.visit_bytes::<A::Error>(&bytes)
    }
}

/// A `Vec` of numbers encoded as one byte string, like a field with
/// `#[serde(with = "lazarus::dense")]`: for a handler's parameter or values nested in
/// other types. Dereferences to the `Vec`.
///
/// ```
/// use lazarus::dense::DenseVec;
///
/// let halos: Vec<Option<DenseVec<f64>>> = vec![Some(vec![1.0, 2.0].into()), None];
/// let bytes = lazarus::wire::encode(&halos).unwrap();
/// let back: Vec<Option<DenseVec<f64>>> = lazarus::wire::decode(&bytes).unwrap();
/// assert_eq!(back, halos);
/// assert_eq!(back[0].as_deref().map(|v| v.len()), Some(2));
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DenseVec<T: Dense>(pub Vec<T>);

impl<T: Dense> DenseVec<T> {
    /// The values.
    pub fn into_inner(self) -> Vec<T> {
        self.0
    }
}

impl<T: Dense> From<Vec<T>> for DenseVec<T> {
    fn from(values: Vec<T>) -> Self {
        DenseVec(values)
    }
}

impl<T: Dense> std::ops::Deref for DenseVec<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Dense> std::ops::DerefMut for DenseVec<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T: Dense> serde::Serialize for DenseVec<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize(&self.0, s)
    }
}

impl<'de, T: Dense> serde::Deserialize<'de> for DenseVec<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        deserialize(d).map(DenseVec)
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize, PartialEq, Debug)]
    struct Block {
        #[serde(with = "crate::dense")]
        f: Vec<f64>,
        #[serde(with = "crate::dense")]
        i: Vec<i32>,
    }

    #[test]
    fn values_come_back_bit_for_bit_including_nan_and_signed_zero() {
        let block = Block {
            f: vec![0.0, -0.0, 1.5, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE],
            i: vec![i32::MIN, -1, 0, 7, i32::MAX],
        };
        let bytes = crate::wire::encode(&block).unwrap();
        let back: Block = crate::wire::decode(&bytes).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.f), bits(&block.f));
        assert_eq!(back.i, block.i);
    }

    #[test]
    fn the_encoding_is_the_values_little_endian_bytes_after_a_byte_length() {
        #[derive(Serialize)]
        struct One(#[serde(with = "crate::dense")] Vec<u16>);
        let bytes = crate::wire::encode(&One(vec![0x0102, 0x0304])).unwrap();
        assert_eq!(bytes, [4, 0x02, 0x01, 0x04, 0x03]);
    }

    #[test]
    fn a_length_that_is_not_whole_values_is_refused() {
        #[derive(Serialize)]
        struct Raw(#[serde(with = "serde_bytes_shim")] Vec<u8>);
        mod serde_bytes_shim {
            pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(v)
            }
        }
        #[derive(Deserialize, Debug)]
        struct Values(#[serde(with = "crate::dense")] Vec<f64>);
        let seven = crate::wire::encode(&Raw(vec![0; 7])).unwrap();
        assert!(crate::wire::decode::<Values>(&seven).is_err());
        let eight = crate::wire::encode(&Raw(1.5f64.to_le_bytes().to_vec())).unwrap();
        assert_eq!(crate::wire::decode::<Values>(&eight).unwrap().0, [1.5]);
    }
}
