//! Reading an XLA HLO module — the model file a framework hands the compiler — into the summary
//! nxcc works from ([`Module`]): its name, the entry computation, its parameters and results
//! (name, dtype, dimensions, bytes), every computation with its instructions' opcodes, and the
//! input/output aliases.
//!
//! Two forms are read, told apart by the first bytes (as [`crate::jobs::ModelFormat::detect`]
//! does): HLO text (the file starts with `HloModule`; `text`) and a binary `HloModuleProto`
//! (anything else; [`proto`], decoded with `prost` from message definitions written here, only
//! the fields nxcc needs — unknown fields are skipped). Either way the reader refuses what a real
//! frontend refuses, with a [`ReadError`] that says where: bytes that are not an `HloModuleProto`
//! (the byte offset and field number of the first thing that does not decode, found by
//! [`wire`]), text that does not parse (the line), a module without an entry computation, an
//! empty file. Neither form panics on any input, and the time taken is linear in its size.
//!
//! - [`looks`]: what a file that is not an HLO module looks like instead (a zip, JSON, text …);
//! - `scan`: an encoded instruction read in place (the pass over a large module's
//!   instructions); `plain`: the same for a text instruction in its plain form;
//! - `shape`: element types, their names and sizes;
//! - [`summary`]: the module summary and what `nxcc hlo-info` prints;
//! - [`command`]: `nxcc hlo-info MODEL [--json]`;
//! - `digest`: a digest of a binary module that leaves its op metadata out (the compile
//!   cache's `hlo_metadata` sloppiness);
//! - [`strip`]: a binary module with its constants zeroed (a reproducer sent without weights).

use std::path::Path;

pub mod command;
pub(crate) mod digest;
pub mod lexer;
pub mod looks;
pub(crate) mod plain;
pub mod proto;
pub(crate) mod scan;
pub(crate) mod shape;
pub mod strip;
pub mod summary;
pub(crate) mod text;
pub mod wire;

pub use shape::{Dtype, Shape};
pub use summary::{Alias, Computation, Largest, Module, Tensor};

/// Why a model could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The file could not be read.
    Io(String),
    /// Zero bytes.
    Empty,
    /// Not an `HloModuleProto` (and not HLO text): what went wrong and where.
    NotProto(String),
    /// Not an HLO module, and recognisably something else: what it looks like ([`looks`]).
    LooksLike(String),
    /// HLO text that does not parse.
    Text {
        /// The 1-based line of the text.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A well-formed module a frontend still refuses (no entry computation, a parameter missing).
    Invalid(String),
    /// A NEFF — what a compile writes — given where a model is read.
    Neff,
}

impl ReadError {
    /// The message for a model at `path`: `model.zip: not an HLO module: it looks like a zip
    /// archive. nxcc reads …`, `model.pb: not an HLO module (not an HloModuleProto: field 3 at
    /// byte 212 runs past the end). nxcc reads …`.
    pub fn render(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            ReadError::Io(e) => format!("{p}: cannot read: {e}"),
            ReadError::Empty => format!("{p}: not an HLO module: the file is empty. {READS}"),
            ReadError::NotProto(m) => {
                format!("{p}: not an HLO module (not an HloModuleProto: {m}). {READS}")
            }
            ReadError::LooksLike(what) => {
                format!("{p}: not an HLO module: it looks like {what}. {READS}")
            }
            ReadError::Text { line, message } => {
                format!("{p}: HLO text does not parse: line {line}: {message}")
            }
            ReadError::Invalid(m) => format!("{p}: not a usable HLO module: {m}"),
            ReadError::Neff => format!(
                "{p}: a NEFF (a compiled model), not an HLO module: nxcc neff-info describes it"
            ),
        }
    }
}

/// What nxcc reads, said after a file that is not it.
pub const READS: &str = "nxcc reads an HLO module: a binary HloModuleProto (as frameworks dump \
     it, `*.hlo_module.pb`) or HLO text (a file that starts with `HloModule`)";

/// Read a module from its bytes: HLO text when they start with `HloModule`, else a binary
/// `HloModuleProto`; bytes that are neither are described by what they look like ([`looks`]).
pub fn parse(bytes: &[u8]) -> Result<Module, ReadError> {
    match form(bytes)? {
        Form::Text => parse_text(bytes),
        Form::Proto => proto::parse(bytes).map_err(|e| match e {
            ReadError::NotProto(m) => match looks::looks_like(bytes) {
                Some(what) => ReadError::LooksLike(what),
                None => ReadError::NotProto(m),
            },
            e => e,
        }),
    }
}

enum Form {
    Text,
    Proto,
}

fn form(bytes: &[u8]) -> Result<Form, ReadError> {
    if bytes.is_empty() {
        Err(ReadError::Empty)
    } else if bytes.starts_with(b"HloModule") {
        Ok(Form::Text)
    } else if looks_like_neff(bytes) {
        Err(ReadError::Neff)
    } else {
        Ok(Form::Proto)
    }
}

/// A NEFF's header (05-neff.md): a small format version at byte 0 and the header size, 1024, at
/// byte 8, both little-endian `u64`s. No `HloModuleProto` starts so (its first byte would be a
/// field of number 0).
fn looks_like_neff(bytes: &[u8]) -> bool {
    let word = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
    };
    matches!((word(0), word(8)), (Some(1..=15), Some(1024)))
}

fn parse_text(bytes: &[u8]) -> Result<Module, ReadError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ReadError::Text {
        line: 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count(),
        message: "not UTF-8".into(),
    })?;
    text::parse(text)
}

/// The most bytes [`read`] takes of a model file: protobuf's limit on one message (2 GiB), so
/// nothing larger can be an `HloModuleProto`.
pub const READ_LIMIT: u64 = 2 << 30;

/// Read the module file at `path`, at most [`READ_LIMIT`] bytes ([`read_limited`]).
pub fn read(path: &Path) -> Result<Module, ReadError> {
    read_limited(path, READ_LIMIT)
}

/// Read the module file at `path`, refusing one of more than `limit` bytes. Only a regular
/// file is read: it is opened without waiting and judged on its descriptor, so a FIFO, a device
/// or a socket is refused at once ([`crate::fsx::regular`]), as is a model directory; the read
/// stops at `limit` by the bytes read, whatever size the file reports.
pub fn read_limited(path: &Path, limit: u64) -> Result<Module, ReadError> {
    let bytes = crate::fsx::regular::read(path, limit).map_err(|e| io_error(&e))?;
    parse(&bytes)
}

/// The [`ReadError::Io`] of a model that cannot be read (`a directory, not an HLO module file`).
pub(crate) fn io_error(e: &std::io::Error) -> ReadError {
    if crate::fsx::regular::is_not_regular(e) && e.to_string().starts_with("a directory") {
        return ReadError::Io("a directory, not an HLO module file".to_string());
    }
    ReadError::Io(e.to_string())
}

/// The bytes of the model file at `path` for `nxcc hlo-info`, a process that reads one file and
/// exits: a regular file only (see [`read_limited`]), mapped rather than copied when it reports
/// a size ([`crate::fsx::Mapped`]: a truncation meanwhile is an error, never a SIGBUS), else read
/// up to [`READ_LIMIT`] bytes (a `/proc` file reports none).
pub(crate) fn with_model_bytes<T>(path: &Path, f: impl FnOnce(&[u8]) -> T) -> Result<T, ReadError> {
    use crate::fsx::regular;
    let file = regular::open(path).map_err(|e| io_error(&e))?;
    let size = file.metadata().map_err(|e| io_error(&e))?.len();
    if size > 0 {
        if let Some(m) = crate::fsx::Mapped::new(&file, size) {
            let out = f(m.bytes());
            if m.truncated() {
                return Err(ReadError::Io(
                    "the file was truncated while it was read".into(),
                ));
            }
            return Ok(out);
        }
    }
    let bytes = regular::read_limited(&file, READ_LIMIT).map_err(|e| io_error(&e))?;
    Ok(f(&bytes))
}
