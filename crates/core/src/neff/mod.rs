//! The NEFF container (05-neff.md): a 1024-byte little-endian header followed by a POSIX PAX tar
//! archive, gzip-compressed unless fast loading is asked for.
//!
//! - [`header`]: the header's fields, encoded and decoded;
//! - [`tar`]: the tar block format (ustar headers, PAX records) both sides share;
//! - `names`: which member names are acceptable (relative, no `..`);
//! - [`write`](mod@write): deterministic packing and the atomic file write;
//! - [`kelper`]: the Kelper job's packing of a work directory's subgraph outputs;
//! - [`read`]: layout detection and a streaming, distrustful archive reader;
//! - [`verify`]: the consistency check of a NEFF;
//! - [`summary`]: the JSON summaries `neff-info` prints;
//! - [`extract`]: unpacking into a directory without ever writing outside it;
//! - [`info`]: the `nxcc neff-info` subcommand.

pub mod extract;
pub mod header;
pub mod info;
pub mod kelper;
pub(crate) mod names;
pub mod read;
pub mod summary;
pub mod tar;
pub mod verify;
pub mod write;

use std::path::PathBuf;

pub use read::{Layout, Limits, Member, Neff};
pub use write::{pack, write_atomically, PackOptions};

/// Everything that can go wrong writing or reading a NEFF.
#[derive(Debug, thiserror::Error)]
pub enum NeffError {
    /// The input is neither a headed NEFF nor a bare archive.
    #[error("not a NEFF file: {0}")]
    NotNeff(String),
    /// The archive is damaged or cut short.
    #[error("corrupt NEFF: {0}")]
    Corrupt(String),
    /// The archive holds something nxcc refuses to read (an unsafe name, a link, a device).
    #[error("refusing the NEFF: {0}")]
    Unsafe(String),
    /// A reading limit was reached (decompressed size, member count, metadata size).
    #[error("refusing the NEFF: {0}")]
    Limit(String),
    /// A member asked for is not in the archive.
    #[error("no member named '{0}' in the NEFF")]
    NoSuchMember(String),
    /// What was given to the packer cannot make a NEFF.
    #[error("cannot pack the NEFF: {0}")]
    Invalid(String),
    /// A file the packer needs is missing.
    #[error("missing required input {}", .0.display())]
    MissingInput(PathBuf),
    /// A file the packer needs is unusable.
    #[error("unusable input {}: {reason}", path.display())]
    BadInput {
        /// The unusable file.
        path: PathBuf,
        /// What is wrong with it, in a few words.
        reason: String,
    },
    /// The directory to extract into cannot take the members (it is not empty, not a directory,
    /// or changed meanwhile): the directory's fault, not the NEFF's.
    #[error("cannot extract into {}: {reason}", path.display())]
    Target {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file the operation was on.
        path: PathBuf,
        /// The error of the operation.
        #[source]
        source: std::io::Error,
    },
}

impl NeffError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> NeffError {
        NeffError::Io {
            path: path.into(),
            source,
        }
    }
}

impl From<NeffError> for crate::error::NccError {
    fn from(e: NeffError) -> Self {
        let resolution = match &e {
            NeffError::MissingInput(_) | NeffError::BadInput { .. } => {
                "Check that the backend (walrus_driver) completed for every subgraph."
            }
            NeffError::Io { .. } => "Check the path and its permissions.",
            _ => "",
        };
        crate::error::NccError::neff_pack(e, resolution)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_convert_to_ncc_errors_naming_the_file() {
        let e: crate::error::NccError =
            NeffError::MissingInput(PathBuf::from("/w/sg00/def.json")).into();
        assert_eq!(e.code, Some("EDRV087"));
        let text = e.to_string();
        assert!(text.starts_with("[ERROR] [NCC_EDRV087] missing required input /w/sg00/def.json"));
        assert!(text.contains("walrus_driver"));
    }
}
