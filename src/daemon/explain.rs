//! `POST /v1/explain`: whether a compile would be a hit of the daemon's cache, and on a miss what
//! differs from the nearest entries — `nxcc cache explain` asked of the daemon, in its world (its
//! cache directory and engine, the request's working directory and environment). The request is
//! `/v1/compile`'s; nothing is compiled, and nothing is written, not even the working directory.
//!
//! The answer is one JSON object: `exit_status` (0: a hit or a remembered failure, 1: a miss, as
//! `nxcc cache explain`; 2 or 70 when the arguments or the plan are refused, or the key cannot be
//! computed), `error_lines` (what was refused, and why) and `explanation` (`nxcc cache explain
//! --json`'s object, `null` when there is none).

use serde_json::{json, Value};

use super::job::{self, Discard};
use super::state::Daemon;
use crate::cache::explain::{Verdict, EXIT_MISS};
use crate::error::EXIT_COMPILE_FAILED;

/// Explain one request. Blocking (it lowers the request into its invocation and keys its model).
pub fn answer(daemon: &Daemon, req: &job::Request) -> Value {
    let inv = match job::invoke_request(req, &daemon.memo, &Discard) {
        Ok(inv) => inv,
        Err(ended) => {
            return json!({
                "exit_status": ended.exit_status(),
                "error_lines": ended.error_lines,
                "explanation": Value::Null,
            })
        }
    };
    match daemon.engine.explain(&inv) {
        Ok(e) => json!({
            "exit_status": match e.verdict {
                Verdict::Miss { .. } => EXIT_MISS,
                _ => 0,
            },
            "error_lines": Vec::<String>::new(),
            "explanation": e,
        }),
        Err(line) => json!({
            "exit_status": EXIT_COMPILE_FAILED,
            "error_lines": [line],
            "explanation": Value::Null,
        }),
    }
}
