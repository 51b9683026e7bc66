//! Where a rule comes from. Every decision the plan records carries one of these tags, so a user
//! reading a dry run knows which behaviour is exact (SEED) and which is reconstructed (RECON).

use serde::Serialize;
use std::fmt;

/// Where a rule comes from, as a dry run tags it (`SEED`, `WIKI`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Source {
    /// Stated in the seed document (the compile-pipeline reverse-engineering notes).
    #[serde(rename = "SEED")]
    Seed,
    /// Public reverse-engineering notes about the same compiler version.
    #[serde(rename = "WIKI")]
    Wiki,
    /// The compiler's public documentation.
    #[serde(rename = "DOCS")]
    Docs,
    /// Observed in public code that invokes the compiler.
    #[serde(rename = "CLIENTS")]
    Clients,
    /// nxcc's reconstruction where every source is silent (see `crate::recon`).
    #[serde(rename = "RECON")]
    Recon,
    /// nxcc's own behaviour, with no counterpart in the original.
    #[serde(rename = "NXCC")]
    Nxcc,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Seed => "SEED",
            Source::Wiki => "WIKI",
            Source::Docs => "DOCS",
            Source::Clients => "CLIENTS",
            Source::Recon => "RECON",
            Source::Nxcc => "NXCC",
        })
    }
}
