//! Log levels as the original's `--verbose` / `--logfile-verbose` accept them (WIKI): a level
//! name in any case, or an integer (`0` → warning, `1` → info, `2` → debug, any other integer is
//! the numeric level itself; `35` is console level *user* plus progress-dots mode).

/// `trace`: the finest level, below Python's `DEBUG`.
pub const TRACE: i64 = 5;
/// `debug` (Python's `logging.DEBUG`).
pub const DEBUG: i64 = 10;
/// `info` (Python's `logging.INFO`); the log file's default.
pub const INFO: i64 = 20;
/// `warning` (Python's `logging.WARNING`).
pub const WARNING: i64 = 30;
/// `--verbose 35`: what the PyTorch integration passes; user level plus progress dots.
pub const DOTS: i64 = 35;
/// `error` (Python's `logging.ERROR`).
pub const ERROR: i64 = 40;
/// `critical` (Python's `logging.CRITICAL`).
pub const CRITICAL: i64 = 50;
/// `user`: the messages meant for the user (progress, results); the console's default.
pub const USER: i64 = 60;
/// `off`: above every message, so nothing is written.
pub const OFF: i64 = 70;

const NAMES: &[(&str, i64)] = &[
    ("trace", TRACE),
    ("debug", DEBUG),
    ("info", INFO),
    ("warning", WARNING),
    ("error", ERROR),
    ("critical", CRITICAL),
    ("user", USER),
    ("off", OFF),
];

/// Parse a level name or integer; `None` if it is neither.
pub fn parse(text: &str) -> Option<i64> {
    let t = text.trim();
    if let Some((_, n)) = NAMES.iter().find(|(name, _)| name.eq_ignore_ascii_case(t)) {
        return Some(*n);
    }
    match super::numbers::parse_python_int(t)? {
        0 => Some(WARNING),
        1 => Some(INFO),
        2 => Some(DEBUG),
        n => Some(n),
    }
}

/// The level a console set to `n` actually filters at (`35` means user level).
pub(crate) fn console_threshold(n: i64) -> i64 {
    if n == DOTS {
        USER
    } else {
        n
    }
}

/// The level's name, or its number when it has none.
pub fn name(n: i64) -> String {
    match NAMES.iter().find(|(_, v)| *v == n) {
        Some((name, _)) => (*name).to_string(),
        None => n.to_string(),
    }
}

/// The upper-case label used in log lines (`INFO`, `USER`, `Level 35`-style for others).
pub(crate) fn label(n: i64) -> String {
    match NAMES.iter().find(|(_, v)| *v == n) {
        Some((name, _)) => name.to_ascii_uppercase(),
        None => format!("LEVEL{n}"),
    }
}
