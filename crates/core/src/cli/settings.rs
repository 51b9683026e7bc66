//! The driver's settings: how this machine runs a compile — where the NEFF and the log go and at
//! which levels, the work directory, the job time limit, the reports, the cache, the remote
//! server, the dry run — lowered once from the parsed namespace ([`super::lower`]). None of them
//! can change the NEFF, so none is keyed: a flag whose field lives here is left out of the cache
//! key and of a remote action's command line because it lives here.
//!
//! Each field is named after its dest (serialisation keeps the table's spelling), grouped as the
//! driver uses them.

use serde::{Deserialize, Serialize};

use super::level;

/// `--dry-run[={text,json}]`: how the plan is shown instead of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DryRun {
    /// The plan as text (`--dry-run`, `--dry-run=text`).
    Text,
    /// The plan as one JSON object (`--dry-run=json`).
    Json,
}

/// The compile's log and console.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log {
    /// `--logfile`, as given (the plan makes it absolute against the launch directory).
    pub logfile: String,
    /// `--logfile-verbose`: the log file's level.
    #[serde(rename = "logfile_verbose")]
    pub file_level: i64,
    /// `--verbose`, as given: the console's level (`35`: the user level with progress dots).
    pub verbose: i64,
}

impl Log {
    /// The level the console shows from (`--verbose 35` is the user level).
    pub(crate) fn console_level(&self) -> i64 {
        level::console_threshold(self.verbose)
    }

    /// Progress dots on the console (`--verbose 35`).
    pub(crate) fn dots(&self) -> bool {
        self.verbose == level::DOTS
    }

    /// Nothing on the console (`--verbose off`).
    pub fn quiet(&self) -> bool {
        self.console_level() >= level::OFF
    }
}

/// The compile's work directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkDir {
    /// `--temp-dir` (`--compile_workdir`, `--workdir`), as given: used and kept; `None`: one is
    /// generated.
    pub temp_dir: Option<String>,
    /// `--keep-work-dir`: keep a generated work directory after a success.
    pub keep_work_dir: bool,
}

/// What a compile writes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reports {
    /// `--timings[=FILE]`: the HTML timeline's file, as given.
    pub timings: Option<String>,
    /// `--trace FILE`: the Chrome trace's file, as given.
    pub trace: Option<String>,
    /// `--submit-metrics`: append the compile's record to the metric store.
    pub submit_metrics: bool,
    /// `--run-id`: the metric record's run id (generated when `None`).
    pub run_id: Option<String>,
    /// `--metrics-timestamp`: the metric record's time stamp (now when `None`).
    pub metrics_timestamp: Option<String>,
}

/// When `--gen-reproducer` writes a bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum When {
    /// When the compile failed (`--gen-reproducer`, `--gen-reproducer=error`).
    Error,
    /// Whatever the outcome (`--gen-reproducer=always`).
    Always,
}

impl When {
    /// From the flag's value.
    pub fn parse(value: &str) -> Option<When> {
        match value {
            "error" => Some(When::Error),
            "always" => Some(When::Always),
            _ => None,
        }
    }
}

/// `--gen-reproducer`: a bundle that replays the compile, written when it fails (or always).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reproducer {
    /// `--gen-reproducer[={error,always}]`: when a bundle is written (`None`: never).
    #[serde(rename = "gen_reproducer")]
    pub when: Option<When>,
    /// `--reproducer-dir`, as given (`None`: the current directory).
    #[serde(rename = "reproducer_dir")]
    pub dir: Option<String>,
    /// `--reproducer-strip-constants`: the model's constants zeroed in the bundle.
    #[serde(rename = "reproducer_strip_constants")]
    pub strip_constants: bool,
}

/// The compile cache's flags (read with the cache directory's configuration file by
/// [`crate::cache`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheFlags {
    /// `--cache_dir`, as given.
    #[serde(rename = "cache_dir")]
    pub dir: Option<String>,
    /// `--no_cache`.
    pub no_cache: bool,
    /// `--retry_failed_compilation`: compile again what the cache remembers as failed.
    #[serde(rename = "retry_failed_compilation")]
    pub retry_failed: bool,
    /// `--cache-max-size`, as given.
    #[serde(rename = "cache_max_size")]
    pub max_size: Option<String>,
    /// `--cache-mode`, as given.
    #[serde(rename = "cache_mode")]
    pub mode: Option<String>,
    /// `--cache-rehash`.
    #[serde(rename = "cache_rehash")]
    pub rehash: bool,
    /// `--cache-secondary`, in order, as given.
    #[serde(rename = "cache_secondary")]
    pub secondary: Vec<String>,
    /// `--cache-sloppiness`, as given.
    #[serde(rename = "cache_sloppiness")]
    pub sloppiness: Option<String>,
}

/// A Remote Execution API server's flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteFlags {
    /// `--remote`: compile on this server.
    #[serde(rename = "remote")]
    pub execute: Option<String>,
    /// `--remote-cache`: share results through this server's action cache.
    #[serde(rename = "remote_cache")]
    pub cache: Option<String>,
    /// `--remote-instance`: the instance name on the server (empty: its default).
    #[serde(rename = "remote_instance")]
    pub instance: String,
}

impl RemoteFlags {
    /// `--remote`, when given and not empty.
    pub fn execute(&self) -> Option<&str> {
        self.execute.as_deref().filter(|s| !s.is_empty())
    }

    /// `--remote-cache`, when given and not empty.
    pub fn cache(&self) -> Option<&str> {
        self.cache.as_deref().filter(|s| !s.is_empty())
    }
}

/// How this machine runs the compile (see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// `--output` (`-o`), as given (the plan makes it absolute against the launch directory).
    pub output: String,
    /// The log and the console.
    #[serde(flatten)]
    pub log: Log,
    /// The work directory.
    #[serde(flatten)]
    pub work_dir: WorkDir,
    /// `--job-timeout`: fail a job that runs longer than this many seconds.
    pub job_timeout: Option<f64>,
    /// The reports.
    #[serde(flatten)]
    pub reports: Reports,
    /// The reproducer bundle.
    #[serde(flatten)]
    pub reproducer: Reproducer,
    /// The compile cache.
    #[serde(flatten)]
    pub cache: CacheFlags,
    /// The remote server.
    #[serde(flatten)]
    pub remote: RemoteFlags,
    /// `--toolchain DIR|sim`, as given (`None`: `NXCC_TOOLCHAIN`, else an installed package).
    pub toolchain: Option<String>,
    /// `--daemon`: send the compile to the daemon.
    pub daemon: bool,
    /// `--dry-run`: show the plan instead of running it.
    pub dry_run: Option<DryRun>,
}

impl Settings {
    /// `--job-timeout` as a duration (`None`: no limit).
    pub(crate) fn job_timeout(&self) -> Option<std::time::Duration> {
        self.job_timeout
            .filter(|s| *s > 0.0 && s.is_finite())
            .map(std::time::Duration::from_secs_f64)
    }
}
