//! The Remote Workers API (`google.devtools.remoteworkers.v1test2`), the part a bot needs:
//! `BotSession`, `Lease`, `Worker`, `Device`, `CreateBotSession`, `UpdateBotSession`. Written
//! here from the public schema (`bots.proto`, `worker.proto`; field numbers as published), since
//! `bazel-remote-apis` does not include it; the client is tonic's generic gRPC client with the
//! prost codec.

use std::time::Duration;

use bazel_remote_apis::google::protobuf::{Any, Timestamp};
use bazel_remote_apis::google::rpc::Status;
use tonic::codegen::http;

use super::client::{Remote, RemoteError};

/// A bot's session with the server (`BotSession`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct BotSession {
    /// The session's name, assigned by the server.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The bot's own id, unique per bot.
    #[prost(string, tag = "2")]
    pub bot_id: String,
    /// The bot's health ([`BotStatus`]).
    #[prost(enumeration = "BotStatus", tag = "3")]
    pub status: i32,
    /// What the bot offers.
    #[prost(message, optional, tag = "4")]
    pub worker: Option<Worker>,
    /// The leases assigned to it.
    #[prost(message, repeated, tag = "5")]
    pub leases: Vec<Lease>,
    /// When the session expires unless updated.
    #[prost(message, optional, tag = "6")]
    pub expire_time: Option<Timestamp>,
    /// The bot's version.
    #[prost(string, tag = "7")]
    pub version: String,
}

/// A unit of work assigned to a bot (`Lease`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Lease {
    /// Deprecated assignment name.
    #[prost(string, tag = "1")]
    pub assignment: String,
    /// The lease's state ([`LeaseState`]).
    #[prost(enumeration = "LeaseState", tag = "2")]
    pub state: i32,
    /// The outcome, set with `COMPLETED`.
    #[prost(message, optional, tag = "3")]
    pub status: Option<Status>,
    /// What the worker must offer.
    #[prost(message, optional, tag = "4")]
    pub requirements: Option<Worker>,
    /// When the lease expires.
    #[prost(message, optional, tag = "5")]
    pub expire_time: Option<Timestamp>,
    /// Deprecated inline assignment.
    #[prost(message, optional, tag = "6")]
    pub inline_assignment: Option<Any>,
    /// The lease's id.
    #[prost(string, tag = "7")]
    pub id: String,
    /// The work: for REAPI, an `Action` or the `Digest` of one.
    #[prost(message, optional, tag = "8")]
    pub payload: Option<Any>,
    /// The result: for REAPI, an `ActionResult`.
    #[prost(message, optional, tag = "9")]
    pub result: Option<Any>,
}

/// What a bot offers (`Worker`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Worker {
    /// The devices; the first is the one that runs commands.
    #[prost(message, repeated, tag = "1")]
    pub devices: Vec<Device>,
    /// The worker's properties.
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
    /// The worker's configuration.
    #[prost(message, repeated, tag = "3")]
    pub configs: Vec<Property>,
}

/// A device of a worker (`Device`); its properties are what the scheduler matches platforms to.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    /// The device's handle.
    #[prost(string, tag = "1")]
    pub handle: String,
    /// Its properties.
    #[prost(message, repeated, tag = "2")]
    pub properties: Vec<Property>,
}

/// A key/value pair (`Worker.Property`, `Worker.Config`, `Device.Property`: one shape).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Property {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `CreateBotSessionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateBotSessionRequest {
    /// The instance (`""`: the default).
    #[prost(string, tag = "1")]
    pub parent: String,
    /// The session to create.
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
}

/// `UpdateBotSessionRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateBotSessionRequest {
    /// The session's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The session as the bot sees it.
    #[prost(message, optional, tag = "2")]
    pub bot_session: Option<BotSession>,
    /// Which fields to update (`google.protobuf.FieldMask`'s `paths`, field 1).
    #[prost(message, optional, tag = "3")]
    pub update_mask: Option<FieldMask>,
}

/// `google.protobuf.FieldMask`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FieldMask {
    /// The field paths.
    #[prost(string, repeated, tag = "1")]
    pub paths: Vec<String>,
}

/// `BotStatus`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum BotStatus {
    /// Unset.
    Unspecified = 0,
    /// Healthy: may get leases.
    Ok = 1,
    /// Unhealthy.
    Unhealthy = 2,
    /// The host is rebooting.
    HostRebooting = 3,
    /// The bot is terminating: no new leases.
    BotTerminating = 4,
}

/// `LeaseState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum LeaseState {
    /// Unset.
    Unspecified = 0,
    /// Assigned, not yet accepted.
    Pending = 1,
    /// Accepted, running.
    Active = 2,
    /// Finished (the status says how).
    Completed = 4,
    /// Cancelled by the server.
    Cancelled = 5,
}

const SERVICE: &str = "google.devtools.remoteworkers.v1test2.Bots";

impl Remote {
    async fn bots_unary<Req, Resp>(
        &self,
        method: &'static str,
        req: Req,
        timeout: Duration,
    ) -> Result<Resp, tonic::Status>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        let mut grpc = tonic::client::Grpc::new(self.conn.channel.clone());
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("the service is not ready: {e}")))?;
        let path = http::uri::PathAndQuery::try_from(format!("/{SERVICE}/{method}"))
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<Req, Resp>::default();
        let req = self.request_within(req, Some(timeout))?;
        let answer = tokio::time::timeout(
            timeout + Duration::from_secs(1),
            grpc.unary(req, path, codec),
        )
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer"))?;
        answer.map(|r| r.into_inner())
    }

    /// `CreateBotSession`, waiting at most `wait` for a first lease.
    pub fn create_bot_session(
        &self,
        session: BotSession,
        wait: Duration,
    ) -> Result<BotSession, RemoteError> {
        let req = CreateBotSessionRequest {
            parent: self.address.instance.clone(),
            bot_session: Some(session),
        };
        self.block(self.bots_unary("CreateBotSession", req, wait))
            .ok_or_else(|| self.cancelled_error("CreateBotSession"))?
            .map_err(|s| self.error("CreateBotSession", &s))
    }

    /// `UpdateBotSession`, waiting at most `wait` for a new lease; a deadline passing while
    /// the server had nothing to hand out is not an error (the session is returned unchanged).
    pub fn update_bot_session(
        &self,
        session: BotSession,
        wait: Duration,
    ) -> Result<BotSession, RemoteError> {
        let req = UpdateBotSessionRequest {
            name: session.name.clone(),
            bot_session: Some(session.clone()),
            update_mask: None,
        };
        let answer = self
            .block(self.bots_unary("UpdateBotSession", req, wait))
            .ok_or_else(|| self.cancelled_error("UpdateBotSession"))?;
        match answer {
            Ok(s) => Ok(s),
            Err(s) if s.code() == tonic::Code::DeadlineExceeded && session.leases.is_empty() => {
                Ok(session)
            }
            Err(s) => Err(self.error("UpdateBotSession", &s)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn field_numbers_are_the_published_ones() {
        // A lease with id (7), state (2) and payload (8): the bytes a Python BuildGrid writes.
        let l = Lease {
            id: "j".into(),
            state: LeaseState::Pending as i32,
            payload: Some(Any {
                type_url: "t".into(),
                value: vec![1],
            }),
            ..Default::default()
        };
        let b = l.encode_to_vec();
        // field 2 varint, then 7 (len), then 8 (len) in number order
        assert_eq!(b[0], 2 << 3);
        assert_eq!(b[2], (7 << 3) | 2);
        assert!(b.contains(&((8 << 3) | 2)));
        let s = BotSession {
            bot_id: "b".into(),
            status: BotStatus::Ok as i32,
            ..Default::default()
        };
        assert_eq!(s.encode_to_vec(), vec![(2 << 3) | 2, 1, b'b', 3 << 3, 1]);
    }
}
