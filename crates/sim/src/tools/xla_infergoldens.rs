//! The simulated `xla_infergoldens` (XLAInferGoldens), run in the work dir:
//!
//! ```text
//! xla_infergoldens --module <abs model> --module-type <proto|text> --input-type numpy
//!   --output value_output0 [--input <value_input*.npy, sorted>]... [--spmd]
//!   [--upcast-all-to-fp32] [--experimental-unsafe-fp8e4m3fn-as-fp8e4m3]
//! ```
//!
//! `--module-type` must match the model (`text` exactly when it starts with `HloModule`), and the
//! model must be an HLO module a real frontend accepts (`Model::graphs`; else exit 1 with the
//! reader's message); the inputs must be `.npy` files, given in sorted order. Writes
//! `<output>.npy` — a float32 array of the entry computation's first result's shape (a scalar or
//! tuple result: one value), its values derived from the model, the inputs and the switches —
//! and `gold-000.p` (a pickle of a string naming that array's digest).

use std::path::{Path, PathBuf};

use super::{Prepared, ToolError};
use crate::argv::{checks::*, opt, Args, Form, Opt, Spec};
use crate::files::{atomic_write, resolve, Model};
use crate::formats;

fn module_type(v: &str) -> Result<(), String> {
    one_of(v, &["proto", "text"])
}

fn input_type(v: &str) -> Result<(), String> {
    one_of(v, &["numpy"])
}

static OPTS: &[Opt] = &[
    opt("--module", Form::Sep, absolute).required(),
    opt("--module-type", Form::Sep, module_type).required(),
    opt("--input-type", Form::Sep, input_type).required(),
    opt("--output", Form::Sep, nonempty).required(),
    opt("--input", Form::Sep, nonempty).repeat(),
    opt("--spmd", Form::Switch, nonempty),
    opt("--upcast-all-to-fp32", Form::Switch, nonempty),
    opt(
        "--experimental-unsafe-fp8e4m3fn-as-fp8e4m3",
        Form::Switch,
        nonempty,
    ),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: None,
    opts: OPTS,
    extra: None,
};

/// The golden file's name (the driver skips the job when it exists).
pub const GOLD_FILE: &str = "gold-000.p";

struct Job {
    model: Model,
    graphs: Vec<crate::hlo::Module>,
    inputs: Vec<Vec<u8>>,
    switches: Vec<&'static str>,
    output: PathBuf,
    gold: PathBuf,
}

/// The [`PrepareFn`](super::PrepareFn) of `xla_infergoldens`: check the argv, read the model.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    let path = resolve(cwd, args.value("--module"));
    let model = Model::read(&path).map_err(|e| ToolError::reading("module", &path, e))?;
    let is_text = model.hlo_text().is_some();
    match (args.value("--module-type"), is_text) {
        ("text", false) => {
            return Err(ToolError::Failed(format!(
                "--module-type text, but {} is not HLO text (it does not start with HloModule)",
                path.display()
            )))
        }
        ("proto", true) => {
            return Err(ToolError::Failed(format!(
                "--module-type proto, but {} is HLO text",
                path.display()
            )))
        }
        _ => {}
    }
    let graphs = model.graphs(&path).map_err(ToolError::Failed)?;
    let names = args.all("--input");
    if names.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ToolError::Usage(format!(
            "--input files must be given once each, in sorted order: {}",
            names.join(" ")
        )));
    }
    let mut inputs = Vec::with_capacity(names.len());
    for n in names {
        let p = resolve(cwd, n);
        let bytes = std::fs::read(&p).map_err(|e| ToolError::reading("input", &p, e))?;
        if !formats::is_npy(&bytes) {
            return Err(ToolError::Failed(format!(
                "input {} is not a .npy file",
                p.display()
            )));
        }
        inputs.push(bytes);
    }
    let switches = OPTS
        .iter()
        .filter(|o| o.form == Form::Switch && args.has(o.name))
        .map(|o| o.name)
        .collect();
    let out = args.value("--output");
    let output = if out.ends_with(".npy") {
        resolve(cwd, out)
    } else {
        resolve(cwd, &format!("{out}.npy"))
    };
    Ok(Box::new(Job {
        model,
        graphs,
        inputs,
        switches,
        output,
        gold: cwd.join(GOLD_FILE),
    }))
}

/// The golden array's shape: the first result's dimensions (none for a scalar or a tuple).
fn golden_shape(job: &Job) -> Vec<usize> {
    let result = job.graphs.last().and_then(|g| g.results.first());
    result
        .map(|t| t.shape.dims().iter().map(|&d| d as usize).collect())
        .unwrap_or_default()
}

/// `n` float32 values in [-1, 1) from the model, the inputs and the switches.
fn golden_values(job: &Job, n: usize) -> Vec<f32> {
    let mut h = blake3::Hasher::new();
    h.update(b"nxcc-sim goldens\0");
    h.update(job.model.digest.as_bytes());
    for i in &job.inputs {
        h.update(blake3::hash(i).as_bytes());
    }
    for s in &job.switches {
        h.update(s.as_bytes());
        h.update(&[0]);
    }
    let mut bytes = vec![0u8; n * 4];
    h.finalize_xof().fill(&mut bytes);
    bytes
        .chunks_exact(4)
        .map(|c| {
            let u = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) >> 8;
            (u as f32 / (1u32 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

impl Prepared for Job {
    fn key(&self) -> blake3::Hash {
        self.model.digest
    }

    fn model_bytes(&self) -> u64 {
        self.model.size()
    }

    fn graph_cost(&self) -> super::GraphCost {
        super::GraphCost::of(self.model.size(), &self.graphs)
    }

    fn execute(&self) -> Result<(), ToolError> {
        let shape = golden_shape(self);
        let n = shape.iter().product::<usize>();
        let npy = formats::npy_f32(&shape, &golden_values(self, n));
        let gold = formats::pickle_str(&format!(
            "nxcc-sim golden {} (simulated; cannot run on Neuron hardware)",
            blake3::hash(&npy).to_hex()
        ));
        atomic_write(&self.output, &npy).map_err(|e| ToolError::writing(&self.output, e))?;
        atomic_write(&self.gold, &gold).map_err(|e| ToolError::writing(&self.gold, e))
    }
}
