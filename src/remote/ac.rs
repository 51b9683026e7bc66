//! The action cache: `GetActionResult` (a miss is `None`) and `UpdateActionResult`.

use super::client::{Remote, RemoteError, CALL_TIMEOUT};
use super::re;
use super::re::action_cache_client::ActionCacheClient;

impl Remote {
    /// The cached result of the action, if the server has one.
    pub fn get_action_result(
        &self,
        action: &re::Digest,
    ) -> Result<Option<re::ActionResult>, RemoteError> {
        let mut ac = ActionCacheClient::new(self.channel.clone());
        let req = re::GetActionResultRequest {
            instance_name: self.address.instance.clone(),
            action_digest: Some(action.clone()),
            inline_stdout: false,
            inline_stderr: true,
            inline_output_files: Vec::new(),
            digest_function: 0,
        };
        match self
            .rt
            .block_on(ac.get_action_result(Remote::request(req, CALL_TIMEOUT)))
        {
            Ok(r) => Ok(Some(r.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(self.error("GetActionResult", &s)),
        }
    }

    /// Store `result` as the action's result.
    pub fn update_action_result(
        &self,
        action: &re::Digest,
        result: re::ActionResult,
    ) -> Result<(), RemoteError> {
        let mut ac = ActionCacheClient::new(self.channel.clone());
        let req = re::UpdateActionResultRequest {
            instance_name: self.address.instance.clone(),
            action_digest: Some(action.clone()),
            action_result: Some(result),
            results_cache_policy: None,
            digest_function: 0,
        };
        self.rt
            .block_on(ac.update_action_result(Remote::request(req, CALL_TIMEOUT)))
            .map(|_| ())
            .map_err(|s| self.error("UpdateActionResult", &s))
    }
}
