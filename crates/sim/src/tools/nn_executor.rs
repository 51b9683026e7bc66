//! The simulated `nn_executor` (the experimental Backend job), run in the work dir through
//! `/bin/bash -c "ulimit -t <s> && nn_executor ..."`:
//!
//! ```text
//! nn_executor --bir sg00/bir.json --tensor_map sg00/tensor_map.json --sunda --json backend.json
//! ```
//!
//! Checks the BIR and the tensor map; writes the `--json` path with its `.json` replaced by
//! `.bir` (`backend.bir`): a JSON summary of the executed subgraph. The `--json` file itself is
//! not read.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::{Prepared, ToolError};
use crate::argv::{checks::*, opt, Args, Form, Opt, Spec};
use crate::bir::Bir;
use crate::files::{atomic_write, resolve};

fn json_name(v: &str) -> Result<(), String> {
    match v.strip_suffix(".json") {
        Some(stem) if !stem.is_empty() && !stem.ends_with('/') => Ok(()),
        _ => Err(format!("{v:?} is not a .json file name")),
    }
}

static OPTS: &[Opt] = &[
    opt("--bir", Form::Sep, nonempty).required(),
    opt("--tensor_map", Form::Sep, nonempty).required(),
    opt("--sunda", Form::Switch, nonempty).required(),
    opt("--json", Form::Sep, json_name).required(),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: None,
    opts: OPTS,
    extra: None,
};

struct Job {
    bir: Bir,
    bir_digest: blake3::Hash,
    tensor_map_digest: blake3::Hash,
    output: PathBuf,
}

/// The [`PrepareFn`](super::PrepareFn) of `nn_executor`: check the argv, read the BIR.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    let bir_path = resolve(cwd, args.value("--bir"));
    let bytes = std::fs::read(&bir_path).map_err(|e| ToolError::reading("BIR", &bir_path, e))?;
    let tm_path = resolve(cwd, args.value("--tensor_map"));
    let tm = std::fs::read(&tm_path).map_err(|e| ToolError::reading("tensor map", &tm_path, e))?;
    let bir = Bir::check(&bytes)
        .map_err(|e| ToolError::Failed(format!("{}: invalid BIR: {e}", bir_path.display())))?;
    let tm_ok = serde_json::from_slice::<serde_json::Value>(&tm)
        .ok()
        .is_some_and(|v| v.get("inputs").is_some_and(|i| i.is_array()));
    if !tm_ok {
        return Err(ToolError::Failed(format!(
            "{}: not a tensor map (a JSON object with an \"inputs\" array)",
            tm_path.display()
        )));
    }
    let json_arg = args.value("--json");
    let output = resolve(
        cwd,
        &format!("{}.bir", json_arg.strip_suffix(".json").unwrap_or(json_arg)),
    );
    Ok(Box::new(Job {
        bir,
        bir_digest: blake3::hash(&bytes),
        tensor_map_digest: blake3::hash(&tm),
        output,
    }))
}

impl Prepared for Job {
    fn key(&self) -> blake3::Hash {
        self.bir_digest
    }

    fn execute(&self) -> Result<(), ToolError> {
        let per_engine: serde_json::Map<String, serde_json::Value> =
            crate::jobs::walrus_driver::ENGINES
                .iter()
                .zip(self.bir.per_engine)
                .filter(|(_, n)| *n > 0)
                .map(|(e, n)| (e.to_string(), json!(n)))
                .collect();
        let doc = json!({
            "format": "nxcc-sim-backend-bir/1",
            "note": crate::NOT_FOR_HARDWARE,
            "sg": self.bir.sg,
            "bir_blake3": self.bir_digest.to_hex().to_string(),
            "tensor_map_blake3": self.tensor_map_digest.to_hex().to_string(),
            "sunda": true,
            "instruction_count": self.bir.instruction_count,
            "engines": per_engine,
        });
        let mut b = serde_json::to_vec_pretty(&doc).unwrap_or_default();
        b.push(b'\n');
        atomic_write(&self.output, &b).map_err(|e| ToolError::writing(&self.output, e))
    }
}
