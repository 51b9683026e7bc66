//! Processes named by pidfd (a handle that names one process and no other, even after its pid
//! is reused): open one, signal through it, wait for its end.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::process::{Pid, PidfdFlags, Signal};

/// A pidfd on process `pid` (close-on-exec).
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::pidfd_open(pid, PidfdFlags::empty())?)
}

/// Send signal `sig` to the process of `pidfd`; one already gone is not an error to report.
pub fn signal(pidfd: impl AsFd, sig: i32) {
    if let Some(sig) = Signal::from_named_raw(sig) {
        let _ = rustix::process::pidfd_send_signal(pidfd, sig);
    }
}

/// Whether the process of `pidfd` ended within `timeout`.
pub fn wait(pidfd: impl AsFd, timeout: Duration) -> bool {
    let timeout = Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    loop {
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(n) => return n > 0,
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pidfd_signals_and_sees_the_end_of_its_process() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let fd = open(child.id()).unwrap();
        assert!(!wait(&fd, Duration::ZERO));
        signal(&fd, libc::SIGKILL);
        assert!(wait(&fd, Duration::from_secs(30)));
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
