//! How failures are reported (04-run.md), in one place for every engine: a job's non-zero exit, a
//! tool, the external compiler or the worker killed by a signal (the F-code banners, WIKI texts,
//! CERTAIN; the signal ↔ code pairing is 128 + signal, as inferred there), timeouts, interrupts.
//! [`job_lines`] turns how a job ended ([`End`]) into the lines the original prints; the pipeline,
//! the executor and the external engine all report through it. Every failure ends with exit
//! status 70.

use std::time::Duration;

use super::metrics::JobStatus;
use crate::recon::failure::signal_of_status;
use crate::run::process::End;

/// The support-ticket banner of F134 and F139.
const TICKET: &str =
    "Please open a support ticket at https://github.com/aws-neuron/aws-neuron-sdk/issues/new";

/// The F-code of the banner for a process that ended by `signal`.
pub fn code(signal: i32) -> &'static str {
    match signal {
        libc::SIGKILL => "F137",
        libc::SIGSEGV => "F139",
        _ => "F134",
    }
}

/// The banner for a process that ended by `signal` (or with the shell-style status 128 + signal).
pub fn banner(signal: i32) -> String {
    let code = code(signal);
    match signal {
        libc::SIGKILL => format!("[{code}] neuronx-cc was forcibly killed - This most commonly occurs due to insufficient system memory. Using a smaller data type, dimensions, batch size, or a larger instance type may help."),
        _ => format!("[{code}] neuronx-cc terminated abnormally - {TICKET}"),
    }
}

/// The line after F137: nxcc's own memory, and the peak of the process that was killed (with its
/// waited-for descendants).
pub(crate) fn memory_line(self_mb: u64, children_mb: u64) -> String {
    format!(
        "Current memory usage for neuronxcc is {self_mb} MB; peak of its children {children_mb} MB"
    )
}

/// `Child process job "{job}" exited abnormally!` with the status (WIKI).
pub(crate) fn exited_abnormally(job: &str, detail: &str) -> String {
    format!("[ERROR] Child process job \"{job}\" exited abnormally! {detail}")
}

/// The timeout line.
pub fn timed_out(job: &str, seconds: f64) -> String {
    let n = if seconds.fract() == 0.0 {
        format!("{}", seconds as u64)
    } else {
        format!("{seconds}")
    };
    format!("[ERROR] Job {job} timed out after {n} s")
}

/// The banner for a process killed by `signal` and, after F137, the memory line; `peak_rss_kb`
/// is the killed process's peak.
pub(crate) fn banner_lines(signal: i32, peak_rss_kb: u64) -> Vec<String> {
    let mut lines = vec![banner(signal)];
    if signal == libc::SIGKILL {
        lines.push(memory_line(
            crate::run::process::own_memory_mb(),
            peak_rss_kb / 1024,
        ));
    }
    lines
}

/// What the original prints when `job` ended as `end`: the abnormal-exit line, the last lines of
/// its stderr, and the banner when a signal ended it (or it exited with 128 + a crash signal, the
/// shell's way); the timeout line for a timeout. Nothing for a success, nor for a cancellation (a
/// cancelled compile is reported once, as [`interrupted`], by whoever cancelled it).
/// `peak_rss_kb` is the job's peak (for the F137 memory line); `timeout` the limit it had.
pub fn job_lines(
    job: &str,
    end: End,
    stderr_tail: &[String],
    peak_rss_kb: u64,
    timeout: Option<Duration>,
) -> Vec<String> {
    let with_tail = |first: String, signal: Option<i32>| {
        let mut lines = vec![first];
        if !stderr_tail.is_empty() {
            lines.push(format!(
                "Last {} lines of the tool's stderr:",
                stderr_tail.len()
            ));
            lines.extend(stderr_tail.iter().map(|l| format!("  {l}")));
        }
        if let Some(sig) = signal {
            lines.extend(banner_lines(sig, peak_rss_kb));
        }
        lines
    };
    match end {
        End::Exited(0) | End::Cancelled(_) => Vec::new(),
        End::TimedOut(_) => vec![timed_out(job, timeout.unwrap_or_default().as_secs_f64())],
        End::Exited(code) => with_tail(
            exited_abnormally(job, &format!("Exit status {code}.")),
            signal_of_status(code),
        ),
        End::Signaled(sig) => with_tail(
            exited_abnormally(
                job,
                &format!(
                    "Killed by signal {sig} ({}).",
                    crate::run::signals::signal_text(sig)
                ),
            ),
            Some(sig),
        ),
    }
}

/// The status a job that ended as `end` has in the figures.
pub(crate) fn job_status(end: End) -> JobStatus {
    match end {
        End::Exited(0) => JobStatus::Ok,
        End::Cancelled(_) => JobStatus::Cancelled,
        End::TimedOut(_) => JobStatus::TimedOut,
        End::Exited(_) | End::Signaled(_) => JobStatus::Failed,
    }
}

/// `[ERROR] Compilation interrupted by SIGINT`: the end of a compile cancelled by a signal.
pub fn interrupted(signal: i32) -> String {
    format!(
        "[ERROR] Compilation interrupted by {}",
        crate::run::signals::signal_text(signal)
    )
}

/// The line for a worker that stopped on a signal sent to it rather than to nxcc.
pub(crate) fn worker_interrupted(signal: i32, worker_pid: u32) -> String {
    format!(
        "[ERROR] Compilation interrupted by {} sent to its worker (pid {worker_pid})",
        crate::run::signals::signal_text(signal)
    )
}

/// The line for a worker whose end is unknown: the process that started and reaped it (the
/// daemon's fork server) died while it ran, taking the worker with it.
pub(crate) fn worker_lost(why: &str) -> String {
    format!("[ERROR] The compile's worker was lost: {why}; the compile did not finish")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banners() {
        assert!(banner(libc::SIGKILL).starts_with("[F137] neuronx-cc was forcibly killed - This most commonly occurs due to insufficient system memory."));
        assert!(banner(libc::SIGSEGV)
            .starts_with("[F139] neuronx-cc terminated abnormally - Please open a support ticket"));
        assert!(banner(libc::SIGABRT).starts_with("[F134] "));
        assert!(banner(libc::SIGBUS).starts_with("[F134] "));
        assert_eq!(signal_of_status(137), Some(libc::SIGKILL));
        assert_eq!(signal_of_status(3), None);
        assert_eq!(
            timed_out("WalrusDriver", 2.0),
            "[ERROR] Job WalrusDriver timed out after 2 s"
        );
        assert_eq!(timed_out("X", 0.5), "[ERROR] Job X timed out after 0.5 s");
    }
}
