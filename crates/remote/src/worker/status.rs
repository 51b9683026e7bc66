//! How a lease the worker did not run to a normal end is answered: a typed refusal whose gRPC
//! code says whose fault it is and whether another try may help — `INVALID_ARGUMENT` for an
//! action nxcc worker does not run (never retried), `FAILED_PRECONDITION` for one that cannot run
//! as things stand (a missing input blob, another toolchain), `RESOURCE_EXHAUSTED` for a worker
//! without room, `UNAVAILABLE` for a CAS that failed or a worker stopping (the server gives the
//! action to another worker), `CANCELLED`, and `INTERNAL` only for the worker's own failure.

use bazel_remote_apis::google::rpc::Status;

use crate::client::{ErrorKind, RemoteError};
use crate::text;

/// Why a lease ended without a result of the compile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The action is not one nxcc worker runs (malformed, not a compile, a bad input tree).
    Invalid(String),
    /// It cannot run as things stand (an input missing from the CAS, another toolchain).
    Precondition(String),
    /// The worker lacks room for it (disk).
    Exhausted(String),
    /// The CAS failed, or the worker is stopping: another worker may run it.
    Unavailable(String),
    /// The lease was cancelled while it ran.
    Cancelled(String),
    /// The worker itself failed.
    Internal(String),
}

impl Refusal {
    /// The gRPC code.
    pub fn code(&self) -> tonic::Code {
        match self {
            Refusal::Invalid(_) => tonic::Code::InvalidArgument,
            Refusal::Precondition(_) => tonic::Code::FailedPrecondition,
            Refusal::Exhausted(_) => tonic::Code::ResourceExhausted,
            Refusal::Unavailable(_) => tonic::Code::Unavailable,
            Refusal::Cancelled(_) => tonic::Code::Cancelled,
            Refusal::Internal(_) => tonic::Code::Internal,
        }
    }

    /// What happened, in a sentence.
    pub fn message(&self) -> &str {
        match self {
            Refusal::Invalid(m)
            | Refusal::Precondition(m)
            | Refusal::Exhausted(m)
            | Refusal::Unavailable(m)
            | Refusal::Cancelled(m)
            | Refusal::Internal(m) => m,
        }
    }

    /// The status the lease is completed with (its message made safe and bounded).
    pub fn status(&self) -> Status {
        Status {
            code: self.code() as i32,
            message: text::message(self.message()),
            details: Vec::new(),
        }
    }

    /// A status with `code` and `message` (made safe and bounded).
    pub fn status_of(code: tonic::Code, message: &str) -> Status {
        Status {
            code: code as i32,
            message: text::message(message),
            details: Vec::new(),
        }
    }

    /// A failed CAS call while fetching or storing the action's blobs.
    pub fn from_cas(e: RemoteError) -> Refusal {
        match e.kind {
            ErrorKind::Cancelled => Refusal::Cancelled(e.to_string()),
            ErrorKind::Unreachable | ErrorKind::Untrusted => Refusal::Unavailable(e.to_string()),
            ErrorKind::Refused => Refusal::Precondition(format!(
                "a blob the action needs could not be read from the CAS: {e}"
            )),
            ErrorKind::Local => Refusal::Internal(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_never_internal_unless_the_worker_failed() {
        assert_eq!(Refusal::Invalid("x".into()).status().code, 3);
        assert_eq!(Refusal::Precondition("x".into()).status().code, 9);
        assert_eq!(Refusal::Exhausted("x".into()).status().code, 8);
        assert_eq!(Refusal::Unavailable("x".into()).status().code, 14);
        assert_eq!(Refusal::Cancelled("x".into()).status().code, 1);
        let long = Refusal::Invalid(format!("\x1b[2J{}", "n".repeat(5000))).status();
        assert!(long.message.starts_with("\\u{1b}[2J") && long.message.len() < 2100);
    }
}
