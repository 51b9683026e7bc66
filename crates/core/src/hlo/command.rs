//! `nxcc hlo-info MODEL [--json]`: what is in an HLO module — its name, the entry computation,
//! its parameters and results (number, name, shape, dtype, bytes) with their byte totals, the
//! instruction count, an opcode histogram, the computations and the largest tensors (with the
//! framework op each came from). `--json` prints the same as one JSON object with stable keys
//! (`format`, `module`, `id`, `file_size`, `entry_computation`, `parameters`, `results`,
//! `parameter_bytes`, `result_bytes`, `instruction_count`, `opcodes`, `computations`,
//! `largest_tensors`, `aliases`).
//!
//! Only a regular file is read (a FIFO, a device or a socket is refused at once, without waiting
//! on it: `super::with_model_bytes`). A file that is not an HLO module (or cannot be read):
//! the reader's message on stderr
//! (`model.pb: not an HloModuleProto: field 3 at byte 212 runs past the end`), exit 1. Usage
//! errors: clap's words, exit 2.

use std::path::{Path, PathBuf};

use crate::cli::subcommand::{err, out, parse, DriverOptions};

/// Exit status of a model that cannot be read as an HLO module.
pub const EXIT_INVALID: i32 = 1;

/// Describe an HLO module: its parameters and results, instructions and computations.
#[derive(Debug, clap::Parser)]
pub(crate) struct HloInfo {
    /// The model: a binary HloModuleProto or HLO text.
    #[arg(value_name = "MODEL")]
    pub(crate) model: PathBuf,
    /// Print the same information as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

/// Run `hlo-info` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let cmd: HloInfo = match parse(prog, "hlo-info", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let file: &Path = &cmd.model;
    let read = super::with_model_bytes(file, |bytes| (bytes.len() as u64, super::parse(bytes)));
    let (size, module) = match read {
        Ok((size, Ok(m))) => (size, m),
        Ok((_, Err(e))) | Err(e) => {
            err(&format!("{prog} hlo-info: error: {}\n", e.render(file)));
            return EXIT_INVALID;
        }
    };
    if cmd.json {
        let mut text = serde_json::to_string_pretty(&module.to_json(size)).unwrap_or_default();
        text.push('\n');
        out(&text);
    } else {
        out(&module.to_text(size));
    }
    0
}

/// `hlo-info`'s command line as clap defines it (nxcc's completions and manual page).
pub fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<HloInfo>(prog, "hlo-info")
}
