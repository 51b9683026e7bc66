//! What a batch says: before it runs, the compiles no memory budget holds beside another and
//! those that will write no NEFF ([`before`]); at the end, the table on stdout (input, status,
//! wall time, peak RSS, the memory estimate and what it came from — `recorded`, `similar` or the
//! formula's name —, cache), the error lines of the failed compiles and where the compiles that
//! wrote no NEFF left their work, `--report FILE` (the [`Report`] as JSON), and the batch as a
//! [`crate::profile`]: `--timings FILE` (the HTML page: one lane per worker slot, one bar per
//! attempt, the memory in use against the budget) and `--profile FILE` (the Chrome trace).

use std::path::Path;

use super::{Report, Status};
use crate::cache::CacheStatus;
use crate::profile::Run;
use crate::words::count;

/// A compile about to be run, as [`before`] needs it.
pub struct Planned<'a> {
    /// What its outputs are named after.
    pub name: &'a str,
    /// Its estimated peak memory, bytes.
    pub estimate: u64,
    /// Why its plan writes no NEFF, if it writes none.
    pub no_neff: Option<&'a str>,
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

/// The warnings printed before a batch runs (stderr; empty when there is nothing to say):
/// compiles estimated above the whole memory budget — each will run alone —, and compiles that
/// will write no NEFF, with where what they make is kept (`kept_in`: the directory their work
/// directories are kept in; `None`: they are not kept). `planned` is largest estimate first.
pub fn before(budget: Option<u64>, planned: &[Planned], kept_in: Option<&Path>) -> String {
    const LISTED: usize = 10;
    let mut t = String::new();
    if let Some(b) = budget {
        let over: Vec<&Planned> = planned.iter().filter(|p| p.estimate > b).collect();
        if !over.is_empty() {
            t.push_str(&format!(
                "parallel-compile: warning: the memory budget of {} is smaller than the estimated peak of {} of {}; each of them will run alone, with no other compile beside it:\n",
                mib(b),
                over.len(),
                count(planned.len(), "compile", "compiles"),
            ));
            for p in over.iter().take(LISTED) {
                t.push_str(&format!("  {}  {}\n", p.name, mib(p.estimate)));
            }
            if over.len() > LISTED {
                t.push_str(&format!("  and {} more\n", over.len() - LISTED));
            }
        }
    }
    let mut reasons: Vec<(&str, usize)> = Vec::new();
    for why in planned.iter().filter_map(|p| p.no_neff) {
        match reasons.iter_mut().find(|(r, _)| *r == why) {
            Some((_, n)) => *n += 1,
            None => reasons.push((why, 1)),
        }
    }
    let kept = match kept_in {
        Some(d) => format!("what each makes stays in its work dir in {}", d.display()),
        None => "what each makes is not kept".to_string(),
    };
    for (why, n) in reasons {
        t.push_str(&format!(
            "parallel-compile: warning: {} of {} will write no NEFF ({why}); {kept}\n",
            n,
            count(planned.len(), "compile", "compiles"),
        ));
    }
    t
}

/// [`table`], its heading line bold when `colour`.
pub fn table_painted(report: &Report, colour: bool) -> String {
    let table = table(report);
    match table.split_once('\n') {
        Some((head, rest)) if colour && !report.compiles.is_empty() => {
            format!("{}\n{rest}", crate::cli::color::heading(head, true))
        }
        _ => table,
    }
}

/// The table printed at the end (no table when there was nothing to compile).
pub fn table(report: &Report) -> String {
    if report.compiles.is_empty() {
        return "nothing to compile\n".to_string();
    }
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
        let status = c.status.as_str();
        let peak = c
            .peak_rss_kb
            .map(|kb| format!("{:.1}", kb as f64 / 1024.0))
            .unwrap_or_else(|| "-".into());
        let (estimate, from) = match &c.estimate {
            Some(e) => (
                format!("{:.1}", e.bytes as f64 / (1 << 20) as f64),
                e.basis.name(),
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
    let mut outcomes = format!("{} succeeded, {} failed", report.succeeded, report.failed);
    for (n, what) in [
        (report.no_neff, "wrote no NEFF"),
        (report.cancelled, "cancelled"),
        (report.skipped, "skipped"),
    ] {
        if n > 0 {
            outcomes.push_str(&format!(", {n} {what}"));
        }
    }
    t.push_str(&format!(
        "{}: {outcomes}; {:.2} s with at most {} at once{}\n",
        count(report.compiles.len(), "compile", "compiles"),
        report.makespan_s,
        report.jobs,
        report
            .memory_budget
            .map(|b| format!(" within {}", mib(b)))
            .unwrap_or_default()
    ));
    t
}

/// What a failure served from the cache is, and how to compile it again (what a single compile
/// says of one).
pub const REMEMBERED: &str = "a failure the cache remembers (nothing ran): add --retry_failed_compilation to the compile arguments (after --) to compile it again";

/// The error lines of every failed compile, with its log, its kept work directory and, for a
/// failure the cache served, how to compile it again; the work directory each interrupted
/// compile left; and what each compile that wrote no NEFF made instead (for stderr).
pub fn failures(report: &Report) -> String {
    let mut t = String::new();
    for c in report
        .compiles
        .iter()
        .filter(|c| c.status == Status::Failed)
    {
        t.push_str(&format!("{} failed ({}):\n", c.input, log_words(c)));
        for l in &c.error_lines {
            t.push_str(&format!("  {l}\n"));
        }
        if c.cache == CacheStatus::Hit {
            t.push_str(&format!("  {REMEMBERED}\n"));
        }
        if let Some(d) = &c.work_dir {
            t.push_str(&format!("  what it made is in {d}\n"));
        }
    }
    for c in report
        .compiles
        .iter()
        .filter(|c| c.status == Status::Cancelled)
    {
        if let Some(d) = &c.work_dir {
            t.push_str(&format!(
                "{} was interrupted; what it made is in {d}\n",
                c.input
            ));
        }
    }
    for c in report
        .compiles
        .iter()
        .filter(|c| c.status == Status::NoNeff)
    {
        t.push_str(&format!(
            "{} wrote no NEFF ({}); {} ({})\n",
            c.input,
            c.error_lines.join("; "),
            match &c.work_dir {
                Some(d) => format!("what it made is in {d}"),
                None => "what it made was not kept".to_string(),
            },
            log_words(c)
        ));
    }
    t
}

/// Where a compile's log is: `log: PATH`, or that none was kept.
fn log_words(c: &super::CompileResult) -> String {
    match &c.log {
        Some(l) => format!("log: {l}"),
        None => "no log kept".to_string(),
    }
}

/// The batch as a profile: one bar per attempt, in the lane of the slot it ran in, linked to
/// its graph's reproducer bundle; the budget.
pub fn profile(report: &Report) -> Run {
    let mut compiles = Vec::new();
    for c in &report.compiles {
        for (i, a) in c.attempts.iter().enumerate() {
            let Some(mut bar) = a.bar.clone() else {
                continue;
            };
            bar.attempt = i as u32;
            if i + 1 == c.attempts.len() {
                bar.reproducer = c.reproducer.clone();
            }
            compiles.push(bar);
        }
    }
    Run {
        title: format!(
            "nxcc parallel-compile ({})",
            count(report.compiles.len(), "compile", "compiles")
        ),
        process: "nxcc parallel-compile".into(),
        lanes: (1..=report.jobs).map(|n| format!("slot {n}")).collect(),
        budget: report.memory_budget,
        compiles,
    }
}

/// The `--timings` page.
pub fn timings_html(report: &Report) -> String {
    crate::profile::page::html(&profile(report))
}

/// The `--profile` Chrome trace.
pub fn trace(report: &Report) -> String {
    crate::profile::trace::text(&profile(report))
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
            work_dir: None,
            outcome: String::new(),
            bar: Some(crate::profile::Compile {
                graph: String::new(),
                input: String::new(),
                slot,
                attempt: 0,
                start_s,
                end_s: start_s + 1.0,
                outcome: match (exit_status, cache) {
                    (0, CacheStatus::Hit) => crate::profile::Outcome::Hit {
                        tier: "local".into(),
                    },
                    (0, _) => crate::profile::Outcome::Compiled,
                    _ => crate::profile::Outcome::Failed {
                        code: None,
                        signal: None,
                        what: "boom".into(),
                    },
                },
                peak_rss_kb: Some(2048),
                estimate: None,
                basis: None,
                key: None,
                phases: Vec::new(),
                error: None,
                log: None,
                reproducer: None,
            }),
        }
    }

    fn result(stem: &str, status: Status, attempts: Vec<Attempt>) -> CompileResult {
        CompileResult {
            input: format!("/m/{stem}.pb"),
            stem: stem.into(),
            output: format!("/o/{stem}.neff"),
            log: Some(format!("/o/{stem}.log")),
            status,
            exit_status: if status == Status::Ok { 0 } else { 70 },
            cache: attempts.last().map_or(CacheStatus::Off, |a| a.cache),
            estimate: None,
            key: None,
            wall_s: attempts.len() as f64,
            peak_rss_kb: Some(2048),
            error_lines: vec!["[ERROR] boom".into()],
            attempts: attempts
                .into_iter()
                .map(|mut a| {
                    if let Some(b) = a.bar.as_mut() {
                        b.graph = stem.into();
                    }
                    a
                })
                .collect(),
            work_dir: None,
            reproducer: (status == Status::Failed)
                .then(|| format!("/o/nxcc-reproducer-{stem}.tar.gz")),
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
            no_neff: 0,
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
    fn bars_follow_the_slots_and_retries_are_numbered() {
        let p = profile(&report());
        assert_eq!(p.lanes.len(), 11);
        assert_eq!(p.budget, Some(1 << 30));
        let bars: Vec<(&str, usize, u32, &str)> = p
            .compiles
            .iter()
            .map(|b| (b.graph.as_str(), b.slot, b.attempt, b.outcome.name()))
            .collect();
        assert_eq!(
            bars,
            [
                ("a", 10, 0, "compiled"),
                ("b", 1, 0, "failed"),
                ("b", 0, 1, "compiled"),
                ("c", 1, 0, "hit")
            ]
        );
        // The failed graph's last bar links its bundle.
        assert_eq!(
            p.compiles[3].reproducer.as_deref(),
            Some("/o/nxcc-reproducer-c.tar.gz")
        );
        let h = timings_html(&report());
        assert!(h.contains("slot 11") && h.contains("b (retry 1)"));
        let t: serde_json::Value = serde_json::from_str(&trace(&report())).unwrap();
        assert_eq!(
            t["traceEvents"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["cat"] == "compile")
                .count(),
            4
        );
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
        // c's failure was served from the cache ("hit"): how to compile it again is said.
        assert_eq!(
            f,
            format!("/m/c.pb failed (log: /o/c.log):\n  [ERROR] boom\n  {REMEMBERED}\n")
        );
        let j: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(j["compiles"][1]["attempts"][0]["exit_status"], 70);
        assert_eq!(r.exit_status(), 70);
    }

    #[test]
    fn a_compile_that_wrote_no_neff_is_no_success() {
        let mut r = report();
        r.failed = 0;
        r.compiles.truncate(2);
        assert_eq!(r.exit_status(), 0);
        let c = &mut r.compiles[1];
        c.status = Status::NoNeff;
        c.error_lines = vec!["layer_unroll_factor=0: no NEFF will be written".into()];
        c.work_dir = Some("/o/neuronxcc-abcdefgh".into());
        r.succeeded = 1;
        r.no_neff = 1;
        assert_eq!(r.exit_status(), 70);
        let t = table(&r);
        assert!(t.lines().nth(2).unwrap().contains("  no NEFF  "), "{t}");
        assert!(
            t.ends_with("2 compiles: 1 succeeded, 0 failed, 1 wrote no NEFF; 3.00 s with at most 11 at once within 1024.0 MiB\n"),
            "{t}"
        );
        assert_eq!(
            failures(&r),
            "/m/b.pb wrote no NEFF (layer_unroll_factor=0: no NEFF will be written); what it made is in /o/neuronxcc-abcdefgh (log: /o/b.log)\n"
        );
        let j: serde_json::Value = serde_json::from_str(&json(&r)).unwrap();
        assert_eq!(j["compiles"][1]["status"], "no_neff");
        assert_eq!(j["no_neff"], 1);
    }

    #[test]
    fn one_compile_is_one_and_none_is_no_table() {
        let mut r = report();
        r.compiles.truncate(1);
        assert!(table(&r).contains("\n1 compile: "), "{}", table(&r));
        r.compiles.clear();
        assert_eq!(table(&r), "nothing to compile\n");
        assert!(timings_html(&r).contains("nxcc parallel-compile (0 compiles)"));
    }

    #[test]
    fn what_is_said_before_a_batch_runs() {
        let out = Some(Path::new("/o"));
        let planned = |estimates: &[u64], no_neff: Option<&'static str>| -> Vec<Planned<'static>> {
            estimates
                .iter()
                .enumerate()
                .map(|(i, &e)| Planned {
                    name: ["g0", "g1", "g2"][i],
                    estimate: e << 20,
                    no_neff,
                })
                .collect()
        };
        // Nothing to say.
        assert_eq!(
            before(Some(400 << 20), &planned(&[320, 320], None), out),
            ""
        );
        assert_eq!(before(None, &planned(&[320, 320], None), out), "");
        // A budget below some estimates: which, and that they run alone.
        assert_eq!(
            before(Some(100 << 20), &planned(&[320, 200, 50], None), out),
            "parallel-compile: warning: the memory budget of 100.0 MiB is smaller than the estimated peak of 2 of 3 compiles; each of them will run alone, with no other compile beside it:\n  g0  320.0 MiB\n  g1  200.0 MiB\n"
        );
        assert_eq!(
            before(None, &planned(&[1], Some("layer_unroll_factor=0: no NEFF will be written")), out),
            "parallel-compile: warning: 1 of 1 compile will write no NEFF (layer_unroll_factor=0: no NEFF will be written); what each makes stays in its work dir in /o\n"
        );
        // Work dirs that are not kept (the framework cache's entries) are not said to be.
        assert_eq!(
            before(None, &planned(&[1], Some("no NEFF")), None),
            "parallel-compile: warning: 1 of 1 compile will write no NEFF (no NEFF); what each makes is not kept\n"
        );
    }
}
