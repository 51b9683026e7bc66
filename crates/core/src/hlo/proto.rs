//! The binary `HloModuleProto`: message definitions for the fields nxcc reads (field numbers from
//! XLA's public schema, `xla/service/hlo.proto` and `xla/xla_data.proto`; every other field is
//! skipped), decoded with `prost`, and turned into a [`Module`].
//!
//! A module may hold hundreds of thousands of instructions, so they are not decoded all at once.
//! One pass over the bytes strips the module of its computations' instructions and reads each
//! instruction on the way (`scan::without_instructions_visiting`): in place where it is plainly
//! encoded (`scan::Reader`: its name, opcode, output size and id, nothing allocated), counted
//! and dropped. The module's other fields, which come after the instructions, are then decoded
//! with `prost` from what the pass kept, and the entry computation's parameters and root (its
//! last instruction, as XLA writes it) decoded from their encodings. Only those, the few largest
//! outputs, and an instruction not plainly encoded are decoded with `prost` (into one reused
//! message; an instruction's `metadata` is kept encoded and decoded on demand,
//! `HloInstructionProto::op_metadata`). Anything else — a root that is not last, bytes that do
//! not decode, a module a frontend refuses — is read again the longer way: the module decoded
//! without its instructions first (`scan::without_instructions`), then each computation's
//! instructions found in place (`scan::instructions`), which says what is wrong if anything.
//! Either way reading gives what decoding every instruction with `prost` gives (the tests compare
//! the two).
//!
//! A module a frontend would refuse is refused here: bytes that do not decode (the error names
//! the field and byte offset, from [`super::wire`]); no computation with the entry computation's
//! id (or, when the id is 0, its name); an entry computation whose root id is not one of its
//! instructions, or whose parameter numbers are not 0..n each once.

use std::collections::HashMap;

use prost::Message;

use super::scan;
use super::shape::{Dtype, Shape, TUPLE};
use super::summary::{Alias, Computation, Module, Tally, Tensor};
use super::wire::{Kind, Schema};
use super::ReadError;

/// `xla.HloModuleProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloModuleProto {
    /// The module's name (`jit_layer`).
    #[prost(string, tag = "1")]
    pub name: String,
    /// The entry computation's name (used to find it when `entry_computation_id` is 0).
    #[prost(string, tag = "2")]
    pub entry_computation_name: String,
    /// Every computation, without instructions.
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<HloComputationProto>,
    /// The entry computation's signature as the host sees it (`None` in older protos).
    #[prost(message, optional, tag = "4")]
    pub host_program_shape: Option<ProgramShapeProto>,
    /// The module id.
    #[prost(int64, tag = "5")]
    pub id: i64,
    /// The id of the entry computation (0: unset, find it by name).
    #[prost(int64, tag = "6")]
    pub entry_computation_id: i64,
    /// Which results share a parameter's buffer (`None`: none do).
    #[prost(message, optional, tag = "8")]
    pub input_output_alias: Option<HloInputOutputAliasProto>,
}

/// `xla.HloComputationProto` without its instructions (field 2, `repeated HloInstructionProto`,
/// read one at a time: [`instructions`]).
#[derive(Clone, PartialEq, Message)]
pub struct HloComputationProto {
    /// The computation's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its parameters' and result's shapes (`None` in protos that omit it).
    #[prost(message, optional, tag = "4")]
    pub program_shape: Option<ProgramShapeProto>,
    /// The computation's id, unique in the module.
    #[prost(int64, tag = "5")]
    pub id: i64,
    /// The id of the instruction whose value the computation returns.
    #[prost(int64, tag = "6")]
    pub root_id: i64,
}

/// `xla.HloInstructionProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloInstructionProto {
    /// The instruction's name, unique in the module (`dot.3`).
    #[prost(string, tag = "1")]
    pub name: String,
    /// The opcode as HLO text spells it (`parameter`, `dot`, `tuple`).
    #[prost(string, tag = "2")]
    pub opcode: String,
    /// The shape of the instruction's output (`None`: missing, which the reader refuses).
    #[prost(message, optional, tag = "3")]
    pub shape: Option<ShapeProto>,
    /// An `xla.OpMetadata`, encoded (`HloInstructionProto::op_metadata` decodes it).
    #[prost(bytes = "vec", tag = "7")]
    pub metadata: Vec<u8>,
    /// Which entry parameter it is, for a `parameter` instruction (0 otherwise).
    #[prost(int64, tag = "9")]
    pub parameter_number: i64,
    /// The instruction's id, unique in the module.
    #[prost(int64, tag = "35")]
    pub id: i64,
    /// The ids of its operands, in order.
    #[prost(int64, repeated, tag = "36")]
    pub operand_ids: Vec<i64>,
}

impl HloInstructionProto {
    /// The instruction's metadata, decoded (`None`: none, or not an `OpMetadata`).
    pub(crate) fn op_metadata(&self) -> Option<OpMetadata> {
        if self.metadata.is_empty() {
            return None;
        }
        OpMetadata::decode(self.metadata.as_slice()).ok()
    }

    /// Empty again, keeping its buffers for the next [`Message::merge`].
    fn reset(&mut self) {
        self.name.clear();
        self.opcode.clear();
        if let Some(s) = &mut self.shape {
            s.element_type = 0;
            s.dimensions.clear();
            s.tuple_shapes.clear();
        }
        self.metadata.clear();
        self.parameter_number = 0;
        self.id = 0;
        self.operand_ids.clear();
    }
}

/// `xla.ShapeProto` (the layout and dynamic dimensions are skipped).
#[derive(Clone, PartialEq, Message)]
pub struct ShapeProto {
    /// An `xla.PrimitiveType`.
    #[prost(int32, tag = "2")]
    pub element_type: i32,
    /// Dimension sizes, major to minor (empty for a scalar or a tuple).
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    /// A tuple's element shapes (empty unless `element_type` is `TUPLE`).
    #[prost(message, repeated, tag = "4")]
    pub tuple_shapes: Vec<ShapeProto>,
}

/// `xla.ProgramShapeProto`.
#[derive(Clone, PartialEq, Message)]
pub struct ProgramShapeProto {
    /// The parameters' shapes, by parameter number.
    #[prost(message, repeated, tag = "1")]
    pub parameters: Vec<ShapeProto>,
    /// The result's shape.
    #[prost(message, optional, tag = "2")]
    pub result: Option<ShapeProto>,
    /// The parameters' names, by parameter number (often empty).
    #[prost(string, repeated, tag = "3")]
    pub parameter_names: Vec<String>,
}

/// `xla.OpMetadata` (the framework's op type and name, and where in the program it came from).
#[derive(Clone, PartialEq, Message)]
pub struct OpMetadata {
    /// The framework op's type (`aten__addmm`).
    #[prost(string, tag = "1")]
    pub op_type: String,
    /// The framework op's name, its place in the model (`jit(f)/dense/dot_general`).
    #[prost(string, tag = "2")]
    pub op_name: String,
    /// The source file of the framework call that made the op (empty when unknown).
    #[prost(string, tag = "3")]
    pub source_file: String,
    /// Its 1-based line in `source_file` (0 when unknown).
    #[prost(int32, tag = "4")]
    pub source_line: i32,
}

/// `xla.HloInputOutputAliasProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloInputOutputAliasProto {
    /// One entry per aliased output.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<AliasEntryProto>,
}

/// `xla.HloInputOutputAliasProto.AliasEntryProto`.
#[derive(Clone, PartialEq, Message)]
pub struct AliasEntryProto {
    /// Where in the result the aliased output is (`[]`: the whole result; `[k]`: tuple element k).
    #[prost(int64, repeated, tag = "1")]
    pub output_shape_index: Vec<i64>,
    /// The entry parameter whose buffer it shares.
    #[prost(int64, tag = "2")]
    pub parameter_number: i64,
    /// Where in that parameter the shared buffer is (`[]`: the whole parameter).
    #[prost(int64, repeated, tag = "3")]
    pub parameter_shape_index: Vec<i64>,
    /// `xla.Kind`: 1 may alias, 2 must alias.
    #[prost(int32, tag = "4")]
    pub kind: i32,
}

/// `xla.Kind::MUST_ALIAS`.
const MUST_ALIAS: i32 = 2;

// The same fields, for locating a decoding failure (keep in step with the structs above).
static SHAPE: Schema = Schema {
    name: "ShapeProto",
    fields: &[
        (2, "element_type", Kind::Int),
        (3, "dimensions", Kind::Ints),
        (4, "tuple_shapes", Kind::Msg(&SHAPE)),
    ],
};
static PROGRAM_SHAPE: Schema = Schema {
    name: "ProgramShapeProto",
    fields: &[
        (1, "parameters", Kind::Msg(&SHAPE)),
        (2, "result", Kind::Msg(&SHAPE)),
        (3, "parameter_names", Kind::Str),
    ],
};
static INSTRUCTION: Schema = Schema {
    name: "HloInstructionProto",
    fields: &[
        (1, "name", Kind::Str),
        (2, "opcode", Kind::Str),
        (3, "shape", Kind::Msg(&SHAPE)),
        (7, "metadata", Kind::Bytes),
        (9, "parameter_number", Kind::Int),
        (35, "id", Kind::Int),
        (36, "operand_ids", Kind::Ints),
    ],
};
static COMPUTATION: Schema = Schema {
    name: "HloComputationProto",
    fields: &[
        (1, "name", Kind::Str),
        (2, "instructions", Kind::Apart(&INSTRUCTION)),
        (4, "program_shape", Kind::Msg(&PROGRAM_SHAPE)),
        (5, "id", Kind::Int),
        (6, "root_id", Kind::Int),
    ],
};
static ALIAS_ENTRY: Schema = Schema {
    name: "AliasEntryProto",
    fields: &[
        (1, "output_shape_index", Kind::Ints),
        (2, "parameter_number", Kind::Int),
        (3, "parameter_shape_index", Kind::Ints),
        (4, "kind", Kind::Int),
    ],
};
static ALIASES: Schema = Schema {
    name: "HloInputOutputAliasProto",
    fields: &[(1, "entries", Kind::Msg(&ALIAS_ENTRY))],
};
/// The wire schema of [`HloModuleProto`].
pub static MODULE: Schema = Schema {
    name: "HloModuleProto",
    fields: &[
        (1, "name", Kind::Str),
        (2, "entry_computation_name", Kind::Str),
        (3, "computations", Kind::Msg(&COMPUTATION)),
        (4, "host_program_shape", Kind::Msg(&PROGRAM_SHAPE)),
        (5, "id", Kind::Int),
        (6, "entry_computation_id", Kind::Int),
        (8, "input_output_alias", Kind::Msg(&ALIASES)),
    ],
};

/// What is wrong with `bytes`, which `prost` refused with `e`: the wire walk's account (the field
/// and byte offset), else `prost`'s own words.
fn not_proto(bytes: &[u8], e: prost::DecodeError) -> ReadError {
    ReadError::NotProto(match super::wire::locate(bytes, &MODULE) {
        Some(p) => p.to_string(),
        None => e.to_string(),
    })
}

/// Decode the module (without its instructions, which are left out before decoding:
/// `scan::without_instructions`), or say where it fails.
pub fn decode(bytes: &[u8]) -> Result<HloModuleProto, ReadError> {
    decode_as(bytes, Reading::InPlace)
}

fn decode_as(bytes: &[u8], reading: Reading) -> Result<HloModuleProto, ReadError> {
    let stripped = match reading {
        Reading::InPlace => scan::without_instructions(bytes),
        #[cfg(test)]
        Reading::Decoded => None,
    };
    let decoded = match stripped {
        Some(rest) => HloModuleProto::decode(rest.as_slice()),
        None => HloModuleProto::decode(bytes),
    };
    decoded.map_err(|e| not_proto(bytes, e))
}

/// Why the fields could not be walked: as [`not_proto`] says it.
fn not_walked(bytes: &[u8], p: super::wire::Problem) -> ReadError {
    ReadError::NotProto(match super::wire::locate(bytes, &MODULE) {
        Some(p) => p.to_string(),
        None => p.to_string(),
    })
}

/// The encoded computations of an encoded module, in order (field 3).
fn computation_bytes(module: &[u8]) -> Result<Vec<&[u8]>, super::wire::Problem> {
    let mut out = Vec::new();
    for f in super::wire::fields(module) {
        let (tag, _, value) = f?;
        if tag == 3 {
            out.push(value);
        }
    }
    Ok(out)
}

/// The encoded instructions of an encoded computation, in order (field 2, which must be
/// length-delimited), found in place (`scan::instructions`).
pub fn instructions(computation: &[u8]) -> scan::Instructions<'_> {
    instructions_as(computation, Reading::InPlace)
}

fn instructions_as(computation: &[u8], reading: Reading) -> scan::Instructions<'_> {
    match reading {
        Reading::InPlace => scan::instructions(computation),
        #[cfg(test)]
        Reading::Decoded => scan::Instructions::walked(computation),
    }
}

/// A shape (an element type this reader does not know, or a negative dimension: an error).
fn shape(s: &ShapeProto) -> Result<Shape, String> {
    shape_at(s, 0)
}

fn shape_at(s: &ShapeProto, depth: usize) -> Result<Shape, String> {
    if s.element_type == TUPLE {
        if depth > super::wire::RECURSION_LIMIT {
            return Err("a tuple shape nests too deeply".into());
        }
        return s
            .tuple_shapes
            .iter()
            .map(|t| shape_at(t, depth + 1))
            .collect::<Result<Vec<_>, _>>()
            .map(Shape::Tuple);
    }
    let dtype = Dtype::from_number(s.element_type)
        .ok_or_else(|| format!("unknown element type {}", s.element_type))?;
    let dims = s
        .dimensions
        .iter()
        .map(|&d| u64::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Shape::Array { dtype, dims })
}

/// Decode everything the summary decodes — the module, then each instruction — and keep none
/// of it: `Err` exactly when reading the bytes fails before the module's meaning is looked at.
pub fn decodes(bytes: &[u8]) -> Result<(), String> {
    HloModuleProto::decode(bytes).map_err(|e| e.to_string())?;
    let mut ins = HloInstructionProto::default();
    for c in computation_bytes(bytes).map_err(|p| p.to_string())? {
        for raw in instructions(c) {
            ins.reset();
            ins.merge(raw.map_err(|p| p.to_string())?)
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// The output size of a shape, checked as [`shape`] checks it, without building it.
fn shape_bytes(s: &ShapeProto, depth: usize) -> Result<u64, String> {
    if s.element_type == TUPLE {
        if depth > super::wire::RECURSION_LIMIT {
            return Err("a tuple shape nests too deeply".into());
        }
        return s.tuple_shapes.iter().try_fold(0u64, |a, t| {
            Ok(a.saturating_add(shape_bytes(t, depth + 1)?))
        });
    }
    let dtype = Dtype::from_number(s.element_type)
        .ok_or_else(|| format!("unknown element type {}", s.element_type))?;
    let mut elements = 1u64;
    for &d in &s.dimensions {
        let d = u64::try_from(d).map_err(|_| format!("negative dimension {d}"))?;
        elements = elements.saturating_mul(d);
    }
    Ok(elements.saturating_mul(dtype.bits()).div_ceil(8))
}

/// How instructions are read: in place where they are plainly encoded ([`scan`]), or each
/// decoded with `prost` (what in-place reading must agree with; the tests compare the two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    InPlace,
    #[cfg(test)]
    Decoded,
}

/// Read a binary `HloModuleProto` into its summary.
pub fn parse(bytes: &[u8]) -> Result<Module, ReadError> {
    parse_as(bytes, Reading::InPlace)
}

fn parse_as(bytes: &[u8], reading: Reading) -> Result<Module, ReadError> {
    if reading == Reading::InPlace {
        if let Some(module) = summarise_in_one_pass(bytes) {
            return Ok(module);
        }
    }
    let m = decode_as(bytes, reading)?;
    summarise_as(&m, bytes, reading)
}

/// The index of the module's entry computation: the one with the entry computation's id, else
/// (an id of 0, as older protos have) the one with its name.
fn entry_index(m: &HloModuleProto) -> Result<usize, ReadError> {
    if m.computations.is_empty() {
        return Err(ReadError::Invalid(
            "it has no computations (so no entry computation)".into(),
        ));
    }
    let by_name = || {
        (!m.entry_computation_name.is_empty())
            .then(|| {
                m.computations
                    .iter()
                    .position(|c| c.name == m.entry_computation_name)
            })
            .flatten()
    };
    m.computations
        .iter()
        .position(|c| c.id == m.entry_computation_id)
        .or_else(by_name)
        .ok_or_else(|| {
            ReadError::Invalid(format!(
                "no entry computation: no computation has the entry computation id {}{}",
                m.entry_computation_id,
                if m.entry_computation_name.is_empty() {
                    String::new()
                } else {
                    format!(" or the name {:?}", m.entry_computation_name)
                }
            ))
        })
}

/// What one pass over the instructions gathers besides the tally: the entry computation's
/// parameters (with their numbers) and its root (name, opcode, shape, operand ids).
#[derive(Default)]
struct Entry {
    params: Vec<(i64, Tensor)>,
    root: Option<(String, String, Shape, Vec<i64>)>,
}

fn summarise_as(m: &HloModuleProto, bytes: &[u8], reading: Reading) -> Result<Module, ReadError> {
    let entry_index = entry_index(m)?;
    let mut tally = Tally::default();
    let mut opcodes = scan::Opcodes::default();
    let encoded = computation_bytes(bytes).map_err(|p| not_walked(bytes, p))?;
    let mut computations = Vec::with_capacity(m.computations.len());
    let mut entry = Entry::default();
    let mut ins = HloInstructionProto::default();
    let mut reader = scan::Reader::default();
    for (ci, (c, encoded)) in m.computations.iter().zip(&encoded).enumerate() {
        let is_entry = ci == entry_index;
        let mut count = 0usize;
        for raw in instructions_as(encoded, reading) {
            let raw = raw.map_err(|p| not_walked(bytes, p))?;
            count += 1;
            // Most instructions are only counted: read in place. The entry computation's
            // parameters and root, and anything not plainly encoded, are decoded.
            let plain = (reading == Reading::InPlace)
                .then(|| reader.read(raw))
                .flatten();
            if let Some(p) =
                plain.filter(|p| !(is_entry && (p.opcode == b"parameter" || p.id == c.root_id)))
            {
                opcodes.count(p.opcode, &mut tally);
                tally.add_output(p.name, p.bytes, || details(raw));
                continue;
            }
            ins.reset();
            ins.merge(raw).map_err(|e| not_proto(bytes, e))?;
            let gathered = if is_entry { Some(&mut entry) } else { None };
            add_decoded(&ins, c, &mut tally, gathered)?;
        }
        computations.push(Computation {
            name: c.name.clone(),
            instructions: count,
            is_entry,
        });
    }
    module_of(
        m,
        entry_index,
        computations,
        (tally, opcodes),
        entry,
        |ids| names_of(ids, encoded[entry_index], bytes, reading),
    )
}

/// The summary, once the instructions are tallied (`tallied`: the tally and the opcodes counted
/// apart) and the entry computation's (`entry_index`) parameters and root are gathered;
/// `names_of` names the instructions of the entry computation with the given ids (a root
/// `tuple`'s operands, after which its results are named).
fn module_of(
    m: &HloModuleProto,
    entry_index: usize,
    computations: Vec<Computation>,
    tallied: (Tally, scan::Opcodes),
    entry: Entry,
    names_of: impl FnOnce(&[i64]) -> Result<HashMap<i64, String>, ReadError>,
) -> Result<Module, ReadError> {
    let (mut tally, opcodes) = tallied;
    opcodes.add_to(&mut tally);
    let comp = &m.computations[entry_index];
    let parameters = numbered(entry.params)?;
    let Some((root_name, root_opcode, root_shape, operands)) = entry.root else {
        return Err(ReadError::Invalid(format!(
            "the entry computation {:?} has no root instruction (root id {} is none of its instructions)",
            comp.name, comp.root_id
        )));
    };
    // A root tuple's results are named after its operands: one more pass over the entry
    // computation for their names.
    let operand_names = if root_opcode == "tuple" && matches!(root_shape, Shape::Tuple(_)) {
        names_of(&operands)?
    } else {
        HashMap::new()
    };
    let results = results(&root_name, &root_opcode, &root_shape, &operands, |id| {
        operand_names.get(&id).cloned()
    });
    Ok(Module {
        format: "proto",
        name: m.name.clone(),
        id: m.id,
        entry: comp.name.clone(),
        parameters,
        results,
        computations,
        instruction_count: tally.instructions,
        opcodes: tally.opcodes,
        largest: tally.largest,
        aliases: aliases(m),
    })
}

/// What the one pass over a module's instructions keeps of one computation's before the
/// module's other fields (which come after them) say which computation is the entry and which
/// instruction its root: how many there are, the encoded parameters, and the last one (the root
/// as XLA writes a computation, in post order).
#[derive(Default)]
struct Seen<'a> {
    count: usize,
    parameters: Vec<&'a [u8]>,
    last: Option<&'a [u8]>,
}

/// The summary read in one pass over the bytes: each instruction read in place (or decoded,
/// when it is not plainly encoded) and tallied as the module is stripped of its instructions
/// ([`scan::without_instructions_visiting`]); then the rest of the module decoded, and the
/// entry computation's parameters and root decoded from the encodings kept. `None` when
/// anything is amiss — a field that does not step plainly, bytes that do not decode, a module
/// a frontend refuses, a root that is not its computation's last instruction — and the caller
/// reads the module as [`summarise_as`] does, which says what is wrong or finds the root.
fn summarise_in_one_pass(bytes: &[u8]) -> Option<Module> {
    let mut tally = Tally::default();
    let mut opcodes = scan::Opcodes::default();
    let mut reader = scan::Reader::default();
    let mut ins = HloInstructionProto::default();
    let mut seen: Vec<Seen> = Vec::new();
    let stripped = scan::without_instructions_visiting(bytes, |ci, raw| {
        if seen.len() <= ci {
            seen.resize_with(ci + 1, Seen::default);
        }
        let s = &mut seen[ci];
        s.count += 1;
        s.last = Some(raw);
        if let Some(p) = reader.read(raw) {
            if p.opcode == b"parameter" {
                s.parameters.push(raw);
            }
            opcodes.count(p.opcode, &mut tally);
            tally.add_output(p.name, p.bytes, || details(raw));
            return Some(());
        }
        ins.reset();
        ins.merge(raw).ok()?;
        if ins.opcode == "parameter" {
            s.parameters.push(raw);
        }
        tally_decoded(&ins, &mut tally).ok().map(|_| ())
    })?;
    let m = HloModuleProto::decode(stripped.as_slice()).ok()?;
    seen.resize_with(m.computations.len(), Seen::default);
    let entry_index = entry_index(&m).ok()?;
    let c = &m.computations[entry_index];
    let mut entry = Entry::default();
    let kept = &seen[entry_index];
    let last = kept.last?;
    let mut gather_from = |raw: &[u8]| {
        let ins = HloInstructionProto::decode(raw).ok()?;
        let root = std::ptr::eq(raw, last) && ins.id == c.root_id;
        gather(&ins, ins.shape.as_ref()?, root, &mut entry).ok()
    };
    for raw in &kept.parameters {
        gather_from(raw)?;
    }
    if !kept
        .parameters
        .last()
        .is_some_and(|p| std::ptr::eq(*p, last))
    {
        gather_from(last)?;
    }
    let encoded = *computation_bytes(bytes).ok()?.get(entry_index)?;
    let computations = m
        .computations
        .iter()
        .zip(&seen)
        .enumerate()
        .map(|(ci, (c, s))| Computation {
            name: c.name.clone(),
            instructions: s.count,
            is_entry: ci == entry_index,
        })
        .collect();
    entry.root.as_ref()?;
    let names = |ids: &[i64]| names_of(ids, encoded, bytes, Reading::InPlace);
    module_of(
        &m,
        entry_index,
        computations,
        (tally, opcodes),
        entry,
        names,
    )
    .ok()
}

/// A decoded instruction of computation `c`: tallied, and when `entry` is given (it is of the
/// entry computation), kept there if it is a parameter or the root.
fn add_decoded(
    ins: &HloInstructionProto,
    c: &HloComputationProto,
    tally: &mut Tally,
    entry: Option<&mut Entry>,
) -> Result<(), ReadError> {
    let bad =
        |e: String| ReadError::Invalid(format!("instruction {:?} of {:?}: {e}", ins.name, c.name));
    let sp = tally_decoded(ins, tally).map_err(bad)?;
    let Some(entry) = entry else {
        return Ok(());
    };
    gather(ins, sp, ins.id == c.root_id, entry).map_err(bad)
}

/// A decoded instruction tallied; its shape, or why it has none the summary takes.
fn tally_decoded<'a>(
    ins: &'a HloInstructionProto,
    tally: &mut Tally,
) -> Result<&'a ShapeProto, String> {
    let sp = ins
        .shape
        .as_ref()
        .filter(|s| s.element_type != 0)
        .ok_or_else(|| "it has no shape".to_string())?;
    let size = shape_bytes(sp, 0)?;
    tally.add_lazy(&ins.name, &ins.opcode, size, || {
        (
            shape(sp).unwrap_or(Shape::Tuple(Vec::new())),
            ins.op_metadata().map(|m| m.op_name).unwrap_or_default(),
        )
    });
    Ok(sp)
}

/// A decoded instruction of the entry computation, of shape `sp`, kept in `entry` if it is a
/// parameter or (`root`) the root.
fn gather(
    ins: &HloInstructionProto,
    sp: &ShapeProto,
    root: bool,
    entry: &mut Entry,
) -> Result<(), String> {
    if ins.opcode == "parameter" {
        entry.params.push((
            ins.parameter_number,
            Tensor {
                number: 0,
                name: ins.name.clone(),
                shape: shape(sp)?,
            },
        ));
    }
    if root {
        entry.root = Some((
            ins.name.clone(),
            ins.opcode.clone(),
            shape(sp)?,
            ins.operand_ids.clone(),
        ));
    }
    Ok(())
}

/// The entry computation's parameters in order, each numbered, when their numbers are 0..n
/// once each.
fn numbered(mut params: Vec<(i64, Tensor)>) -> Result<Vec<Tensor>, ReadError> {
    params.sort_by_key(|(n, _)| *n);
    let last = params.len().saturating_sub(1);
    for (k, (n, t)) in params.iter_mut().enumerate() {
        if *n != k as i64 {
            return Err(ReadError::Invalid(format!(
                "the entry computation's parameter numbers are not 0 to {last} once each: parameter {:?} has number {n}",
                t.name
            )));
        }
        t.number = k;
    }
    Ok(params.into_iter().map(|(_, t)| t).collect())
}

/// The names of the instructions of an encoded computation whose ids are among `ids`.
fn names_of(
    ids: &[i64],
    computation: &[u8],
    bytes: &[u8],
    reading: Reading,
) -> Result<HashMap<i64, String>, ReadError> {
    let mut names = HashMap::new();
    let mut ins = HloInstructionProto::default();
    let mut reader = scan::Reader::default();
    for raw in instructions_as(computation, reading) {
        let raw = raw.map_err(|p| not_walked(bytes, p))?;
        if let Some(p) = (reading == Reading::InPlace)
            .then(|| reader.read(raw))
            .flatten()
        {
            if ids.contains(&p.id) {
                names.insert(p.id, String::from_utf8_lossy(p.name).into_owned());
            }
            continue;
        }
        ins.reset();
        ins.merge(raw).map_err(|e| not_proto(bytes, e))?;
        if ids.contains(&ins.id) {
            names.insert(ins.id, ins.name.clone());
        }
    }
    Ok(names)
}

/// The module's input/output aliases.
fn aliases(m: &HloModuleProto) -> Vec<Alias> {
    m.input_output_alias
        .iter()
        .flat_map(|a| &a.entries)
        .filter_map(|e| {
            Some(Alias {
                output_index: usize::try_from(*e.output_shape_index.first().unwrap_or(&0)).ok()?,
                parameter: usize::try_from(e.parameter_number).ok()?,
                must_alias: e.kind == MUST_ALIAS,
            })
        })
        .collect()
}

/// The shape and op name [`Tally::add_lazy`] keeps of one of the largest outputs, from an
/// instruction [`scan::Reader::read`] read (so one that decodes).
fn details(raw: &[u8]) -> (Shape, String) {
    let ins = HloInstructionProto::decode(raw).unwrap_or_default();
    let shape = ins.shape.as_ref().and_then(|s| shape(s).ok());
    (
        shape.unwrap_or(Shape::Tuple(Vec::new())),
        ins.op_metadata().map(|m| m.op_name).unwrap_or_default(),
    )
}

/// The results of a computation whose root is `name`: the operands of a root `tuple`, the
/// elements (`name.0`, ...) of another tuple-shaped root, else the root itself.
fn results(
    name: &str,
    opcode: &str,
    shape: &Shape,
    operand_ids: &[i64],
    name_of: impl Fn(i64) -> Option<String>,
) -> Vec<Tensor> {
    match shape {
        Shape::Tuple(parts) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| Tensor {
                number: k,
                name: (opcode == "tuple")
                    .then(|| operand_ids.get(k).and_then(|&id| name_of(id)))
                    .flatten()
                    .unwrap_or_else(|| format!("{name}.{k}")),
                shape: p.clone(),
            })
            .collect(),
        s => vec![Tensor {
            number: 0,
            name: name.to_string(),
            shape: s.clone(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn varint(mut n: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
        out
    }

    fn field(tag: u64, body: &[u8]) -> Vec<u8> {
        [
            varint(tag << 3 | 2),
            varint(body.len() as u64),
            body.to_vec(),
        ]
        .concat()
    }

    fn num(tag: u64, n: u64) -> Vec<u8> {
        [varint(tag << 3), varint(n)].concat()
    }

    fn packed(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|&v| varint(v)).collect()
    }

    const TUPLE_TYPE: u64 = TUPLE as u64;

    /// A shape, plain or not: `k` picks the kind, `p` a dimension.
    fn shape_atom(k: u8, p: u8) -> Vec<u8> {
        let d = u64::from(p);
        let f32s = [num(2, 11), field(3, &packed(&[d, 3]))].concat();
        match k % 13 {
            0 => f32s,
            1 => [num(2, 11), num(3, d), num(3, 7)].concat(),
            2 => [
                num(2, TUPLE_TYPE),
                field(4, &f32s),
                field(4, &[num(2, 2), num(3, d)].concat()),
            ]
            .concat(),
            3 => [
                num(2, TUPLE_TYPE),
                field(4, &[num(2, TUPLE_TYPE), field(4, &f32s)].concat()),
            ]
            .concat(),
            4 => field(3, &packed(&[d])),
            5 => [num(2, 999), num(3, d)].concat(),
            6 => [num(2, 11), num(3, u64::MAX - d)].concat(),
            7 => [num(2, 11), vec![0x1d, p, 0, 0, 0]].concat(),
            8 => [f32s, field(5, &field(1, &packed(&[1, 0])))].concat(),
            9 => [f32s, vec![0x2b, 0x08, p, 0x2c]].concat(),
            10 => Vec::new(),
            11 => [num(2, 16), field(3, &packed(&[d, d]))].concat(),
            // Dimensions as a fixed64 whose bytes would read as fields.
            _ => [
                num(2, 11),
                vec![0x19, 0x81, 0x01, 0x08, p & 0x7f, 0x08, 0x01, 0x08, 0x01],
            ]
            .concat(),
        }
    }

    /// One field of an instruction, plain or not (the first twelve kinds are fields a valid
    /// instruction has, the rest what a reader must not take plainly).
    fn instruction_atom(k: u8, p: u8) -> Vec<u8> {
        match k % 25 {
            0 | 1 => field(1, format!("i{p}").as_bytes()),
            2 => field(1, "é".repeat(usize::from(p % 3) + 1).as_bytes()),
            3 => field(
                2,
                [&b"add"[..], b"tuple", b"dot", b"dynamic-update-slice"][usize::from(p % 4)],
            ),
            4..=6 => field(3, &shape_atom(p % 4, p / 4)),
            7 => field(
                7,
                &[
                    field(1, b"ty"),
                    field(2, format!("jit(f)/op{p}").as_bytes()),
                ]
                .concat(),
            ),
            8 => field(36, &packed(&[u64::from(p % 8), 1])),
            9 => num(36, u64::from(p % 8)),
            10 => [varint(50 << 3 | 1), vec![p; 8]].concat(),
            11 => [varint(51 << 3 | 5), vec![p; 4]].concat(),
            12 => field(3, &shape_atom(p, p)),
            13 => field(1, &[0xff, p]),
            14 => field(2, &[0xc3]),
            15 => field(2, b"parameter"),
            16 => num(9, u64::from(p % 4)),
            17 => field(36, &[0x80]),
            18 => vec![0xa3, 0x03, 0x08, p, 0xa4, 0x03],
            19 => num(1, u64::from(p)),
            20 => num(35, u64::from(p % 8)),
            21 => [vec![0x90, 0x03], vec![0xff; 9], vec![p]].concat(),
            22 => field(9, &[0x28, p & 0x7f]),
            23 => field(35, &[0x28, p & 0x7f]),
            _ => vec![0x07 | (p & 0xf8)],
        }
    }

    prop_compose! {
        /// An instruction: mostly a plain one (a name, an opcode and a shape) and what the
        /// atoms add, its id last (so it is the one that counts).
        fn instruction()(
            plain in 0u8..40,
            p in any::<u8>(),
            atoms in proptest::collection::vec((0u8..12, any::<u8>()), 0..4),
            odd in proptest::collection::vec((12u8..25, any::<u8>()), 1..3),
        ) -> Vec<u8> {
            let mut out = Vec::new();
            if plain > 0 {
                out = [field(1, format!("n{p}").as_bytes()), field(2, b"add"), field(3, &shape_atom(p % 4, p))].concat();
            }
            for (k, p) in atoms {
                out.extend(instruction_atom(k, p));
            }
            if plain < 2 {
                for (k, p) in odd {
                    out.extend(instruction_atom(k, p));
                }
            }
            out
        }
    }

    prop_compose! {
        /// A module: the entry computation (id 1) with parameters numbered in order, then
        /// instructions, each with its own id, and a root among them; maybe a second
        /// computation; now and then a group or a name to find the entry by.
        fn module()(
            comps in proptest::collection::vec((proptest::collection::vec(instruction(), 1..30), any::<prop::sample::Index>()), 1..3),
            params in 0u64..3,
            extra in any::<u8>(),
        ) -> Vec<u8> {
            let mut out = field(1, b"m");
            for (i, (instrs, root)) in comps.iter().enumerate() {
                let mut c = field(1, format!("c{i}").as_bytes());
                let mut id = 100 * i as u64;
                if i == 0 {
                    for n in 0..params {
                        id += 1;
                        let p = [field(1, format!("p{n}").as_bytes()), field(2, b"parameter"), field(3, &shape_atom(0, n as u8)), num(9, n), num(35, id)].concat();
                        c.extend(field(2, &p));
                    }
                }
                let first = id + 1;
                for ins in instrs {
                    id += 1;
                    c.extend(field(2, &[ins.clone(), num(35, id)].concat()));
                }
                c.extend(num(5, i as u64 + 1));
                c.extend(num(6, first + root.index(instrs.len()) as u64));
                if extra % 5 == 0 {
                    c.extend(vec![0x3b, 0x08, 1, 0x3c]);
                }
                if extra % 13 == 1 {
                    // An instruction field that is not length-delimited, then bytes that
                    // would read as an instruction if it were taken as a length.
                    c.extend(num(2, 5));
                    c.extend([0x48, 0x01, 0x48, 0x81, 0x01]);
                }
                out.extend(field(3, &c));
            }
            out.extend(num(6, if extra % 11 == 0 { 0 } else { 1 }));
            if extra % 7 == 0 {
                out.extend(field(2, b"c0"));
            }
            out
        }
    }

    fn same_either_way(bytes: &[u8]) -> bool {
        let in_place = parse_as(bytes, Reading::InPlace);
        let decoded = parse_as(bytes, Reading::Decoded);
        assert_eq!(in_place, decoded);
        in_place.is_ok()
    }

    #[test]
    fn reading_in_place_agrees_with_decoding() {
        use proptest::test_runner::{Config, TestRunner};
        let mut runner = TestRunner::new(Config::with_cases(2000));
        let strategy = (
            module(),
            any::<prop::sample::Index>(),
            any::<prop::sample::Index>(),
            any::<u8>(),
        );
        // How many generated modules read (the rest are refused, the same way either way).
        let read = std::sync::atomic::AtomicUsize::new(0);
        let outcome = runner.run(&strategy, |(m, cut, at, byte)| {
            if same_either_way(&m) {
                read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            same_either_way(&m[..cut.index(m.len() + 1)]);
            let mut altered = m.clone();
            altered[at.index(m.len())] = byte;
            same_either_way(&altered);
            Ok(())
        });
        if let Err(e) = outcome {
            panic!("{e}");
        }
        // Most generated modules read, so the comparison covers summaries, not only refusals.
        let read = read.into_inner();
        assert!(read >= 600, "only {read} of 2000 generated modules read");
    }

    #[test]
    fn a_root_before_the_last_instruction_is_found_by_the_fallback() {
        let ins = |name: &[u8], opcode: &[u8], id: u64| {
            let shape = [num(2, 11), field(3, &packed(&[4]))].concat();
            field(
                2,
                &[
                    field(1, name),
                    field(2, opcode),
                    field(3, &shape),
                    num(35, id),
                ]
                .concat(),
            )
        };
        let module = |root: u64| {
            let mut c = field(1, b"main");
            c.extend(ins(b"p", b"parameter", 1));
            c.extend(ins(b"neg", b"negate", 2));
            c.extend(ins(b"dead", b"negate", 3));
            c.extend([num(5, 1), num(6, root)].concat());
            [field(1, b"m"), field(3, &c), num(6, 1)].concat()
        };
        let last = module(3);
        assert_eq!(
            summarise_in_one_pass(&last).unwrap().results[0].name,
            "dead"
        );
        let before = module(2);
        assert_eq!(summarise_in_one_pass(&before), None);
        let m = parse_as(&before, Reading::InPlace).unwrap();
        assert_eq!(m.results[0].name, "neg");
        assert_eq!(Ok(m), parse_as(&before, Reading::Decoded));
    }

    #[test]
    fn the_zoo_reads_the_same_either_way() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.to_string_lossy().ends_with(".pb") {
                let bytes = std::fs::read(&path).unwrap();
                let m = parse_as(&bytes, Reading::InPlace);
                assert!(m.is_ok(), "{}: {m:?}", path.display());
                assert_eq!(m, parse_as(&bytes, Reading::Decoded), "{}", path.display());
                // Read in one pass, not by the fallback.
                let one_pass = summarise_in_one_pass(&bytes);
                assert_eq!(one_pass.map(Ok), Some(m), "{}", path.display());
                n += 1;
            }
        }
        assert!(n >= 4, "only {n} models in {}", dir.display());
    }
}
