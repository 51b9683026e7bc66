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
    Ok,
    Failed,
    Skipped,
    TimedOut,
    Cancelled,
}

/// One job's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobMetrics {
    pub job: String,
    pub status: JobStatus,
    /// Seconds from the start of the pipeline.
    pub start_s: f64,
    pub wall_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    pub max_rss_kb: u64,
    pub exit_status: Option<i32>,
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
    pub run_id: &'a str,
    pub metrics_timestamp: &'a str,
    pub target: &'a str,
    pub optlevel: &'a str,
    pub logical_nc_config: i64,
    pub exit_status: i32,
    pub jobs: &'a [JobMetrics],
}

/// Append one record to `<launch dir>/global_metric_store.json` under an exclusive lock, so
/// concurrent compiles in one directory never interleave.
pub fn submit(launch_dir: &Path, record: &Record) -> std::io::Result<()> {
    let path = launch_dir.join("global_metric_store.json");
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    fs4::fs_std::FileExt::lock_exclusive(&f)?;
    let r = f.write_all(&line).and_then(|_| f.flush());
    let _ = fs4::fs_std::FileExt::unlock(&f);
    r
}

/// This process's own peak RSS in KiB: `VmHWM` of `/proc/self/status`. (`getrusage`'s
/// `ru_maxrss` is not used for this: Linux carries it across `execve`, so it would report the
/// peak of whatever process forked us.)
pub fn own_peak_rss_kb() -> u64 {
    crate::run::os::own_status_field("VmHWM").unwrap_or(0)
}

/// A generated run id: time and pid, unique enough per launch directory.
pub fn generated_run_id() -> String {
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
            job: job.into(),
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
