//! `nxcc toolchain`: `show` says where a compile would take its toolchain from (a real one or the
//! simulated one) and each tool's path; `sim DIR` has the simulated toolchain behind
//! [`Simulator`](super::Simulator) lay itself out in `DIR`.

use crate::cli::subcommand::{err, out, parse, DriverOptions};
use crate::recon::toolchain::{SIM_MARKER, TOOLCHAIN_ENV};
use crate::toolchain::{self, Request, LIBWALRUS, TEST_INSTRUMENT, TOOLS};

// Public, and hidden from the API's documentation, for the test that checks the commands the
// documentation shows against it (`tests/docs.rs`); its doc comments are its `--help`.
/// Lay out or describe a toolchain directory.
///
/// `sim DIR` lays out the simulated toolchain, a test instrument: its NEFFs cannot run on Neuron
/// hardware. `show` says where a compile would take its toolchain from.
#[derive(Debug, clap::Parser)]
#[doc(hidden)]
pub struct ToolchainCommand {
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
        Action::Show { toolchain } => show(toolchain.as_deref()),
    }
}

fn show(option: Option<&str>) -> i32 {
    let launch = std::env::current_dir().unwrap_or_default();
    let env = std::env::var(TOOLCHAIN_ENV).ok().filter(|s| !s.is_empty());
    let request = Request::from(option, env.as_deref(), &launch);
    let source = match (option, &env) {
        (Some(_), _) => "--toolchain".to_string(),
        (None, Some(_)) => TOOLCHAIN_ENV.to_string(),
        (None, None) => "an installed neuronxcc package (asked of python3)".to_string(),
    };
    let mut text = format!("source: {source}\n");
    let tc = toolchain::locate(&request);
    match &tc {
        None => {
            text.push_str(
                "toolchain: none found (use --toolchain DIR, NXCC_TOOLCHAIN, or --toolchain sim)\n",
            );
            out(&text);
            return 1;
        }
        Some(tc) => {
            text.push_str(&format!(
                "toolchain: {}{}\n",
                tc.bin.display(),
                if tc.simulated { " (simulated)" } else { "" }
            ));
            if request == Request::Simulated && !tc.bin.join(SIM_MARKER).exists() {
                text.push_str("  (laid out on first use)\n");
            }
            for tool in TOOLS {
                let path = tc
                    .resolve(tool)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "missing".into());
                text.push_str(&format!("  {tool:<18} {path}\n"));
            }
            let lib = tc.libwalrus();
            text.push_str(&format!(
                "  {LIBWALRUS:<18} {}{}\n",
                lib.display(),
                if lib.exists() { "" } else { " (missing)" }
            ));
            if tc.simulated {
                text.push_str(TEST_INSTRUMENT);
                text.push('\n');
            }
        }
    }
    out(&text);
    0
}
