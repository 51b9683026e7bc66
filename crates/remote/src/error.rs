//! A remote call that failed: what was attempted, at which address, what kind of failure it is,
//! and the server's words made safe to print.

use std::fmt;

use super::text;

/// What kind of failure a [`RemoteError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The server could not be reached, or did not answer in time (after the retries).
    Unreachable,
    /// The server answered with a refusal (no permission, an invalid request, ...).
    Refused,
    /// The server's answer failed a check: a blob that is not what its digest says, a stream
    /// longer than declared, a result that is not a NEFF.
    Untrusted,
    /// The compile was cancelled (a signal, a client gone) while the call ran.
    Cancelled,
    /// Something on this machine: a file, a setting.
    Local,
}

/// A remote call that failed: what was attempted, at which address, and why.
#[derive(Debug, Clone)]
pub struct RemoteError {
    /// The server's address as given.
    pub url: String,
    /// What failed and why (server text made safe).
    pub what: String,
    /// What kind of failure.
    pub kind: ErrorKind,
}

impl RemoteError {
    /// Whether the server could not be reached at all (or stopped answering).
    pub fn unreachable(&self) -> bool {
        self.kind == ErrorKind::Unreachable
    }

    /// Whether the call ended because the compile was cancelled.
    pub fn cancelled(&self) -> bool {
        self.kind == ErrorKind::Cancelled
    }
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (remote {})", self.what, self.url)
    }
}

/// A status as messages show it: `Code: message` (the server's words made safe), with the
/// transport's causes when the message alone says little.
pub fn status_text(s: &tonic::Status) -> String {
    let mut msg = text::message(s.message());
    if let Some(src) = std::error::Error::source(s) {
        let chain = text::message(&error_chain(src));
        if !chain.is_empty() && !msg.contains(&chain) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&chain);
        }
    }
    if msg.is_empty() {
        format!("{:?}", s.code())
    } else {
        format!("{:?}: {msg}", s.code())
    }
}

/// An error with its causes (`transport error: tcp connect error: Connection refused`).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_is_safe() {
        let s = tonic::Status::internal("\x1b[2Jboom\nsecond line");
        assert_eq!(status_text(&s), "Internal: \\u{1b}[2Jboom\\nsecond line");
        assert_eq!(status_text(&tonic::Status::unavailable("")), "Unavailable");
    }
}
