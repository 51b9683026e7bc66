//! Per-job figures (04-run.md "Measuring every job"): wall time, user and system CPU time, peak
//! RSS (from `wait4`'s rusage for subprocesses; the worker's own CPU delta for in-process jobs),
//! exit status and signal — the summary table written to the log, and `--submit-metrics`'s record
//! appended to `global_metric_store.json` (one JSON object per line) in the launch directory.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// It did its work.
    Ok,
    /// It failed: a non-zero exit, a signal, an error of its own.
    Failed,
    /// It had nothing to do (its step said why, in the log).
    Skipped,
    /// `--job-timeout` elapsed and nxcc killed it.
    TimedOut,
    /// The compile was cancelled while it ran.
    Cancelled,
}

/// One job's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMetrics {
    /// The job (`Frontend`).
    pub job: crate::job_name::JobName,
    /// How it ended.
    pub status: JobStatus,
    /// Seconds from the start of the pipeline.
    pub start_s: f64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// User CPU time of its processes (or the worker's own, in-process), seconds.
    pub user_s: f64,
    /// System CPU time, counted as [`JobMetrics::user_s`] is, seconds.
    pub sys_s: f64,
    /// Peak resident set size, KiB, of its largest process (the worker's own for in-process work).
    pub max_rss_kb: u64,
    /// The exit status (or a library call's return value) that ended it, when it was one; `None`
    /// when nothing exited with a status, or a signal ended it.
    pub exit_status: Option<i32>,
    /// The signal that ended its process, if one did (also after a timeout or a cancellation).
    pub signal: Option<i32>,
    /// Native tool processes the job ran.
    pub processes: u32,
}

/// The summary table the log gets at the end of every compile.
pub fn table(jobs: &[JobMetrics]) -> String {
    let mut out = String::from("Job metrics:\n");
    out.push_str(&format!(
        "  {:<18} {:>9} {:>9} {:>9} {:>9} {:>12} {:>5}  {}\n",
        "job", "start s", "wall s", "user s", "sys s", "peak RSS KB", "procs", "status"
    ));
    for j in jobs {
        let status = match (j.status, j.exit_status, j.signal) {
            (_, _, Some(sig)) => {
                format!("{:?} ({})", j.status, crate::run::signals::signal_text(sig))
            }
            (JobStatus::Failed, Some(code), _) => format!("Failed (exit {code})"),
            _ => format!("{:?}", j.status),
        };
        out.push_str(&format!(
            "  {:<18} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>12} {:>5}  {}\n",
            j.job, j.start_s, j.wall_s, j.user_s, j.sys_s, j.max_rss_kb, j.processes, status
        ));
    }
    let wall: f64 = jobs.iter().map(|j| j.wall_s).sum();
    let peak = jobs.iter().map(|j| j.max_rss_kb).max().unwrap_or(0);
    out.push_str(&format!("  total wall {wall:.3} s, peak RSS {peak} KB\n"));
    out
}

/// The `--submit-metrics` record.
#[derive(Debug, Clone, Serialize)]
pub struct Record<'a> {
    /// `--run-id`, or a generated `nxcc-<ms>-<pid>`.
    pub run_id: &'a str,
    /// `--metrics-timestamp`, or the time the record was written (the log's timestamp format).
    pub metrics_timestamp: &'a str,
    /// `--target`.
    pub target: &'a str,
    /// `--optlevel` (`0` to `3`).
    pub optlevel: &'a str,
    /// `--lnc`: how many physical NeuronCores form one logical core (1 or 2).
    pub logical_nc_config: i64,
    /// The compile's exit status.
    pub exit_status: i32,
    /// Every job's figures, in run order.
    pub jobs: &'a [JobMetrics],
}

/// Append one record to `<launch dir>/global_metric_store.json` under an exclusive lock, so
/// concurrent compiles in one directory never interleave.
pub fn submit(launch_dir: &Path, record: &Record) -> std::io::Result<()> {
    let path = launch_dir.join("global_metric_store.json");
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = crate::fsx::regular::open_append(&path)?;
    fs4::fs_std::FileExt::lock_exclusive(&f)?;
    let r = f.write_all(&line).and_then(|_| f.flush());
    let _ = fs4::fs_std::FileExt::unlock(&f);
    r
}

/// This process's own peak RSS in KiB: `VmHWM` of `/proc/self/status`. (`getrusage`'s
/// `ru_maxrss` is not used for this: Linux carries it across `execve`, so it would report the
/// peak of whatever process forked us.)
pub(crate) fn own_peak_rss_kb() -> u64 {
    crate::run::os::own_status_field("VmHWM").unwrap_or(0)
}

/// A generated run id: time and pid, unique enough per launch directory.
pub(crate) fn generated_run_id() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("nxcc-{}-{}", t.as_millis(), std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(job: &str, status: JobStatus) -> JobMetrics {
        JobMetrics {
            job: crate::job_name::JobName::named(job).unwrap(),
            status,
            start_s: 0.5,
            wall_s: 1.25,
            user_s: 1.0,
            sys_s: 0.1,
            max_rss_kb: 2048,
            exit_status: Some(3),
            signal: None,
            processes: 1,
        }
    }

    #[test]
    fn table_lists_every_job() {
        let t = table(&[
            m("HLOToTensorizer", JobStatus::Ok),
            m("WalrusDriver", JobStatus::Failed),
        ]);
        assert!(
            t.contains("HLOToTensorizer") && t.contains("Failed (exit 3)"),
            "{t}"
        );
        assert!(t.contains("total wall 2.500 s, peak RSS 2048 KB"));
    }

    #[test]
    fn submit_appends_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let jobs = [m("Kelper", JobStatus::Ok)];
        let rec = Record {
            run_id: "r1",
            metrics_timestamp: "2026-01-01T00:00:00Z",
            target: "trn1",
            optlevel: "2",
            logical_nc_config: 1,
            exit_status: 0,
            jobs: &jobs,
        };
        submit(dir.path(), &rec).unwrap();
        submit(
            dir.path(),
            &Record {
                run_id: "r2",
                ..rec
            },
        )
        .unwrap();
        let text = std::fs::read_to_string(dir.path().join("global_metric_store.json")).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["run_id"], "r2");
        assert_eq!(lines[0]["jobs"][0]["job"], "Kelper");
    }
}
