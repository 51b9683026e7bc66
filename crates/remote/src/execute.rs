//! Remote execution: `Execute` an action and follow its operation to the end, as Bazel's
//! remote executor does:
//!
//! - every message of the operation stream must come within the idle deadline; a stream that
//!   breaks, ends early or goes quiet is followed again by name (`WaitExecution`), with backoff;
//!   an answer that moves the operation forward renews the retry budget;
//! - `WaitExecution` answering `NOT_FOUND` (the server lost the operation: a restart; BuildGrid
//!   says `INVALID_ARGUMENT`) runs `Execute` again; so does an operation that ended with a code
//!   worth another try;
//! - an answer that the action's inputs are missing (`FAILED_PRECONDITION`: the server's CAS lost
//!   them) uploads them again and executes again ([`Remote::execute_uploading`]);
//! - cancelling the compile ends the wait at once and asks the server to cancel the operation
//!   (`CancelOperation`), so its worker stops too.

use std::time::Duration;

use prost::Message;

use bazel_remote_apis::google::longrunning::{
    operation, operations_client::OperationsClient, CancelOperationRequest, Operation,
};

use super::cas::{Blob, Sent};
use super::client::{Remote, RemoteError};
use super::connection::seconds;
use super::re;
use super::re::execution_client::ExecutionClient;
use super::retry::{retriable, worth_retrying, Backoff};
use super::text;

/// The type URL of an `ExecuteResponse` in an operation's `response`.
pub const EXECUTE_RESPONSE_TYPE: &str =
    "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteResponse";

/// How many times missing inputs are uploaded again before the compile fails.
pub const REUPLOADS: u32 = 3;

/// How long cancelling an operation may take.
const CANCEL_DEADLINE: Duration = Duration::from_secs(2);

/// How following one stream of the operation ended.
enum Follow {
    /// The operation finished.
    Done(Operation),
    /// The stream failed (or ended, or went quiet) before that.
    Broken(tonic::Status),
    /// The compile was cancelled.
    Cancelled,
}

/// What to do with a finished operation.
enum Finished {
    Response(Box<re::ExecuteResponse>),
    /// Ended with a code worth executing again.
    Again(tonic::Status),
}

/// Whether `WaitExecution` failing with `s` says the server no longer knows the operation:
/// `NOT_FOUND`, as the API specifies, or `INVALID_ARGUMENT`, as BuildGrid answers for a name it
/// does not hold (a name it gave out itself, so nothing else can be wrong with it).
fn lost(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::NotFound | tonic::Code::InvalidArgument
    )
}

impl Remote {
    /// Upload what the server lacks of `blobs`, then execute the action; when the server answers
    /// that inputs are missing, upload and execute again (at most `REUPLOADS` times).
    pub fn execute_uploading(
        &self,
        action: &re::Digest,
        blobs: &[(re::Digest, Blob)],
        skip_cache_lookup: bool,
    ) -> Result<(re::ExecuteResponse, Sent), RemoteError> {
        let mut sent = Sent::default();
        let mut tries = 0;
        loop {
            let s = self.upload_missing(blobs)?;
            sent.blobs += s.blobs;
            sent.bytes += s.bytes;
            let resp = self.execute(action, skip_cache_lookup)?;
            let missing = resp
                .status
                .as_ref()
                .is_some_and(|s| s.code == tonic::Code::FailedPrecondition as i32);
            if !missing || tries >= REUPLOADS {
                return Ok((resp, sent));
            }
            tries += 1;
        }
    }

    /// Execute the action (the server may answer from its cache unless `skip_cache_lookup`), and
    /// follow it to its end (see the module documentation).
    pub fn execute(
        &self,
        action: &re::Digest,
        skip_cache_lookup: bool,
    ) -> Result<re::ExecuteResponse, RemoteError> {
        let req = re::ExecuteRequest {
            instance_name: self.address.instance.clone(),
            skip_cache_lookup,
            action_digest: Some(action.clone()),
            execution_policy: None,
            results_cache_policy: None,
            digest_function: 0,
            inline_stdout: false,
            inline_stderr: true,
            inline_output_files: Vec::new(),
        };
        let mut name: Option<String> = None;
        let mut execute_backoff = Backoff::new(self.settings.retry);
        let mut wait_backoff = Backoff::new(self.settings.retry);
        loop {
            let waiting = name.is_some();
            let what = if waiting { "WaitExecution" } else { "Execute" };
            let status = match self.follow(&req, &mut name, &mut wait_backoff) {
                Follow::Cancelled => {
                    self.cancel_operation(name.as_deref());
                    return Err(self.cancelled_error(what));
                }
                Follow::Done(op) => match self.finished(op)? {
                    Finished::Response(r) => return Ok(*r),
                    Finished::Again(s) => {
                        name = None;
                        s
                    }
                },
                Follow::Broken(s) if waiting && lost(&s) => {
                    // The server lost the operation: execute again.
                    name = None;
                    s
                }
                Follow::Broken(s) if !waiting && s.code() == tonic::Code::FailedPrecondition => {
                    // Refused up front for missing inputs: as an operation that ended so.
                    return Ok(re::ExecuteResponse {
                        status: Some(bazel_remote_apis::google::rpc::Status {
                            code: s.code() as i32,
                            message: s.message().to_string(),
                            details: Vec::new(),
                        }),
                        ..Default::default()
                    });
                }
                Follow::Broken(s) if worth_retrying(&s) => s,
                Follow::Broken(s) => return Err(self.error(what, &s)),
            };
            let backoff = if name.is_some() {
                &mut wait_backoff
            } else {
                &mut execute_backoff
            };
            let Some(p) = backoff.pause() else {
                return Err(self.gave_up(what, &status, backoff));
            };
            if self.pause(p).is_none() {
                self.cancel_operation(name.as_deref());
                return Err(self.cancelled_error(what));
            }
        }
    }

    /// Open `Execute` (no operation yet) or `WaitExecution` (`name`), and read its stream to
    /// the end of the operation; every message renews `progress`.
    fn follow(
        &self,
        req: &re::ExecuteRequest,
        name: &mut Option<String>,
        progress: &mut Backoff,
    ) -> Follow {
        let mut ex = ExecutionClient::new(self.conn.channel.clone());
        let idle = self.settings.idle;
        let quiet =
            |what: &str| tonic::Status::deadline_exceeded(format!("{what} for {}", seconds(idle)));
        let within = |r: Result<Result<_, tonic::Status>, tokio::time::error::Elapsed>| {
            r.map_err(|_| quiet("no answer"))?
        };
        let started = match name.clone() {
            None => match self.request_within(req.clone(), None) {
                Ok(r) => {
                    self.block(async { within(tokio::time::timeout(idle, ex.execute(r)).await) })
                }
                Err(s) => return Follow::Broken(s),
            },
            Some(n) => match self.request_within(re::WaitExecutionRequest { name: n }, None) {
                Ok(r) => self.block(async {
                    within(tokio::time::timeout(idle, ex.wait_execution(r)).await)
                }),
                Err(s) => return Follow::Broken(s),
            },
        };
        let mut stream = match started {
            None => return Follow::Cancelled,
            Some(Err(s)) => return Follow::Broken(s),
            Some(Ok(r)) => r.into_inner(),
        };
        loop {
            let next = self.block(async {
                tokio::time::timeout(idle, stream.message())
                    .await
                    .map_err(|_| quiet("no news of the operation"))?
            });
            match next {
                None => return Follow::Cancelled,
                Some(Err(s)) => return Follow::Broken(s),
                Some(Ok(None)) => {
                    return Follow::Broken(tonic::Status::unavailable(
                        "the operation stream ended before the action finished",
                    ))
                }
                Some(Ok(Some(op))) => {
                    if !op.name.is_empty() {
                        *name = Some(op.name.clone());
                    }
                    progress.reset();
                    if op.done {
                        return Follow::Done(op);
                    }
                }
            }
        }
    }

    fn finished(&self, op: Operation) -> Result<Finished, RemoteError> {
        match op.result {
            Some(operation::Result::Response(any)) if any.type_url == EXECUTE_RESPONSE_TYPE => {
                let r = re::ExecuteResponse::decode(any.value.as_slice()).map_err(|e| {
                    self.untrusted(format!("Execute: a malformed ExecuteResponse: {e}"))
                })?;
                match &r.status {
                    // Worth running again, unless it is the action's own timeout.
                    Some(st)
                        if retriable(tonic::Code::from(st.code))
                            && st.code != tonic::Code::DeadlineExceeded as i32 =>
                    {
                        Ok(Finished::Again(tonic::Status::new(
                            tonic::Code::from(st.code),
                            st.message.clone(),
                        )))
                    }
                    _ => Ok(Finished::Response(Box::new(r))),
                }
            }
            Some(operation::Result::Response(any)) => Err(self.untrusted(format!(
                "Execute: an unexpected response type {}",
                text::message(&any.type_url)
            ))),
            Some(operation::Result::Error(st)) => {
                let s = tonic::Status::new(tonic::Code::from(st.code), st.message);
                if worth_retrying(&s) {
                    Ok(Finished::Again(s))
                } else {
                    Err(self.error("Execute", &s))
                }
            }
            None => Err(self.untrusted("Execute: the operation finished without a result")),
        }
    }

    /// Ask the server to cancel the operation `name` (best effort, within a short deadline; the
    /// compile's own cancellation does not end this call).
    pub fn cancel_operation(&self, name: Option<&str>) {
        let Some(name) = name else { return };
        let mut ops = OperationsClient::new(self.conn.channel.clone());
        let Ok(req) = self.request_within(
            CancelOperationRequest {
                name: name.to_string(),
            },
            Some(CANCEL_DEADLINE),
        ) else {
            return;
        };
        let _ = self.rt.block_on(async {
            tokio::time::timeout(CANCEL_DEADLINE, ops.cancel_operation(req)).await
        });
    }
}
