//! The element types a window holds: plain numbers, stored little-endian.

use lazarus_proto::window::ElementType;

mod sealed {
    pub trait Sealed {}
}

/// A plain number a window can hold (`u8` ... `u64`, `i8` ... `i64`, `f32`, `f64`).
pub trait Element: Copy + Send + Sync + 'static + sealed::Sealed {
    /// Its type tag, checked by every operation at the target.
    const TYPE: ElementType;
    /// The values as little-endian bytes.
    fn encode(values: &[Self]) -> Vec<u8>;
    /// Little-endian bytes as values (a trailing partial element is ignored).
    fn decode(bytes: &[u8]) -> Vec<Self>;
}

macro_rules! element {
    ($($t:ty => $tag:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const TYPE: ElementType = ElementType::$tag;
            fn encode(values: &[Self]) -> Vec<u8> {
                values.iter().flat_map(|v| v.to_le_bytes()).collect()
            }
            fn decode(bytes: &[u8]) -> Vec<Self> {
                bytes
                    .chunks_exact(std::mem::size_of::<$t>())
                    .map(|c| {
                        let mut a = [0u8; std::mem::size_of::<$t>()];
                        a.copy_from_slice(c);
                        <$t>::from_le_bytes(a)
                    })
                    .collect()
            }
        }
    )*};
}

element!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32,
    u64 => U64, i64 => I64, f32 => F32, f64 => F64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_round_trip_little_endian() {
        assert_eq!(u32::encode(&[1, 0x0102_0304]), [1, 0, 0, 0, 4, 3, 2, 1]);
        assert_eq!(f64::decode(&f64::encode(&[1.5, -2.0])), [1.5, -2.0]);
        assert_eq!(
            i16::decode(&[0xff, 0xff, 7]),
            [-1],
            "a partial element is ignored"
        );
    }
}
