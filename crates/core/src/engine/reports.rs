//! What a compile writes about itself once it has ended (04-run.md "Measuring every job"): the
//! per-job table in its log, the `--submit-metrics` record, and the `--timings` (HTML) and
//! `--trace` (Chrome trace) timelines.

use std::path::Path;

use super::log::{self, Logger};
use super::metrics::{self, JobMetrics};
use super::timeline::{self, Span};
use crate::plan::Invocation;

/// The per-job table (log), `--submit-metrics`, `--timings` and `--trace`.
pub fn write_metrics(inv: &Invocation, logger: &Logger, jobs: &[JobMetrics], exit_status: i32) {
    logger.file_only(&metrics::table(jobs));
    let (plan, reports) = (&inv.plan, &inv.settings.reports);
    if reports.submit_metrics {
        submit(inv, logger, jobs, exit_status);
    }
    let spans = spans(jobs);
    let title = format!(
        "nxcc compile {}",
        plan.model
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("")
    );
    if let Some(path) = &reports.timings {
        write_report(
            logger,
            &crate::fsx::absolute(&plan.launch_dir, path),
            &timeline::html(&title, &spans),
            "timings",
        );
    }
    if let Some(path) = &reports.trace {
        write_report(
            logger,
            &crate::fsx::absolute(&plan.launch_dir, path),
            &timeline::chrome_trace(&spans),
            "trace",
        );
    }
}

/// Append the `--submit-metrics` record to the launch directory's metric store.
fn submit(inv: &Invocation, logger: &Logger, jobs: &[JobMetrics], exit_status: i32) {
    let reports = &inv.settings.reports;
    let run_id = reports
        .run_id
        .clone()
        .unwrap_or_else(metrics::generated_run_id);
    let stamp = reports.metrics_timestamp.clone().unwrap_or_else(log::now);
    let record = metrics::Record {
        run_id: &run_id,
        metrics_timestamp: &stamp,
        target: inv.inputs.target(),
        optlevel: inv.optlevel(),
        logical_nc_config: inv.inputs.logical_nc_config(),
        exit_status,
        jobs,
    };
    if let Err(e) = metrics::submit(&inv.plan.launch_dir, &record) {
        logger.warning(log::DRIVER, &format!("Could not submit metrics: {e}"));
    }
}

/// One timeline span per job.
fn spans(jobs: &[JobMetrics]) -> Vec<Span> {
    jobs.iter()
        .map(|j| Span {
            lane: "compile".to_string(),
            label: j.job.to_string(),
            start_s: j.start_s,
            end_s: j.start_s + j.wall_s,
            status: serde_json::to_value(j.status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            details: vec![
                ("user s".into(), format!("{:.3}", j.user_s)),
                ("sys s".into(), format!("{:.3}", j.sys_s)),
                ("peak RSS KB".into(), j.max_rss_kb.to_string()),
                ("processes".into(), j.processes.to_string()),
                (
                    "exit status".into(),
                    j.exit_status.map(|c| c.to_string()).unwrap_or_default(),
                ),
                (
                    "signal".into(),
                    j.signal
                        .map(crate::run::signals::signal_text)
                        .unwrap_or_default(),
                ),
            ],
        })
        .collect()
}

fn write_report(logger: &Logger, path: &Path, text: &str, what: &str) {
    let r = path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|_| {
            crate::fsx::atomic::write_file(path, text.as_bytes(), crate::fsx::Durability::Visible)
        });
    match r {
        // On the console too: a plain `--timings` writes to a file the user did not name.
        Ok(()) => logger.user(&format!("Wrote the {what} to {}", path.display())),
        Err(e) => {
            logger.warning(
                log::DRIVER,
                &format!("Could not write the {what} to {}: {e}", path.display()),
            );
        }
    }
}
