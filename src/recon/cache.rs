//! RECON rules of the compile cache (07). The ecosystem's caches record failed compiles and skip
//! them unless `--retry_failed_compilation`; which failures are *results* of the inputs (worth
//! remembering) and which are accidents of the moment is not written down anywhere.

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

/// Whether a failed compile is remembered as a failed entry: only a failure the inputs caused —
/// the compile ran (a worker or compiler process existed and at least one job finished) and ended
/// with status 70 — and not one the moment caused: an interrupt or cancellation, a job timeout
/// (`--job-timeout` is not part of the key), or a process killed by SIGKILL (`[F137]`, most often
/// the out-of-memory killer; the same compile may well succeed with more memory or alone).
pub fn failure_is_cacheable(
    exit_status: i32,
    ran: bool,
    jobs: &[JobMetrics],
    error_lines: &[String],
    interrupted: bool,
) -> bool {
    exit_status == crate::error::EXIT_COMPILE_FAILED
        && ran
        && !interrupted
        && !jobs.is_empty()
        && jobs.iter().all(|j| {
            j.signal != Some(libc::SIGKILL)
                && !matches!(j.status, JobStatus::TimedOut | JobStatus::Cancelled)
        })
        && !error_lines.iter().any(|l| l.starts_with("[F137]"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let failed = [job(JobStatus::Failed, None)];
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
}
