//! Reproducer bundles: what support needs to replay a failed compile, in one file, and the
//! replay. `compile --gen-reproducer[=error|always]` (and `parallel-compile --gen-reproducer`, one
//! bundle per graph that failed) writes `nxcc-reproducer-<key>.tar.gz` ([`mod@write`]), holding
//!
//! - `model/<name>`: the model as compiled (its constants zeroed with
//!   `--reproducer-strip-constants`: [`crate::hlo::strip`]);
//! - `argv.json`: the command line as given, where it ran, and the arguments a replay uses
//!   (the compile semantics only, in one spelling: [`crate::remote::action::remote_arguments`]);
//!   `compile_flags.json` when the compile came from an entry of the framework's cache;
//! - `versions.json`: nxcc's version and identity, the toolchain's (or the external compiler's);
//! - `env.json`: the `NEURON_*`, `XLA_*` and `NXCC_*` variables, those whose names say they
//!   hold a secret left out (by name, listed);
//! - `log.txt`: the compile's lines of its log; `failure.json`: how it ended (the job, its exit
//!   status or signal, its error code, peak memory, the error lines); `cache_key.json`: what went
//!   into its cache key;
//! - `repro.sh`: the compile again, with the bundle's model and environment;
//! - `manifest.json`: every other file with its size and blake3.
//!
//! `nxcc reproduce BUNDLE` ([`replay`]) treats the bundle as untrusted input: unpacked by the
//! distrustful archive reader (no links, no absolute or `..` names, bounded sizes and counts),
//! checked against its manifest, its arguments compile semantics only, its environment only the
//! variables a compile request may set; it compiles the model in a scratch directory and says
//! whether the same failure recurred — the same job, status and code — (exit 0) or not (exit 1,
//! with what differed).

pub mod replay;
pub mod sent;
pub mod write;

use serde::{Deserialize, Serialize};

use crate::engine::result::CompileResult;
use crate::result::{Failure, JobEnd, Status};

/// The bundle's format, in its manifest.
pub const FORMAT: &str = "nxcc-reproducer-1";
/// The manifest's name in the bundle.
pub const MANIFEST: &str = "manifest.json";
/// The directory the model is in, in the bundle.
pub const MODEL_DIR: &str = "model";
/// The prefixes of the environment variables a bundle keeps.
pub const ENV_PREFIXES: [&str; 3] = ["NEURON_", "XLA_", "NXCC_"];
/// Words that mark a variable as a secret (left out of a bundle by its name).
pub const SECRET_WORDS: [&str; 7] = [
    "SECRET",
    "TOKEN",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "PRIVATE",
    "AUTH",
];

pub use crate::cli::settings::When;

/// Whether a compile that ended with `status` gets a bundle when `--gen-reproducer` asked for
/// one `when` (an interrupted or cancelled compile never does: there is nothing of its own to
/// replay).
pub fn wanted(when: When, status: &Status) -> bool {
    match status {
        Status::Failed(_) => true,
        Status::Succeeded => when == When::Always,
        Status::Interrupted(_) | Status::Cancelled(_) => false,
    }
}

/// Whether a variable is kept in a bundle: one of [`ENV_PREFIXES`], and not a secret by its
/// name.
pub fn env_kept(name: &str) -> Result<(), &'static str> {
    if !ENV_PREFIXES.iter().any(|p| name.starts_with(p)) {
        return Err("not a compiler variable");
    }
    let upper = name.to_ascii_uppercase();
    if SECRET_WORDS.iter().any(|w| upper.contains(w)) || upper.ends_with("_KEY") {
        return Err("a secret, by its name");
    }
    Ok(())
}

/// What a failure is compared by: how the compile ended, the job, its status, its code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// `succeeded`, `failed`, `interrupted`, `cancelled`.
    pub outcome: String,
    /// The job that failed, when one did.
    pub job: Option<String>,
    /// How it ended: `exit status 3`, `SIGSEGV`, `timed out`, `error`, or what failed.
    pub status: Option<String>,
    /// The error code printed (`NCC_EVRF024`, `F137`), if any.
    pub code: Option<String>,
}

impl Signature {
    /// The signature of a compile's result.
    pub fn of(result: &CompileResult) -> Signature {
        let (outcome, failure) = match &result.status {
            Status::Succeeded => ("succeeded", None),
            Status::Failed(f) => ("failed", Some(f)),
            Status::Interrupted(_) => ("interrupted", None),
            Status::Cancelled(_) => ("cancelled", None),
        };
        let (job, status) = failure.map(job_and_status).unwrap_or((None, None));
        let signal = failure.and_then(Failure::signal);
        let code = failure.and_then(|_| {
            crate::profile::code_in(&result.lines)
                .or_else(|| signal.map(|s| crate::engine::failure::code(s).to_string()))
        });
        Signature {
            outcome: outcome.to_string(),
            job,
            status,
            code,
        }
    }

    /// In words: `failed at WalrusDriver: exit status 3 (code NCC_EVRF024)`.
    pub fn describe(&self) -> String {
        let mut s = self.outcome.clone();
        if let Some(j) = &self.job {
            s.push_str(&format!(" at {j}"));
        }
        if let Some(st) = &self.status {
            s.push_str(&format!(": {st}"));
        }
        if let Some(c) = &self.code {
            s.push_str(&format!(" (code {c})"));
        }
        s
    }

    /// What differs from `other`, field by field (empty: the same).
    pub fn differences(&self, other: &Signature) -> Vec<String> {
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".into());
        let mut d = Vec::new();
        if self.outcome != other.outcome {
            d.push(format!("outcome: {} → {}", self.outcome, other.outcome));
        }
        for (what, a, b) in [
            ("job", &self.job, &other.job),
            ("status", &self.status, &other.status),
            ("code", &self.code, &other.code),
        ] {
            if a != b {
                d.push(format!("{what}: {} → {}", show(a), show(b)));
            }
        }
        d
    }
}

/// The job a failure is of, and how it ended.
fn job_and_status(f: &Failure) -> (Option<String>, Option<String>) {
    let sig = crate::run::signals::signal_text;
    match f {
        Failure::Job { job, end } => (
            job.as_ref().map(ToString::to_string),
            Some(match end {
                JobEnd::Exited(c) => format!("exit status {c}"),
                JobEnd::Crashed(s) => sig(*s),
                JobEnd::Error => "error".to_string(),
            }),
        ),
        Failure::Timeout { job, .. } => (Some(job.to_string()), Some("timed out".into())),
        Failure::OutOfMemory { job, .. } => (
            job.as_ref().map(ToString::to_string),
            Some(sig(libc::SIGKILL)),
        ),
        Failure::WorkerLost { signal, .. } => (
            None,
            Some(signal.map_or_else(|| "the worker was lost".into(), sig)),
        ),
        other => (None, Some(other.describe())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_name::JobName;

    #[test]
    fn which_variables_a_bundle_keeps() {
        for ok in [
            "NEURON_CC_FLAGS",
            "XLA_FLAGS",
            "NXCC_SIM_FAULT",
            "NEURON_RT_VISIBLE_CORES",
        ] {
            assert_eq!(env_kept(ok), Ok(()), "{ok}");
        }
        for secret in [
            "NXCC_REMOTE_TOKEN",
            "NEURON_SECRET",
            "NXCC_PASSWORD_FILE",
            "XLA_API_KEY",
            "NEURON_AUTH_HEADER",
        ] {
            assert_eq!(env_kept(secret), Err("a secret, by its name"), "{secret}");
        }
        for other in ["PATH", "LD_PRELOAD", "AWS_SECRET_ACCESS_KEY", "HOME"] {
            assert!(env_kept(other).is_err(), "{other}");
        }
    }

    #[test]
    fn signatures_compare_job_status_and_code() {
        let failed = |job: &str, end: JobEnd, lines: &[&str]| {
            let mut r = CompileResult::failed(
                Failure::Job {
                    job: JobName::named(job),
                    end,
                },
                lines.iter().map(|s| s.to_string()).collect(),
            );
            r.lines.push(String::new());
            Signature::of(&r)
        };
        let a = failed(
            "WalrusDriver",
            JobEnd::Exited(3),
            &["[ERROR] [NCC_EVRF024] x"],
        );
        assert_eq!(
            a.describe(),
            "failed at WalrusDriver: exit status 3 (code NCC_EVRF024)"
        );
        assert!(a.differences(&a.clone()).is_empty());
        let b = failed("WalrusDriver", JobEnd::Crashed(libc::SIGSEGV), &[]);
        assert_eq!(
            a.differences(&b),
            [
                "status: exit status 3 → SIGSEGV",
                "code: NCC_EVRF024 → F139"
            ]
        );
        let ok = Signature::of(&CompileResult::succeeded(Vec::new()));
        assert_eq!(
            a.differences(&ok),
            [
                "outcome: failed → succeeded",
                "job: WalrusDriver → none",
                "status: exit status 3 → none",
                "code: NCC_EVRF024 → none"
            ]
        );
        assert!(wanted(When::Error, &Status::Failed(Failure::Internal)));
        assert!(!wanted(When::Error, &Status::Succeeded));
        assert!(wanted(When::Always, &Status::Succeeded));
        assert!(!wanted(When::Always, &Status::Interrupted(2)));
    }
}
