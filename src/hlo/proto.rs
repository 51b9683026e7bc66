//! The binary `HloModuleProto`: message definitions for the fields nxcc reads (field numbers from
//! XLA's public schema, `xla/service/hlo.proto` and `xla/xla_data.proto`; every other field is
//! skipped), decoded with `prost`, and turned into a [`Module`].
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

/// `xla.HloComputationProto`.
#[derive(Clone, PartialEq, Message)]
pub struct HloComputationProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub instructions: Vec<HloInstructionProto>,
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
    #[prost(message, optional, tag = "7")]
    pub metadata: Option<OpMetadata>,
    #[prost(int64, tag = "9")]
    pub parameter_number: i64,
    #[prost(int64, tag = "35")]
    pub id: i64,
    #[prost(int64, repeated, tag = "36")]
    pub operand_ids: Vec<i64>,
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
static METADATA: Schema = Schema {
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
        (7, "metadata", Kind::Msg(&METADATA)),
        (9, "parameter_number", Kind::Int),
        (35, "id", Kind::Int),
        (36, "operand_ids", Kind::Ints),
    ],
};
static COMPUTATION: Schema = Schema {
    name: "HloComputationProto",
    fields: &[
        (1, "name", Kind::Str),
        (2, "instructions", Kind::Msg(&INSTRUCTION)),
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

/// Decode the message, or say where it fails.
pub fn decode(bytes: &[u8]) -> Result<HloModuleProto, ReadError> {
    HloModuleProto::decode(bytes).map_err(|e| {
        ReadError::NotProto(match super::wire::locate(bytes, &MODULE) {
            Some(p) => p.to_string(),
            None => e.to_string(),
        })
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

/// Read a binary `HloModuleProto` into its summary.
pub fn parse(bytes: &[u8]) -> Result<Module, ReadError> {
    let m = decode(bytes)?;
    summarise(&m)
}

/// The summary of a decoded module.
pub fn summarise(m: &HloModuleProto) -> Result<Module, ReadError> {
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
    let mut computations = Vec::with_capacity(m.computations.len());
    for (ci, c) in m.computations.iter().enumerate() {
        for i in &c.instructions {
            let s = match &i.shape {
                Some(s) => shape(s).map_err(|e| {
                    invalid(format!("instruction {:?} of {:?}: {e}", i.name, c.name))
                })?,
                None => Shape::Tuple(Vec::new()),
            };
            tally.add(&i.name, &i.opcode, &s);
        }
        computations.push(Computation {
            name: c.name.clone(),
            instructions: c.instructions.len(),
            is_entry: ci == entry_index,
        });
    }
    let entry = &m.computations[entry_index];
    let shape_of = |i: &HloInstructionProto| -> Shape {
        i.shape
            .as_ref()
            .and_then(|s| shape(s).ok())
            .unwrap_or(Shape::Tuple(Vec::new()))
    };
    let mut params: Vec<(i64, Tensor)> = entry
        .instructions
        .iter()
        .filter(|i| i.opcode == "parameter")
        .map(|i| {
            (
                i.parameter_number,
                Tensor {
                    number: 0,
                    name: i.name.clone(),
                    shape: shape_of(i),
                },
            )
        })
        .collect();
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
    let by_id: HashMap<i64, &HloInstructionProto> =
        entry.instructions.iter().map(|i| (i.id, i)).collect();
    let root = by_id.get(&entry.root_id).ok_or_else(|| {
        invalid(format!(
            "the entry computation {:?} has no root instruction (root id {} is none of its instructions)",
            entry.name, entry.root_id
        ))
    })?;
    let results = results(root, &shape_of(root), |id| {
        by_id.get(&id).map(|i| i.name.clone())
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

/// The results of a computation whose root is `root`: the operands of a root `tuple`, the
/// elements (`root.0`, ...) of another tuple-shaped root, else the root itself.
fn results(
    root: &HloInstructionProto,
    shape: &Shape,
    name_of: impl Fn(i64) -> Option<String>,
) -> Vec<Tensor> {
    match shape {
        Shape::Tuple(parts) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| Tensor {
                number: k,
                name: (root.opcode == "tuple")
                    .then(|| root.operand_ids.get(k).and_then(|&id| name_of(id)))
                    .flatten()
                    .unwrap_or_else(|| format!("{}.{k}", root.name)),
                shape: p.clone(),
            })
            .collect(),
        s => vec![Tensor {
            number: 0,
            name: root.name.clone(),
            shape: s.clone(),
        }],
    }
}
