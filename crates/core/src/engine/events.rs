//! What a compile's worker reports to its supervisor, event by event, over the report pipe
//! (`crate::run::events`): the jobs planned, each job's start and figures, every error line,
//! and the end. The daemon forwards the same events to its clients.

use serde::{Deserialize, Serialize};

use super::metrics::JobMetrics;
use crate::job_name::JobName;
use crate::result::Status;

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The jobs about to run, in order.
    Pipeline {
        /// The jobs, in run order.
        jobs: Vec<JobName>,
    },
    /// A job is starting.
    JobStarted {
        /// The job (`Frontend`).
        job: JobName,
        /// Its place in the run, from 1.
        index: usize,
        /// How many jobs the run has.
        total: usize,
    },
    /// A job has ended (in any way), with its figures.
    JobFinished(JobMetrics),
    /// An error line the worker printed (`[ERROR] ...`, an F-code banner, a stderr tail line).
    Error {
        /// The line as printed, without the line end.
        line: String,
    },
    /// The worker is done; its exit status follows.
    Done {
        /// The compile's exit status: 0 on success, else the status nxcc exits with (70 for a
        /// failed compile).
        exit_status: i32,
        /// How the worker's part ended, what failed (the supervisor reports it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<Status>,
    },
}

/// Parse one line of the report pipe (unknown or malformed lines are ignored by the reader).
pub fn parse(line: &str) -> Option<Event> {
    serde_json::from_str(line).ok()
}
