//! A digest of a binary `HloModuleProto` that leaves its op metadata out, for the compile cache's
//! `hlo_metadata` sloppiness: two modules that differ only in where their ops came from (the
//! framework op's type and name, the source file, line and columns, the stack frame) digest
//! alike; any other difference — names, ids, shapes, layouts, constants, attributes, the
//! schedule, anything this walk does not know — gives another digest.
//!
//! Left out, by field number (XLA's `hlo.proto` and `xla_data.proto`):
//! - `HloModuleProto.stack_frame_index` (17): the module's table of files, functions, locations
//!   and frames the ops' `stack_frame_id`s point into;
//! - in every `HloModuleProto.computations` (3) → `HloComputationProto.instructions` (2) →
//!   `HloInstructionProto.metadata` (7), the `OpMetadata` fields `op_type` (1), `op_name` (2),
//!   `source_file` (3), `source_line` (4), `stack_frame_id` (15), `source_end_line` (17),
//!   `source_column` (18) and `source_end_column` (19).
//!
//! Every other field of the metadata (profile figures, the deduplicated and scheduling names, a
//! payload) still counts, as does every other field anywhere, unknown ones included, byte for
//! byte as encoded.
//!
//! One streaming pass over the bytes, nothing decoded into messages: each field is walked by its
//! key and length; the four messages above are descended into, every other field is fed to the
//! hasher as its encoded bytes (key, length and value), runs of adjacent kept fields in one
//! piece. A descended field is fed as its key, its kept fields, then a 0 byte — which no field
//! key can start with — so the fed stream reads back unambiguously. Bytes that are not a
//! well-formed protobuf message at these four levels (a bad varint, a length past its message,
//! a group, a descended field that is not length-delimited) give no digest: the caller uses the
//! exact bytes instead.

/// What the digest starts with, so it never equals a digest of plain bytes.
pub const DOMAIN: &[u8] = b"nxcc-hlo-without-op-metadata-v1\0";

/// `HloModuleProto.computations`.
const MODULE_COMPUTATIONS: u32 = 3;
/// `HloModuleProto.stack_frame_index`.
const MODULE_STACK_FRAME_INDEX: u32 = 17;
/// `HloComputationProto.instructions`.
const COMPUTATION_INSTRUCTIONS: u32 = 2;
/// `HloInstructionProto.metadata`.
const INSTRUCTION_METADATA: u32 = 7;
/// The `OpMetadata` fields left out: op type and name, source file and line, stack frame id,
/// source end line, column and end column.
const METADATA_LEFT_OUT: [u32; 8] = [1, 2, 3, 4, 15, 17, 18, 19];

/// The message being walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Module,
    Computation,
    Instruction,
    Metadata,
}

impl Level {
    /// What to do with field `number` of this message: descend into it (the next level), leave
    /// it out, or keep its bytes.
    fn field(self, number: u32) -> Field {
        match (self, number) {
            (Level::Module, MODULE_COMPUTATIONS) => Field::Descend(Level::Computation),
            (Level::Module, MODULE_STACK_FRAME_INDEX) => Field::Skip,
            (Level::Computation, COMPUTATION_INSTRUCTIONS) => Field::Descend(Level::Instruction),
            (Level::Instruction, INSTRUCTION_METADATA) => Field::Descend(Level::Metadata),
            (Level::Metadata, n) if METADATA_LEFT_OUT.contains(&n) => Field::Skip,
            _ => Field::Keep,
        }
    }
}

enum Field {
    Descend(Level),
    Skip,
    Keep,
}

/// The digest of a binary `HloModuleProto` without its op metadata (see the module
/// documentation); `None` when the bytes are not a well-formed message at the levels walked.
pub(crate) fn without_op_metadata(bytes: &[u8]) -> Option<blake3::Hash> {
    let mut feed = Feed {
        hasher: blake3::Hasher::new(),
        bytes,
        run: 0..0,
    };
    feed.hasher.update(DOMAIN);
    walk(bytes, 0, bytes.len(), Level::Module, &mut feed)?;
    feed.flush();
    Some(feed.hasher.finalize())
}

/// The hasher and the run of kept bytes not yet fed to it.
struct Feed<'a> {
    hasher: blake3::Hasher,
    bytes: &'a [u8],
    run: std::ops::Range<usize>,
}

impl Feed<'_> {
    /// Keep `range` of the input: extends the pending run when adjacent.
    fn keep(&mut self, range: std::ops::Range<usize>) {
        if self.run.end == range.start && !self.run.is_empty() {
            self.run.end = range.end;
        } else {
            self.flush();
            self.run = range;
        }
    }

    fn flush(&mut self) {
        if !self.run.is_empty() {
            let piece = &self.bytes[self.run.clone()];
            if piece.len() >= 1 << 20 {
                self.hasher.update_rayon(piece);
            } else {
                self.hasher.update(piece);
            }
        }
        self.run = 0..0;
    }

    /// Feed bytes that are not a run of the input (the end-of-message marker).
    fn mark(&mut self, b: u8) {
        self.flush();
        self.hasher.update(&[b]);
    }
}

/// A varint at `*pos`, before `end`.
fn varint(buf: &[u8], pos: &mut usize, end: usize) -> Option<u64> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let b = *buf.get(*pos).filter(|_| *pos < end)?;
        *pos += 1;
        if i == 9 && b > 1 {
            return None;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(value);
        }
    }
    None
}

/// Walk the message `buf[start..end]` at `level`.
fn walk(buf: &[u8], start: usize, end: usize, level: Level, feed: &mut Feed) -> Option<()> {
    let mut pos = start;
    while pos < end {
        let field_start = pos;
        let key = varint(buf, &mut pos, end)?;
        let number = u32::try_from(key >> 3).ok().filter(|n| *n > 0)?;
        let value_start = pos;
        let value_end = match key & 7 {
            0 => {
                varint(buf, &mut pos, end)?;
                pos
            }
            1 => value_start.checked_add(8).filter(|e| *e <= end)?,
            2 => {
                let len = usize::try_from(varint(buf, &mut pos, end)?).ok()?;
                pos.checked_add(len).filter(|e| *e <= end)?
            }
            5 => value_start.checked_add(4).filter(|e| *e <= end)?,
            _ => return None,
        };
        match level.field(number) {
            Field::Keep => feed.keep(field_start..value_end),
            Field::Skip => {}
            Field::Descend(inner) => {
                if key & 7 != 2 {
                    return None;
                }
                feed.keep(field_start..value_start);
                walk(buf, pos, value_end, inner, feed)?;
                feed.mark(0);
            }
        }
        pos = value_end;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint_bytes(mut v: u64, out: &mut Vec<u8>) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }

    fn field(number: u32, wire: u8, value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint_bytes(u64::from(number) << 3 | u64::from(wire), &mut out);
        if wire == 2 {
            varint_bytes(value.len() as u64, &mut out);
        }
        out.extend_from_slice(value);
        out
    }

    fn int(number: u32, v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        varint_bytes(v, &mut b);
        field(number, 0, &b)
    }

    fn msg(number: u32, parts: &[Vec<u8>]) -> Vec<u8> {
        field(number, 2, &parts.concat())
    }

    struct Inst<'a> {
        name: &'a str,
        shape_dim: u64,
        literal: &'a [u8],
        op_name: &'a str,
        line: u64,
        frame: u64,
        dedup: &'a str,
    }

    fn module(insts: &[Inst], frames: &str) -> Vec<u8> {
        let instructions: Vec<Vec<u8>> = insts
            .iter()
            .map(|i| {
                msg(
                    2,
                    &[
                        field(1, 2, i.name.as_bytes()),
                        field(2, 2, b"constant"),
                        msg(3, &[int(2, 11), int(3, i.shape_dim)]),
                        msg(
                            7,
                            &[
                                field(1, 2, b"jit"),
                                field(2, 2, i.op_name.as_bytes()),
                                field(3, 2, b"/src/model.py"),
                                int(4, i.line),
                                int(15, i.frame),
                                int(18, 7),
                                field(12, 2, i.dedup.as_bytes()),
                            ],
                        ),
                        msg(8, &[field(8, 2, i.literal)]),
                        int(35, 1),
                    ],
                )
            })
            .collect();
        [
            field(1, 2, b"jit_f"),
            msg(3, &[field(1, 2, b"main"), instructions.concat(), int(5, 1)]),
            msg(17, &[field(1, 2, frames.as_bytes())]),
            int(5, 42),
        ]
        .concat()
    }

    fn base() -> Inst<'static> {
        Inst {
            name: "c.1",
            shape_dim: 4,
            literal: b"\x01\x02\x03\x04",
            op_name: "jit(f)/add",
            line: 10,
            frame: 1,
            dedup: "",
        }
    }

    #[test]
    fn metadata_only_changes_digest_alike_and_everything_else_differs() {
        let d0 = without_op_metadata(&module(&[base()], "model.py")).unwrap();
        let moved = Inst {
            op_name: "jit(g)/add",
            line: 99,
            frame: 3,
            ..base()
        };
        assert_eq!(
            without_op_metadata(&module(&[moved], "other.py")).unwrap(),
            d0,
            "op name, source line, stack frame and the frame index are left out"
        );
        for (what, changed) in [
            (
                "a constant",
                Inst {
                    literal: b"\x01\x02\x03\x05",
                    ..base()
                },
            ),
            (
                "a shape",
                Inst {
                    shape_dim: 5,
                    ..base()
                },
            ),
            (
                "a name",
                Inst {
                    name: "c.2",
                    ..base()
                },
            ),
            (
                "a metadata field that is not a location",
                Inst {
                    dedup: "fusion.1",
                    ..base()
                },
            ),
        ] {
            assert_ne!(
                without_op_metadata(&module(&[changed], "model.py")).unwrap(),
                d0,
                "{what}"
            );
        }
        // The exact bytes differ from the digest's domain: never the plain blake3.
        assert_ne!(blake3::hash(&module(&[base()], "model.py")), d0);
    }

    #[test]
    fn a_field_moved_between_levels_or_split_differs() {
        // The same instruction bytes in one computation, or split over two: another digest.
        let one = [
            field(1, 2, b"m"),
            msg(
                3,
                &[msg(2, &[field(1, 2, b"a")]), msg(2, &[field(1, 2, b"b")])],
            ),
        ]
        .concat();
        let two = [
            field(1, 2, b"m"),
            msg(3, &[msg(2, &[field(1, 2, b"a")])]),
            msg(3, &[msg(2, &[field(1, 2, b"b")])]),
        ]
        .concat();
        assert_ne!(
            without_op_metadata(&one).unwrap(),
            without_op_metadata(&two).unwrap()
        );
    }

    #[test]
    fn malformed_bytes_give_no_digest() {
        let good = module(&[base()], "x");
        assert!(without_op_metadata(&good).is_some());
        assert!(without_op_metadata(&good[..good.len() - 1]).is_none());
        assert!(without_op_metadata(b"HloModule m\n").is_none());
        // A descended field that is not length-delimited.
        assert!(without_op_metadata(&int(3, 1)).is_none());
        // A group.
        assert!(without_op_metadata(&[0x0b, 0x0c]).is_none());
        // Field number 0.
        assert!(without_op_metadata(&[0x02, 0x00]).is_none());
        assert!(without_op_metadata(&[0xff; 11]).is_none());
        // The empty module is a message.
        assert!(without_op_metadata(b"").is_some());
    }

    #[test]
    fn the_example_models_digest_and_keep_their_graph() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        let bytes = std::fs::read(dir.join("mlp.hlo_module.pb")).unwrap();
        let d = without_op_metadata(&bytes).expect("a module");
        // The module's name is its first field: changing it changes the digest.
        assert_eq!(&bytes[2..11], b"jit_layer");
        let mut other = bytes.clone();
        other[2] = b'J';
        assert_ne!(without_op_metadata(&other), Some(d));
        // Its ops carry metadata (`jit(layer)/...` op names): renaming them all does not.
        let renamed = String::from_utf8_lossy(&bytes).contains("jit(layer)");
        assert!(renamed);
        let mut moved = bytes.clone();
        for w in 0..moved.len() - 10 {
            if &moved[w..w + 10] == b"jit(layer)" {
                moved[w + 4..w + 9].copy_from_slice(b"LAYER");
            }
        }
        assert_ne!(moved, bytes);
        assert_eq!(without_op_metadata(&moved), Some(d));
    }
}
