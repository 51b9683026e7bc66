//! A binary `HloModuleProto` with its constants' values replaced by zeros of the same shape
//! (a reproducer of a graph that carries weights, sent without them): every instruction's
//! `literal` (XLA's `LiteralProto`, field 8 of `HloInstructionProto`) keeps its shape and the
//! number of its elements, each element zero (`false` for predicates); tuple literals are
//! zeroed element by element. Everything else is copied byte for byte, so the module stays what
//! it was but for its constants' values. Field numbers from XLA's `hlo.proto` and
//! `xla_data.proto`.

use super::wire;

/// `HloModuleProto.computations`.
const COMPUTATIONS: u32 = 3;
/// `HloComputationProto.instructions`.
const INSTRUCTIONS: u32 = 2;
/// `HloInstructionProto.literal`.
const LITERAL: u32 = 8;
/// `LiteralProto.shape`.
const LITERAL_SHAPE: u32 = 1;
/// `LiteralProto.tuple_literals`.
const TUPLE_LITERALS: u32 = 10;
/// `LiteralProto.sparse_indices` (indices, not values: kept).
const SPARSE_INDICES: u32 = 14;
/// The `LiteralProto` fields of varint elements, packed: `preds`, `s32s`, `s64s`, `u32s`,
/// `u64s` (every other value field is bytes or packed fixed-width floats).
const VARINT_VALUES: [u32; 5] = [2, 4, 5, 6, 7];

/// What stripping found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stripped {
    /// Literals whose values were zeroed.
    pub literals: usize,
    /// Bytes of values zeroed.
    pub bytes: u64,
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn put_field(out: &mut Vec<u8>, tag: u32, wire_type: u64, value: &[u8]) {
    put_varint(out, (u64::from(tag) << 3) | wire_type);
    if wire_type == 2 {
        put_varint(out, value.len() as u64);
    }
    out.extend_from_slice(value);
}

/// What rewrites a length-delimited field (by its number and contents): `None` keeps it.
type Rewriter<'r> = &'r mut dyn FnMut(u32, &[u8]) -> Result<Option<Vec<u8>>, String>;

/// Re-encode `buf` field by field, `inner` rewriting the length-delimited fields it wants to.
fn rewrite(buf: &[u8], inner: Rewriter) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(buf.len());
    for f in wire::fields(buf) {
        let (tag, wire_type, value) = f.map_err(|p| p.to_string())?;
        let new = if wire_type == 2 {
            inner(tag, value)?
        } else {
            None
        };
        put_field(&mut out, tag, wire_type, new.as_deref().unwrap_or(value));
    }
    Ok(out)
}

/// A literal with every value zero.
fn zero_literal(buf: &[u8], seen: &mut Stripped) -> Result<Vec<u8>, String> {
    seen.literals += 1;
    let mut out = Vec::with_capacity(buf.len());
    for f in wire::fields(buf) {
        let (tag, wire_type, value) = f.map_err(|p| p.to_string())?;
        let zeroed: Vec<u8> = match (tag, wire_type) {
            (LITERAL_SHAPE, _) | (SPARSE_INDICES, _) => value.to_vec(),
            (TUPLE_LITERALS, 2) => zero_literal(value, seen)?,
            // Packed varints: as many elements, each a one-byte zero.
            (t, 2) if VARINT_VALUES.contains(&t) => {
                vec![0; value.iter().filter(|b| **b < 0x80).count()]
            }
            // One varint element; bytes, packed floats, one fixed-width element: as long.
            (_, 0) => vec![0],
            _ => vec![0; value.len()],
        };
        if tag != LITERAL_SHAPE && tag != SPARSE_INDICES && tag != TUPLE_LITERALS {
            seen.bytes += value.len() as u64;
        }
        put_field(&mut out, tag, wire_type, &zeroed);
    }
    Ok(out)
}

/// The module `bytes` with every constant's values zeroed (`Err`: the bytes are not a module's
/// wire format, with where).
pub fn strip_constants(bytes: &[u8]) -> Result<(Vec<u8>, Stripped), String> {
    let mut seen = Stripped::default();
    let out = rewrite(bytes, &mut |tag, computation| {
        if tag != COMPUTATIONS {
            return Ok(None);
        }
        rewrite(computation, &mut |tag, instruction| {
            if tag != INSTRUCTIONS {
                return Ok(None);
            }
            rewrite(instruction, &mut |tag, literal| match tag {
                LITERAL => zero_literal(literal, &mut seen).map(Some),
                _ => Ok(None),
            })
            .map(Some)
        })
        .map(Some)
    })?;
    Ok((out, seen))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn examples(name: &str) -> Vec<u8> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        std::fs::read(root.join(name)).unwrap()
    }

    /// Every literal's value fields, as (field, wire type, bytes), depth first.
    fn values(module: &[u8]) -> Vec<(u32, u64, Vec<u8>)> {
        fn lit(buf: &[u8], out: &mut Vec<(u32, u64, Vec<u8>)>) {
            for f in wire::fields(buf) {
                let (t, w, v) = f.unwrap();
                match t {
                    LITERAL_SHAPE | SPARSE_INDICES => {}
                    TUPLE_LITERALS => lit(v, out),
                    _ => out.push((t, w, v.to_vec())),
                }
            }
        }
        let mut out = Vec::new();
        for c in wire::fields(module)
            .map(Result::unwrap)
            .filter(|f| f.0 == COMPUTATIONS)
        {
            for i in wire::fields(c.2)
                .map(Result::unwrap)
                .filter(|f| f.0 == INSTRUCTIONS)
            {
                for l in wire::fields(i.2)
                    .map(Result::unwrap)
                    .filter(|f| f.0 == LITERAL)
                {
                    lit(l.2, &mut out);
                }
            }
        }
        out
    }

    #[test]
    fn constants_become_zeros_and_the_module_stays_the_same() {
        for name in [
            "big.hlo_module.pb",
            "attention.hlo_module.pb",
            "mlp2.hlo_module.pb",
        ] {
            let original = examples(name);
            let (stripped, seen) = strip_constants(&original).unwrap();
            let before = values(&original);
            let after = values(&stripped);
            assert!(seen.literals > 0, "{name} has constants");
            assert_eq!(before.len(), after.len(), "{name}");
            for ((t0, w0, v0), (t1, w1, v1)) in before.iter().zip(&after) {
                assert_eq!((t0, w0), (t1, w1));
                assert!(v1.iter().all(|b| *b == 0), "{name}: field {t1} not zeroed");
                if !VARINT_VALUES.contains(t0) {
                    assert_eq!(v0.len(), v1.len(), "{name}: field {t0} changed length");
                }
            }
            // The module reads as it did: same name, parameters, results, instructions.
            let (a, b) = (
                super::super::parse(&original).unwrap(),
                super::super::parse(&stripped).unwrap(),
            );
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
        }
        // The big one carries a 4 MiB weight: it was non-zero, and is zero now.
        let big = examples("big.hlo_module.pb");
        assert!(values(&big)
            .iter()
            .any(|(_, _, v)| v.len() >= 4 << 20 && v.iter().any(|b| *b != 0)));
        assert_eq!(
            strip_constants(&big).unwrap().1.bytes,
            values(&big).iter().map(|v| v.2.len() as u64).sum::<u64>()
        );
    }

    #[test]
    fn varint_elements_are_counted_and_tuples_followed() {
        // A literal: shape, s64s packed [300, 1, 2^40], a tuple of one literal with preds [1, 1].
        let mut tuple = Vec::new();
        put_field(&mut tuple, 2, 2, &[1, 1]);
        let mut lit = Vec::new();
        put_field(&mut lit, LITERAL_SHAPE, 2, &[8, 5]);
        let mut s64s = Vec::new();
        for n in [300u64, 1, 1 << 40] {
            put_varint(&mut s64s, n);
        }
        put_field(&mut lit, 5, 2, &s64s);
        put_field(&mut lit, TUPLE_LITERALS, 2, &tuple);
        let mut seen = Stripped::default();
        let z = zero_literal(&lit, &mut seen).unwrap();
        let f: Vec<(u32, u64, Vec<u8>)> = wire::fields(&z)
            .map(|f| {
                let (a, b, c) = f.unwrap();
                (a, b, c.to_vec())
            })
            .collect();
        assert_eq!(f[0], (LITERAL_SHAPE, 2, vec![8, 5]));
        assert_eq!(f[1], (5, 2, vec![0, 0, 0]));
        let t: Vec<(u32, u64, Vec<u8>)> = wire::fields(&f[2].2)
            .map(|f| {
                let (a, b, c) = f.unwrap();
                (a, b, c.to_vec())
            })
            .collect();
        assert_eq!(t, [(2, 2, vec![0, 0])]);
        assert_eq!(seen.literals, 2);
        // Bytes that are no module are refused, not copied.
        assert!(strip_constants(&[0x1a, 0x7f, 0x00]).is_err());
    }
}
