//! The end of a batch: the table on stdout (input, status, wall time, peak RSS, cache), the error
//! lines of the failed compiles, `--report FILE` (the [`Report`] as JSON) and `--timings FILE`
//! (an HTML timeline with one lane per worker slot, one bar per attempt).

use std::path::Path;

use super::{Report, Status};
use crate::run::timeline::{self, Span};

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
        "{:<width$}  {:<9}  {:>8}  {:>12}  {:<5}  {}\n",
        "input", "status", "wall s", "peak RSS MiB", "cache", "attempts"
    );
    for c in &report.compiles {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        };
        let peak = c
            .peak_rss_kb
            .map(|kb| format!("{:.1}", kb as f64 / 1024.0))
            .unwrap_or_else(|| "-".into());
        t.push_str(&format!(
            "{:<width$}  {:<9}  {:>8.3}  {:>12}  {:<5}  {}\n",
            c.input,
            status,
            c.wall_s,
            peak,
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
    let mut v = Vec::new();
    for c in &report.compiles {
        for (i, a) in c.attempts.iter().enumerate() {
            let status = if a.exit_status != 0 {
                "failed"
            } else if a.cache == crate::cache::CacheStatus::Hit {
                "hit"
            } else {
                "ok"
            };
            v.push(Span {
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
            });
        }
    }
    v.sort_by(|a, b| a.lane.cmp(&b.lane).then(a.start_s.total_cmp(&b.start_s)));
    v
}

/// The HTML timeline.
pub fn timings_html(report: &Report) -> String {
    timeline::html(
        &format!("nxcc parallel-compile ({} compiles)", report.compiles.len()),
        &spans(report),
    )
}

/// Write a file through a temporary name in the same directory.
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("report");
    let tmp = path.with_file_name(format!(".{name}.nxcc-tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
}

/// The JSON report's text.
pub fn json(report: &Report) -> String {
    let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
    s.push('\n');
    s
}
