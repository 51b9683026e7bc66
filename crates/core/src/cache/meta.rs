//! The files of a cache entry besides the NEFF: `meta.json` (the key's inputs in clear, the NEFF's
//! blake3 and size, the compile's figures, the model's size, creation and last use) and, for a
//! failed compile, `failed.json` (its error lines and exit status).

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::metrics::JobMetrics;
use crate::engine::Engine;

/// `meta.json`'s format version.
pub const META_FORMAT: u32 = 1;
/// The NEFF of an entry.
pub const NEFF_FILE: &str = "model.neff";
/// The entry's description.
pub const META_FILE: &str = "meta.json";
/// The compile's log lines.
pub const LOG_FILE: &str = "log.txt";
/// A failed compile's error lines and status.
pub const FAILED_FILE: &str = "failed.json";
/// Where a NEFF the compile did not make here came from (a JSON object: the remote server, the
/// action, the worker), left beside the product by what ran the compile; the entry records it as
/// `meta.json`'s `origin` and keeps no such file.
pub const ORIGIN_FILE: &str = "origin.json";

/// The NEFF of an entry: its blake3 (hex) and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NeffInfo {
    /// The NEFF's blake3, 64 hex digits.
    pub blake3: String,
    /// The NEFF's size, bytes.
    pub size: u64,
}

/// `meta.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// [`META_FORMAT`] when written.
    pub format: u32,
    /// The entry's key, 64 hex digits (its directory's name).
    pub key: String,
    /// The key without the model ("the same arguments").
    pub args_key: String,
    /// The args key's inputs in clear (plan version, arguments, plan facts, toolchain identity).
    pub inputs: Value,
    /// The model as compiled: its path then (informational), blake3 and size.
    pub model_path: String,
    /// The model's blake3, 64 hex digits.
    pub model_blake3: String,
    /// The model's size, bytes.
    pub model_size: u64,
    /// How the key took the model: `blake3` (its bytes) or `hlo_metadata` (the module without
    /// its op metadata, so a model that differs from this one's only there is served this
    /// entry). Absent in entries written before it existed: `blake3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_digest_kind: Option<String>,
    /// The digest of the model without its op metadata, when it is a binary HLO module
    /// (`crate::hlo::digest`): what `nxcc cache explain` compares to say that only op metadata
    /// differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_hlo_metadata: Option<String>,
    /// `ok` or `failed`.
    pub status: Status,
    /// The exit status the compile ended with (0 for `ok`).
    pub exit_status: i32,
    /// `None` for a failed compile.
    pub neff: Option<NeffInfo>,
    /// The engine that compiled it (`pipeline` or `external`).
    pub engine: EngineKind,
    /// Each job's figures, in the order they ran.
    pub jobs: Vec<JobMetrics>,
    /// The largest peak RSS of any job, KiB.
    pub peak_rss_kb: u64,
    /// The compile's wall time, seconds (the sum of its jobs').
    pub wall_s: f64,
    /// The nxcc version that wrote the entry.
    pub nxcc_version: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub created: String,
    /// Milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Milliseconds since the Unix epoch, when the entry was written; a hit records its use as
    /// this file's modification time instead of rewriting it (the last use is the later of the
    /// two, see [`super::store::Cache::last_used_ms`]).
    pub last_used_ms: u64,
}

/// How an entry's compile ended: `meta.json`'s `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// `ok`: the entry holds a NEFF.
    Ok,
    /// `failed`: the entry holds `failed.json`.
    Failed,
}

/// Which engine compiled an entry: `meta.json`'s `engine`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// `pipeline`: nxcc's own pipeline.
    Pipeline,
    /// `external`: an external compiler.
    External,
}

impl From<&Engine> for EngineKind {
    fn from(engine: &Engine) -> EngineKind {
        match engine {
            Engine::Pipeline => EngineKind::Pipeline,
            Engine::External(_) => EngineKind::External,
        }
    }
}

/// `failed.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failed {
    /// The exit status a hit on the entry returns.
    pub exit_status: i32,
    /// The error lines a hit on the entry prints again.
    pub error_lines: Vec<String>,
    /// What failed (absent in entries written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<crate::result::Failure>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Read and parse a JSON file.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<T> {
    let bytes = std::fs::read(path)?;
    serde_json::from_slice(&bytes)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Write JSON to a file (pretty, newline-terminated).
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    std::fs::write(path, text)
}
