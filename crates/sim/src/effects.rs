//! Carrying out the injected faults and costs of [`super::inject`]: the `@first` state markers,
//! the invocation record, CPU work, touched memory, and dying by a real signal.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::inject::Fault;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Whether this is the first run of `tool` for the model whose blake3 is `key`: creates the
/// marker `<state>/<tool>-<key>` with `O_CREAT|O_EXCL`, so of any number of concurrent runs
/// exactly one is first.
pub fn first_run(state_dir: &Path, tool: &str, key: &blake3::Hash) -> std::io::Result<bool> {
    std::fs::create_dir_all(state_dir)?;
    let marker = state_dir.join(format!("{tool}-{}", key.to_hex()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// One invocation, as `NXCC_SIM_RECORD` records it.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The tool's name (`walrus_driver`).
    pub tool: String,
    /// The full argv, `argv[0]` first.
    pub argv: Vec<String>,
    /// The working directory it ran in.
    pub cwd: PathBuf,
    /// When it started, milliseconds since the Unix epoch.
    pub start_ms: u64,
}

impl Invocation {
    /// Append the record line (`{"tool", "argv", "cwd", "pid", "start_ms", "end_ms"}`) to `file`
    /// with `O_APPEND` in one `write`, so concurrent tools never interleave. A failure to record
    /// is reported on stderr and does not change the tool's outcome.
    pub fn record(&self, file: &Path) {
        let line = serde_json::json!({
            "tool": self.tool,
            "argv": self.argv,
            "cwd": self.cwd.display().to_string(),
            "pid": std::process::id(),
            "start_ms": self.start_ms,
            "end_ms": now_ms(),
        });
        let mut text = line.to_string();
        text.push('\n');
        let result = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(file)
            .and_then(|mut f| {
                let n = f.write(text.as_bytes())?;
                if n == text.len() {
                    Ok(())
                } else {
                    Err(std::io::Error::other(format!(
                        "short write ({n} of {} bytes)",
                        text.len()
                    )))
                }
            });
        if let Err(e) = result {
            eprintln!(
                "{}: warning: could not append to the record file {}: {e}",
                self.tool,
                file.display()
            );
        }
    }
}

/// Touch `mb` MiB of memory (every page written) and return it; the caller holds it until it
/// returns.
pub fn touch_memory(mb: u64) -> Vec<u8> {
    let len = usize::try_from(mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
    // A non-zero fill writes every byte, so every page is really resident.
    let v = vec![0xA5u8; len];
    std::hint::black_box(&v);
    v
}

/// Spend `ms` milliseconds of CPU time in a CPU-bound loop.
pub fn burn_cpu(ms: u64) {
    // CPU time of this thread, not wall time: on a loaded machine the work still costs `ms` of
    // CPU (it then takes longer), as a real compiler's work would.
    let cpu = || {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime fills the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.max(0) as u32)
    };
    let end = cpu() + Duration::from_millis(ms);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while cpu() < end {
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

/// Die by `signal` for real: restore its default action, unblock it, and raise it (SIGKILL is
/// sent with `kill` to the whole process).
pub fn die_by_signal(signal: i32) -> ! {
    let _ = std::io::stderr().flush();
    let _ = std::io::stdout().flush();
    // SAFETY: plain libc calls on this process with initialised arguments; the default action
    // of the signals used here terminates the process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        if signal == libc::SIGKILL {
            libc::kill(libc::getpid(), libc::SIGKILL);
        } else {
            libc::raise(signal);
        }
    }
    // Unreachable in practice; never return from a fault that was asked for.
    std::process::abort()
}

/// Sleep forever (until killed).
pub fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The signal a fault dies by, if it is a signal fault.
pub fn signal_of(fault: &Fault) -> Option<i32> {
    match fault {
        Fault::Segv => Some(libc::SIGSEGV),
        Fault::Abort => Some(libc::SIGABRT),
        Fault::Kill => Some(libc::SIGKILL),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_run_is_true_once_per_tool_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let a = blake3::hash(b"model a");
        let b = blake3::hash(b"model b");
        assert!(first_run(&state, "walrus_driver", &a).unwrap());
        assert!(!first_run(&state, "walrus_driver", &a).unwrap());
        assert!(first_run(&state, "walrus_driver", &b).unwrap());
        assert!(first_run(&state, "hlo2penguin", &a).unwrap());
    }

    #[test]
    fn concurrent_first_runs_have_exactly_one_winner() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_path_buf();
        let key = blake3::hash(b"m");
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| first_run(&state, "nn_executor", &key).unwrap()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap() as usize)
                .sum()
        });
        assert_eq!(wins, 1);
    }

    #[test]
    fn record_lines_are_json_and_appended() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("rec.jsonl");
        let inv = Invocation {
            tool: "walrus_driver".into(),
            argv: vec!["walrus_driver".into(), "bir.json".into()],
            cwd: dir.path().to_path_buf(),
            start_ms: now_ms(),
        };
        inv.record(&file);
        inv.record(&file);
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["tool"], "walrus_driver");
            assert_eq!(v["argv"][1], "bir.json");
            assert_eq!(v["pid"], std::process::id());
            assert!(v["end_ms"].as_u64().unwrap() >= v["start_ms"].as_u64().unwrap());
        }
    }

    #[test]
    fn burn_cpu_takes_at_least_the_time_asked() {
        let t = std::time::Instant::now();
        burn_cpu(60);
        assert!(t.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn touched_memory_has_the_size_asked() {
        let v = touch_memory(3);
        assert_eq!(v.len(), 3 << 20);
        assert!(v.iter().step_by(4096).all(|b| *b == 0xA5));
    }
}
