//! The operating system's plumbing, each piece once, for the process toolbox, the supervisor and
//! the signal handling: the parent-death setup, close-on-exec pipes, `/proc` readings, process
//! group signals, waiting and reaping, `poll`.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::process::{kill_process_group, Pid, Signal, WaitId, WaitIdOptions};

/// Ask the kernel to send `signal` to this process when its parent dies (`PR_SET_PDEATHSIG`),
/// then check that the parent is still `parent`: if it is already gone (re-parented), `ESRCH`. The kernel
/// sends the signal when the *thread* that forked this process exits, so the parent must start
/// children from a thread that outlives them. Async-signal-safe (raw system calls, no
/// allocation): usable between `fork` and `exec`.
pub(crate) fn die_with_parent(parent: u32, signal: Signal) -> io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(signal))?;
    let now = rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32);
    if now != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// A pipe, both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for `pipe2` to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `pipe2` succeeded, so both descriptors are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The fields of `/proc/<pid>/stat` nxcc reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// `R`, `S`, `Z`, ...
    pub state: char,
    /// The parent's process id.
    pub ppid: u32,
    /// The process group id.
    pub pgrp: u32,
    /// The session id.
    pub session: u32,
}

impl ProcStat {
    /// Read `/proc/<pid>/stat` (`None` if the process is gone or the line does not parse).
    pub fn read(pid: u32) -> Option<ProcStat> {
        ProcStat::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Parse a stat line: the fields after the command name (which may hold spaces and
    /// parentheses, so the last `)` ends it).
    pub fn parse(stat: &str) -> Option<ProcStat> {
        let rest = &stat[stat.rfind(')')? + 1..];
        let mut f = rest.split_whitespace();
        let state = f.next()?.chars().next()?;
        let ppid = f.next()?.parse().ok()?;
        let pgrp = f.next()?.parse().ok()?;
        let session = f.next()?.parse().ok()?;
        Some(ProcStat {
            state,
            ppid,
            pgrp,
            session,
        })
    }
}

/// A field of `/proc/self/status` in its unit (`Threads`, `VmHWM` in kB, ...).
pub(crate) fn own_status_field(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// This process's resident memory now, MiB (`/proc/self/statm`; 0 if it cannot be read).
pub(crate) fn own_memory_mb() -> u64 {
    // SAFETY: `sysconf` has no preconditions.
    let page_size = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size / (1024 * 1024))
}

/// Send `sig` to the process group led by `pid` (errors ignored: the group may be empty).
pub(crate) fn signal_group(pid: u32, sig: Signal) {
    if let Some(pgid) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(pgid, sig);
    }
}

/// Block until `pid` has exited, without reaping it.
pub(crate) fn wait_for_exit(pid: u32) {
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return;
    };
    loop {
        match rustix::process::waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            // Exited, or an error (no such child): either way there is nothing more to wait for.
            _ => return,
        }
    }
}

/// Reap `pid`: its wait status and resource usage.
pub(crate) fn reap(pid: u32) -> io::Result<(i32, libc::rusage)> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    loop {
        let mut status = 0;
        // SAFETY: a zeroed `rusage` is valid; `status` and `usage` are valid out-pointers.
        let (result, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let result = libc::wait4(pid, &mut status, 0, &mut usage);
            (result, usage)
        };
        if result == pid {
            return Ok((status, usage));
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// A `timeval` as a duration (negative parts as zero).
pub fn timeval(tv: libc::timeval) -> Duration {
    let secs = u64::try_from(tv.tv_sec).unwrap_or(0);
    let micros = u32::try_from(tv.tv_usec).unwrap_or(0);
    Duration::from_secs(secs) + Duration::from_micros(u64::from(micros))
}

/// `poll(2)` for input on `fds`, with an optional timeout (rounded up to whole milliseconds);
/// for each descriptor, whether it is ready (readable, at its end, or in error).
pub fn poll(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut entries: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let timeout_ms = timeout.map_or(-1, |timeout| {
        let ms = timeout.as_millis() + u128::from(timeout.subsec_nanos() % 1_000_000 != 0);
        libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `entries` is a valid, exclusively borrowed array of `pollfd` of the given length.
    let result = unsafe {
        libc::poll(
            entries.as_mut_ptr(),
            entries.len() as libc::nfds_t,
            timeout_ms,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(entries.iter().map(|entry| entry.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_past_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (a (weird) name) S 17 4242 4200 0 -1 4194560 101 0 0 0";
        assert_eq!(
            ProcStat::parse(stat),
            Some(ProcStat {
                state: 'S',
                ppid: 17,
                pgrp: 4242,
                session: 4200
            })
        );
        assert_eq!(ProcStat::parse("4242 (cut"), None);
        assert_eq!(ProcStat::parse("4242 (x) Z 1"), None);
        let me = ProcStat::read(std::process::id()).expect("own stat");
        assert_eq!(me.ppid, std::os::unix::process::parent_id());
        assert!(own_status_field("Threads").is_some_and(|n| n >= 1));
        assert_eq!(own_status_field("NoSuchField"), None);
    }

    #[test]
    fn a_parent_that_is_not_the_expected_one_is_refused() {
        // Run in a child so the parent-death setting does not stay on the test thread.
        let child = std::thread::spawn(|| {
            let real = std::os::unix::process::parent_id();
            let wrong =
                die_with_parent(real.wrapping_add(1), Signal::KILL).map_err(|e| e.raw_os_error());
            (wrong, die_with_parent(real, Signal::KILL).is_ok())
        });
        let (wrong, right) = child.join().unwrap();
        assert_eq!(wrong, Err(Some(libc::ESRCH)));
        assert!(right);
    }
}
