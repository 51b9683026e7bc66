//! Progress of a batch on stderr: on a terminal a live line — done / running / queued / failed,
//! an estimate of the time left, and the running graphs with how long each has run — redrawn in
//! place (cut to the terminal's width) and cleared at the end; elsewhere one line per finished
//! compile (and per retry), so logs of CI jobs stay readable.

use crate::cli::subcommand::err;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{CompileResult, Status};
use crate::result::{Failure, JobEnd};

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A live count, redrawn in place (stderr is a terminal).
    Live,
    /// One line per finished compile.
    Lines,
    /// Nothing.
    Quiet,
}

impl ProgressMode {
    /// [`ProgressMode::Live`] when stderr is a terminal, else [`ProgressMode::Lines`].
    pub fn detect() -> ProgressMode {
        if std::io::stderr().is_terminal() {
            ProgressMode::Live
        } else {
            ProgressMode::Lines
        }
    }
}

#[derive(Debug, Default)]
struct State {
    total: usize,
    done: usize,
    failed: usize,
    running: usize,
    queued: usize,
    stop: bool,
    /// The graph each busy worker slot runs, and since when.
    slots: BTreeMap<usize, (String, Instant)>,
    /// Seconds and count of the attempts that ended: their mean predicts the others.
    ended: (f64, usize),
}

/// A running progress display; cleared when dropped.
pub struct Progress {
    mode: ProgressMode,
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

/// The live line's text at `now`.
fn live_text(s: &State, now: Instant) -> String {
    let mut t = format!(
        "parallel-compile: {}/{} done, {} running, {} queued, {} failed",
        s.done, s.total, s.running, s.queued, s.failed
    );
    let elapsed: Vec<(&str, f64)> = s
        .slots
        .values()
        .map(|(name, since)| (name.as_str(), now.duration_since(*since).as_secs_f64()))
        .collect();
    let mean = (s.ended.1 > 0).then(|| s.ended.0 / s.ended.1 as f64);
    let times: Vec<f64> = elapsed.iter().map(|(_, e)| *e).collect();
    if let Some(left) = eta(mean, s.queued, &times) {
        t.push_str(&format!(", ETA {}", seconds(left)));
    }
    if !elapsed.is_empty() {
        let running: Vec<String> = elapsed
            .iter()
            .map(|(name, e)| format!("{name} {}", seconds(*e)))
            .collect();
        t.push_str(&format!(" | {}", running.join(", ")));
    }
    t
}

/// The seconds left: what the queued compiles and the rest of the running ones would take at the
/// mean of those that ended (`None` before one has), spread over the running ones.
fn eta(mean: Option<f64>, queued: usize, running: &[f64]) -> Option<f64> {
    let mean = mean?;
    let rest: f64 = running.iter().map(|e| (mean - e).max(0.0)).sum();
    Some((queued as f64 * mean + rest) / running.len().max(1) as f64)
}

/// `7 s`, `2m05s`, `1h02m`.
fn seconds(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s / 60 % 60),
    }
}

/// The columns of the terminal on stderr (80 when it does not say).
fn columns() -> usize {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into the struct it is handed, which lives for the
    // call; on failure it writes nothing and the zero width is replaced below.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        80
    }
}

/// `text` cut to fit in `width` columns (one column before the edge, so no terminal wraps it).
fn fit(text: &str, width: usize) -> String {
    text.chars().take(width.saturating_sub(1)).collect()
}

/// `1.23 s`, `312.5 MiB`: a finished compile's line.
pub fn line(done: usize, total: usize, r: &CompileResult) -> String {
    let status = r.status.as_str();
    let mut t = format!(
        "[{done:>w$}/{total}] {status:<9} {}  {:.2} s",
        r.stem,
        r.wall_s,
        w = total.to_string().len()
    );
    if let Some(kb) = r.peak_rss_kb {
        t.push_str(&format!("  peak {:.1} MiB", kb as f64 / 1024.0));
    }
    if matches!(r.status, Status::Skipped | Status::NoNeff) {
        t.push_str(&format!("  ({})", r.error_lines.join("; ")));
    } else if r.status != Status::Ok {
        t.push_str(&format!("  exit {}", r.exit_status));
    }
    t.push_str(&format!("  cache {}", r.cache.as_str()));
    if r.status == Status::Failed && r.cache == crate::cache::CacheStatus::Hit {
        t.push_str(" (a remembered failure: --retry_failed_compilation compiles it again)");
    }
    if r.attempts.len() > 1 {
        t.push_str(&format!("  ({} attempts)", r.attempts.len()));
    }
    t
}

impl Progress {
    /// Start showing a batch of `total` compiles.
    pub fn start(mode: ProgressMode, total: usize, queued_failed: usize) -> Progress {
        let state = Arc::new((
            Mutex::new(State {
                total,
                queued: total.saturating_sub(queued_failed),
                ..State::default()
            }),
            Condvar::new(),
        ));
        let thread = (mode == ProgressMode::Live).then(|| {
            let state = state.clone();
            std::thread::spawn(move || {
                let (m, cv) = &*state;
                let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if g.stop {
                        err("\r\x1b[K");
                        return;
                    }
                    let line = fit(&live_text(&g, Instant::now()), columns());
                    err(&format!("\r\x1b[K{line}"));
                    g = cv
                        .wait_timeout(g, Duration::from_millis(250))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            })
        });
        Progress {
            mode,
            state,
            thread,
        }
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let (m, cv) = &*self.state;
        let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g);
        cv.notify_all();
    }

    /// Worker slot `slot` started a compile of `name`.
    pub fn started(&self, slot: usize, name: &str) {
        self.update(|s| {
            s.slots.insert(slot, (name.to_string(), Instant::now()));
        });
    }

    /// Worker slot `slot` ended its compile.
    pub fn stopped(&self, slot: usize) {
        self.update(|s| {
            if let Some((_, since)) = s.slots.remove(&slot) {
                s.ended.0 += since.elapsed().as_secs_f64();
                s.ended.1 += 1;
            }
        });
    }

    /// How many compiles are running now.
    pub fn set_running(&self, n: usize) {
        self.update(|s| s.running = n);
    }

    /// How many compiles are still waiting to start.
    pub fn set_queued(&self, n: usize) {
        self.update(|s| s.queued = n);
    }

    /// A compile reached its final state.
    pub fn finished(&self, r: &CompileResult) {
        let mut done = 0;
        let mut total = 0;
        self.update(|s| {
            s.done += 1;
            if !matches!(r.status, Status::Ok | Status::Skipped | Status::NoNeff) {
                s.failed += 1;
            }
            done = s.done;
            total = s.total;
        });
        if self.mode == ProgressMode::Lines {
            err(&format!("{}\n", line(done, total, r)));
        }
    }

    /// A compile that failed so is queued again.
    pub fn retrying(&self, r: &CompileResult, failure: &Failure, alone: bool) {
        if self.mode == ProgressMode::Lines {
            let why = retry_reason(failure, r.exit_status);
            err(&format!(
                "retrying {}{} after {why}\n",
                r.stem,
                if alone { " alone" } else { "" }
            ));
        }
    }
}

/// What a retry line says the attempt failed of: the F-code of a process killed by a signal
/// (`[F137]` for the out-of-memory kill), else its exit status.
fn retry_reason(failure: &Failure, exit_status: i32) -> String {
    match failure {
        Failure::OutOfMemory { .. } => format!("[{}]", crate::engine::failure::code(libc::SIGKILL)),
        Failure::Job {
            end: JobEnd::Crashed(sig),
            ..
        }
        | Failure::WorkerLost {
            signal: Some(sig), ..
        } => format!("[{}]", crate::engine::failure::code(*sig)),
        _ => format!("exit {exit_status}"),
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.update(|s| s.stop = true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheStatus;

    #[test]
    fn a_finished_compile_in_one_line() {
        let mut r = CompileResult {
            input: "/m/g07.pb".into(),
            stem: "g07".into(),
            output: String::new(),
            log: None,
            status: Status::Ok,
            exit_status: 0,
            cache: CacheStatus::Miss,
            estimate: None,
            key: None,
            wall_s: 1.234,
            peak_rss_kb: Some(3 << 10),
            error_lines: Vec::new(),
            attempts: Vec::new(),
            work_dir: None,
            reproducer: None,
        };
        assert_eq!(
            line(3, 12, &r),
            "[ 3/12] ok        g07  1.23 s  peak 3.0 MiB  cache miss"
        );
        r.status = Status::Failed;
        r.exit_status = 70;
        r.peak_rss_kb = None;
        r.cache = CacheStatus::Hit;
        assert_eq!(
            line(12, 12, &r),
            "[12/12] failed    g07  1.23 s  exit 70  cache hit (a remembered failure: --retry_failed_compilation compiles it again)"
        );
        let now = Instant::now();
        let mut s = State {
            total: 4,
            done: 1,
            running: 2,
            queued: 1,
            ..State::default()
        };
        assert_eq!(
            live_text(&s, now),
            "parallel-compile: 1/4 done, 2 running, 1 queued, 0 failed"
        );
        s.slots
            .insert(0, ("g07".into(), now - Duration::from_secs(12)));
        s.slots
            .insert(1, ("g03".into(), now - Duration::from_secs(2)));
        assert_eq!(
            live_text(&s, now),
            "parallel-compile: 1/4 done, 2 running, 1 queued, 0 failed | g07 12 s, g03 2 s",
            "no estimate before a compile has ended"
        );
        s.ended = (20.0, 1);
        // Left: the queued one (20 s) and the rest of the running ones (8 s + 18 s), over 2.
        assert_eq!(
            live_text(&s, now),
            "parallel-compile: 1/4 done, 2 running, 1 queued, 0 failed, ETA 23 s | g07 12 s, g03 2 s"
        );
    }

    #[test]
    fn the_estimate_and_the_line_s_width() {
        assert_eq!(eta(None, 3, &[1.0]), None);
        assert_eq!(eta(Some(10.0), 0, &[]), Some(0.0));
        assert_eq!(
            eta(Some(10.0), 2, &[15.0]),
            Some(20.0),
            "overdue counts as 0"
        );
        assert_eq!(seconds(59.4), "59 s");
        assert_eq!(seconds(125.0), "2m05s");
        assert_eq!(seconds(3720.0), "1h02m");
        assert_eq!(fit("abcdef", 4), "abc");
        assert_eq!(fit("ab", 80), "ab");
    }
}
