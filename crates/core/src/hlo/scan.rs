//! One encoded `HloInstructionProto` read in place, for the pass over a module's instructions
//! ([`super::proto`]): its name and opcode borrowed from the bytes, the size of its output worked
//! out from the encoded shape without building the shape, its id and parameter number; its
//! metadata, operands and every other field stepped over by their lengths. Nothing is copied or
//! allocated, so an instruction costs about what reading its bytes costs.
//!
//! Only an instruction encoded the plain way is read here. Anything else gives `None` — a group,
//! a known field with another wire type than its schema's, a second `shape` (which `prost` would
//! merge into the first), a malformed key, varint or length, a string that is not UTF-8, a shape
//! nested deeper than [`MAX_DEPTH`], or a shape the summary refuses (no element type, one it does
//! not know, a negative dimension) — and the caller decodes that instruction with `prost` as
//! before, which gives the same result or the same error. This reader therefore decides nothing
//! of its own: it is a shorter way to the answer decoding with `prost` gives, and the tests check
//! that the two agree.
//!
//! The rules for what is plain are `prost`'s (and [`super::wire`]'s): a key is a varint within
//! `u32` with a field number above 0 and a wire type of 0, 1, 2 or 5; a varint has at most ten
//! bytes, the tenth at most 1; a length stays within its message; packed integers fill their
//! length exactly.

use super::shape::{Dtype, TUPLE};
use super::summary::Tally;
use super::wire::{Fields, Problem};

/// How deeply tuple shapes may nest in an instruction read here (deeper ones go to `prost`).
pub const MAX_DEPTH: usize = 32;

/// What the summary needs of one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Instruction<'a> {
    /// Its name (`add.3`), UTF-8.
    pub name: &'a [u8],
    /// Its opcode (`add`), UTF-8.
    pub opcode: &'a [u8],
    /// The bytes its output occupies (saturating, as [`super::Shape::bytes`]).
    pub bytes: u64,
    /// Its id.
    pub id: i64,
    /// Its parameter number (0 unless it is a `parameter`).
    pub parameter_number: i64,
}

/// Reads the instructions of a module one after another ([`Reader::read`]), remembering the
/// encoding of the last shape it worked out and its size: a module's instructions mostly repeat
/// a few shapes, encoded the same way, and the same bytes give the same size.
#[derive(Debug, Default)]
pub struct Reader<'a> {
    last_shape: Option<(&'a [u8], u64)>,
}

impl<'a> Reader<'a> {
    /// `raw`, an encoded `HloInstructionProto`, read in place; `None` when it is not plainly
    /// encoded or its shape is one the summary refuses (see the module docs).
    pub fn read(&mut self, raw: &'a [u8]) -> Option<Instruction<'a>> {
        let mut c = Cursor { buf: raw, pos: 0 };
        let mut ins = Instruction {
            name: b"",
            opcode: b"",
            bytes: 0,
            id: 0,
            parameter_number: 0,
        };
        let mut shaped = false;
        while c.pos < raw.len() {
            match c.key()? {
                (1, 2) => ins.name = utf8(c.bytes()?)?,
                (2, 2) => ins.opcode = utf8(c.bytes()?)?,
                (3, 2) if !shaped => {
                    ins.bytes = self.shape_bytes(c.bytes()?)?;
                    shaped = true;
                }
                (7, 2) => {
                    c.bytes()?;
                }
                (9, 0) => ins.parameter_number = c.varint()? as i64,
                (35, 0) => ins.id = c.varint()? as i64,
                (36, 0) => {
                    c.varint()?;
                }
                (36, 2) => packed_varints(c.bytes()?)?,
                (1 | 2 | 3 | 7 | 9 | 35 | 36, _) => return None,
                (_, wire) => c.skip(wire)?,
            }
        }
        shaped.then_some(ins)
    }

    /// [`shape_bytes`] of an encoded shape, the last one's size when its bytes are the same.
    #[inline]
    fn shape_bytes(&mut self, shape: &'a [u8]) -> Option<u64> {
        if let Some((last, bytes)) = self.last_shape {
            if same_bytes(last, shape) {
                return Some(bytes);
            }
        }
        let bytes = shape_bytes(shape, 0)?;
        self.last_shape = Some((shape, bytes));
        Some(bytes)
    }
}

/// Whether `a` and `b` hold the same bytes; a short pair (an encoded shape is a dozen bytes)
/// compared inline, without a library call.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    if a.len() > 32 {
        return a == b;
    }
    a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Packed varints filling `buf` exactly (what `prost` accepts as packed integers).
#[inline]
fn packed_varints(buf: &[u8]) -> Option<()> {
    let mut packed = Cursor { buf, pos: 0 };
    while packed.pos < buf.len() {
        packed.varint()?;
    }
    Some(())
}

/// The encoded instructions (field 2) of an encoded `HloComputationProto`, in order, found in
/// place; see [`Instructions`].
pub fn instructions(computation: &[u8]) -> Instructions<'_> {
    Instructions {
        buf: computation,
        pos: 0,
        exact: None,
    }
}

/// The instructions of a computation: its fields stepped through here while they are plain;
/// from the first that is not (a group, a bad key or length), [`super::wire::fields`] walks the
/// rest with every rule and says what is wrong, if anything. An instruction field that is not
/// length-delimited is an error.
pub struct Instructions<'a> {
    buf: &'a [u8],
    pos: usize,
    exact: Option<Fields<'a>>,
}

impl<'a> Instructions<'a> {
    /// The instructions of `computation` walked with every rule from the start (what reading
    /// them in place must agree with).
    #[cfg(test)]
    pub(crate) fn walked(computation: &'a [u8]) -> Instructions<'a> {
        Instructions {
            buf: computation,
            pos: 0,
            exact: Some(super::wire::fields(computation)),
        }
    }
}

impl<'a> Iterator for Instructions<'a> {
    type Item = Result<&'a [u8], Problem>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(fields) = &mut self.exact {
            return exact_next(fields);
        }
        let mut c = Cursor {
            buf: self.buf,
            pos: self.pos,
        };
        while c.pos < self.buf.len() {
            let start = c.pos;
            match c.key() {
                Some((2, 2)) => {
                    if let Some(value) = c.bytes() {
                        self.pos = c.pos;
                        return Some(Ok(value));
                    }
                }
                Some((tag, wire)) if tag != 2 && c.skip(wire).is_some() => continue,
                _ => {}
            }
            self.pos = start;
            let mut fields = super::wire::fields(&self.buf[start..]);
            let item = exact_next(&mut fields);
            self.exact = Some(fields);
            return item;
        }
        self.pos = c.pos;
        None
    }
}

fn exact_next<'a>(fields: &mut Fields<'a>) -> Option<Result<&'a [u8], Problem>> {
    for f in fields {
        return match f {
            Ok((2, 2, value)) => Some(Ok(value)),
            Ok((2, wire, _)) => Some(Err(Problem {
                at: 0,
                field: Some(2),
                path: "instructions".into(),
                what: format!("has wire type {wire}, not 2 (a message)"),
            })),
            Ok(_) => continue,
            Err(p) => Some(Err(p)),
        };
    }
    None
}

/// An encoded `HloModuleProto` re-encoded without its computations' instructions (each
/// computation's other fields kept as they are, its length shortened), so that the rest can be
/// decoded without stepping through every instruction; `None` when a field of the module or of
/// a computation does not step plainly (the caller then decodes the bytes whole).
pub(crate) fn without_instructions(module: &[u8]) -> Option<Vec<u8>> {
    strip(module, false, |_, _| Some(()))
}

/// [`without_instructions`], handing each instruction met on the way to `visit` with the index
/// of its computation (in the module's order), so that one pass over the bytes both strips and
/// reads the instructions. `None` as soon as a field does not step plainly, an instruction
/// field is not length-delimited, or `visit` says `None`.
pub(crate) fn without_instructions_visiting<'a>(
    module: &'a [u8],
    visit: impl FnMut(usize, &'a [u8]) -> Option<()>,
) -> Option<Vec<u8>> {
    strip(module, true, visit)
}

fn strip<'a>(
    module: &'a [u8],
    visiting: bool,
    mut visit: impl FnMut(usize, &'a [u8]) -> Option<()>,
) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(module.len().min(64 << 10));
    let mut kept = Vec::new();
    let mut c = Cursor {
        buf: module,
        pos: 0,
    };
    let mut index = 0;
    while c.pos < module.len() {
        let start = c.pos;
        let (tag, wire) = c.key()?;
        if (tag, wire) != (3, 2) {
            c.skip(wire)?;
            out.extend_from_slice(&module[start..c.pos]);
            continue;
        }
        let computation = c.bytes()?;
        kept.clear();
        let mut f = Cursor {
            buf: computation,
            pos: 0,
        };
        while f.pos < computation.len() {
            let field = f.pos;
            match f.key()? {
                (2, 2) => visit(index, f.bytes()?)?,
                // An instruction that is not a message: for the caller to refuse.
                (2, _) if visiting => return None,
                (_, wire) => {
                    f.skip(wire)?;
                    kept.extend_from_slice(&computation[field..f.pos]);
                }
            }
        }
        push_varint(&mut out, 3 << 3 | 2);
        push_varint(&mut out, kept.len() as u64);
        out.extend_from_slice(&kept);
        index += 1;
    }
    Some(out)
}

fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Instructions counted per opcode, the opcodes borrowed from the module's bytes. A module has a
/// few dozen distinct opcodes among any number of instructions: a short list, the last opcode
/// found looked at first, a short opcode compared as one number; past [`Opcodes::SHORT`]
/// distinct ones, the others go straight to the tally's map.
#[derive(Debug, Default)]
pub struct Opcodes<'a> {
    counts: Vec<(u64, &'a [u8], usize)>,
    last: usize,
}

/// An opcode of at most 7 bytes as one number (its bytes and its length), else 0.
#[inline(always)]
fn short_key(opcode: &[u8]) -> u64 {
    if opcode.len() > 7 {
        return 0;
    }
    let mut key = (opcode.len() as u64) << 56;
    for (i, b) in opcode.iter().enumerate() {
        key |= u64::from(*b) << (8 * i);
    }
    key
}

impl<'a> Opcodes<'a> {
    /// How many distinct opcodes the short list holds.
    pub const SHORT: usize = 64;

    /// One more instruction of `opcode` (UTF-8).
    #[inline]
    pub fn count(&mut self, opcode: &'a [u8], tally: &mut Tally) {
        let key = short_key(opcode);
        let same = |(k, op, _): &(u64, &[u8], usize)| {
            if key != 0 {
                *k == key
            } else {
                *op == opcode
            }
        };
        if let Some(entry) = self.counts.get_mut(self.last).filter(|e| same(e)) {
            entry.2 += 1;
            return;
        }
        match self.counts.iter().position(same) {
            Some(i) => {
                self.counts[i].2 += 1;
                self.last = i;
            }
            None if self.counts.len() < Self::SHORT => {
                self.counts.push((key, opcode, 1));
                self.last = self.counts.len() - 1;
            }
            None => tally.count_opcode(&String::from_utf8_lossy(opcode), 1),
        }
    }

    /// The counts added to `tally`'s.
    pub(crate) fn add_to(self, tally: &mut Tally) {
        for (_, op, n) in self.counts {
            tally.count_opcode(&String::from_utf8_lossy(op), n);
        }
    }
}

/// The bytes of an encoded `ShapeProto`'s value, as the summary counts them: a tuple's, the sum
/// of its elements'; an array's, its elements times the element type's bits, rounded up to bytes.
fn shape_bytes(buf: &[u8], depth: usize) -> Option<u64> {
    if depth > MAX_DEPTH {
        return None;
    }
    let mut c = Cursor { buf, pos: 0 };
    let mut element_type = 0i32;
    let mut elements = 1u64;
    let mut tuple = 0u64;
    while c.pos < buf.len() {
        match c.key()? {
            (2, 0) => element_type = c.varint()? as i32,
            (3, 0) => elements = elements.saturating_mul(dimension(c.varint()?)?),
            (3, 2) => {
                let mut packed = Cursor {
                    buf: c.bytes()?,
                    pos: 0,
                };
                while packed.pos < packed.buf.len() {
                    elements = elements.saturating_mul(dimension(packed.varint()?)?);
                }
            }
            (4, 2) => tuple = tuple.saturating_add(shape_bytes(c.bytes()?, depth + 1)?),
            (2..=4, _) => return None,
            (_, wire) => c.skip(wire)?,
        }
    }
    if element_type == TUPLE {
        return Some(tuple);
    }
    let bits = Dtype::from_number(element_type)?.bits();
    Some(elements.saturating_mul(bits).div_ceil(8))
}

/// `b` when it is UTF-8 (names and opcodes are nearly always ASCII: checked inline first).
#[inline]
fn utf8(b: &[u8]) -> Option<&[u8]> {
    (b.is_ascii() || std::str::from_utf8(b).is_ok()).then_some(b)
}

/// A dimension: an `int64` that must not be negative.
fn dimension(v: u64) -> Option<u64> {
    u64::try_from(v as i64).ok()
}

/// A position in an encoded message.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn varint(&mut self) -> Option<u64> {
        let first = *self.buf.get(self.pos)?;
        self.pos += 1;
        if first < 0x80 {
            return Some(u64::from(first));
        }
        let mut value = u64::from(first & 0x7f);
        for i in 1..10 {
            let b = *self.buf.get(self.pos)?;
            self.pos += 1;
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

    /// A field key: (field number, wire type).
    #[inline(always)]
    fn key(&mut self) -> Option<(u32, u8)> {
        let key = u32::try_from(self.varint()?).ok()?;
        let (tag, wire) = (key >> 3, (key & 7) as u8);
        (tag > 0 && wire <= 5).then_some((tag, wire))
    }

    /// A length-delimited value.
    #[inline(always)]
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = self.varint()?;
        let rest = &self.buf[self.pos..];
        let value = rest.get(..usize::try_from(len).ok()?)?;
        self.pos += value.len();
        Some(value)
    }

    /// Step over a value of another field (groups are not plain).
    fn skip(&mut self, wire: u8) -> Option<()> {
        match wire {
            0 => {
                self.varint()?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if self.buf.len() - self.pos < n {
                    return None;
                }
                self.pos += n;
            }
            2 => {
                self.bytes()?;
            }
            _ => return None,
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    fn field(tag: u64, body: &[u8]) -> Vec<u8> {
        let mut out = varint(tag << 3 | 2);
        out.extend(varint(body.len() as u64));
        out.extend_from_slice(body);
        out
    }

    fn num(tag: u64, n: u64) -> Vec<u8> {
        let mut out = varint(tag << 3);
        out.extend(varint(n));
        out
    }

    fn f32_shape(dims: &[u64]) -> Vec<u8> {
        let packed: Vec<u8> = dims.iter().flat_map(|&d| varint(d)).collect();
        [num(2, 11), field(3, &packed)].concat()
    }

    #[test]
    fn a_plain_instruction_is_read_in_place() {
        let raw = [
            field(1, b"add.3"),
            field(2, b"add"),
            field(3, &f32_shape(&[128, 256])),
            field(7, &field(2, b"jit(f)/add")),
            num(35, 3),
            field(36, &[1, 2]),
            // An unknown fixed64 field and an unknown varint field are stepped over.
            vec![0x41, 1, 2, 3, 4, 5, 6, 7, 8],
            num(40, 300),
        ]
        .concat();
        let ins = Reader::default().read(&raw).unwrap();
        assert_eq!(
            ins,
            Instruction {
                name: b"add.3",
                opcode: b"add",
                bytes: 128 * 256 * 4,
                id: 3,
                parameter_number: 0
            }
        );
        // A tuple's size is its elements'; dimensions may come one by one.
        let tuple = [
            num(2, u64::from(TUPLE as u32)),
            field(4, &f32_shape(&[2])),
            field(4, &[num(2, 11), num(3, 3), num(3, 5)].concat()),
        ]
        .concat();
        let raw = [
            field(1, b"t"),
            field(2, b"tuple"),
            field(3, &tuple),
            num(9, 4),
        ]
        .concat();
        let ins = Reader::default().read(&raw).unwrap();
        assert_eq!((ins.bytes, ins.parameter_number), (8 + 60, 4));
    }

    #[test]
    fn anything_not_plain_is_left_to_prost() {
        let shape = field(3, &f32_shape(&[4]));
        let ok = [field(1, b"a"), field(2, b"add"), shape.clone()].concat();
        assert!(Reader::default().read(&ok).is_some());
        let cases: Vec<Vec<u8>> = vec![
            // No shape, a second shape, a shape of no element type or an unknown one.
            [field(1, b"a"), field(2, b"add")].concat(),
            [ok.clone(), shape.clone()].concat(),
            [field(1, b"a"), field(3, &field(3, &[4]))].concat(),
            [field(1, b"a"), field(3, &num(2, 999))].concat(),
            // A negative dimension.
            [
                field(1, b"a"),
                field(3, &[num(2, 11), num(3, u64::MAX)].concat()),
            ]
            .concat(),
            // A name that is not UTF-8, a name sent as a varint.
            [field(1, &[0xff]), shape.clone()].concat(),
            [num(1, 5), shape.clone()].concat(),
            // A group, a field number 0, an invalid wire type, a cut length, an overlong varint.
            [ok.clone(), vec![0x53, 0x54]].concat(),
            [ok.clone(), vec![0x00, 1]].concat(),
            [ok.clone(), vec![0x47]].concat(),
            [ok.clone(), vec![0x52, 9, 1]].concat(),
            [
                ok.clone(),
                vec![
                    0x50, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2,
                ],
            ]
            .concat(),
            // Packed operands that overrun their length.
            [ok.clone(), field(36, &[0x80])].concat(),
        ];
        for (k, raw) in cases.iter().enumerate() {
            assert_eq!(Reader::default().read(raw), None, "case {k}");
        }
        // A tuple nested deeper than MAX_DEPTH.
        let mut s = f32_shape(&[1]);
        for _ in 0..=MAX_DEPTH {
            s = [num(2, u64::from(TUPLE as u32)), field(4, &s)].concat();
        }
        assert_eq!(
            Reader::default().read(&[field(1, b"a"), field(3, &s)].concat()),
            None
        );
    }
}
