//! What a compile's pipeline writes about itself once it has ended (04-run.md "Measuring every
//! job"): the per-job table in its log and the `--submit-metrics` record. (Its `--timings` page
//! and `--trace` profile are the compile's, written by whoever ran the whole compile: a hit
//! has them too.)

use super::log::{self, Logger};
use super::metrics::{self, JobMetrics};
use crate::plan::Invocation;

/// The per-job table (log) and `--submit-metrics`.
pub(crate) fn write_metrics(
    inv: &Invocation,
    logger: &Logger,
    jobs: &[JobMetrics],
    exit_status: i32,
) {
    logger.file_only(&metrics::table(jobs));
    if inv.settings.reports.submit_metrics {
        submit(inv, logger, jobs, exit_status);
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
