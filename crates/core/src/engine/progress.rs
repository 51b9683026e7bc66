//! Progress while the pipeline runs (04-run.md): with `--verbose 35` (dots mode, WIKI) one `.` on
//! stdout every 5 seconds and a newline at the end; on an interactive terminal at the default level
//! a live status line on stderr — job `i/n`, its name, elapsed time — cleared at the end (never drawn
//! when stderr is not a terminal; the logger decides).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::log::Logger;

/// How often a dot is printed in dots mode.
pub const DOT_INTERVAL: Duration = Duration::from_secs(5);

struct State {
    job: Option<(usize, usize, String, Instant)>,
    stop: bool,
}

/// A running progress reporter; stops (and cleans up its line) when dropped.
pub struct Progress {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
    logger: Logger,
    dots: bool,
}

impl Progress {
    /// Start the reporter's thread: a dot every [`DOT_INTERVAL`] when `dots`, otherwise the status
    /// line redrawn with the job's elapsed time four times a second.
    pub fn start(logger: &Logger, dots: bool) -> Progress {
        let state = Arc::new((
            Mutex::new(State {
                job: None,
                stop: false,
            }),
            Condvar::new(),
        ));
        let (s2, l2) = (state.clone(), logger.clone());
        let tick = if dots {
            DOT_INTERVAL
        } else {
            Duration::from_millis(250)
        };
        let thread = std::thread::Builder::new()
            .name("nxcc-progress".into())
            .spawn(move || {
                let (lock, cv) = &*s2;
                let mut g = lock.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    let (ng, _) = cv.wait_timeout(g, tick).unwrap_or_else(|p| p.into_inner());
                    g = ng;
                    if g.stop {
                        break;
                    }
                    if dots {
                        l2.dot();
                    } else if let Some((i, n, name, t)) = &g.job {
                        l2.status(&format!(
                            "[{i}/{n}] {name} {:.0}s",
                            t.elapsed().as_secs_f64()
                        ));
                    }
                }
            })
            .ok();
        Progress {
            state,
            thread,
            logger: logger.clone(),
            dots,
        }
    }

    /// A job started (1-based index).
    pub fn job(&self, index: usize, total: usize, name: &str) {
        let (lock, _) = &*self.state;
        lock.lock().unwrap_or_else(|p| p.into_inner()).job =
            Some((index, total, name.to_string(), Instant::now()));
        if !self.dots {
            self.logger.status(&format!("[{index}/{total}] {name}"));
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if self.dots {
            self.logger.end_dots();
        } else {
            self.logger.clear_status();
        }
    }
}
