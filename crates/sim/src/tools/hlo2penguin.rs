//! The simulated `hlo2penguin` (HLOToTensorizer), run in the work dir:
//!
//! ```text
//! hlo2penguin --input <abs model> --out-dir ./ --output penguin.py
//!   --target-instance=<target> --logical-nc-config=<lnc>
//!   --verbose=<level> --logfile=<abs logfile> --logfile-verbose=<level>
//!   [--partition] [--layers-per-module=<M>] [--spmd] [--remat] [--analyze-schedule]
//!   [--engine-placement-mode] [--build-with-users] [--disable-layer-det]
//!   [<internal_hlo2tensorizer_options>...]
//! ```
//!
//! The model must be what a real frontend accepts (`Model::graphs`): HLO text that parses or a
//! binary `HloModuleProto` with an entry computation (a directory: one per `*.pb` file); anything
//! else is refused with the reader's message (exit 1), so a garbage model fails the compile at
//! HLOToTensorizer.
//!
//! Writes `<out-dir>/<output>`: a Python file of comments and constants holding the model's
//! blake3, each module's summary (name, parameters, results, instruction count), the target, the
//! logical NeuronCore config and the optional and extra options — the relevant argv, never a path
//! (so it is the same for the same model wherever it lives). The log options are checked and not
//! used: the driver owns the log file.

use std::path::{Path, PathBuf};

use super::{Prepared, ToolError};
use crate::argv::{checks::*, opt, Args, Form, Opt, Spec};
use crate::files::{atomic_write, resolve, Model};

/// The comment line of `penguin.py` that names the model (the simulated frontend checks it).
pub const MODEL_LINE_PREFIX: &str = "# model-blake3: ";

/// The optional switches, in the order the driver appends them.
const SWITCHES: [&str; 7] = [
    "--partition",
    "--spmd",
    "--remat",
    "--analyze-schedule",
    "--engine-placement-mode",
    "--build-with-users",
    "--disable-layer-det",
];

fn file_name(v: &str) -> Result<(), String> {
    if v.is_empty() || v.ends_with('/') {
        Err(format!("{v:?} is not a file name"))
    } else {
        Ok(())
    }
}

static OPTS: &[Opt] = &[
    opt("--input", Form::Sep, absolute).required(),
    opt("--out-dir", Form::Sep, nonempty).required(),
    opt("--output", Form::Sep, file_name).required(),
    opt("--target-instance", Form::Eq, target).required(),
    opt("--logical-nc-config", Form::Eq, positive).required(),
    opt("--verbose", Form::Eq, level).required(),
    opt("--logfile", Form::Eq, absolute).required(),
    opt("--logfile-verbose", Form::Eq, level).required(),
    opt("--partition", Form::Switch, nonempty),
    opt("--layers-per-module", Form::Eq, int),
    opt("--spmd", Form::Switch, nonempty),
    opt("--remat", Form::Switch, nonempty),
    opt("--analyze-schedule", Form::Switch, nonempty),
    opt("--engine-placement-mode", Form::Switch, nonempty),
    opt("--build-with-users", Form::Switch, nonempty),
    opt("--disable-layer-det", Form::Switch, nonempty),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: None,
    opts: OPTS,
    extra: Some("<internal_hlo2tensorizer_options>"),
};

struct Job {
    model: Model,
    graphs: Vec<crate::hlo::Module>,
    out: PathBuf,
    target: String,
    lnc: String,
    options: Vec<String>,
    extra: Vec<String>,
}

/// The [`PrepareFn`](super::PrepareFn) of `hlo2penguin`: check the argv, read the model.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    if args.has("--layers-per-module") && !args.has("--partition") {
        return Err(ToolError::Usage(
            "--layers-per-module requires --partition".into(),
        ));
    }
    let input = resolve(cwd, args.value("--input"));
    let model = Model::read(&input).map_err(|e| ToolError::reading("input", &input, e))?;
    if model.is_empty() {
        return Err(ToolError::Failed(format!(
            "input {} is empty",
            input.display()
        )));
    }
    let graphs = model.graphs(&input).map_err(ToolError::Failed)?;
    let out_dir = resolve(cwd, args.value("--out-dir"));
    if !out_dir.is_dir() {
        return Err(ToolError::Usage(format!(
            "output directory {} does not exist",
            out_dir.display()
        )));
    }
    let mut options: Vec<String> = SWITCHES
        .iter()
        .filter(|s| args.has(s))
        .map(|s| s.to_string())
        .collect();
    if let Some(m) = args.get("--layers-per-module") {
        options.push(format!("--layers-per-module={m}"));
    }
    Ok(Box::new(Job {
        model,
        graphs,
        out: out_dir.join(args.value("--output")),
        target: args.value("--target-instance").to_string(),
        lnc: args.value("--logical-nc-config").to_string(),
        options,
        extra: args.extra.clone(),
    }))
}

/// A Python string literal (JSON string syntax is valid Python).
fn py_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn py_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| py_str(s)).collect();
    format!("[{}]", inner.join(", "))
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
        let hex = self.model.digest.to_hex();
        let modules: Vec<String> = self
            .graphs
            .iter()
            .map(|g| format!("# module: {}\n", g.one_line()))
            .collect();
        let signature = |ts: &[crate::hlo::Tensor]| {
            py_list(
                &ts.iter()
                    .map(|t| format!("{} {}", t.name, t.shape))
                    .collect::<Vec<_>>(),
            )
        };
        let text = format!(
            "# penguin.py, written by the simulated hlo2penguin (nxcc-sim).\n\
             # {note}\n\
             {MODEL_LINE_PREFIX}{hex}\n\
             {modules}\
             # target-instance: {target}\n\
             # logical-nc-config: {lnc}\n\
             # options: {opts}\n\
             # extra options: {extra}\n\
             MODEL_BLAKE3 = {hex_py}\n\
             MODEL_BYTES = {len}\n\
             PARAMETERS = {params}\n\
             RESULTS = {results}\n\
             INSTRUCTIONS = {instructions}\n\
             TARGET_INSTANCE = {target_py}\n\
             LOGICAL_NC_CONFIG = {lnc}\n\
             OPTIONS = {opts_py}\n\
             EXTRA_OPTIONS = {extra_py}\n",
            note = crate::NOT_FOR_HARDWARE,
            target = self.target,
            lnc = self.lnc,
            opts = self.options.join(" "),
            extra = self.extra.join(" "),
            hex_py = py_str(hex.as_str()),
            len = self.model.len(),
            modules = modules.concat(),
            params = signature(&self.graphs[0].parameters),
            results = signature(&self.graphs[self.graphs.len() - 1].results),
            instructions = self
                .graphs
                .iter()
                .map(|g| g.instruction_count)
                .sum::<usize>(),
            target_py = py_str(&self.target),
            opts_py = py_list(&self.options),
            extra_py = py_list(&self.extra),
        );
        atomic_write(&self.out, text.as_bytes()).map_err(|e| ToolError::writing(&self.out, e))
    }
}
