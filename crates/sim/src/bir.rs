//! The simulated BIR (`sgNN/bir.json`): what the simulated frontend writes and the simulated
//! `walrus_driver`, `nn_executor` and `watchpoint_insert` read. It is not the real compiler's BIR;
//! it carries what the simulated backend needs to produce deterministic, size-scaled outputs:
//! the subgraph's inputs, outputs and aliases, and a list of instructions, each placed on one
//! engine (`PE`, `Pool`, `Activation`, `SP`, `DVE`).

use serde_json::{json, Map, Value};

use crate::jobs::walrus_driver::ENGINES;

/// The `format` field of a simulated BIR file.
pub const FORMAT: &str = "nxcc-sim-bir/1";
/// Model bytes per instruction: the instruction count (and every backend output size) scales
/// with the model.
pub const BYTES_PER_INSTRUCTION: usize = 256;
/// Instructions every subgraph has at least.
pub const MIN_INSTRUCTIONS: usize = 4;

const OPS: [&[&str]; 5] = [
    &["MatMult", "Transpose", "LoadStationary"],
    &["TensorReduce", "Pool", "MaxPool"],
    &["Activate", "Exp", "Gelu"],
    &["Iota", "Memset", "Shuffle"],
    &["TensorTensor", "TensorScalar", "TensorCopy"],
];

/// A tensor of a subgraph's interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// The tensor's name: the HLO parameter's or result's, or `<sg>_output0` for the value one
    /// subgraph passes to the next.
    pub name: String,
    /// The element type as HLO text spells it (`f32`, `bf16`).
    pub dtype: String,
    /// The dimension sizes (empty for a scalar).
    pub shape: Vec<u64>,
    /// The tensor's size, bytes.
    pub bytes: u64,
}

impl Port {
    /// `{name, dtype, shape, bytes}`, as the BIR file holds it.
    pub fn to_json(&self) -> Value {
        json!({"name": self.name, "dtype": self.dtype, "shape": self.shape, "bytes": self.bytes})
    }
}

/// An input/output alias of a subgraph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AliasEntry {
    /// The aliased input port's name.
    pub input_name: String,
    /// The output port's name that shares its buffer.
    pub output_name: String,
    /// `true`: the alias is required; `false`: it may be made.
    pub must_alias: bool,
}

impl AliasEntry {
    /// `{input_name, output_name, must_alias}`, as the BIR file holds it.
    pub fn to_json(&self) -> Value {
        json!({"input_name": self.input_name, "output_name": self.output_name, "must_alias": self.must_alias})
    }
}

/// What the frontend knows of one subgraph.
#[derive(Debug, Clone)]
pub struct SubgraphSource<'a> {
    /// The subgraph's name (`sg00`).
    pub sg: String,
    /// Its 0-based position among the model's subgraphs.
    pub index: usize,
    /// How many subgraphs the model was split into.
    pub count: usize,
    /// The model bytes this subgraph stands for.
    pub bytes: &'a [u8],
    /// The blake3 of the whole model.
    pub model_digest: blake3::Hash,
    /// The digest of `penguin.py` (so target and options reach every backend output).
    pub penguin_digest: blake3::Hash,
    /// The tensors the subgraph reads.
    pub inputs: Vec<Port>,
    /// The tensors it produces.
    pub outputs: Vec<Port>,
    /// Its input/output aliases.
    pub aliases: Vec<AliasEntry>,
}

/// The instruction count for a subgraph of `len` model bytes.
pub fn instruction_count(len: usize) -> usize {
    MIN_INSTRUCTIONS + len / BYTES_PER_INSTRUCTION
}

/// Build a subgraph's BIR document (deterministic in its source).
pub fn generate(src: &SubgraphSource) -> Value {
    let n = instruction_count(src.bytes.len());
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"nxcc-sim bir\0");
    hasher.update(src.model_digest.as_bytes());
    hasher.update(src.penguin_digest.as_bytes());
    hasher.update(&(src.index as u64).to_le_bytes());
    hasher.update(src.bytes);
    let mut stream = vec![0u8; n * 8];
    hasher.finalize_xof().fill(&mut stream);
    let instructions: Vec<Value> = stream
        .chunks_exact(8)
        .enumerate()
        .map(|(i, b)| {
            // The first instruction is always a PE one: every subgraph uses PE.
            let engine = if i == 0 { 0 } else { b[0] as usize % ENGINES.len() };
            let ops = OPS[engine];
            let op = ops[b[1] as usize % ops.len()];
            json!({
                "id": i,
                "engine": ENGINES[engine],
                "op": op,
                "arg": format!("{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}", b[2], b[3], b[4], b[5], b[6], b[7]),
            })
        })
        .collect();
    json!({
        "format": FORMAT,
        "note": crate::NOT_FOR_HARDWARE,
        "sg": src.sg,
        "subgraph_index": src.index,
        "subgraph_count": src.count,
        "model_blake3": src.model_digest.to_hex().to_string(),
        "penguin_blake3": src.penguin_digest.to_hex().to_string(),
        "inputs": src.inputs.iter().map(Port::to_json).collect::<Vec<_>>(),
        "outputs": src.outputs.iter().map(Port::to_json).collect::<Vec<_>>(),
        "aliases": src.aliases.iter().map(AliasEntry::to_json).collect::<Vec<_>>(),
        "instructions": instructions,
    })
}

/// Serialise a BIR document as its file bytes (compact JSON and a newline).
pub fn to_bytes(doc: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec(doc).unwrap_or_default();
    b.push(b'\n');
    b
}

/// A checked BIR document.
#[derive(Debug, Clone)]
pub struct Bir {
    /// The whole document.
    pub doc: Map<String, Value>,
    /// The subgraph's name (its `sg` field).
    pub sg: String,
    /// Instruction count per engine, in [`ENGINES`] order.
    pub per_engine: [usize; 5],
    /// Instructions, over every engine.
    pub instruction_count: usize,
}

impl Bir {
    /// Check a BIR file's bytes: JSON, this format, a subgraph name, well-formed instructions
    /// (ids in order, known engines), well-formed interface entries.
    pub fn check(bytes: &[u8]) -> Result<Bir, String> {
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| format!("not valid JSON: {e}"))?;
        let Value::Object(doc) = value else {
            return Err("not a JSON object".into());
        };
        match doc.get("format").and_then(Value::as_str) {
            Some(FORMAT) => {}
            other => {
                return Err(format!(
                    "format {} is not {FORMAT:?} (the simulated toolchain reads only BIR written by its own frontend)",
                    other.map(|s| format!("{s:?}")).unwrap_or_else(|| "missing".into())
                ))
            }
        }
        let sg = doc
            .get("sg")
            .and_then(Value::as_str)
            .filter(|s| {
                s.len() >= 4 && s.starts_with("sg") && s[2..].chars().all(|c| c.is_ascii_digit())
            })
            .ok_or("missing or malformed \"sg\" (expected sgNN)")?
            .to_string();
        for key in ["inputs", "outputs"] {
            let list = doc
                .get(key)
                .and_then(Value::as_array)
                .ok_or_else(|| format!("missing array {key:?}"))?;
            for (i, p) in list.iter().enumerate() {
                if p.get("name").and_then(Value::as_str).is_none() {
                    return Err(format!("{key}[{i}] has no name"));
                }
            }
        }
        let instructions = doc
            .get("instructions")
            .and_then(Value::as_array)
            .ok_or("missing array \"instructions\"")?;
        if instructions.is_empty() {
            return Err("no instructions".into());
        }
        let mut per_engine = [0usize; 5];
        for (i, ins) in instructions.iter().enumerate() {
            if ins.get("id").and_then(Value::as_u64) != Some(i as u64) {
                return Err(format!("instruction {i}: id out of order"));
            }
            let engine = ins.get("engine").and_then(Value::as_str).unwrap_or("");
            let Some(e) = ENGINES.iter().position(|x| *x == engine) else {
                return Err(format!("instruction {i}: unknown engine {engine:?}"));
            };
            if ins.get("op").and_then(Value::as_str).is_none() {
                return Err(format!("instruction {i}: no op"));
            }
            per_engine[e] += 1;
        }
        Ok(Bir {
            instruction_count: instructions.len(),
            doc,
            sg,
            per_engine,
        })
    }

    /// The engines with at least one instruction, in [`ENGINES`] order (PE always among them
    /// for BIR from the simulated frontend).
    pub fn engines(&self) -> Vec<&'static str> {
        ENGINES
            .iter()
            .zip(self.per_engine)
            .filter(|(_, n)| *n > 0)
            .map(|(e, _)| *e)
            .collect()
    }

    /// A top-level field of the document (`Null` when absent).
    pub fn field(&self, key: &str) -> Value {
        self.doc.get(key).cloned().unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(bytes: &[u8]) -> SubgraphSource<'_> {
        SubgraphSource {
            sg: "sg00".into(),
            index: 0,
            count: 1,
            bytes,
            model_digest: blake3::hash(bytes),
            penguin_digest: blake3::hash(b"p"),
            inputs: vec![Port {
                name: "p0".into(),
                dtype: "f32".into(),
                shape: vec![2, 3],
                bytes: 24,
            }],
            outputs: vec![],
            aliases: vec![],
        }
    }

    #[test]
    fn generated_bir_checks_and_scales() {
        let small = generate(&source(b"tiny"));
        let big_model = vec![7u8; 64 * 1024];
        let big = generate(&source(&big_model));
        let s = Bir::check(&to_bytes(&small)).unwrap();
        let b = Bir::check(&to_bytes(&big)).unwrap();
        assert_eq!(s.instruction_count, MIN_INSTRUCTIONS);
        assert_eq!(b.instruction_count, MIN_INSTRUCTIONS + 256);
        assert!(s.engines().contains(&"PE"));
        assert_eq!(b.engines().len(), 5, "a large subgraph uses every engine");
        assert!(to_bytes(&big).len() > 10 * to_bytes(&small).len());
        assert_eq!(to_bytes(&small), to_bytes(&generate(&source(b"tiny"))));
        assert_ne!(to_bytes(&small), to_bytes(&generate(&source(b"tinz"))));
    }

    #[test]
    fn check_rejects_foreign_or_broken_bir() {
        for (text, needle) in [
            ("[]", "not a JSON object"),
            ("{", "not valid JSON"),
            ("{\"format\": \"real\"}", "is not"),
            (
                "{\"format\": \"nxcc-sim-bir/1\", \"sg\": \"x\"}",
                "malformed \"sg\"",
            ),
            (
                "{\"format\": \"nxcc-sim-bir/1\", \"sg\": \"sg00\", \"inputs\": [], \"outputs\": [], \"instructions\": [{\"id\": 0, \"engine\": \"GPU\", \"op\": \"x\"}]}",
                "unknown engine",
            ),
            (
                "{\"format\": \"nxcc-sim-bir/1\", \"sg\": \"sg00\", \"inputs\": [], \"outputs\": [], \"instructions\": [{\"id\": 1, \"engine\": \"PE\", \"op\": \"x\"}]}",
                "out of order",
            ),
        ] {
            let e = Bir::check(text.as_bytes()).unwrap_err();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }
}
