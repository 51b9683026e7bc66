//! The command value: what to run, where, with which environment changes and limits — and its
//! one rendering, shell-quoted, that everything nxcc shows of a command prints.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::DEFAULT_KILL_GRACE;

/// What to run, where, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// A path, or a bare name looked up in `PATH`.
    pub program: PathBuf,
    /// The arguments after the program name, passed as they are (no shell).
    pub args: Vec<OsString>,
    /// The child's working directory (required: nxcc never relies on its own).
    pub cwd: PathBuf,
    /// Variables set in the child, applied after [`Spec::env_remove`].
    pub env_set: Vec<(String, String)>,
    /// Variables removed from the inherited environment.
    pub env_remove: Vec<String>,
    /// After this long, the group gets SIGTERM, then SIGKILL after [`Spec::kill_grace`].
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL, for a timeout or a cancellation.
    pub kill_grace: Duration,
}

impl Spec {
    /// `program` run in `cwd`, no arguments, the inherited environment, no timeout.
    pub fn new(program: impl Into<PathBuf>, cwd: impl Into<PathBuf>) -> Spec {
        Spec {
            program: program.into(),
            args: Vec::new(),
            cwd: cwd.into(),
            env_set: Vec::new(),
            env_remove: Vec::new(),
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
        }
    }

    /// Append one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Spec {
        self.args.push(arg.into());
        self
    }

    /// Append several arguments, in order.
    pub fn args<I, S>(mut self, args: I) -> Spec
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Set `key` to `value` in the child's environment.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Spec {
        self.env_set.push((key.into(), value.into()));
        self
    }

    /// Remove `key` from the child's environment (unless [`Spec::env`] sets it again).
    pub fn env_remove(mut self, key: impl Into<String>) -> Spec {
        self.env_remove.push(key.into());
        self
    }

    /// Set the limit on the run's wall time (`None`: no limit).
    pub fn timeout(mut self, timeout: Option<Duration>) -> Spec {
        self.timeout = timeout;
        self
    }

    /// Set the time between SIGTERM and SIGKILL.
    #[cfg(test)]
    pub(crate) fn kill_grace(mut self, grace: Duration) -> Spec {
        self.kill_grace = grace;
        self
    }

    /// The program and its arguments as text (lossy UTF-8), program first.
    pub fn argv(&self) -> Vec<String> {
        std::iter::once(self.program.to_string_lossy().into_owned())
            .chain(self.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect()
    }
}

impl fmt::Display for Spec {
    /// The command as a POSIX shell would run it, every word quoted as needed: the environment
    /// changes first (`env -u NAME` for a removal, `NAME=value` for a setting), then the program
    /// and its arguments. The one rendering of a command nxcc shows: the dry run, the log's
    /// `Executing` and replay lines, spawn errors and replay scripts all print this.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words: Vec<String> = Vec::new();
        if !self.env_remove.is_empty() {
            words.push("env".into());
            for key in &self.env_remove {
                words.push("-u".into());
                words.push(crate::shell::quote(key));
            }
        }
        for (key, value) in &self.env_set {
            words.push(format!("{}={}", key, crate::shell::quote(value)));
        }
        words.extend(self.argv().iter().map(|w| crate::shell::quote(w)));
        f.write_str(&words.join(" "))
    }
}
