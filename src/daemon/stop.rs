//! `nxcc daemon stop [--socket PATH] [--pid-file PATH]`: stop the daemon of a socket cleanly and
//! wait until it is gone.
//!
//! The daemon is asked as any client asks (`POST /exit`: it stops accepting, lets its running
//! compiles finish within its `--shutdown-grace`, and removes its socket and pid file). One that
//! does not answer but still holds its pid file's lock (a live daemon that is stuck) is sent
//! SIGTERM, which stops it the same way; its pid is read from that pid file, which passes nxcc's
//! trust rule and is held by the very process it names. Either way `stop` returns once the pid
//! file's lock is free and nothing answers on the socket, within [`STOP_WAIT`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{client, config, pidfile};

/// How long `stop` waits for the daemon to be gone: its default shutdown grace for running
/// compiles (30 s), the wind-down after it, and room to spare.
pub const STOP_WAIT: Duration = Duration::from_secs(60);

/// How a stop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// A daemon ran and is gone now (its pid, when its pid file said).
    Stopped(Option<u32>),
    /// No daemon answered on the socket or held the pid file.
    NotRunning,
}

fn answers(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}

/// Stop the daemon on `socket` (its pid file `pid_file`), waiting at most `wait` for it to go.
pub fn stop(socket: &Path, pid_file: &Path, wait: Duration) -> Result<Stopped, String> {
    let held = |p: &Path| {
        pidfile::live_holder(p)
            .map_err(|e| format!("cannot read the pid file {}: {e}", p.display()))
    };
    let holder = held(pid_file)?;
    let pid = holder.as_ref().and_then(|h| h.pid);
    match client::request(socket, "POST", "/exit") {
        Ok((200 | 503, _)) => {}
        Ok((code, body)) => {
            return Err(format!(
                "the daemon on {} refused to stop ({}): {}",
                socket.display(),
                client::status_text(code),
                body.trim_end()
            ))
        }
        Err(_) if holder.is_none() => return Ok(Stopped::NotRunning),
        Err(_) => match pid {
            // Alive (it holds its pid file) but not answering: SIGTERM stops it as /exit does.
            Some(p) => {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(p as i32).ok_or_else(|| {
                        format!("the pid file {} names pid 0", pid_file.display())
                    })?,
                    rustix::process::Signal::TERM,
                );
            }
            None => {
                return Err(format!(
                "a daemon holds the pid file {} without saying its pid, and does not answer on {}",
                pid_file.display(),
                socket.display()
            ))
            }
        },
    }
    let deadline = Instant::now() + wait;
    loop {
        if held(pid_file)?.is_none() && !answers(socket) {
            return Ok(Stopped::Stopped(pid));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the daemon{} on {} is still running after {} s",
                pid.map_or(String::new(), |p| format!(" (pid {p})")),
                socket.display(),
                wait.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Which daemon to stop.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct StopArgs {
    /// The daemon's socket (default: $NXCC_DAEMON_SOCKET, the one `nxcc compile --daemon` uses,
    /// else $XDG_RUNTIME_DIR/nxcc/daemon.sock, else /tmp/nxcc-<uid>/daemon.sock, or in a private
    /// /tmp/nxcc-<uid>-* of yours when another user made that first).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// The daemon's pid file (default: the socket's path with .pid for its extension).
    #[arg(long = "pid-file", value_name = "PATH")]
    pub(crate) pid_file: Option<PathBuf>,
}

/// `nxcc daemon stop [--socket PATH] [--pid-file PATH]`; returns the exit status: 0 when the
/// daemon is gone (or none was running), 1 when it could not be stopped.
pub(crate) fn main(args: &StopArgs) -> i32 {
    let absolute = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
    let socket = args
        .socket
        .as_ref()
        .map(absolute)
        .unwrap_or_else(client::socket_path);
    let pid_file = args
        .pid_file
        .as_ref()
        .map(absolute)
        .unwrap_or_else(|| config::pid_file_for(&socket));
    match stop(&socket, &pid_file, STOP_WAIT) {
        Ok(Stopped::Stopped(pid)) => {
            super::out(&format!(
                "nxcc daemon{} on {} stopped\n",
                pid.map_or(String::new(), |p| format!(" (pid {p})")),
                socket.display()
            ));
            0
        }
        Ok(Stopped::NotRunning) => {
            super::out(&format!("no nxcc daemon runs on {}\n", socket.display()));
            0
        }
        Err(e) => {
            super::err(&format!("nxcc daemon stop: error: {e}\n"));
            1
        }
    }
}
