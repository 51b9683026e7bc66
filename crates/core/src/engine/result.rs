//! A compile's result, as every way of running a plan and every cache layer gives it: its
//! [`Status`] (what failed, typed), the error lines it printed (rendered once, where each
//! failure was found), each job's figures, and what the cache's record of it needs (the work
//! dir, the pids its log lines carry).

use std::path::PathBuf;

use super::metrics::JobMetrics;
use crate::result::{Failure, Status};

/// What happened.
#[derive(Debug, Clone, PartialEq)]
pub struct CompileResult {
    /// How the compile ended.
    pub status: Status,
    /// Every error line printed, in order (a daemon's answer, a report, a cached failure).
    pub lines: Vec<String>,
    /// Each job's figures, in the order they ran.
    pub jobs: Vec<JobMetrics>,
    /// The compile's work dir (`None`: the compile failed before making one, or ran no jobs here).
    pub work_dir: Option<PathBuf>,
    /// The work dir was kept.
    pub kept: bool,
    /// The worker's (or the compiler's) pid, if one ran: its lines in the shared log file carry it.
    pub worker_pid: Option<u32>,
    /// This (supervising) process's pid, as its log lines carry it.
    pub supervisor_pid: u32,
}

impl CompileResult {
    /// A result of this process's compile: `status`, the error lines printed, the jobs' figures.
    pub fn new(status: Status, lines: Vec<String>, jobs: Vec<JobMetrics>) -> CompileResult {
        CompileResult {
            status,
            lines,
            jobs,
            work_dir: None,
            kept: false,
            worker_pid: None,
            supervisor_pid: std::process::id(),
        }
    }

    /// A success with these jobs.
    pub fn succeeded(jobs: Vec<JobMetrics>) -> CompileResult {
        CompileResult::new(Status::Succeeded, Vec::new(), jobs)
    }

    /// A failure that printed `lines` (no job ran).
    pub fn failed(failure: Failure, lines: Vec<String>) -> CompileResult {
        CompileResult::new(Status::Failed(failure), lines, Vec::new())
    }

    /// The exit status nxcc ends with for it.
    pub fn exit_status(&self) -> i32 {
        self.status.exit_status()
    }

    /// Whether it succeeded.
    pub fn ok(&self) -> bool {
        self.status.succeeded()
    }

    /// The failure, when it failed.
    pub fn failure(&self) -> Option<&Failure> {
        self.status.failure()
    }

    /// The largest peak RSS of its jobs, KiB (`None`: no job ran).
    pub fn peak_rss_kb(&self) -> Option<u64> {
        self.jobs.iter().map(|j| j.max_rss_kb).max()
    }
}
