//! The binary `HloModuleProto`: message definitions for the fields nxcc reads (field numbers from
//! XLA's public schema, `xla/service/hlo.proto` and `xla/xla_data.proto`; every other field is
//! skipped), decoded with `prost`, and turned into a [`Module`].
//!
//! A module may hold hundreds of thousands of instructions, so they are not decoded all at once:
//! the module and its computations are decoded without their instructions; then each
//! computation's encoded instructions are found in place ([`super::wire::fields`], no copy) and
//! each is decoded in turn into one reused message (its buffers kept), counted and dropped; an
//! instruction's `metadata` is kept encoded and decoded on demand
//! ([`HloInstructionProto::op_metadata`]). Reading is one pass over the bytes, without an
//! allocation per instruction.
//!
//! A module a frontend would refuse is refused here: bytes that do not decode (the error names
//! the field and byte offset, from [`super::wire`]); no computation with the entry computation's
//! id (or, when the id is 0, its name); an entry computation whose root id is not one of its
//! instructions, or whose parameter numbers are not 0..n each once.

use std::collections::HashMap;

use prost::Message;

use super::shape::{Dtype, Shape, TUPLE};
use super::summary::{Alias, Computation, Module, Tally, Tensor};
use super::wire::{Kind, Schema};
use super::ReadError;

/// `xla.HloModuleProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloModuleProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub entry_computation_name: String,
    #[prost(message, repeated, tag = "3")]
    pub computations: Vec<HloComputationProto>,
    #[prost(message, optional, tag = "4")]
    pub host_program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "5")]
    pub id: i64,
    #[prost(int64, tag = "6")]
    pub entry_computation_id: i64,
    #[prost(message, optional, tag = "8")]
    pub input_output_alias: Option<HloInputOutputAliasProto>,
}

/// `xla.HloComputationProto` without its instructions (field 2, `repeated HloInstructionProto`,
/// read one at a time: [`instructions`]).
#[derive(Clone, PartialEq, Message)]
pub struct HloComputationProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "4")]
    pub program_shape: Option<ProgramShapeProto>,
    #[prost(int64, tag = "5")]
    pub id: i64,
    #[prost(int64, tag = "6")]
    pub root_id: i64,
}

/// `xla.HloInstructionProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloInstructionProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub opcode: String,
    #[prost(message, optional, tag = "3")]
    pub shape: Option<ShapeProto>,
    /// An `xla.OpMetadata`, encoded ([`HloInstructionProto::op_metadata`] decodes it).
    #[prost(bytes = "vec", tag = "7")]
    pub metadata: Vec<u8>,
    #[prost(int64, tag = "9")]
    pub parameter_number: i64,
    #[prost(int64, tag = "35")]
    pub id: i64,
    #[prost(int64, repeated, tag = "36")]
    pub operand_ids: Vec<i64>,
}

impl HloInstructionProto {
    /// The instruction's metadata, decoded (`None`: none, or not an `OpMetadata`).
    pub fn op_metadata(&self) -> Option<OpMetadata> {
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
    #[prost(int64, repeated, tag = "3")]
    pub dimensions: Vec<i64>,
    #[prost(message, repeated, tag = "4")]
    pub tuple_shapes: Vec<ShapeProto>,
}

/// `xla.ProgramShapeProto`.
#[derive(Clone, PartialEq, Message)]
pub struct ProgramShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub parameters: Vec<ShapeProto>,
    #[prost(message, optional, tag = "2")]
    pub result: Option<ShapeProto>,
    #[prost(string, repeated, tag = "3")]
    pub parameter_names: Vec<String>,
}

/// `xla.OpMetadata` (the framework's op type and name, and where in the program it came from).
#[derive(Clone, PartialEq, Message)]
pub struct OpMetadata {
    #[prost(string, tag = "1")]
    pub op_type: String,
    #[prost(string, tag = "2")]
    pub op_name: String,
    #[prost(string, tag = "3")]
    pub source_file: String,
    #[prost(int32, tag = "4")]
    pub source_line: i32,
}

/// `xla.HloInputOutputAliasProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloInputOutputAliasProto {
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<AliasEntryProto>,
}

/// `xla.HloInputOutputAliasProto.AliasEntryProto`.
#[derive(Clone, PartialEq, Message)]
pub struct AliasEntryProto {
    #[prost(int64, repeated, tag = "1")]
    pub output_shape_index: Vec<i64>,
    #[prost(int64, tag = "2")]
    pub parameter_number: i64,
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
/// The wire schema of [`OpMetadata`].
pub static METADATA: Schema = Schema {
    name: "OpMetadata",
    fields: &[
        (1, "op_type", Kind::Str),
        (2, "op_name", Kind::Str),
        (3, "source_file", Kind::Str),
        (4, "source_line", Kind::Int),
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

/// Decode the module (without its instructions), or say where it fails.
pub fn decode(bytes: &[u8]) -> Result<HloModuleProto, ReadError> {
    HloModuleProto::decode(bytes).map_err(|e| not_proto(bytes, e))
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
/// length-delimited).
pub fn instructions(
    computation: &[u8],
) -> impl Iterator<Item = Result<&[u8], super::wire::Problem>> {
    super::wire::fields(computation).filter_map(|f| match f {
        Ok((2, 2, value)) => Some(Ok(value)),
        Ok((2, wire, _)) => Some(Err(super::wire::Problem {
            at: 0,
            field: Some(2),
            path: "instructions".into(),
            what: format!("has wire type {wire}, not 2 (a message)"),
        })),
        Ok(_) => None,
        Err(p) => Some(Err(p)),
    })
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

/// Read a binary `HloModuleProto` into its summary.
pub fn parse(bytes: &[u8]) -> Result<Module, ReadError> {
    let m = decode(bytes)?;
    summarise(&m, bytes)
}

/// The summary of a decoded module; `bytes` is what it was decoded from (to say where an
/// instruction that does not decode is).
pub fn summarise(m: &HloModuleProto, bytes: &[u8]) -> Result<Module, ReadError> {
    let invalid = ReadError::Invalid;
    if m.computations.is_empty() {
        return Err(invalid(
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
    let entry_index = m
        .computations
        .iter()
        .position(|c| c.id == m.entry_computation_id)
        .or_else(by_name)
        .ok_or_else(|| {
            invalid(format!(
                "no entry computation: no computation has the entry computation id {}{}",
                m.entry_computation_id,
                if m.entry_computation_name.is_empty() {
                    String::new()
                } else {
                    format!(" or the name {:?}", m.entry_computation_name)
                }
            ))
        })?;
    let mut tally = Tally::default();
    let encoded = computation_bytes(bytes).map_err(|p| not_walked(bytes, p))?;
    let mut computations = Vec::with_capacity(m.computations.len());
    let mut params: Vec<(i64, Tensor)> = Vec::new();
    // The entry computation's root: name, opcode, shape, operand ids.
    let mut root: Option<(String, String, Shape, Vec<i64>)> = None;
    let mut ins = HloInstructionProto::default();
    for (ci, (c, encoded)) in m.computations.iter().zip(&encoded).enumerate() {
        let is_entry = ci == entry_index;
        let mut count = 0usize;
        for raw in instructions(encoded) {
            ins.reset();
            ins.merge(raw.map_err(|p| not_walked(bytes, p))?)
                .map_err(|e| not_proto(bytes, e))?;
            count += 1;
            let bad =
                |e: String| invalid(format!("instruction {:?} of {:?}: {e}", ins.name, c.name));
            let sp = ins
                .shape
                .as_ref()
                .filter(|s| s.element_type != 0)
                .ok_or_else(|| bad("it has no shape".into()))?;
            let size = shape_bytes(sp, 0).map_err(bad)?;
            tally.add_lazy(&ins.name, &ins.opcode, size, || {
                (
                    shape(sp).unwrap_or(Shape::Tuple(Vec::new())),
                    ins.op_metadata().map(|m| m.op_name).unwrap_or_default(),
                )
            });
            if !is_entry {
                continue;
            }
            if ins.opcode == "parameter" {
                params.push((
                    ins.parameter_number,
                    Tensor {
                        number: 0,
                        name: ins.name.clone(),
                        shape: shape(sp).map_err(bad)?,
                    },
                ));
            }
            if ins.id == c.root_id {
                root = Some((
                    ins.name.clone(),
                    ins.opcode.clone(),
                    shape(sp).map_err(bad)?,
                    ins.operand_ids.clone(),
                ));
            }
        }
        computations.push(Computation {
            name: c.name.clone(),
            instructions: count,
            is_entry,
        });
    }
    let entry = &m.computations[entry_index];
    params.sort_by_key(|(n, _)| *n);
    let params_len = params.len();
    for (k, (n, t)) in params.iter_mut().enumerate() {
        if *n != k as i64 {
            return Err(invalid(format!(
                "the entry computation's parameter numbers are not 0 to {} once each: parameter {:?} has number {n}",
                params_len.saturating_sub(1),
                t.name
            )));
        }
        t.number = k;
    }
    let Some((root_name, root_opcode, root_shape, operands)) = root else {
        return Err(invalid(format!(
            "the entry computation {:?} has no root instruction (root id {} is none of its instructions)",
            entry.name, entry.root_id
        )));
    };
    // A root tuple's results are named after its operands: one more pass over the entry
    // computation for their names.
    let mut operand_names: HashMap<i64, String> = HashMap::new();
    if root_opcode == "tuple" && matches!(root_shape, Shape::Tuple(_)) {
        for raw in instructions(encoded[entry_index]) {
            ins.reset();
            ins.merge(raw.map_err(|p| not_walked(bytes, p))?)
                .map_err(|e| not_proto(bytes, e))?;
            if operands.contains(&ins.id) {
                operand_names.insert(ins.id, ins.name.clone());
            }
        }
    }
    let results = results(&root_name, &root_opcode, &root_shape, &operands, |id| {
        operand_names.get(&id).cloned()
    });
    let aliases = m
        .input_output_alias
        .iter()
        .flat_map(|a| &a.entries)
        .filter_map(|e| {
            Some(Alias {
                output_index: usize::try_from(*e.output_shape_index.first().unwrap_or(&0)).ok()?,
                parameter: usize::try_from(e.parameter_number).ok()?,
                must_alias: e.kind == MUST_ALIAS,
            })
        })
        .collect();
    Ok(Module {
        format: "proto",
        name: m.name.clone(),
        id: m.id,
        entry: entry.name.clone(),
        parameters: params.into_iter().map(|(_, t)| t).collect(),
        results,
        computations,
        instruction_count: tally.instructions,
        opcodes: tally.opcodes,
        largest: tally.largest,
        aliases,
    })
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
