//! `nxcc hlo-info MODEL [--json]`: what is in an HLO module — its name, the entry computation,
//! its parameters and results (number, name, shape, dtype, bytes) with their byte totals, the
//! instruction count, an opcode histogram, the computations and the largest tensors (with the
//! framework op each came from). `--json` prints the same as one JSON object with stable keys
//! (`format`, `module`, `id`, `file_size`, `entry_computation`, `parameters`, `results`,
//! `parameter_bytes`, `result_bytes`, `instruction_count`, `opcodes`, `computations`,
//! `largest_tensors`, `aliases`).
//!
//! Only a regular file is read (a FIFO, a device or a socket is refused at once, without waiting
//! on it: [`super::with_model_bytes`]). A file that is not an HLO module (or cannot be read):
//! the reader's message on stderr
//! (`model.pb: not an HloModuleProto: field 3 at byte 212 runs past the end`), exit 1. Usage
//! errors: argparse's form, exit 2.

use std::path::Path;

use crate::cli::argparse::{Nargs, Positional};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{err, out, Subcommand, HELP};

/// Exit status of a model that cannot be read as an HLO module.
pub const EXIT_INVALID: i32 = 1;

#[rustfmt::skip]
static JSON: Flag = flag("--json", &[], "json", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Print the same information as one JSON object.");

static OWN_FLAGS: [&Flag; 2] = [&HELP, &JSON];

const POSITIONALS: [Positional; 1] = [Positional {
    metavar: "MODEL",
    nargs: Nargs::One,
    help: "The model: a binary HloModuleProto or HLO text.",
}];

static COMMAND: Subcommand = Subcommand {
    name: "hlo-info",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Describe an HLO module: its parameters and results, instructions and computations.",
};

/// Run `hlo-info` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let file = Path::new(&parsed.positionals[0][0]);
    let read = super::with_model_bytes(file, |bytes| (bytes.len() as u64, super::parse(bytes)));
    let (size, module) = match read {
        Ok((size, Ok(m))) => (size, m),
        Ok((_, Err(e))) | Err(e) => {
            err(&format!("{prog} hlo-info: error: {}\n", e.render(file)));
            return EXIT_INVALID;
        }
    };
    if parsed.flag("json") {
        let mut text = serde_json::to_string_pretty(&module.to_json(size)).unwrap_or_default();
        text.push('\n');
        out(&text);
    } else {
        out(&module.to_text(size));
    }
    0
}
