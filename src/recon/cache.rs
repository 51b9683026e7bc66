//! RECON rules of the compile cache (spec 07-cache-parallel.md). The ecosystem's caches record
//! failed compiles and skip them unless `--retry_failed_compilation`; which failures are *results*
//! of the inputs (worth remembering) and which are accidents of the moment is not written down
//! anywhere. This file is the one place that decides it ([`failure_is_cacheable`]).

use crate::engine::metrics::{JobMetrics, JobStatus};

/// Whether a plan's compile can be served from the cache: its one product must be the NEFF at
/// `--output` — the pipeline runs Kelper (which writes it), and neither NeffWrapper (which also
/// writes `<stem>.wrapped.hlo.pb`) nor SaveTemps (which copies the work dir into the launch
/// directory). A `--pipeline` that stops earlier, `-O3` (no backend), or one of those two compile
/// without the cache.
pub fn plan_is_cacheable(pipeline: &[&str]) -> bool {
    pipeline.contains(&"Kelper")
        && !pipeline
            .iter()
            .any(|j| matches!(*j, "NeffWrapper" | "SaveTemps"))
}

/// What the environment's errors look like in error lines, whoever prints them: the C
/// library's `strerror` texts (Rust's `io::Error` and Python's `OSError` print the same words)
/// of the errors a compile meets because of the machine, the moment or a path outside the key —
/// a full or failing disk, a quota, a permission, a read-only file system, too little memory or
/// too many open files, a path that is not a directory or too long.
pub const ENVIRONMENT_ERRORS: &[&str] = &[
    "No space left on device",
    "Disk quota exceeded",
    "Input/output error",
    "Permission denied",
    "Operation not permitted",
    "Read-only file system",
    "Cannot allocate memory",
    "Out of memory",
    "Too many open files",
    "File too large",
    "Is a directory",
    "Not a directory",
    "File name too long",
    "Too many levels of symbolic links",
    "Stale file handle",
    "Text file busy",
];

/// Error codes nxcc reports for failures of the environment, not of the model: a missing tool
/// (`EDRV082`), a tool that could not be started (`EDRV090`), a compiler output that could not
/// be moved to `--output` (`EDRV112`), a cache directory that must not be used (`EDRV113`).
pub const ENVIRONMENT_CODES: &[&str] = &[
    "[NCC_EDRV082]",
    "[NCC_EDRV090]",
    "[NCC_EDRV112]",
    "[NCC_EDRV113]",
];

/// Signals that end a tool because of the moment, not of its input: killed (most often by the
/// out-of-memory killer), terminated, interrupted, hung up, a broken pipe, a CPU or file-size
/// limit, an alarm.
pub const ENVIRONMENT_SIGNALS: &[i32] = &[
    libc::SIGKILL,
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGPIPE,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGALRM,
];

/// Whether a failed compile is remembered as a failed entry: only a failure the key determines,
/// reported by a tool or by the worker in a tool's stead. All of these must hold:
/// - the compile ran and ended with status 70 (not an interrupt or cancellation, not a usage
///   error): a worker or compiler process existed, at least one job finished, nothing was
///   interrupted;
/// - a job failed by itself: a tool exited with a non-zero status, or crashed on a signal of
///   its own (SIGSEGV, SIGABRT, ...; not one in [`ENVIRONMENT_SIGNALS`], nor a status
///   128 + such a signal), or an in-process job (the worker in a tool's stead) reported an
///   error — not a timeout (`--job-timeout` is not in the key), not a cancellation;
/// - no error line shows the environment: none holds an [`ENVIRONMENT_ERRORS`] text or an
///   [`ENVIRONMENT_CODES`] code, none is an `[F137]` banner (the out-of-memory killer; the same
///   compile may well succeed with more memory or alone).
///
/// A full disk, an I/O error, a permission, a missing tool, a killed process, a timeout, an
/// interrupt, a path that cannot be written: none of these is remembered.
pub fn failure_is_cacheable(
    exit_status: i32,
    ran: bool,
    jobs: &[JobMetrics],
    error_lines: &[String],
    interrupted: bool,
) -> bool {
    let failed_by_itself = |j: &JobMetrics| {
        j.status == JobStatus::Failed
            && match (j.exit_status, j.signal) {
                (_, Some(sig)) => !ENVIRONMENT_SIGNALS.contains(&sig),
                (Some(code), None) => {
                    code != 0
                        && !crate::engine::failure::signal_of_status(code)
                            .is_some_and(|s| ENVIRONMENT_SIGNALS.contains(&s))
                }
                // In-process: the worker reported the job's error itself.
                (None, None) => j.processes == 0,
            }
    };
    let environment_line = |l: &String| {
        l.starts_with("[F137]")
            || ENVIRONMENT_ERRORS.iter().any(|e| l.contains(e))
            || ENVIRONMENT_CODES.iter().any(|c| l.contains(c))
    };
    exit_status == crate::error::EXIT_COMPILE_FAILED
        && ran
        && !interrupted
        && !jobs.is_empty()
        && jobs.iter().any(failed_by_itself)
        && !jobs
            .iter()
            .any(|j| matches!(j.status, JobStatus::TimedOut | JobStatus::Cancelled))
        && !error_lines.iter().any(environment_line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32) -> JobMetrics {
        let mut j = job(JobStatus::Failed, None);
        j.exit_status = Some(code);
        j
    }

    fn job(status: JobStatus, signal: Option<i32>) -> JobMetrics {
        JobMetrics {
            job: "WalrusDriver".into(),
            status,
            start_s: 0.0,
            wall_s: 0.1,
            user_s: 0.0,
            sys_s: 0.0,
            max_rss_kb: 1,
            exit_status: None,
            signal,
            processes: 1,
        }
    }

    #[test]
    fn only_plans_whose_product_is_the_neff_are_cached() {
        let full = [
            "HLOToTensorizer",
            "XLAInferGoldens",
            "Frontend",
            "WalrusDriver",
            "Kelper",
        ];
        assert!(plan_is_cacheable(&full));
        assert!(!plan_is_cacheable(&full[..4]));
        assert!(!plan_is_cacheable(&["Frontend", "Kelper", "NeffWrapper"]));
        assert!(!plan_is_cacheable(&["Frontend", "Kelper", "SaveTemps"]));
    }

    #[test]
    fn only_failures_of_the_inputs_are_cached() {
        let failed = [exited(1)];
        let lines = vec!["[ERROR] Child process job \"WalrusDriver\" exited abnormally!".into()];
        assert!(failure_is_cacheable(70, true, &failed, &lines, false));
        assert!(failure_is_cacheable(
            70,
            true,
            &[job(JobStatus::Failed, Some(libc::SIGSEGV))],
            &lines,
            false
        ));
        assert!(!failure_is_cacheable(0, true, &failed, &lines, false));
        assert!(!failure_is_cacheable(143, true, &failed, &lines, false));
        assert!(!failure_is_cacheable(70, false, &failed, &lines, false));
        assert!(!failure_is_cacheable(70, true, &[], &lines, false));
        assert!(!failure_is_cacheable(70, true, &failed, &lines, true));
        assert!(!failure_is_cacheable(
            70,
            true,
            &[job(JobStatus::Failed, Some(libc::SIGKILL))],
            &lines,
            false
        ));
        assert!(!failure_is_cacheable(
            70,
            true,
            &[job(JobStatus::TimedOut, None)],
            &lines,
            false
        ));
        assert!(!failure_is_cacheable(
            70,
            true,
            &failed,
            &["[F137] neuronx-cc was forcibly killed".into()],
            false
        ));
    }

    #[test]
    fn failures_of_the_environment_are_not_cached() {
        let failed = [exited(1)];
        let line = |l: &str| vec![l.to_string()];
        for l in [
            "  OSError: [Errno 28] No space left on device",
            "[ERROR] [NCC_EDRV087] Kelper could not write /o/x.neff: No space left on device (os error 28) - Check",
            "  write error: Input/output error",
            "  open(/out): Permission denied",
            "[ERROR] [NCC_EDRV082] Could not find walrus_driver - Point --toolchain",
            "[ERROR] [NCC_EDRV090] Could not start /t/x: Exec format error - Check",
            "[ERROR] [NCC_EDRV087] Kelper could not write /o: Is a directory (os error 21) - Check",
        ] {
            assert!(!failure_is_cacheable(70, true, &failed, &line(l), false), "{l}");
        }
        // A tool that exited 137 or was terminated: the moment, not the model.
        let lines = line("[ERROR] x exited abnormally");
        assert!(!failure_is_cacheable(
            70,
            true,
            &[exited(137)],
            &lines,
            false
        ));
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGPIPE, libc::SIGXFSZ] {
            let j = [job(JobStatus::Failed, Some(sig))];
            assert!(!failure_is_cacheable(70, true, &j, &lines, false), "{sig}");
        }
        // Nothing failed by itself (every job ok or skipped): not a failure of the model.
        assert!(!failure_is_cacheable(
            70,
            true,
            &[job(JobStatus::Ok, None)],
            &lines,
            false
        ));
        // A missing tool: no process ran for the job, and the error says so.
        let mut spawn = job(JobStatus::Failed, None);
        spawn.processes = 0;
        assert!(!failure_is_cacheable(
            70,
            true,
            &[spawn.clone()],
            &line("[ERROR] [NCC_EDRV082] Could not find x - Point"),
            false
        ));
        // An in-process job's own error (the worker in a tool's stead) is the model's.
        assert!(failure_is_cacheable(
            70,
            true,
            &[spawn],
            &line("[ERROR] [NCC_EDRV087] Kelper could not pack the NEFF: sg00/def.json: invalid JSON - Check"),
            false
        ));
    }
}
