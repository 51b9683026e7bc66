//! The simulated Neuron toolchain — a test instrument. Its outputs cannot run on Neuron
//! hardware.
//!
//! nxcc's tests and demos cannot use the real compiler, so the project ships a simulated one
//! (03-jobs.md, "The simulated toolchain"):
//! - [`tools`]: every native tool the driver runs (`hlo2penguin`, `xla_infergoldens`,
//!   `walrus_driver`, `hlo-neff-wrapper`, `nn_executor`, `watchpoint_insert`), callable
//!   in-process through [`run_tool`] with an explicit working directory, and as the `nxcc-sim`
//!   binary, which acts as the tool it is invoked as;
//! - [`frontend`]: the simulated Frontend, run in-process by the driver;
//! - `run_backend_driver(argc, argv)`, the `libwalrus.so` entry point of the fork-walrus path,
//!   is the `nxcc-walrus` crate's `cdylib`, over [`tools`];
//! - [`layout`]: `nxcc toolchain sim DIR` and the automatic layout behind `--toolchain sim`.
//!
//! The tools are strict so that they test the driver: each parses exactly the argv 03-jobs.md
//! gives it (`argv`); an unknown option, a missing value or a missing input is an error with
//! exit status 2. Their outputs are deterministic functions of the input bytes and the argv
//! (never of time, process id or the absolute work-dir path), written through a temporary name
//! and a rename. Faults and costs are injected through the environment (`inject`,
//! `effects`): `NXCC_SIM_FAULT`, `NXCC_SIM_WORK_MS`, `NXCC_SIM_WORK_MS_PER_MB`,
//! `NXCC_SIM_WAIT_MS`, `NXCC_SIM_RSS_MB`, `NXCC_SIM_RECORD`, `NXCC_SIM_STATE`.

#![warn(missing_docs)]

pub(crate) mod argv;
pub(crate) mod bir;
pub(crate) mod effects;
pub(crate) mod files;
pub mod formats;
pub mod frontend;
pub(crate) mod inject;
pub mod layout;
pub mod tools;

pub use tools::run_tool;

// The layers below, under the names the simulator's modules use.
pub(crate) use nxcc_core::{
    cli, error, fsx, hlo, jobs, recon, toolchain, ORIGINAL_VERSION, VERSION,
};

/// The simulated toolchain as the toolchain layer sees it ([`crate::toolchain::Simulator`]).
struct Simulated;

impl crate::toolchain::Simulator for Simulated {
    fn ensure_default(&self) -> std::io::Result<crate::toolchain::Toolchain> {
        layout::ensure_default()
    }

    fn frontend(
        &self,
        model: &std::path::Path,
        work_dir: &std::path::Path,
        subgraphs: Option<usize>,
    ) -> Result<Vec<String>, crate::error::NccError> {
        frontend::run(model, work_dir, subgraphs).map_err(|e| {
            let mut err = crate::error::NccError::simulated_frontend(&e);
            err.os_error = e.os_error;
            err
        })
    }

    fn serve_as_tool(&self, argv: &[std::ffi::OsString]) -> Option<i32> {
        let argv0 = argv.first()?;
        invoked_as_tool(argv0).then(|| binary_main(argv.to_vec()))
    }

    fn lay_out_command(&self, dir: &str) -> i32 {
        layout::lay_out_command(dir)
    }

    fn check_settings(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
        inject::Inject::from_lookup(get).map(drop)
    }
}

/// Make the simulated toolchain available to this program's compiles (`--toolchain sim`, and
/// the in-process Frontend of a simulated toolchain). Idempotent.
pub fn register() {
    crate::toolchain::register_simulator(&Simulated);
}

/// Make the running executable the simulated toolchain too (`nxcc`'s entry point): registered
/// ([`register`]), acting as every tool by the name it is invoked under, and the executable the
/// layouts point their tools at ([`layout::serve_tools_from_self`]).
pub fn serve_from_this_executable() {
    layout::serve_tools_from_self();
    register();
}

/// The note every simulated output file carries.
pub const NOT_FOR_HARDWARE: &str =
    "Written by the simulated Neuron toolchain (nxcc-sim), a test instrument: it cannot run on Neuron hardware.";

pub use nxcc_core::toolchain::TEST_INSTRUMENT;

pub(crate) use crate::cli::subcommand::{err, out};

/// The `nxcc-sim --help` text.
pub fn help_text() -> String {
    format!(
        "usage: nxcc-sim <tool> [args...]\n       <tool> [args...]   (invoked through a link named after the tool)\n       nxcc-sim --help | --version\n\n\
         The simulated Neuron toolchain: one executable acting as every native tool of the\n\
         compile pipeline, by the name it is invoked under. {TEST_INSTRUMENT}\n\n\
         tools:\n{tools}\n\n\
         Each tool accepts exactly the command line the nxcc driver writes for it; an unknown\n\
         option, a missing value or a missing input file exits with status 2. Only hlo2penguin\n\
         and walrus_driver accept further --flag or --flag=value options, after their required\n\
         ones (the user's --internal-hlo2tensorizer-options / --internal-backend-options); those\n\
         are recorded in the outputs, not interpreted.\n\n\
         environment (each a comma list of <tool>:<setting>, '*' for every tool; a setting\n\
         ending in @first applies only to the first run of that tool for a model):\n\
         \x20 NXCC_SIM_FAULT    segv | abort | kill | exit=N | hang | stderr=TEXT\n\
         \x20 NXCC_SIM_WORK_MS  milliseconds of CPU-bound work before writing outputs\n\
         \x20 NXCC_SIM_WORK_MS_PER_MB  more of it, per MiB of the model the tool reads\n\
         \x20 NXCC_SIM_WAIT_MS  milliseconds asleep (no CPU) before writing outputs\n\
         \x20 NXCC_SIM_RSS_MB   MiB of memory to touch and hold until exit\n\
         \x20 NXCC_SIM_RECORD   a file to append one JSON line per invocation to\n\
         \x20 NXCC_SIM_STATE    where @first remembers runs (default $TMPDIR/nxcc-sim-state)\n\n\
         Lay out a toolchain directory with: nxcc toolchain sim DIR\n",
        tools = tools::usage_lines().join("\n"),
    )
}

/// Whether a program invoked as `argv0` is to act as a simulated tool: its file name is a tool's
/// or `nxcc-sim` (nxcc's entry point then hands the whole argv to [`binary_main`]).
pub fn invoked_as_tool(argv0: &std::ffi::OsStr) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == layout::SIM_EXE || tools::find(n).is_some())
}

/// The simulated tools' entry point (the `nxcc-sim` binary, and `nxcc` invoked under a tool's
/// name): act as the tool named by `argv[0]`'s file name, or, invoked as `nxcc-sim`, as the tool
/// named by the first argument. Returns the exit status.
pub fn binary_main(argv: Vec<std::ffi::OsString>) -> i32 {
    layout::serve_tools_from_self();
    let mut args: Vec<String> = Vec::with_capacity(argv.len());
    for a in &argv {
        match a.to_str() {
            Some(s) => args.push(s.to_string()),
            None => {
                eprintln!("nxcc-sim: error: argument {a:?} is not valid UTF-8");
                return 2;
            }
        }
    }
    let argv0 = args.first().cloned().unwrap_or_else(|| "nxcc-sim".into());
    let name = std::path::Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("")
        .to_string();
    let cwd = match std::env::current_dir() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: error: cannot read the current directory: {e}");
            return 2;
        }
    };
    if tools::find(&name).is_some() {
        return tools::run_invocation(&name, &argv0, &args[1..], &cwd);
    }
    match args.get(1).map(String::as_str) {
        Some("--help") | Some("-h") => {
            out(&help_text());
            0
        }
        Some("--version") | Some("-V") => {
            out(&format!(
                "nxcc-sim (nxcc) {}: the simulated toolchain of {}. {TEST_INSTRUMENT}\n",
                crate::VERSION,
                crate::ORIGINAL_VERSION
            ));
            0
        }
        Some(tool) if tools::find(tool).is_some() => {
            tools::run_invocation(tool, &args[1], &args[2..], &cwd)
        }
        Some(other) => {
            eprintln!(
                "nxcc-sim: error: unknown tool {other:?} (one of {}); see nxcc-sim --help",
                crate::toolchain::TOOLS.join(", ")
            );
            2
        }
        None => {
            eprintln!("nxcc-sim: error: no tool given; see nxcc-sim --help");
            2
        }
    }
}

/// HLO models for the simulator's own tests.
#[cfg(test)]
pub(crate) mod testing {
    /// A valid HLO text module (`p0: f32[4,8]`, `p1: f32[8]` → `f32[4,8]`) padded with comment
    /// lines to at least `size` bytes, its padding bytes derived from `seed` (so different seeds
    /// give different models of the same graph).
    pub fn text_model(size: usize, seed: u8) -> Vec<u8> {
        let mut t = String::from(
            "HloModule padded\n\nENTRY main {\n  p0 = f32[4,8]{1,0} parameter(0)\n  p1 = f32[8]{0} parameter(1)\n  b = f32[4,8]{1,0} broadcast(p1), dimensions={1}\n  ROOT r = f32[4,8]{1,0} add(p0, b)\n}\n",
        );
        let mut x = seed as u32 | 1;
        while t.len() < size {
            t.push_str("// ");
            for _ in 0..60 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                t.push((b'a' + (x >> 16) as u8 % 26) as char);
            }
            t.push('\n');
        }
        t.into_bytes()
    }
}
