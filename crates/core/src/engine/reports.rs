//! What a compile's pipeline writes about itself once it has ended (04-run.md "Measuring every
//! job"): the per-job table in its log and the `--submit-metrics` record. (Its `--timings` page
//! and `--trace` profile are the compile's, written by whoever ran the whole compile: a hit
//! has them too.)

use super::log::{self, Logger};
use super::metrics::{self, JobMetrics};
use crate::cli::namespace::Dest;
use crate::plan::Plan;

/// The per-job table (log) and `--submit-metrics`.
pub fn write_metrics(plan: &Plan, logger: &Logger, jobs: &[JobMetrics], exit_status: i32) {
    logger.file_only(&metrics::table(jobs));
    let ns = &plan.ns;
    if ns.bool(Dest::SubmitMetrics) {
        submit(plan, logger, jobs, exit_status);
    }
}

/// Append the `--submit-metrics` record to the launch directory's metric store.
fn submit(plan: &Plan, logger: &Logger, jobs: &[JobMetrics], exit_status: i32) {
    let ns = &plan.ns;
    let run_id = ns
        .str(Dest::RunId)
        .map(str::to_string)
        .unwrap_or_else(metrics::generated_run_id);
    let stamp = ns
        .str(Dest::MetricsTimestamp)
        .map(str::to_string)
        .unwrap_or_else(log::now);
    let record = metrics::Record {
        run_id: &run_id,
        metrics_timestamp: &stamp,
        target: plan.target(),
        optlevel: plan.optlevel(),
        logical_nc_config: plan.logical_nc_config(),
        exit_status,
        jobs,
    };
    if let Err(e) = metrics::submit(&plan.launch_dir, &record) {
        logger.warning(log::DRIVER, &format!("Could not submit metrics: {e}"));
    }
}
