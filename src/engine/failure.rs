//! How failures are reported (04-run.md): a job's non-zero exit, a tool or the worker killed by a
//! signal (the F-code banners, WIKI texts, CERTAIN; the signal ↔ code pairing is 128 + signal, as
//! inferred there), timeouts. Every failure ends with exit status 70.

/// The support-ticket banner of F134 and F139.
const TICKET: &str =
    "Please open a support ticket at https://github.com/aws-neuron/aws-neuron-sdk/issues/new";

/// The banner for a process that ended by `signal` (or with the shell-style status 128 + signal).
pub fn banner(signal: i32) -> String {
    match signal {
        libc::SIGKILL => "[F137] neuronx-cc was forcibly killed - This most commonly occurs due to insufficient system memory. Using a smaller data type, dimensions, batch size, or a larger instance type may help.".to_string(),
        libc::SIGSEGV => format!("[F139] neuronx-cc terminated abnormally - {TICKET}"),
        _ => format!("[F134] neuronx-cc terminated abnormally - {TICKET}"),
    }
}

/// The signal an exit status stands for when a tool reports a crash the shell way (134, 137, 139).
pub fn signal_of_status(status: i32) -> Option<i32> {
    match status {
        134 => Some(libc::SIGABRT),
        137 => Some(libc::SIGKILL),
        139 => Some(libc::SIGSEGV),
        _ => None,
    }
}

/// The line after F137: nxcc's own memory and the peak of its children.
pub fn memory_line(self_mb: u64, children_mb: u64) -> String {
    format!(
        "Current memory usage for neuronxcc is {self_mb} MB; peak of its children {children_mb} MB"
    )
}

/// `Child process job "{job}" exited abnormally!` with the status (WIKI).
pub fn exited_abnormally(job: &str, detail: &str) -> String {
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

/// `SIGSEGV`-style name of a signal, or `signal N` for one without a conventional name.
pub fn signal_name(signal: i32) -> String {
    crate::run::signals::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), str::to_string)
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
