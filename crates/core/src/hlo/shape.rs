//! HLO shapes: the element types (XLA's `PrimitiveType`, with the names HLO text spells them
//! with and their sizes in bits), array and tuple shapes, and their byte sizes.

use std::fmt;

/// An element type. The numbers are XLA's `PrimitiveType` values (`xla/xla_data.proto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// `pred`: a boolean, stored in one byte.
    Pred,
    /// `s1`: a 1-bit signed integer.
    S1,
    /// `s2`: a 2-bit signed integer.
    S2,
    /// `s4`: a 4-bit signed integer.
    S4,
    /// `s8`: an 8-bit signed integer.
    S8,
    /// `s16`: a 16-bit signed integer.
    S16,
    /// `s32`: a 32-bit signed integer.
    S32,
    /// `s64`: a 64-bit signed integer.
    S64,
    /// `u1`: a 1-bit unsigned integer.
    U1,
    /// `u2`: a 2-bit unsigned integer.
    U2,
    /// `u4`: a 4-bit unsigned integer.
    U4,
    /// `u8`: an 8-bit unsigned integer.
    U8,
    /// `u16`: a 16-bit unsigned integer.
    U16,
    /// `u32`: a 32-bit unsigned integer.
    U32,
    /// `u64`: a 64-bit unsigned integer.
    U64,
    /// `f16`: IEEE half precision.
    F16,
    /// `f32`: IEEE single precision.
    F32,
    /// `bf16`: bfloat16 (8 exponent bits, 7 mantissa bits).
    Bf16,
    /// `f64`: IEEE double precision.
    F64,
    /// `f8e5m2`: 8-bit float, 5 exponent and 2 mantissa bits.
    F8e5m2,
    /// `f8e4m3`: 8-bit float, 4 exponent and 3 mantissa bits, IEEE-like infinities and NaNs.
    F8e4m3,
    /// `f8e4m3fn`: 8-bit float, 4 exponent and 3 mantissa bits, finite only (NaN, no infinity).
    F8e4m3fn,
    /// `f8e4m3b11fnuz`: 8-bit float, 4 exponent (bias 11) and 3 mantissa bits, finite, unsigned
    /// zero.
    F8e4m3b11fnuz,
    /// `f8e3m4`: 8-bit float, 3 exponent and 4 mantissa bits.
    F8e3m4,
    /// `f8e5m2fnuz`: 8-bit float, 5 exponent and 2 mantissa bits, finite, unsigned zero.
    F8e5m2fnuz,
    /// `f8e4m3fnuz`: 8-bit float, 4 exponent and 3 mantissa bits, finite, unsigned zero.
    F8e4m3fnuz,
    /// `f4e2m1fn`: 4-bit float, 2 exponent and 1 mantissa bit, finite only.
    F4e2m1fn,
    /// `f8e8m0fnu`: 8-bit scale factor, 8 exponent bits and no mantissa, unsigned.
    F8e8m0fnu,
    /// `c64`: a complex number of two `f32`.
    C64,
    /// `c128`: a complex number of two `f64`.
    C128,
    /// `token`: an ordering token; it occupies no bytes.
    Token,
    /// `opaque`: a backend-defined handle; counted as no bytes.
    Opaque,
}

/// (type, `PrimitiveType` number, HLO text name, bits per element).
const TYPES: &[(Dtype, i32, &str, u64)] = &[
    (Dtype::Pred, 1, "pred", 8),
    (Dtype::S1, 30, "s1", 1),
    (Dtype::S2, 26, "s2", 2),
    (Dtype::S4, 21, "s4", 4),
    (Dtype::S8, 2, "s8", 8),
    (Dtype::S16, 3, "s16", 16),
    (Dtype::S32, 4, "s32", 32),
    (Dtype::S64, 5, "s64", 64),
    (Dtype::U1, 31, "u1", 1),
    (Dtype::U2, 27, "u2", 2),
    (Dtype::U4, 22, "u4", 4),
    (Dtype::U8, 6, "u8", 8),
    (Dtype::U16, 7, "u16", 16),
    (Dtype::U32, 8, "u32", 32),
    (Dtype::U64, 9, "u64", 64),
    (Dtype::F16, 10, "f16", 16),
    (Dtype::F32, 11, "f32", 32),
    (Dtype::Bf16, 16, "bf16", 16),
    (Dtype::F64, 12, "f64", 64),
    (Dtype::F8e5m2, 19, "f8e5m2", 8),
    (Dtype::F8e4m3, 28, "f8e4m3", 8),
    (Dtype::F8e4m3fn, 20, "f8e4m3fn", 8),
    (Dtype::F8e4m3b11fnuz, 23, "f8e4m3b11fnuz", 8),
    (Dtype::F8e3m4, 29, "f8e3m4", 8),
    (Dtype::F8e5m2fnuz, 24, "f8e5m2fnuz", 8),
    (Dtype::F8e4m3fnuz, 25, "f8e4m3fnuz", 8),
    (Dtype::F4e2m1fn, 32, "f4e2m1fn", 4),
    (Dtype::F8e8m0fnu, 33, "f8e8m0fnu", 8),
    (Dtype::C64, 15, "c64", 64),
    (Dtype::C128, 18, "c128", 128),
    (Dtype::Token, 17, "token", 0),
    (Dtype::Opaque, 14, "opaque", 0),
];

/// `PrimitiveType::TUPLE`.
pub const TUPLE: i32 = 13;

impl Dtype {
    fn row(self) -> &'static (Dtype, i32, &'static str, u64) {
        TYPES
            .iter()
            .find(|r| r.0 == self)
            .expect("every Dtype has a row")
    }

    /// From a `PrimitiveType` number (`None`: invalid, a tuple, or unknown).
    pub(crate) fn from_number(n: i32) -> Option<Dtype> {
        TYPES.iter().find(|r| r.1 == n).map(|r| r.0)
    }

    /// From its HLO text name (`f32`, `bf16`, ...).
    pub(crate) fn from_name(name: &str) -> Option<Dtype> {
        TYPES.iter().find(|r| r.2 == name).map(|r| r.0)
    }

    /// The HLO text name (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Bits per element (a sub-byte type's own width; `pred` 8; `token` and `opaque` 0).
    pub fn bits(self) -> u64 {
        self.row().3
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// An array (a scalar has no dimensions); a token or opaque value is an array of no bits.
    Array {
        /// The element type.
        dtype: Dtype,
        /// The dimension sizes, major to minor as written (`f32[2,3]` → `[2, 3]`).
        dims: Vec<u64>,
    },
    /// A tuple of shapes, in order (possibly empty, possibly nested).
    Tuple(Vec<Shape>),
}

impl Shape {
    /// Bytes the value occupies, densely packed (sub-byte types rounded up per array).
    pub fn bytes(&self) -> u64 {
        match self {
            Shape::Array { dtype, dims } => {
                let elements = dims.iter().fold(1u64, |a, &d| a.saturating_mul(d));
                elements.saturating_mul(dtype.bits()).div_ceil(8)
            }
            Shape::Tuple(parts) => parts.iter().fold(0u64, |a, p| a.saturating_add(p.bytes())),
        }
    }

    /// Bytes the value occupies, densely packed, or `None` when that does not fit in 64 bits (its
    /// dimensions' product, or its size in bytes, overflows): what is shown of a size.
    /// [`Shape::bytes`] saturates instead, for estimates.
    pub(crate) fn checked_bytes(&self) -> Option<u64> {
        match self {
            Shape::Array { dtype, dims } => {
                if dims.contains(&0) {
                    return Some(0);
                }
                let elements = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
                let bits = u128::from(elements) * u128::from(dtype.bits());
                u64::try_from(bits.div_ceil(8)).ok()
            }
            Shape::Tuple(parts) => parts
                .iter()
                .try_fold(0u64, |a, p| a.checked_add(p.checked_bytes()?)),
        }
    }

    /// The dtype's name, or `tuple`.
    pub fn dtype_name(&self) -> &'static str {
        match self {
            Shape::Array { dtype, .. } => dtype.name(),
            Shape::Tuple(_) => "tuple",
        }
    }

    /// The dimensions of an array (a tuple: none).
    pub fn dims(&self) -> &[u64] {
        match self {
            Shape::Array { dims, .. } => dims,
            Shape::Tuple(_) => &[],
        }
    }
}

impl fmt::Display for Shape {
    /// As HLO text writes it, without a layout: `f32[8,16]`, `(f32[2], s32[])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Array { dtype, dims } => {
                write!(f, "{dtype}[")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("]")
            }
            Shape::Tuple(parts) => {
                f.write_str("(")?;
                for (i, p) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{p}")?;
                }
                f.write_str(")")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_numbers_and_sizes() {
        assert_eq!(Dtype::from_name("bf16"), Some(Dtype::Bf16));
        assert_eq!(Dtype::from_number(11), Some(Dtype::F32));
        assert_eq!(Dtype::from_number(TUPLE), None);
        assert_eq!(Dtype::from_number(0), None);
        for (t, n, name, _) in TYPES {
            assert_eq!(Dtype::from_number(*n), Some(*t));
            assert_eq!(Dtype::from_name(name), Some(*t));
        }
        let a = |dtype, dims: &[u64]| Shape::Array {
            dtype,
            dims: dims.to_vec(),
        };
        assert_eq!(a(Dtype::F32, &[8, 16]).bytes(), 512);
        assert_eq!(a(Dtype::Bf16, &[]).bytes(), 2);
        assert_eq!(a(Dtype::S4, &[3]).bytes(), 2);
        assert_eq!(a(Dtype::Pred, &[0, 5]).bytes(), 0);
        let t = Shape::Tuple(vec![a(Dtype::F32, &[2]), a(Dtype::S32, &[])]);
        assert_eq!(t.bytes(), 12);
        assert_eq!(t.to_string(), "(f32[2], s32[])");
        assert_eq!(a(Dtype::U64, &[u64::MAX, 4]).bytes(), u64::MAX.div_ceil(8));
        assert_eq!(a(Dtype::U64, &[u64::MAX, 4]).checked_bytes(), None);
        assert_eq!(a(Dtype::F32, &[1 << 61]).checked_bytes(), Some(1 << 63));
        assert_eq!(a(Dtype::F32, &[1 << 62]).checked_bytes(), None);
        assert_eq!(
            a(Dtype::S4, &[u64::MAX]).checked_bytes(),
            Some(u64::MAX / 2 + 1)
        );
        assert_eq!(
            a(Dtype::F32, &[u64::MAX, u64::MAX, 0]).checked_bytes(),
            Some(0)
        );
        assert_eq!(t.checked_bytes(), Some(12));
        let big = Shape::Tuple(vec![a(Dtype::U8, &[u64::MAX]), a(Dtype::U8, &[1])]);
        assert_eq!(big.checked_bytes(), None);
    }
}
