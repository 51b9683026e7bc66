//! The simulated `hlo-neff-wrapper` (NeffWrapper), run in the work dir:
//!
//! ```text
//! hlo-neff-wrapper --hlo <abs model> --neff <abs output> --output <abs dir>/<stem>.wrapped.hlo.pb
//!   --netlist hlo_netlist.json
//!   ( --io_transposes sg00/io_transposes.json | --modular-io-transposes "sg00/... sg01/..." )
//! ```
//!
//! Exactly one of the two transposes options; the modular one lists at least two files. Every
//! file must exist (relative paths against the working directory); the netlist must be JSON, each
//! io_transposes file a JSON array, the NEFF a NEFF. Writes `--output`: the model's bytes followed
//! by a text trailer with the blake3 of the NEFF, the netlist and the io_transposes files.

use std::path::{Path, PathBuf};

use super::{Prepared, ToolError};
use crate::argv::{checks::*, opt, Args, Form, Opt, Spec};
use crate::files::{atomic_write, resolve, Model};
use crate::formats;

static OPTS: &[Opt] = &[
    opt("--hlo", Form::Sep, absolute).required(),
    opt("--neff", Form::Sep, absolute).required(),
    opt("--output", Form::Sep, absolute).required(),
    opt("--netlist", Form::Sep, nonempty).required(),
    opt("--io_transposes", Form::Sep, nonempty),
    opt("--modular-io-transposes", Form::Sep, nonempty),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: None,
    opts: OPTS,
    extra: None,
};

struct Job {
    model: Model,
    neff: blake3::Hash,
    netlist: blake3::Hash,
    transposes: blake3::Hash,
    output: PathBuf,
}

fn read(cwd: &Path, what: &str, p: &str) -> Result<Vec<u8>, ToolError> {
    let path = resolve(cwd, p);
    std::fs::read(&path).map_err(|e| ToolError::reading(what, &path, e))
}

/// The [`PrepareFn`](super::PrepareFn) of `hlo-neff-wrapper`: check the argv, read the model, the
/// NEFF, the netlist and the transposes files.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    let files: Vec<&str> = match (
        args.get("--io_transposes"),
        args.get("--modular-io-transposes"),
    ) {
        (Some(one), None) => vec![one],
        (None, Some(list)) => {
            let v: Vec<&str> = list.split_whitespace().collect();
            if v.len() < 2 {
                return Err(ToolError::Usage(format!(
                    "--modular-io-transposes needs two or more files (one subgraph uses --io_transposes), got {list:?}"
                )));
            }
            v
        }
        (Some(_), Some(_)) => {
            return Err(ToolError::Usage(
                "--io_transposes and --modular-io-transposes are mutually exclusive".into(),
            ))
        }
        (None, None) => {
            return Err(ToolError::Usage(
                "one of --io_transposes or --modular-io-transposes is required".into(),
            ))
        }
    };
    let hlo = resolve(cwd, args.value("--hlo"));
    let model = Model::read(&hlo).map_err(|e| ToolError::reading("HLO module", &hlo, e))?;
    let neff_path = args.value("--neff");
    let neff = read(cwd, "NEFF", neff_path)?;
    let netlist = read(cwd, "netlist", args.value("--netlist"))?;
    let mut transposes = blake3::Hasher::new();
    let mut contents = Vec::new();
    for f in &files {
        contents.push((f, read(cwd, "io_transposes file", f)?));
    }
    if !formats::looks_like_neff(&neff) {
        return Err(ToolError::Failed(format!("{neff_path} is not a NEFF")));
    }
    if serde_json::from_slice::<serde_json::Value>(&netlist).is_err() {
        return Err(ToolError::Failed(format!(
            "netlist {} is not valid JSON",
            args.value("--netlist")
        )));
    }
    for (f, bytes) in contents {
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(serde_json::Value::Array(_)) => {}
            _ => {
                return Err(ToolError::Failed(format!(
                    "io_transposes file {f} is not a JSON array"
                )))
            }
        }
        transposes.update(blake3::hash(&bytes).as_bytes());
    }
    Ok(Box::new(Job {
        model,
        neff: blake3::hash(&neff),
        netlist: blake3::hash(&netlist),
        transposes: transposes.finalize(),
        output: resolve(cwd, args.value("--output")),
    }))
}

impl Prepared for Job {
    fn key(&self) -> blake3::Hash {
        self.model.digest
    }

    fn model_bytes(&self) -> u64 {
        self.model.size()
    }

    fn execute(&self) -> Result<(), ToolError> {
        let mut out = self.model.bytes();
        out.extend_from_slice(
            format!(
                "\n# nxcc-sim hlo-neff-wrapper trailer. {}\n# neff-blake3: {}\n# netlist-blake3: {}\n# io-transposes-blake3: {}\n",
                crate::NOT_FOR_HARDWARE,
                self.neff.to_hex(),
                self.netlist.to_hex(),
                self.transposes.to_hex()
            )
            .as_bytes(),
        );
        atomic_write(&self.output, &out).map_err(|e| ToolError::writing(&self.output, e))
    }
}
