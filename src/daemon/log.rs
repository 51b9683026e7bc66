//! The daemon's own log: one line per event (start, stop, each request and compile, refusals), in
//! the compile log's format `<UTC timestamp> <LEVEL> <pid> [nxcc-daemon]: <message>`, appended to
//! `--log-file` or written to stderr. The log's directory is created 0700 if missing and passes
//! nxcc's trust rule ([`super::pidfile::open_parent`]); the file is opened from it without
//! following a link (made 0600), and must be the user's or root's and writable by nobody else.
//! Each compile's own log stays in its working directory.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use rustix::fs::OFlags;

/// The logger name on each line.
pub const LOGGER: &str = "nxcc-daemon";

/// A thread-safe line writer.
pub struct DaemonLog {
    out: Mutex<Box<dyn Write + Send>>,
    pid: u32,
    to_file: bool,
}

impl std::fmt::Debug for DaemonLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonLog").field("pid", &self.pid).finish()
    }
}

impl DaemonLog {
    /// Append to `path` (see the module documentation), or write to stderr.
    pub fn open(path: Option<&Path>) -> io::Result<DaemonLog> {
        let out: Box<dyn Write + Send> = match path {
            Some(p) => {
                let (dir, name) = super::pidfile::open_parent(p)?;
                let flags = OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE;
                Box::new(dir.open_file(&name, flags, 0o600)?)
            }
            None => Box::new(io::stderr()),
        };
        Ok(DaemonLog {
            out: Mutex::new(out),
            pid: std::process::id(),
            to_file: path.is_some(),
        })
    }

    /// Whether the log goes to a file (not stderr).
    pub fn to_file(&self) -> bool {
        self.to_file
    }

    fn line(&self, level: &str, message: &str) {
        let text = format!(
            "{} {level} {} [{LOGGER}]: {message}\n",
            crate::engine::log::now(),
            self.pid
        );
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// Log a line at level `INFO`.
    pub fn info(&self, message: &str) {
        self.line("INFO", message);
    }

    /// Log a line at level `WARNING`.
    pub fn warning(&self, message: &str) {
        self.line("WARNING", message);
    }

    /// Log a line at level `ERROR`.
    pub fn error(&self, message: &str) {
        self.line("ERROR", message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_appended_in_the_log_format() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("logs/daemon.log");
        let log = DaemonLog::open(Some(&p)).unwrap();
        log.info("started");
        log.warning("refused uid 65534");
        drop(log);
        DaemonLog::open(Some(&p)).unwrap().error("third");
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        let pid = std::process::id();
        assert!(lines[0].ends_with(&format!(" INFO {pid} [nxcc-daemon]: started")));
        assert!(lines[1].contains(" WARNING ") && lines[1].ends_with("refused uid 65534"));
        assert!(lines[2].contains(" ERROR ") && lines[2].ends_with("third"));
        assert!(lines[0].as_bytes()[4] == b'-' && lines[0].contains('T'));
    }
}
