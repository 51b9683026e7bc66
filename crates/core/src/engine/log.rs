//! Logging as the original does it (WIKI): a log file opened in append mode
//! (`<UTC timestamp> <LEVEL> <pid> [<logger>]: <message>`) and the console — at user level
//! `<timestamp> <message>`, below user level the log-file format; errors on stderr, the rest on
//! stdout. One lock serialises every console write, so the live status line (drawn on a terminal
//! while jobs run) is cleared before a line and redrawn after it.
//!
//! The console may instead be a sink (the daemon streams a compile's lines to its client).

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::cli::level;

/// Logger names of the original.
pub const DRIVER: &str = "neuronx-cc";
/// The pipeline's logger: the run's start and end, each job's start and end.
pub const PIPELINE: &str = "pipeline.Pipeline.0";

/// The job logger's name: `job.<Job>.0`.
pub fn job_logger(job: &str) -> String {
    format!("job.{job}.0")
}

/// A line for the console: its text and whether it belongs on stderr.
pub type Sink = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// Where console lines go.
#[derive(Clone)]
pub enum Console {
    /// This process's stdout and stderr.
    Terminal,
    /// A callback (text, is_error).
    Sink(Sink),
}

struct Inner {
    file: Option<File>,
    file_level: i64,
    console_level: i64,
    console: Console,
    pid: u32,
    /// The live status line currently drawn on stderr, if any.
    status: Option<String>,
    status_enabled: bool,
    /// A line of progress dots is open on stdout.
    dots_open: bool,
}

/// A cheap-to-clone handle on the compile's log.
#[derive(Clone)]
pub struct Logger {
    inner: Arc<Mutex<Inner>>,
}

/// `YYYY-MM-DDTHH:MM:SSZ` for a Unix time.
pub(crate) fn utc_timestamp(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The current UTC time as a log timestamp.
pub fn now() -> String {
    utc_timestamp(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    )
}

impl Logger {
    /// A logger writing to `logfile` (appended; its directory created) at `file_level`, and to the
    /// console at `console_level` (`--verbose`; 35 means user level plus dots).
    pub fn open(
        logfile: Option<&Path>,
        file_level: i64,
        console_level: i64,
        console: Console,
    ) -> io::Result<Logger> {
        let file = match logfile {
            Some(p) => {
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                // Never waits on a FIFO nobody reads (a daemon's thread must not).
                Some(crate::fsx::regular::open_append(p)?)
            }
            None => None,
        };
        let status_enabled = matches!(console, Console::Terminal)
            && level::console_threshold(console_level) == level::USER
            && console_level != level::DOTS
            && io::stderr().is_terminal();
        Ok(Logger {
            inner: Arc::new(Mutex::new(Inner {
                file,
                file_level,
                console_level: level::console_threshold(console_level),
                console,
                pid: std::process::id(),
                status: None,
                status_enabled,
                dots_open: false,
            })),
        })
    }

    /// A logger that only writes to a console sink (no file).
    #[cfg(test)]
    pub(crate) fn sink_only(console_level: i64, sink: Sink) -> Logger {
        Logger::open(None, level::OFF, console_level, Console::Sink(sink)).expect("no file to open")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Log a message at a level under a logger name.
    pub fn log(&self, logger: &str, lvl: i64, message: &str) {
        let ts = now();
        let mut g = self.lock();
        let full = format!("{ts} {} {} [{logger}]: {message}", level::label(lvl), g.pid);
        if lvl >= g.file_level {
            if let Some(f) = g.file.as_mut() {
                let _ = f.write_all(format!("{full}\n").as_bytes());
            }
        }
        if lvl >= g.console_level && g.console_level < level::OFF {
            let line = if g.console_level >= level::USER {
                format!("{ts} {message}")
            } else {
                full
            };
            g.console_line(&line, (level::ERROR..level::USER).contains(&lvl));
        }
    }

    /// Log a message at a level under a logger name in the log file only (the lines of a
    /// compiler whose console output is shown as it is).
    pub fn to_file(&self, logger: &str, lvl: i64, message: &str) {
        let ts = now();
        let mut g = self.lock();
        if lvl >= g.file_level {
            let full = format!(
                "{ts} {} {} [{logger}]: {message}\n",
                level::label(lvl),
                g.pid
            );
            if let Some(f) = g.file.as_mut() {
                let _ = f.write_all(full.as_bytes());
            }
        }
    }

    /// Log `message` at DEBUG under the logger named `logger`.
    pub fn debug(&self, logger: &str, message: &str) {
        self.log(logger, level::DEBUG, message)
    }
    /// Log `message` at INFO under the logger named `logger`.
    pub fn info(&self, logger: &str, message: &str) {
        self.log(logger, level::INFO, message)
    }
    /// Log `message` at WARNING under the logger named `logger`.
    pub fn warning(&self, logger: &str, message: &str) {
        self.log(logger, level::WARNING, message)
    }
    /// A warning the user must see whatever `--verbose` says (unless the console is `off`): logged
    /// at WARNING, and shown on the console's stderr as `<time> WARNING: <message>`.
    pub fn warning_shown(&self, logger: &str, message: &str) {
        let mut g = self.lock();
        if g.console_level <= level::WARNING {
            drop(g);
            return self.warning(logger, message);
        }
        let ts = now();
        if level::WARNING >= g.file_level {
            let line = format!(
                "{ts} {} {} [{logger}]: {message}\n",
                level::label(level::WARNING),
                g.pid
            );
            if let Some(f) = g.file.as_mut() {
                let _ = f.write_all(line.as_bytes());
            }
        }
        if g.console_level < level::OFF {
            g.console_line(&format!("{ts} WARNING: {message}"), true);
        }
    }

    /// A USER-level message (shown at the default console level).
    pub fn user(&self, message: &str) {
        self.log(DRIVER, level::USER, message)
    }

    /// An error line: logged at ERROR, and always shown on the console's stderr (unless the
    /// console is `off`), in the format the caller gives (`[ERROR] [NCC_...] ...`, `[F137] ...`).
    pub fn error(&self, logger: &str, message: &str) {
        let ts = now();
        let mut g = self.lock();
        let full = format!(
            "{ts} {} {} [{logger}]: {message}",
            level::label(level::ERROR),
            g.pid
        );
        if level::ERROR >= g.file_level {
            if let Some(f) = g.file.as_mut() {
                let _ = f.write_all(format!("{full}\n").as_bytes());
            }
        }
        if g.console_level < level::OFF {
            let line = if g.console_level >= level::USER {
                message.to_string()
            } else {
                full
            };
            g.console_line(&line, true);
        }
    }

    /// Write text to the log file only (e.g. the metrics table).
    pub(crate) fn file_only(&self, text: &str) {
        let mut g = self.lock();
        if let Some(f) = g.file.as_mut() {
            let _ = f.write_all(text.as_bytes());
            if !text.ends_with('\n') {
                let _ = f.write_all(b"\n");
            }
        }
    }

    /// Draw (or replace) the live status line on a terminal; no-op elsewhere.
    pub fn status(&self, text: &str) {
        let mut g = self.lock();
        if !g.status_enabled {
            return;
        }
        let mut e = io::stderr().lock();
        let _ = write!(e, "\r\x1b[K{text}");
        let _ = e.flush();
        g.status = Some(text.to_string());
    }

    /// Remove the status line.
    pub(crate) fn clear_status(&self) {
        let mut g = self.lock();
        if g.status.take().is_some() {
            let mut e = io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
    }

    /// Print one progress dot (dots mode).
    pub fn dot(&self) {
        let mut g = self.lock();
        g.raw(".", false);
        g.dots_open = true;
    }

    /// End the line of dots, if one is open.
    pub(crate) fn end_dots(&self) {
        let mut g = self.lock();
        if g.dots_open {
            g.dots_open = false;
            g.raw("\n", false);
        }
    }
}

impl Inner {
    fn raw(&mut self, text: &str, to_stderr: bool) {
        match &self.console {
            Console::Terminal => {
                if to_stderr {
                    let mut e = io::stderr().lock();
                    let _ = e.write_all(text.as_bytes());
                    let _ = e.flush();
                } else {
                    let mut o = io::stdout().lock();
                    let _ = o.write_all(text.as_bytes());
                    let _ = o.flush();
                }
            }
            Console::Sink(s) => {
                if text != "\n" {
                    s(text, to_stderr)
                }
            }
        }
    }

    fn console_line(&mut self, line: &str, to_stderr: bool) {
        let redraw = self.status.clone();
        if redraw.is_some() {
            let mut e = io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
        if self.dots_open {
            self.dots_open = false;
            self.raw("\n", false);
        }
        match &self.console {
            Console::Sink(s) => s(line, to_stderr),
            Console::Terminal => self.raw(&format!("{line}\n"), to_stderr),
        }
        if let Some(s) = redraw {
            let mut e = io::stderr().lock();
            let _ = write!(e, "{s}");
            let _ = e.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(utc_timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc_timestamp(1_795_935_662), "2026-11-29T07:01:02Z");
    }

    #[test]
    fn file_and_console_formats() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/log.txt");
        let lines = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
        let l2 = lines.clone();
        let sink: Sink =
            Arc::new(move |t: &str, e: bool| l2.lock().unwrap().push((t.to_string(), e)));
        let log = Logger::open(
            Some(&path),
            level::INFO,
            level::USER,
            Console::Sink(sink.clone()),
        )
        .unwrap();
        log.info("job.Frontend.0", "Starting job Frontend");
        log.debug("neuronx-cc", "hidden");
        log.user("Compiler status PASS");
        log.error("neuronx-cc", "[ERROR] [NCC_DRV068] boom - fix");
        let text = std::fs::read_to_string(&path).unwrap();
        let file: Vec<&str> = text.lines().collect();
        assert_eq!(file.len(), 3, "{text}");
        let pid = std::process::id();
        assert!(
            file[0].ends_with(&format!(
                " INFO {pid} [job.Frontend.0]: Starting job Frontend"
            )),
            "{}",
            file[0]
        );
        assert!(file[1].ends_with(&format!(" USER {pid} [neuronx-cc]: Compiler status PASS")));
        assert!(
            file[2].contains(" ERROR ") && file[2].ends_with("[ERROR] [NCC_DRV068] boom - fix")
        );
        let c = lines.lock().unwrap().clone();
        assert_eq!(c.len(), 2, "{c:?}");
        assert!(c[0].0.ends_with("Z Compiler status PASS") && !c[0].1);
        assert_eq!(c[1], ("[ERROR] [NCC_DRV068] boom - fix".to_string(), true));
        // Append mode: a second logger adds to the same file.
        let log2 = Logger::open(Some(&path), level::INFO, level::OFF, Console::Sink(sink)).unwrap();
        log2.info("x", "more");
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 4);
        // Below user level the console gets the file format.
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let l3 = lines.clone();
        let log3 = Logger::sink_only(
            level::DEBUG,
            Arc::new(move |t: &str, _| l3.lock().unwrap().push(t.to_string())),
        );
        log3.debug("job.X.0", "detail");
        assert!(lines.lock().unwrap()[0].contains(&format!(" DEBUG {pid} [job.X.0]: detail")));
    }
}
