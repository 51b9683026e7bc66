//! Remote execution: `Execute` an action and follow its operation to the end (`WaitExecution`
//! when the stream ends early), the answer as an [`re::ExecuteResponse`].

use prost::Message;

use bazel_remote_apis::google::longrunning::{operation, Operation};

use super::client::{Remote, RemoteError};
use super::re;
use super::re::execution_client::ExecutionClient;

/// The type URL of an `ExecuteResponse` in an operation's `response`.
pub const EXECUTE_RESPONSE_TYPE: &str =
    "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteResponse";

impl Remote {
    /// Execute the action (the server may answer from its cache unless `skip_cache_lookup`), and
    /// wait for it to finish.
    pub fn execute(
        &self,
        action: &re::Digest,
        skip_cache_lookup: bool,
    ) -> Result<re::ExecuteResponse, RemoteError> {
        let mut ex = ExecutionClient::new(self.channel.clone());
        let req = re::ExecuteRequest {
            instance_name: self.address.instance.clone(),
            skip_cache_lookup,
            action_digest: Some(action.clone()),
            execution_policy: None,
            results_cache_policy: None,
            digest_function: 0,
            inline_stdout: false,
            inline_stderr: false,
            inline_output_files: Vec::new(),
        };
        let mut stream = self.retry("Execute", || {
            let (mut ex, req) = (ex.clone(), req.clone());
            async move { ex.execute(req).await.map(|r| r.into_inner()) }
        })?;
        self.rt.block_on(async {
            let mut name = String::new();
            let mut waits = 0;
            loop {
                match stream.message().await {
                    Ok(Some(op)) => {
                        name = op.name.clone();
                        if op.done {
                            return self.finished(op);
                        }
                    }
                    Ok(None) | Err(_) if !name.is_empty() && waits < 3 => {
                        // The stream ended before the operation did: wait on it by name.
                        waits += 1;
                        stream = ex
                            .wait_execution(re::WaitExecutionRequest { name: name.clone() })
                            .await
                            .map_err(|s| self.error("WaitExecution", &s))?
                            .into_inner();
                    }
                    Ok(None) => {
                        return Err(self.other(
                            "Execute: the operation stream ended before the action finished",
                        ))
                    }
                    Err(s) => return Err(self.error("Execute", &s)),
                }
            }
        })
    }

    fn finished(&self, op: Operation) -> Result<re::ExecuteResponse, RemoteError> {
        match op.result {
            Some(operation::Result::Response(any)) if any.type_url == EXECUTE_RESPONSE_TYPE => {
                re::ExecuteResponse::decode(any.value.as_slice())
                    .map_err(|e| self.other(format!("Execute: a malformed ExecuteResponse: {e}")))
            }
            Some(operation::Result::Response(any)) => Err(self.other(format!(
                "Execute: an unexpected response type {}",
                any.type_url
            ))),
            Some(operation::Result::Error(st)) => {
                Err(self.other(format!("Execute failed: {} (code {})", st.message, st.code)))
            }
            None => Err(self.other("Execute: the operation finished without a result")),
        }
    }
}
