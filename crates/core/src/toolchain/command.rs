//! `nxcc toolchain`: `show` says where a compile would take its toolchain from (a real one or the
//! simulated one) and each tool's path; `sim DIR` has the simulated toolchain behind
//! [`Simulator`](super::Simulator) lay itself out in `DIR`.

use crate::cli::subcommand::{err, out, parse, DriverOptions};
use crate::recon::toolchain::{SIM_MARKER, TOOLCHAIN_ENV};
use crate::toolchain::{self, Request, LIBWALRUS, TEST_INSTRUMENT, TOOLS};

/// Lay out or describe a toolchain directory.
///
/// `sim DIR` lays out the simulated toolchain, a test instrument: its NEFFs cannot run on Neuron
/// hardware. `show` says where a compile would take its toolchain from.
#[derive(Debug, clap::Parser)]
pub(crate) struct ToolchainCommand {
    /// What to do.
    #[command(subcommand)]
    pub(crate) action: Action,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

/// `nxcc toolchain`'s actions.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Action {
    /// Lay out a standalone simulated toolchain in DIR.
    ///
    /// bin/nxcc-sim (this executable), bin/<tool> links to it, bin/.nxcc-simulated-toolchain,
    /// lib/libwalrus.so (when built). A test instrument: its outputs cannot run on Neuron
    /// hardware.
    Sim {
        /// The directory to lay the simulated toolchain out in.
        #[arg(value_name = "DIR")]
        dir: String,
    },
    /// Say where a compile would take its toolchain from, and each tool's path.
    Show {
        /// The toolchain to describe (DIR or sim), as compile's --toolchain takes it.
        #[arg(long, value_name = "TOOLCHAIN")]
        toolchain: Option<String>,
        /// Print one JSON object: source ("--toolchain", "NXCC_TOOLCHAIN" or "python3"),
        /// toolchain (null when none is found; else bin, simulated, laid_out, tools: {name: path
        /// or null}, libwalrus: {path, exists}).
        #[arg(long)]
        json: bool,
    },
}

/// `nxcc toolchain sim DIR` / `nxcc toolchain show`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let cmd: ToolchainCommand = match parse(prog, "toolchain", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    match cmd.action {
        Action::Sim { dir } => match crate::toolchain::simulator() {
            Some(simulator) => simulator.lay_out_command(&dir),
            None => {
                err(&format!(
                    "[ERROR] cannot lay out a simulated toolchain: {}\n",
                    crate::toolchain::no_simulator()
                ));
                1
            }
        },
        Action::Show { toolchain, json } => show(toolchain.as_deref(), json),
    }
}

/// What `toolchain show` says, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
struct Shown {
    source: &'static str,
    toolchain: Option<Found>,
}

/// The toolchain found.
#[derive(Debug, serde::Serialize)]
struct Found {
    bin: String,
    simulated: bool,
    /// False for the simulated toolchain not laid out yet (it is on first use).
    laid_out: bool,
    tools: serde_json::Map<String, serde_json::Value>,
    libwalrus: Library,
}

#[derive(Debug, serde::Serialize)]
struct Library {
    path: String,
    exists: bool,
}

fn show(option: Option<&str>, json: bool) -> i32 {
    let launch = std::env::current_dir().unwrap_or_default();
    let env = std::env::var(TOOLCHAIN_ENV).ok().filter(|s| !s.is_empty());
    let request = Request::from(option, env.as_deref(), &launch);
    let source = match (option, &env) {
        (Some(_), _) => "--toolchain",
        (None, Some(_)) => TOOLCHAIN_ENV,
        (None, None) => "python3",
    };
    let toolchain = toolchain::locate(&request).map(|tc| Found {
        bin: tc.bin.display().to_string(),
        simulated: tc.simulated,
        laid_out: request != Request::Simulated || tc.bin.join(SIM_MARKER).exists(),
        tools: TOOLS
            .iter()
            .map(|tool| {
                let path = tc.resolve(tool).map(|p| p.display().to_string());
                (
                    tool.to_string(),
                    path.map_or(serde_json::Value::Null, Into::into),
                )
            })
            .collect(),
        libwalrus: Library {
            path: tc.libwalrus().display().to_string(),
            exists: tc.libwalrus().exists(),
        },
    });
    let status = i32::from(toolchain.is_none());
    let shown = Shown { source, toolchain };
    if json {
        let text = serde_json::to_string(&shown).unwrap_or_default();
        out(&format!("{text}\n"));
    } else {
        out(&show_text(&shown));
    }
    status
}

fn show_text(shown: &Shown) -> String {
    let source = match shown.source {
        "python3" => "an installed neuronxcc package (asked of python3)",
        s => s,
    };
    let mut text = format!("source: {source}\n");
    let Some(tc) = &shown.toolchain else {
        text.push_str(
            "toolchain: none found (use --toolchain DIR, NXCC_TOOLCHAIN, or --toolchain sim)\n",
        );
        return text;
    };
    let simulated = if tc.simulated { " (simulated)" } else { "" };
    text.push_str(&format!("toolchain: {}{simulated}\n", tc.bin));
    if !tc.laid_out {
        text.push_str("  (laid out on first use)\n");
    }
    for (tool, path) in &tc.tools {
        text.push_str(&format!(
            "  {tool:<18} {}\n",
            path.as_str().unwrap_or("missing")
        ));
    }
    let missing = if tc.libwalrus.exists {
        ""
    } else {
        " (missing)"
    };
    text.push_str(&format!(
        "  {LIBWALRUS:<18} {}{missing}\n",
        tc.libwalrus.path
    ));
    if tc.simulated {
        text.push_str(TEST_INSTRUMENT);
        text.push('\n');
    }
    text
}

/// `toolchain`'s command line as clap defines it (nxcc's completions and manual page).
pub fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<ToolchainCommand>(prog, "toolchain")
}
