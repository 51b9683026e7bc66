//! The summary of an HLO module that both readers produce, and its two renderings (the text and
//! the `--json` of `nxcc hlo-info`, whose keys are stable).
//!
//! The renderings take any input: names and shapes of any length (padding is done here, not by
//! the formatter, whose widths are bounded), and sizes that overflow 64 bits, shown as such
//! ([`OVERFLOWS`] in text, `null` in JSON) rather than as a saturated figure.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::shape::Shape;

/// How many of the largest tensors the summary keeps.
pub const LARGEST: usize = 10;

/// A named value: an entry parameter, a result, or an instruction's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    /// The parameter number, or the result's (or list's) index.
    pub number: usize,
    /// The instruction's name; a result's: the root's, a root tuple's operand's, or `<root>.<k>`
    /// when the root is no `tuple` of named operands.
    pub name: String,
    /// Its shape.
    pub shape: Shape,
}

impl Tensor {
    /// Bytes the value occupies ([`Shape::bytes`]: saturating, for estimates).
    pub fn bytes(&self) -> u64 {
        self.shape.bytes()
    }

    /// Bytes the value occupies, `None` when that overflows 64 bits ([`Shape::checked_bytes`]).
    pub(crate) fn checked_bytes(&self) -> Option<u64> {
        self.shape.checked_bytes()
    }

    /// `{number, name, dtype, shape, bytes}` (`shape`: the dimensions; a tuple's: its parts';
    /// `bytes`: `null` when the size overflows 64 bits).
    pub fn to_json(&self) -> Value {
        json!({
            "number": self.number,
            "name": self.name,
            "dtype": self.shape.dtype_name(),
            "shape": shape_json(&self.shape),
            "bytes": self.checked_bytes(),
        })
    }
}

fn shape_json(s: &Shape) -> Value {
    match s {
        Shape::Array { dims, .. } => json!(dims),
        Shape::Tuple(parts) => Value::Array(
            parts
                .iter()
                .map(|p| json!({"dtype": p.dtype_name(), "shape": shape_json(p)}))
                .collect(),
        ),
    }
}

/// One of the largest instruction outputs, with the framework op it came from (the instruction's
/// `metadata` `op_name`; empty when it has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Largest {
    /// The instruction's output.
    pub tensor: Tensor,
    /// The framework op it came from (the instruction's metadata `op_name`; empty when it has
    /// none).
    pub op_name: String,
}

/// One computation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Computation {
    /// The computation's name.
    pub name: String,
    /// How many instructions it holds.
    pub instructions: usize,
    /// Whether it is the module's entry computation.
    pub is_entry: bool,
}

/// One `input_output_alias` entry: result `output_index` shares the buffer of a parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The first index of the output shape index (`{}` → 0).
    pub output_index: usize,
    /// The entry parameter number whose buffer the output shares.
    pub parameter: usize,
    /// `true`: the alias is required (`must-alias`); `false`: the compiler may alias.
    pub must_alias: bool,
}

/// What nxcc knows of a module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Module {
    /// `proto` or `text`.
    pub format: &'static str,
    /// The module's name.
    pub name: String,
    /// The module id (HLO text carries none: 0).
    pub id: i64,
    /// The entry computation's name.
    pub entry: String,
    /// The entry computation's parameters, by parameter number.
    pub parameters: Vec<Tensor>,
    /// The entry computation's results: the root's value, or the elements of a root tuple.
    pub results: Vec<Tensor>,
    /// In the module's order.
    pub computations: Vec<Computation>,
    /// Every instruction of every computation.
    pub instruction_count: usize,
    /// Instructions per opcode, over every computation.
    pub opcodes: BTreeMap<String, usize>,
    /// The [`LARGEST`] largest instruction outputs, largest first (ties: by name).
    pub largest: Vec<Largest>,
    /// The module's `input_output_alias` entries (results sharing a parameter's buffer), in order.
    pub aliases: Vec<Alias>,
}

impl Module {
    /// Bytes of every entry parameter, summed (saturating).
    pub fn parameter_bytes(&self) -> u64 {
        self.parameters
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.bytes()))
    }

    /// Bytes of every entry result, summed (saturating).
    pub fn result_bytes(&self) -> u64 {
        self.results
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.bytes()))
    }

    /// Bytes of every entry parameter, summed; `None` when that overflows 64 bits.
    pub(crate) fn checked_parameter_bytes(&self) -> Option<u64> {
        checked_sum(&self.parameters)
    }

    /// Bytes of every entry result, summed; `None` when that overflows 64 bits.
    pub(crate) fn checked_result_bytes(&self) -> Option<u64> {
        checked_sum(&self.results)
    }

    /// The first parameter, result or largest tensor whose size overflows 64 bits, if any.
    pub fn overflowing(&self) -> Option<&Tensor> {
        self.parameters
            .iter()
            .chain(&self.results)
            .chain(self.largest.iter().map(|l| &l.tensor))
            .find(|t| t.checked_bytes().is_none())
    }

    /// One line: `jit_layer: 3 parameters (2.6 KiB) → 1 result (1.0 KiB), 10 instructions in 1
    /// computation`.
    pub fn one_line(&self) -> String {
        format!(
            "{}: {} ({}) → {} ({}), {} in {}",
            self.name,
            count(self.parameters.len(), "parameter"),
            human_size(self.checked_parameter_bytes()),
            count(self.results.len(), "result"),
            human_size(self.checked_result_bytes()),
            count(self.instruction_count, "instruction"),
            count(self.computations.len(), "computation"),
        )
    }

    /// The `hlo-info --json` object; `file_size` is the model file's size in bytes.
    pub fn to_json(&self, file_size: u64) -> Value {
        json!({
            "format": self.format,
            "module": self.name,
            "id": self.id,
            "file_size": file_size,
            "entry_computation": self.entry,
            "parameters": self.parameters.iter().map(Tensor::to_json).collect::<Vec<_>>(),
            "results": self.results.iter().map(Tensor::to_json).collect::<Vec<_>>(),
            "parameter_bytes": self.checked_parameter_bytes(),
            "result_bytes": self.checked_result_bytes(),
            "instruction_count": self.instruction_count,
            "opcodes": self.opcodes,
            "computations": self.computations.iter().map(|c| json!({
                "name": c.name,
                "instructions": c.instructions,
                "entry": c.is_entry,
            })).collect::<Vec<_>>(),
            "largest_tensors": self.largest.iter().map(|l| json!({
                "name": l.tensor.name,
                "dtype": l.tensor.shape.dtype_name(),
                "shape": shape_json(&l.tensor.shape),
                "bytes": l.tensor.checked_bytes(),
                "op_name": l.op_name,
            })).collect::<Vec<_>>(),
            "aliases": self.aliases.iter().map(|a| json!({
                "output_index": a.output_index,
                "parameter": a.parameter,
                "must_alias": a.must_alias,
            })).collect::<Vec<_>>(),
        })
    }

    /// The `hlo-info` text.
    pub fn to_text(&self, file_size: u64) -> String {
        let mut o = String::new();
        o.push_str(&format!(
            "module       {} (HLO {}, {} bytes{})\n",
            self.name,
            self.format,
            file_size,
            if self.id != 0 {
                format!(", id {}", self.id)
            } else {
                String::new()
            }
        ));
        o.push_str(&format!("entry        {}\n", self.entry));
        tensors_text(
            &mut o,
            "parameters",
            &self.parameters,
            self.checked_parameter_bytes(),
        );
        tensors_text(
            &mut o,
            "results",
            &self.results,
            self.checked_result_bytes(),
        );
        if !self.aliases.is_empty() {
            o.push_str("\naliases:\n");
            for a in &self.aliases {
                o.push_str(&format!(
                    "  result {} ← parameter {} ({})\n",
                    a.output_index,
                    a.parameter,
                    if a.must_alias { "must" } else { "may" }
                ));
            }
        }
        self.instructions_text(&mut o);
        self.largest_text(&mut o);
        o
    }

    /// The instructions by computation, and the opcode histogram (most frequent first).
    fn instructions_text(&self, o: &mut String) {
        o.push_str(&format!(
            "\ninstructions {} in {}:\n",
            self.instruction_count,
            count(self.computations.len(), "computation")
        ));
        for c in &self.computations {
            o.push_str(&format!(
                "  {}{}  {}\n",
                if c.is_entry { "ENTRY " } else { "" },
                c.name,
                c.instructions
            ));
        }
        let mut ops: Vec<(&String, &usize)> = self.opcodes.iter().collect();
        ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        o.push_str("\nopcodes:\n");
        for (op, n) in ops {
            o.push_str(&format!("  {n:>6}  {op}\n"));
        }
    }

    /// The largest tensors, with the framework op each came from.
    fn largest_text(&self, o: &mut String) {
        o.push_str("\nlargest tensors:\n");
        let shapes: Vec<String> = self
            .largest
            .iter()
            .map(|l| l.tensor.shape.to_string())
            .collect();
        let width = shapes.iter().map(|s| width_of(s)).max().unwrap_or(0);
        let names = self
            .largest
            .iter()
            .map(|l| width_of(&l.tensor.name))
            .max()
            .unwrap_or(0);
        for (l, shape) in self.largest.iter().zip(&shapes) {
            let t = &l.tensor;
            let line = format!(
                "  {}  {}  {}  {}",
                size_cell(t.checked_bytes()),
                pad(shape, width),
                pad(&t.name, names),
                l.op_name
            );
            o.push_str(line.trim_end());
            o.push('\n');
        }
    }
}

/// A table of tensors (parameters or results) under its title, with their count and total size.
fn tensors_text(o: &mut String, title: &str, ts: &[Tensor], total: Option<u64>) {
    o.push_str(&format!(
        "\n{title} ({}, {}):\n",
        ts.len(),
        size_text(total)
    ));
    let width = ts.iter().map(|t| width_of(&t.name)).max().unwrap_or(0);
    for t in ts {
        o.push_str(&format!(
            "  {:>3}  {}  {}  {}\n",
            t.number,
            pad(&t.name, width),
            pad(&t.shape.to_string(), 24),
            size_cell(t.checked_bytes())
        ));
    }
}

fn checked_sum(ts: &[Tensor]) -> Option<u64> {
    ts.iter()
        .try_fold(0u64, |a, t| a.checked_add(t.checked_bytes()?))
}

/// What a size that overflows 64 bits is shown as.
pub const OVERFLOWS: &str = "size overflows 64 bits";

/// `1234 bytes`, or [`OVERFLOWS`].
fn size_text(b: Option<u64>) -> String {
    b.map_or_else(|| OVERFLOWS.to_string(), |b| format!("{b} bytes"))
}

/// A size right-aligned in a column (`        1234 bytes`), or [`OVERFLOWS`].
fn size_cell(b: Option<u64>) -> String {
    b.map_or_else(|| OVERFLOWS.to_string(), |b| format!("{b:>12} bytes"))
}

/// [`human`], or [`OVERFLOWS`].
fn human_size(b: Option<u64>) -> String {
    b.map_or_else(|| OVERFLOWS.to_string(), human)
}

/// The width of a text in a column: its characters.
fn width_of(s: &str) -> usize {
    s.chars().count()
}

/// `s` padded with spaces to `width` characters. The standard formatter's width is bounded
/// (a name of 70,000 characters panics it), this is not.
fn pad(s: &str, width: usize) -> String {
    let mut o = String::with_capacity(s.len() + width);
    o.push_str(s);
    o.extend(std::iter::repeat_n(' ', width.saturating_sub(width_of(s))));
    o
}

fn count(n: usize, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// Bytes in B, KiB, MiB, GiB, TiB, PiB or EiB with one decimal.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// Counts instructions and opcodes, and keeps the largest outputs, as a reader walks them.
#[derive(Debug, Default)]
pub struct Tally {
    /// Instructions seen so far.
    pub instructions: usize,
    /// Instructions seen so far per opcode.
    pub opcodes: BTreeMap<String, usize>,
    /// Largest first, at most [`LARGEST`].
    pub largest: Vec<Largest>,
    /// The bytes of the last of [`Tally::largest`] once it holds [`LARGEST`].
    floor: Option<u64>,
}

impl Tally {
    /// One instruction.
    pub fn add(&mut self, name: &str, opcode: &str, shape: &Shape) {
        self.add_lazy(name, opcode, shape.bytes(), || {
            (shape.clone(), String::new())
        });
    }

    /// One instruction whose output is `bytes` large; its shape and op name are made only when
    /// it is among the largest.
    pub(crate) fn add_lazy(
        &mut self,
        name: &str,
        opcode: &str,
        bytes: u64,
        details: impl FnOnce() -> (Shape, String),
    ) {
        self.count_opcode(opcode, 1);
        self.add_output(name.as_bytes(), bytes, details);
    }

    /// `n` more instructions of `opcode` (a reader that counts opcodes on its own adds them up
    /// here).
    pub(crate) fn count_opcode(&mut self, opcode: &str, n: usize) {
        match self.opcodes.get_mut(opcode) {
            Some(count) => *count += n,
            None => {
                self.opcodes.insert(opcode.to_string(), n);
            }
        }
    }

    /// One instruction whose opcode is counted apart ([`Tally::count_opcode`]): its name (UTF-8)
    /// and output size; its shape and op name are made only when it is among the largest.
    pub(crate) fn add_output(
        &mut self,
        name: &[u8],
        bytes: u64,
        details: impl FnOnce() -> (Shape, String),
    ) {
        self.instructions += 1;
        // Largest first; among equal sizes, the first name first.
        match self.floor {
            Some(floor) if bytes < floor => return,
            Some(floor)
                if bytes == floor
                    && self.largest.last().is_some_and(|l| {
                        compare(name, l.tensor.name.as_bytes()) != std::cmp::Ordering::Less
                    }) =>
            {
                return
            }
            _ => {}
        }
        let beats = |l: &Largest| {
            (bytes, std::cmp::Reverse(name))
                > (
                    l.tensor.bytes(),
                    std::cmp::Reverse(l.tensor.name.as_bytes()),
                )
        };
        let at = self
            .largest
            .iter()
            .position(beats)
            .unwrap_or(self.largest.len());
        if at >= LARGEST {
            return;
        }
        let (shape, op_name) = details();
        self.largest.insert(
            at,
            Largest {
                tensor: Tensor {
                    number: 0,
                    name: String::from_utf8_lossy(name).into_owned(),
                    shape,
                },
                op_name,
            },
        );
        self.largest.truncate(LARGEST);
        for (i, l) in self.largest.iter_mut().enumerate() {
            l.tensor.number = i;
        }
        if self.largest.len() == LARGEST {
            self.floor = self.largest.last().map(|l| l.tensor.bytes());
        }
    }
}

/// `a` against `b` as byte strings compare, inline: instruction names are short and most
/// differ early, so a loop beats a library call per instruction.
#[inline(always)]
fn compare(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hlo::Dtype;

    #[test]
    fn the_tally_keeps_the_largest_in_order() {
        let mut t = Tally::default();
        for i in 0..30u64 {
            let s = Shape::Array {
                dtype: Dtype::F32,
                dims: vec![i % 13],
            };
            t.add(
                &format!("i{i:02}"),
                if i % 2 == 0 { "add" } else { "dot" },
                &s,
            );
        }
        assert_eq!(t.instructions, 30);
        assert_eq!(t.opcodes["add"], 15);
        let names: Vec<&str> = t.largest.iter().map(|x| x.tensor.name.as_str()).collect();
        // 12 elements: i12 and i25; 11: i11, i24; 10: i10, i23; ...
        assert_eq!(
            names,
            ["i12", "i25", "i11", "i24", "i10", "i23", "i09", "i22", "i08", "i21"]
        );
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(12), "12 B");
    }
}
