//! The simulated native tools, callable in-process: [`run_tool`] runs one by name with its
//! arguments and an explicit working directory (the process's current directory is never read or
//! changed here), and returns its exit status.
//!
//! Every invocation goes through the same steps: parse the injection settings
//! (`crate::inject`), parse the argv strictly (`crate::argv`), check and read the
//! inputs, apply the injected memory, CPU work and fault (the `@first` settings only on the first
//! run for the model), write the outputs (temporary name plus rename), and append the
//! `NXCC_SIM_RECORD` line.
//!
//! The tools that read the model (`hlo2penguin`, `xla_infergoldens`) also cost what reading its
//! graph costs, on top of any injected cost ([`GraphCost`]): memory touched and held, and CPU
//! work, that scale with the graph — so a compile's measured peak RSS and time depend on its
//! model as a real compile's do.
//!
//! Exit statuses: 0 success; 1 an input that is there but unusable (bad JSON, not a NEFF, ...);
//! 2 a usage error (unknown option, missing value, missing input file, a rejected combination);
//! an injected `exit=N` gives N.
//!
//! The `@first` settings are keyed on the blake3 of what the tool reads: the model for
//! `hlo2penguin`, `xla_infergoldens` and `hlo-neff-wrapper`; the subgraph's `bir.json` for
//! `walrus_driver`, `nn_executor` and `watchpoint_insert` (so with several subgraphs, the first
//! run for each subgraph is a first run).
//!
//! Like everything in [`crate`], these tools are a test instrument: their outputs cannot run
//! on Neuron hardware.

use std::path::Path;

use crate::argv::{self, Args, Spec};
use crate::effects::{self, Invocation};
use crate::error::NccError;
use crate::inject::{Fault, Inject};

pub mod hlo2penguin;
pub mod hlo_neff_wrapper;
pub mod nn_executor;
pub mod walrus_driver;
pub mod watchpoint_insert;
pub mod xla_infergoldens;

/// Why a tool failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// A usage error or a missing input file: exit 2.
    Usage(String),
    /// An input that cannot be used, or an output that cannot be written: exit 1.
    Failed(String),
    /// An error in the compiler's own line format (`[ERROR] [NCC_...] ...`): exit 2.
    Ncc(NccError),
}

impl ToolError {
    /// The exit status the tool ends with: 2 for a usage or compiler-format error, 1 for a failure.
    pub fn status(&self) -> i32 {
        match self {
            ToolError::Usage(_) | ToolError::Ncc(_) => 2,
            ToolError::Failed(_) => 1,
        }
    }

    fn report(&self, tool: &str) {
        match self {
            ToolError::Usage(m) | ToolError::Failed(m) => eprintln!("{tool}: error: {m}"),
            ToolError::Ncc(e) => eprintln!("{e}"),
        }
    }

    /// A missing input is a usage error; any other read error is a failure.
    pub fn reading(what: &str, path: &Path, e: std::io::Error) -> ToolError {
        if e.kind() == std::io::ErrorKind::NotFound {
            ToolError::Usage(format!("{what} {} does not exist", path.display()))
        } else {
            ToolError::Failed(format!("cannot read {what} {}: {e}", path.display()))
        }
    }

    /// An output that cannot be written: a failure.
    pub fn writing(path: &Path, e: std::io::Error) -> ToolError {
        ToolError::Failed(format!("cannot write {}: {e}", path.display()))
    }
}

/// What reading a graph costs a simulated tool (a documented formula, not a measurement):
///
/// - memory touched and held while the tool runs:
///   `2 × model bytes + 8 × (parameter bytes + result bytes) + 16 KiB × instructions`;
/// - CPU work: `1 ms per 64 instructions`.
///
/// (summed over the model's modules).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GraphCost {
    /// Memory touched and held while the tool runs, bytes.
    pub rss_bytes: u64,
    /// CPU-bound work, milliseconds.
    pub work_ms: u64,
}

/// [`GraphCost`]: bytes held per byte of the model file.
pub const COST_MODEL_FACTOR: u64 = 2;
/// [`GraphCost`]: bytes held per byte of parameters and results.
pub const COST_TENSOR_FACTOR: u64 = 8;
/// [`GraphCost`]: bytes held per instruction.
pub const COST_INSTRUCTION_BYTES: u64 = 16 << 10;
/// [`GraphCost`]: instructions per millisecond of CPU work.
pub const COST_INSTRUCTIONS_PER_MS: u64 = 64;

impl GraphCost {
    /// The cost of a model of `model_bytes` holding `graphs`.
    pub fn of(model_bytes: u64, graphs: &[crate::hlo::Module]) -> GraphCost {
        let tensors = graphs.iter().fold(0u64, |a, g| {
            a.saturating_add(g.parameter_bytes())
                .saturating_add(g.result_bytes())
        });
        let instructions = graphs
            .iter()
            .map(|g| g.instruction_count as u64)
            .sum::<u64>();
        GraphCost {
            rss_bytes: model_bytes
                .saturating_mul(COST_MODEL_FACTOR)
                .saturating_add(tensors.saturating_mul(COST_TENSOR_FACTOR))
                .saturating_add(instructions.saturating_mul(COST_INSTRUCTION_BYTES)),
            work_ms: instructions / COST_INSTRUCTIONS_PER_MS,
        }
    }
}

/// A tool invocation whose argv and inputs have been checked, ready to write its outputs.
pub trait Prepared {
    /// The blake3 the `@first` settings are keyed on: the model, or the input file the tool
    /// reads when it has no model argument.
    fn key(&self) -> blake3::Hash;
    /// The size of the model the tool reads (0 for tools that read none), for
    /// `NXCC_SIM_WORK_MS_PER_MB`.
    fn model_bytes(&self) -> u64 {
        0
    }
    /// What reading the model's graph costs (nothing for tools that read none).
    fn graph_cost(&self) -> GraphCost {
        GraphCost::default()
    }
    /// Write the outputs.
    fn execute(&self) -> Result<(), ToolError>;
}

/// Check a parsed argv and the inputs it names (paths relative to the working directory).
pub type PrepareFn = fn(&Args, &Path) -> Result<Box<dyn Prepared>, ToolError>;

/// One simulated tool.
pub struct ToolDef {
    /// The tool's executable name (`hlo2penguin`).
    pub name: &'static str,
    /// Its command line.
    pub spec: &'static Spec,
    /// Its line in `nxcc-sim --help`: the job it stands for, what it reads and writes.
    pub summary: &'static str,
    /// Checks a parsed command line and its inputs.
    pub prepare: PrepareFn,
}

/// Every simulated tool (the names of [`crate::toolchain::TOOLS`]).
pub static TOOLS: &[ToolDef] = &[
    ToolDef {
        name: "hlo2penguin",
        spec: &hlo2penguin::SPEC,
        summary: "HLOToTensorizer: reads the model, writes penguin.py",
        prepare: hlo2penguin::prepare,
    },
    ToolDef {
        name: "xla_infergoldens",
        spec: &xla_infergoldens::SPEC,
        summary: "XLAInferGoldens: writes value_output0.npy and gold-000.p",
        prepare: xla_infergoldens::prepare,
    },
    ToolDef {
        name: "walrus_driver",
        spec: &walrus_driver::SPEC,
        summary: "WalrusDriver / BIRVerifier / BIRSim: reads bir.json, writes def.json, tensor_map.json, neff.json and <Engine>.bin beside it",
        prepare: walrus_driver::prepare,
    },
    ToolDef {
        name: "hlo-neff-wrapper",
        spec: &hlo_neff_wrapper::SPEC,
        summary: "NeffWrapper: wraps the NEFF into <stem>.wrapped.hlo.pb",
        prepare: hlo_neff_wrapper::prepare,
    },
    ToolDef {
        name: "nn_executor",
        spec: &nn_executor::SPEC,
        summary: "Backend: reads bir.json and tensor_map.json, writes backend.bir",
        prepare: nn_executor::prepare,
    },
    ToolDef {
        name: "watchpoint_insert",
        spec: &watchpoint_insert::SPEC,
        summary: "Watchpoint: adds a watchpoint to bir.json (rewritten in place)",
        prepare: watchpoint_insert::prepare,
    },
];

/// A tool by name.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    TOOLS.iter().find(|t| t.name == name)
}

/// Run a simulated tool in-process: `args` without `argv[0]`, paths relative to `cwd`.
pub fn run_tool(tool: &str, args: &[String], cwd: &Path) -> i32 {
    run_invocation(tool, tool, args, cwd)
}

/// [`run_tool`] with the `argv[0]` the tool was invoked as (recorded by `NXCC_SIM_RECORD`).
pub fn run_invocation(tool: &str, argv0: &str, args: &[String], cwd: &Path) -> i32 {
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(argv0.to_string());
    argv.extend(args.iter().cloned());
    let invocation = Invocation {
        tool: tool.to_string(),
        argv,
        cwd: cwd.to_path_buf(),
        start_ms: effects::now_ms(),
    };
    let inject = match Inject::from_env() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("{tool}: error: {e}");
            return 2;
        }
    };
    let record_file = inject.record_file(cwd);
    let record = || {
        if let Some(f) = &record_file {
            invocation.record(f);
        }
    };
    let status = run_checked(tool, args, cwd, &inject, &record);
    record();
    status
}

fn run_checked(tool: &str, args: &[String], cwd: &Path, inject: &Inject, record: &dyn Fn()) -> i32 {
    let Some(def) = find(tool) else {
        eprintln!(
            "nxcc-sim: error: unknown tool {tool:?} (one of {})",
            crate::toolchain::TOOLS.join(", ")
        );
        return 2;
    };
    let parsed = match argv::parse(def.spec, args) {
        Ok(a) => a,
        Err(m) => {
            ToolError::Usage(m).report(tool);
            return 2;
        }
    };
    let job = match (def.prepare)(&parsed, cwd) {
        Ok(j) => j,
        Err(e) => {
            e.report(tool);
            return e.status();
        }
    };
    let mut settings = inject.for_tool(tool);
    if settings.needs_first() {
        let state = inject.state_dir(cwd);
        match effects::first_run(&state, tool, &job.key()) {
            Ok(true) => {}
            Ok(false) => settings = settings.without_first_only(),
            Err(e) => {
                eprintln!(
                    "{tool}: error: cannot use the @first state directory {}: {e}",
                    state.display()
                );
                return 2;
            }
        }
    }
    // Held until this function returns (for the binary: until exit).
    let graph = job.graph_cost();
    let memory = settings.rss_mb.map(|c| effects::touch_memory(c.value));
    let graph_memory = effects::touch_memory(graph.rss_bytes.div_ceil(1 << 20));
    let per_mb = settings
        .work_ms_per_mb
        .map_or(0, |c| c.value.saturating_mul(job.model_bytes()) >> 20);
    let work = settings
        .work_ms
        .map_or(0, |c| c.value)
        .saturating_add(per_mb)
        .saturating_add(graph.work_ms);
    if work > 0 {
        effects::burn_cpu(work);
    }
    if let Some(wait) = settings.wait_ms.map(|c| c.value).filter(|w| *w > 0) {
        std::thread::sleep(std::time::Duration::from_millis(wait));
    }
    if let Some(fault) = settings.fault.map(|c| c.value) {
        match fault {
            Fault::Exit(n) => return n,
            Fault::Stderr(text) => {
                eprintln!("{text}");
                return 1;
            }
            Fault::Hang => effects::hang(),
            signal_fault => {
                if let Some(sig) = effects::signal_of(&signal_fault) {
                    eprintln!("{tool}: simulated fault (NXCC_SIM_FAULT): signal {sig}");
                    record();
                    effects::die_by_signal(sig);
                }
            }
        }
    }
    let status = match job.execute() {
        Ok(()) => 0,
        Err(e) => {
            e.report(tool);
            e.status()
        }
    };
    drop(memory);
    drop(graph_memory);
    status
}

/// The one-line help of every tool (for `nxcc-sim --help`).
pub fn usage_lines() -> Vec<String> {
    TOOLS
        .iter()
        .map(|t| {
            let mut parts: Vec<String> = Vec::new();
            if let Some(m) = t.spec.input_first {
                parts.push(m.to_string());
            }
            for o in t.spec.opts {
                let shown = match o.form {
                    argv::Form::Switch => o.name.to_string(),
                    argv::Form::Sep => format!("{} V", o.name),
                    argv::Form::Eq => format!("{}=V", o.name),
                    argv::Form::Either => format!("{} V|{}=V", o.name, o.name),
                };
                parts.push(if o.required {
                    shown
                } else {
                    format!("[{shown}]")
                });
            }
            if let Some(x) = t.spec.extra {
                parts.push(format!("[{x} ...]"));
            }
            format!(
                "  {}\n      {}\n      {}",
                t.name,
                t.summary,
                parts.join(" ")
            )
        })
        .collect()
}
