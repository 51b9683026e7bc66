//! `nxcc daemon status [--socket PATH] [--json]`: what the daemon of a socket is doing, asked as
//! any client asks (`GET /v1/status`, read into [`wire::DaemonStatus`]), shown as a few lines —
//! or, with `--json`, the daemon's answer as it sent it.
//!
//! Exit status: 0 when a daemon answered; 3 when none runs on the socket (as `pg_ctl status` and
//! an init script's `status` say "not running"); 1 when one runs but cannot be asked (it holds
//! its pid file and does not answer, it answered with an error, or its socket is not one this
//! user can trust).

use std::path::{Path, PathBuf};

use super::{client, config, pidfile, wire};
use crate::hlo::summary::human;
use crate::words::count;

/// The exit status of `status` when no daemon runs on the socket.
pub const EXIT_NOT_RUNNING: i32 = 3;

/// Which daemon to ask, and how to show its answer.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub(crate) struct StatusArgs {
    /// The daemon's socket (default: $NXCC_DAEMON_SOCKET, the one `nxcc compile --daemon` uses,
    /// else $XDG_RUNTIME_DIR/nxcc/daemon.sock, else /tmp/nxcc-<uid>/daemon.sock).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Print the daemon's status as the JSON object it answered (`GET /v1/status`).
    #[arg(long)]
    pub(crate) json: bool,
}

/// What asking the daemon of a socket gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Asked {
    /// It answered: the body as sent, and as read.
    Answered(String, Box<wire::DaemonStatus>),
    /// No daemon runs there (nothing answers, no live daemon holds the pid file).
    NotRunning,
    /// One runs but could not be asked (why).
    Unanswered(String),
}

/// Ask the daemon on `socket` (its pid file `pid_file`) for its status.
pub fn ask(socket: &Path, pid_file: &Path) -> Asked {
    if let Err(e) = client::check_socket(socket) {
        return Asked::Unanswered(e);
    }
    match client::request(socket, "GET", "/v1/status") {
        Ok((200, body)) => match serde_json::from_str::<wire::DaemonStatus>(&body) {
            Ok(s) => Asked::Answered(body, Box::new(s)),
            Err(e) => Asked::Unanswered(format!(
                "the daemon on {} answered a status that is not one: {e}",
                socket.display()
            )),
        },
        Ok((code, body)) => Asked::Unanswered(format!(
            "the daemon on {} answered {}: {}",
            socket.display(),
            client::status_text(code),
            body.trim_end()
        )),
        Err(e) => match pidfile::live_holder(pid_file) {
            Ok(None) => Asked::NotRunning,
            Ok(Some(h)) => Asked::Unanswered(format!(
                "a daemon{} holds the pid file {} but does not answer on {} ({e}); `nxcc daemon stop --socket {}` stops it",
                h.pid.map_or(String::new(), |p| format!(" (pid {p})")),
                pid_file.display(),
                socket.display(),
                socket.display()
            )),
            Err(pe) => Asked::Unanswered(format!(
                "{e}; cannot read the pid file {}: {pe}",
                pid_file.display()
            )),
        },
    }
}

/// The status as lines: who, what runs and waits, what it did, its limits, engine and cache.
pub fn text(s: &wire::DaemonStatus) -> String {
    let mut t = format!(
        "nxcc daemon (pid {}) on {}: up {:.0} s{}, nxcc {} (reproduces {})\n",
        s.pid,
        s.socket,
        s.uptime_s,
        if s.stopping { ", stopping" } else { "" },
        s.version,
        s.reproduces
    );
    let c = &s.compiles;
    t.push_str(&format!(
        "  compiles: {} running, {} queued (at most {} at once); {} finished, {} failed, {} cancelled\n",
        s.running, s.queued, s.max_concurrent, c.finished, c.failed, c.cancelled
    ));
    t.push_str(&match s.memory.budget {
        Some(b) => format!(
            "  memory: {} of the budget of {} estimated for the running compiles\n",
            human(s.memory.in_use),
            human(b)
        ),
        None => "  memory: no budget\n".to_string(),
    });
    let k = &s.connections;
    t.push_str(&format!(
        "  connections: {} open (at most {}, {} per user)\n",
        k.open, k.max, k.max_per_uid
    ));
    t.push_str(&format!("  engine: {}\n", s.engine));
    t.push_str(&match &s.cache {
        Some(c) => format!(
            "  cache: {} ({} and {} since the daemon started)\n",
            c.dir,
            count(c.hits as usize, "hit", "hits"),
            count(c.misses as usize, "miss", "misses")
        ),
        None => "  cache: none\n".to_string(),
    });
    t.push_str(&match s.inactivity_timeout_s {
        Some(secs) => format!("  stops after {secs:.0} s without a request\n"),
        None => "  stops only when asked (nxcc daemon stop)\n".to_string(),
    });
    t
}

/// `nxcc daemon status`; returns the exit status.
pub(crate) fn main(args: &StatusArgs) -> i32 {
    let socket = args
        .socket
        .as_ref()
        .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
        .unwrap_or_else(client::socket_path);
    let pid_file = config::pid_file_for(&socket);
    match ask(&socket, &pid_file) {
        Asked::Answered(body, s) => {
            super::out(&if args.json {
                format!("{}\n", body.trim_end())
            } else {
                text(&s)
            });
            0
        }
        Asked::NotRunning => {
            super::err(&format!(
                "no nxcc daemon runs on {} (`nxcc daemon --socket {}` starts one; `nxcc compile --daemon` starts one on its socket)\n",
                socket.display(),
                socket.display()
            ));
            EXIT_NOT_RUNNING
        }
        Asked::Unanswered(e) => {
            super::err(&format!("nxcc daemon status: error: {e}\n"));
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_says_what_runs_its_limits_and_its_cache() {
        let mut s = wire::DaemonStatus {
            version: "0.1.0".into(),
            reproduces: "neuronx-cc 2.24.5133.0".into(),
            pid: 42,
            socket: "/r/d.sock".into(),
            uptime_s: 12.4,
            running: 1,
            queued: 2,
            max_concurrent: 4,
            engine: "nxcc pipeline".into(),
            inactivity_timeout_s: Some(300.0),
            ..Default::default()
        };
        s.memory.budget = Some(8 << 30);
        s.memory.in_use = 512 << 20;
        s.compiles.finished = 5;
        s.compiles.failed = 1;
        s.cache = Some(wire::Cache {
            dir: "/c".into(),
            hits: 1,
            misses: 3,
            ..Default::default()
        });
        let t = text(&s);
        assert!(
            t.starts_with("nxcc daemon (pid 42) on /r/d.sock: up 12 s, nxcc 0.1.0"),
            "{t}"
        );
        assert!(t.contains("  compiles: 1 running, 2 queued (at most 4 at once); 5 finished, 1 failed, 0 cancelled\n"), "{t}");
        assert!(
            t.contains("  memory: 512.0 MiB of the budget of 8.0 GiB"),
            "{t}"
        );
        assert!(
            t.contains("  cache: /c (1 hit and 3 misses since the daemon started)\n"),
            "{t}"
        );
        assert!(t.contains("  stops after 300 s without a request\n"), "{t}");
        s.memory.budget = None;
        s.cache = None;
        s.inactivity_timeout_s = None;
        s.stopping = true;
        let t = text(&s);
        assert!(t.contains(": up 12 s, stopping,"), "{t}");
        assert!(t.contains("  memory: no budget\n  "), "{t}");
        assert!(t.contains("  cache: none\n"), "{t}");
        assert!(t.contains("stops only when asked"), "{t}");
    }
}
