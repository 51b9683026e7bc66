//! `nxcc toolchain`: `show` says where a compile would take its toolchain from (a real one or the
//! simulated one) and each tool's path; `sim DIR` has the simulated toolchain behind
//! [`Simulator`](super::Simulator) lay itself out in `DIR`.

use crate::cli::argparse::{Nargs, Positional};
use crate::cli::flags::{self, flag, Action, Choices, Flag, Kind as FlagKind, Scope, Visibility};
use crate::cli::subcommand::{err, out, Stop, Subcommand, HELP};
use crate::recon::toolchain::{SIM_MARKER, TOOLCHAIN_ENV};
use crate::toolchain::{self, Request, LIBWALRUS, TEST_INSTRUMENT, TOOLS};

static TOOLCHAIN_FLAG: Flag = flag(
    "--toolchain",
    &[],
    "toolchain",
    Action::Store,
    FlagKind::Str,
    flags::Default::None,
    Choices::Any,
    Visibility::Public,
    Scope::Compile,
    "nxcc",
    "For show: the toolchain to describe (DIR or sim), as compile's --toolchain takes it.",
);

const POSITIONALS: [Positional; 2] = [
    Positional {
        metavar: "{sim,show}",
        nargs: Nargs::One,
        help: "sim DIR: lay out a simulated toolchain in DIR; show: say where the toolchain comes from.",
    },
    Positional {
        metavar: "DIR",
        nargs: Nargs::Optional,
        help: "The directory to lay the simulated toolchain out in (for sim).",
    },
];

static OWN_FLAGS: [&Flag; 2] = [&HELP, &TOOLCHAIN_FLAG];

static COMMAND: Subcommand = Subcommand {
    name: "toolchain",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Lay out or describe a toolchain directory.\n\n  sim DIR   lay out a standalone simulated toolchain in DIR: bin/nxcc-sim (this executable),\n            bin/<tool> links to it, bin/.nxcc-simulated-toolchain, lib/libwalrus.so (when\n            built; a test instrument: its outputs cannot run on Neuron hardware)\n  show      say where a compile would take its toolchain from, and each tool's path",
};

/// `nxcc toolchain sim DIR` / `nxcc toolchain show`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let usage_error = |message: &str| Stop::Usage(COMMAND.usage_error(prog, message)).report();
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let action = parsed.positionals.first().and_then(|v| v.first());
    let dir = parsed.positionals.get(1).and_then(|v| v.first());
    match (action.map(String::as_str), dir) {
        (None, _) => usage_error("the following arguments are required: {sim,show}"),
        (Some("sim"), None) => {
            usage_error("toolchain sim: the following arguments are required: DIR")
        }
        (Some("sim"), Some(dir)) => {
            if parsed.str("toolchain").is_some() {
                return usage_error("--toolchain applies to show only");
            }
            match crate::toolchain::simulator() {
                Some(simulator) => simulator.lay_out_command(dir),
                None => {
                    err(&format!(
                        "[ERROR] cannot lay out a simulated toolchain: {}\n",
                        crate::toolchain::no_simulator()
                    ));
                    1
                }
            }
        }
        (Some("show"), Some(extra)) => usage_error(&format!("unrecognized arguments: {extra}")),
        (Some("show"), None) => show(parsed.str("toolchain")),
        (Some(other), _) => usage_error(&format!(
            "argument {{sim,show}}: invalid choice: {} (choose from 'sim', 'show')",
            crate::cli::argparse::py_repr(other)
        )),
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
