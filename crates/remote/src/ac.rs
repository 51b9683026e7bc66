//! The action cache: `GetActionResult` (a miss is `None`) and `UpdateActionResult`.

use super::client::{Remote, RemoteError};
use super::re;
use super::re::action_cache_client::ActionCacheClient;

impl Remote {
    /// The cached result of the action, if the server has one.
    pub fn get_action_result(
        &self,
        action: &re::Digest,
    ) -> Result<Option<re::ActionResult>, RemoteError> {
        let ac = ActionCacheClient::new(self.conn.channel.clone());
        let req = re::GetActionResultRequest {
            instance_name: self.address.instance.clone(),
            action_digest: Some(action.clone()),
            inline_stdout: false,
            inline_stderr: true,
            inline_output_files: Vec::new(),
            digest_function: 0,
        };
        self.unary("GetActionResult", || {
            let (mut ac, req) = (ac.clone(), self.request(req.clone()));
            async move {
                match ac.get_action_result(req?).await {
                    Ok(r) => Ok(Some(r.into_inner())),
                    Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
                    Err(s) => Err(s),
                }
            }
        })
    }

    /// Store `result` as the action's result.
    pub fn update_action_result(
        &self,
        action: &re::Digest,
        result: re::ActionResult,
    ) -> Result<(), RemoteError> {
        let ac = ActionCacheClient::new(self.conn.channel.clone());
        let req = re::UpdateActionResultRequest {
            instance_name: self.address.instance.clone(),
            action_digest: Some(action.clone()),
            action_result: Some(result),
            results_cache_policy: None,
            digest_function: 0,
        };
        self.unary("UpdateActionResult", || {
            let (mut ac, req) = (ac.clone(), self.request(req.clone()));
            async move { ac.update_action_result(req?).await.map(|_| ()) }
        })
    }
}
