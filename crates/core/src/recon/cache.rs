//! RECON rules of the compile cache (spec 07-cache-parallel.md). The ecosystem's caches record failed compiles and skip
//! them unless `--retry_failed_compilation`; which failures are *results* of the inputs (worth
//! remembering) and which are accidents of the moment is not written down anywhere. This file is
//! the one place that decides it ([`remembers`]), on the failure's kind.

use crate::jobs::Job;
use crate::result::Failure;

/// Whether a plan's compile can be served from the cache: its one product must be the NEFF at
/// `--output` — the pipeline runs Kelper (which writes it), and neither NeffWrapper (which also
/// writes `<stem>.wrapped.hlo.pb`) nor SaveTemps (which copies the work dir into the launch
/// directory). A `--pipeline` that stops earlier, `-O3` (no backend), or one of those two compile
/// without the cache.
pub(crate) fn plan_is_cacheable(pipeline: &[Job]) -> bool {
    pipeline.contains(&Job::Kelper)
        && !pipeline
            .iter()
            .any(|j| matches!(j, Job::NeffWrapper | Job::SaveTemps))
}

/// Whether a failed compile is remembered as a failed entry: only a failure the key determines —
/// a job that failed by itself ([`Failure::Job`]: its tool exited with a non-zero status or
/// crashed on a signal of its own, or the job, run in the worker, reported an error of the
/// model's). Everything else is an accident of the machine or the moment, and the same compile
/// may well succeed again: a timeout (`--job-timeout` is not in the key), a kill (most often the
/// out-of-memory killer: the compile may succeed with more memory or alone), a lost worker, the
/// environment (a full disk, an I/O error, a permission, a missing tool, a path that cannot be
/// written; `crate::recon::failure` says how they are told), a usage error, the remote
/// server, nxcc itself. An interrupt or a cancellation is not a failure at all.
pub fn remembers(failure: &Failure) -> bool {
    matches!(failure, Failure::Job { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job_name::{Job, JobName};
    use crate::result::{Environment, IoCause, JobEnd, RemoteFailure};

    #[test]
    fn only_plans_whose_product_is_the_neff_are_cached() {
        let full = [
            Job::HLOToTensorizer,
            Job::XLAInferGoldens,
            Job::Frontend,
            Job::WalrusDriver,
            Job::Kelper,
        ];
        assert!(plan_is_cacheable(&full));
        assert!(!plan_is_cacheable(&full[..4]));
        assert!(!plan_is_cacheable(&[
            Job::Frontend,
            Job::Kelper,
            Job::NeffWrapper
        ]));
        assert!(!plan_is_cacheable(&[
            Job::Frontend,
            Job::Kelper,
            Job::SaveTemps
        ]));
    }

    #[test]
    fn only_failures_of_the_inputs_are_remembered() {
        let job = |end| Failure::Job {
            job: Some(JobName::Registry(Job::WalrusDriver)),
            end,
        };
        assert!(remembers(&job(JobEnd::Exited(1))));
        assert!(remembers(&job(JobEnd::Crashed(libc::SIGSEGV))));
        assert!(remembers(&job(JobEnd::Error)));
        for f in [
            Failure::Timeout {
                job: JobName::Registry(Job::WalrusDriver),
                seconds: 2.0,
            },
            Failure::OutOfMemory {
                job: Some(JobName::Registry(Job::WalrusDriver)),
                peak_rss_kb: 1,
            },
            Failure::WorkerLost {
                signal: Some(libc::SIGSEGV),
                peak_rss_kb: 1,
            },
            Failure::Environment(Environment::Io(IoCause::DiskFull)),
            Failure::Environment(Environment::MissingTool("walrus_driver".into())),
            Failure::Environment(Environment::Signal(libc::SIGTERM)),
            Failure::Usage,
            Failure::Remote(RemoteFailure::FailedRemotely(70)),
            Failure::Internal,
        ] {
            assert!(!remembers(&f), "{f:?}");
        }
    }
}
