//! The end of a batch: the table on stdout (input, status, wall time, peak RSS, the memory estimate
//! and what it came from — `recorded`, `similar` or the formula's name —, cache), the error
//! lines of the failed compiles, `--report FILE` (the [`Report`] as JSON) and `--timings FILE`
//! (an HTML timeline with one lane per worker slot, one bar per attempt).

use std::path::Path;

use super::{Report, Status};
use crate::engine::timeline::{self, Span};

/// The table printed at the end.
pub fn table(report: &Report) -> String {
    let width = report
        .compiles
        .iter()
        .map(|c| c.input.len())
        .max()
        .unwrap_or(5)
        .max(5);
    let mut t = format!(
        "{:<width$}  {:<9}  {:>8}  {:>12}  {:>12}  {:<8}  {:<5}  {}\n",
        "input", "status", "wall s", "peak RSS MiB", "estimate MiB", "from", "cache", "attempts"
    );
    for c in &report.compiles {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Skipped => "skipped",
        };
        let peak = c
            .peak_rss_kb
            .map(|kb| format!("{:.1}", kb as f64 / 1024.0))
            .unwrap_or_else(|| "-".into());
        let (estimate, from) = match &c.estimate {
            Some(e) => (
                format!("{:.1}", e.bytes as f64 / (1 << 20) as f64),
                match &e.basis {
                    crate::cache::Basis::Recorded => "recorded",
                    crate::cache::Basis::Similar { .. } => "similar",
                    crate::cache::Basis::Default { formula } => formula,
                },
            ),
            None => ("-".into(), "-"),
        };
        t.push_str(&format!(
            "{:<width$}  {:<9}  {:>8.3}  {:>12}  {:>12}  {:<8}  {:<5}  {}\n",
            c.input,
            status,
            c.wall_s,
            peak,
            estimate,
            from,
            c.cache.as_str(),
            c.attempts.len()
        ));
    }
    t.push_str(&format!(
        "{} compiles: {} succeeded, {} failed{}; {:.2} s with at most {} at once{}\n",
        report.compiles.len(),
        report.succeeded,
        report.failed,
        if report.cancelled > 0 {
            format!(", {} cancelled", report.cancelled)
        } else {
            String::new()
        } + &if report.skipped > 0 {
            format!(", {} skipped", report.skipped)
        } else {
            String::new()
        },
        report.makespan_s,
        report.jobs,
        report
            .memory_budget
            .map(|b| format!(" within {:.1} MiB", b as f64 / (1 << 20) as f64))
            .unwrap_or_default()
    ));
    t
}

/// The error lines of every failed compile, with its log (for stderr).
pub fn failures(report: &Report) -> String {
    let mut t = String::new();
    for c in report
        .compiles
        .iter()
        .filter(|c| c.status == Status::Failed)
    {
        t.push_str(&format!("{} failed (log: {}):\n", c.input, c.log));
        for l in &c.error_lines {
            t.push_str(&format!("  {l}\n"));
        }
    }
    t
}

/// The timeline's bars: one per attempt, in the lane of the slot it ran in.
pub fn spans(report: &Report) -> Vec<Span> {
    let mut v: Vec<(usize, Span)> = Vec::new();
    for c in &report.compiles {
        for (i, a) in c.attempts.iter().enumerate() {
            let status = if a.exit_status != 0 {
                "failed"
            } else if a.cache == crate::cache::CacheStatus::Hit {
                "hit"
            } else {
                "ok"
            };
            v.push((
                a.slot,
                Span {
                    lane: format!("slot {}", a.slot + 1),
                    label: if i == 0 {
                        c.stem.clone()
                    } else {
                        format!("{} (retry {i})", c.stem)
                    },
                    start_s: a.start_s,
                    end_s: a.end_s,
                    status: status.to_string(),
                    details: vec![
                        ("input".into(), c.input.clone()),
                        ("cache".into(), a.cache.as_str().to_string()),
                        (
                            "peak RSS KB".into(),
                            a.peak_rss_kb.map(|k| k.to_string()).unwrap_or_default(),
                        ),
                        (
                            "estimate MiB".into(),
                            c.estimate
                                .as_ref()
                                .map(|e| format!("{:.1}", e.bytes as f64 / (1 << 20) as f64))
                                .unwrap_or_default(),
                        ),
                        ("alone".into(), a.alone.to_string()),
                        ("exit status".into(), a.exit_status.to_string()),
                    ],
                },
            ));
        }
    }
    // Lanes in slot order (the timeline draws them in order of appearance).
    v.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.start_s.total_cmp(&b.1.start_s)));
    v.into_iter().map(|(_, s)| s).collect()
}

/// The HTML timeline.
pub fn timings_html(report: &Report) -> String {
    timeline::html(
        &format!("nxcc parallel-compile ({} compiles)", report.compiles.len()),
        &spans(report),
    )
}

/// Write a file as one [`crate::fsx::AtomicFile`] (its directory created first).
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    crate::fsx::atomic::write_file(path, text.as_bytes(), crate::fsx::Durability::Visible)
}

/// The JSON report's text.
pub fn json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheStatus;
    use crate::parallel::{Attempt, CompileResult};

    fn attempt(slot: usize, start_s: f64, exit_status: i32, cache: CacheStatus) -> Attempt {
        Attempt {
            start_s,
            end_s: start_s + 1.0,
            exit_status,
            cache,
            alone: false,
            slot,
            peak_rss_kb: Some(2048),
            error_lines: Vec::new(),
        }
    }

    fn result(stem: &str, status: Status, attempts: Vec<Attempt>) -> CompileResult {
        CompileResult {
            input: format!("/m/{stem}.pb"),
            stem: stem.into(),
            output: format!("/o/{stem}.neff"),
            log: format!("/o/{stem}.log"),
            status,
            exit_status: if status == Status::Ok { 0 } else { 70 },
            cache: attempts.last().map_or(CacheStatus::Off, |a| a.cache),
            estimate: None,
            key: None,
            wall_s: attempts.len() as f64,
            peak_rss_kb: Some(2048),
            error_lines: vec!["[ERROR] boom".into()],
            attempts,
        }
    }

    fn report() -> Report {
        Report {
            nxcc_version: crate::VERSION.into(),
            jobs: 11,
            memory_budget: Some(1 << 30),
            engine: "pipeline".into(),
            cache_dir: None,
            output_dir: "/o".into(),
            makespan_s: 3.0,
            succeeded: 2,
            failed: 1,
            cancelled: 0,
            skipped: 0,
            neuron_cache: None,
            compiles: vec![
                result(
                    "a",
                    Status::Ok,
                    vec![attempt(10, 0.0, 0, CacheStatus::Miss)],
                ),
                result(
                    "b",
                    Status::Ok,
                    vec![
                        attempt(1, 0.5, 70, CacheStatus::Miss),
                        attempt(0, 2.0, 0, CacheStatus::Miss),
                    ],
                ),
                result(
                    "c",
                    Status::Failed,
                    vec![attempt(1, 0.0, 0, CacheStatus::Hit)],
                ),
            ],
        }
    }

    #[test]
    fn lanes_follow_the_slots_and_retries_are_labelled() {
        let s = spans(&report());
        let lanes: Vec<&str> = s.iter().map(|s| s.lane.as_str()).collect();
        assert_eq!(lanes, ["slot 1", "slot 2", "slot 2", "slot 11"]);
        assert_eq!(s[0].label, "b (retry 1)");
        assert_eq!((s[1].label.as_str(), s[1].status.as_str()), ("c", "hit"));
        assert_eq!((s[2].label.as_str(), s[2].status.as_str()), ("b", "failed"));
        assert!(timings_html(&report()).contains("slot 11"));
    }

    #[test]
    fn the_table_and_the_failures() {
        let r = report();
        let t = table(&r);
        assert_eq!(t.lines().count(), 5, "{t}");
        assert!(t.contains("/m/b.pb") && t.contains("2.0") && t.contains("miss"));
        assert!(t.ends_with(
            "3 compiles: 2 succeeded, 1 failed; 3.00 s with at most 11 at once within 1024.0 MiB\n"
        ));
        let f = failures(&r);
        assert_eq!(f, "/m/c.pb failed (log: /o/c.log):\n  [ERROR] boom\n");
        let j: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(j["compiles"][1]["attempts"][0]["exit_status"], 70);
        assert_eq!(r.exit_status(), 70);
    }
}
