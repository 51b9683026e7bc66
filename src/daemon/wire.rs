//! The daemon's wire: the JSON the server writes and its clients read, as types both sides
//! compile against (buck2's forkserver schema) — the body of `POST /v1/compile`
//! ([`CompileRequest`]), each line of its answer ([`Line`]: first what runs the compile,
//! [`Said::Engine`]; once the compile is planned, the toolchain it runs with, [`Said::Toolchain`];
//! console lines and worker events; last [`Done`], which carries how the
//! compile ended as a typed [`Status`] and [`Failure`]), and the answer of `GET /v1/status`
//! ([`DaemonStatus`]). The JSON itself is the protocol's: field names and
//! values are those clients of other languages read.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::{EngineIdentity, ToolchainIdentity};
use crate::engine::events::Event;
use crate::result::{Failure, Status};

/// The JSON body of `POST /v1/compile`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompileRequest {
    /// The compile arguments, with or without a leading `compile`.
    pub argv: Vec<String>,
    /// Absolute; relative paths in `argv` are taken against it.
    pub working_directory: String,
    /// Variables for the compile's worker and tools (each checked by the daemon: a name a
    /// request may set, a string value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<serde_json::Map<String, Value>>,
}

/// Which of the client's streams a console line belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    /// Standard output (the dry run's plan, help).
    Stdout,
    /// Standard error (the log's console lines, errors).
    Stderr,
}

/// Whether a compile cache answered a compile: the `cache` field of [`Done`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheUse {
    /// The NEFF (or a remembered failure) came from the cache; no tool ran.
    Hit,
    /// The cache was consulted and the compile ran (its result is stored).
    Miss,
    /// No cache was involved.
    Off,
}

impl CacheUse {
    /// The word reports use: `hit`, `miss` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheUse::Hit => "hit",
            CacheUse::Miss => "miss",
            CacheUse::Off => "off",
        }
    }
}

impl From<crate::cache::CacheStatus> for CacheUse {
    fn from(s: crate::cache::CacheStatus) -> CacheUse {
        match s {
            crate::cache::CacheStatus::Hit => CacheUse::Hit,
            crate::cache::CacheStatus::Miss => CacheUse::Miss,
            crate::cache::CacheStatus::Off => CacheUse::Off,
        }
    }
}

/// The last line of a `/v1/compile` answer: how the compile ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Done {
    /// The exit status `nxcc compile` would end with.
    pub exit_status: i32,
    /// The NEFF the compile writes (when it got as far as a plan).
    pub output: Option<String>,
    /// Whether the cache served it, ran it, or was not used.
    pub cache: CacheUse,
    /// The error lines reported, in order.
    #[serde(default)]
    pub error_lines: Vec<String>,
    /// What failed, typed (`null` unless the compile failed): the key clients read to tell
    /// failures apart without parsing lines.
    #[serde(default)]
    pub failure: Option<Failure>,
    /// Seconds from admission to the end (zero when it never started).
    #[serde(default)]
    pub wall_s: f64,
    /// How the compile ended, typed: succeeded, failed (and what failed), interrupted, cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl Done {
    /// The compile's result as a client puts it together: how it ended (`status`, else, from a
    /// daemon that does not send it, its `failure` or a success by its exit status), its error
    /// lines, and `jobs`, the figures its events carried; `None` for a failure of unknown kind.
    pub fn result(
        &self,
        jobs: Vec<crate::engine::metrics::JobMetrics>,
    ) -> Option<crate::engine::result::CompileResult> {
        let status = match (&self.status, &self.failure) {
            (Some(s), _) => s.clone(),
            (None, Some(f)) => Status::Failed(f.clone()),
            (None, None) if self.exit_status == 0 => Status::Succeeded,
            (None, None) => return None,
        };
        Some(crate::engine::result::CompileResult::new(
            status,
            self.error_lines.clone(),
            jobs,
        ))
    }
}

/// What the daemon itself says on a stream: what runs the compile, a console line, or the end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Said {
    /// What runs the compile, the stream's first line: nxcc's pipeline, or the external
    /// compiler the daemon runs (its path and identity, as its cache keys it).
    Engine(EngineIdentity),
    /// The toolchain the compile runs with, once the daemon has planned it (its own when the
    /// request names none): where its tools are, whether it is the simulated one, and its
    /// identity as the daemon's cache key records it.
    Toolchain(ToolchainIdentity),
    /// One console line of the compile.
    Log {
        /// The line, without its end.
        line: String,
        /// Where the client prints it.
        stream: Stream,
    },
    /// The compile is over.
    Done(Done),
}

/// One line of a `/v1/compile` answer: what the daemon says, or a worker event it forwards (the
/// jobs planned, a job started or finished, an error line; never the worker's own `done`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Line {
    /// A console line or the end.
    Said(Said),
    /// A worker event.
    Worker(Event),
}

impl Line {
    /// A console line.
    pub fn log(line: &str, stream: Stream) -> Line {
        Line::Said(Said::Log {
            line: line.to_string(),
            stream,
        })
    }

    /// The line a worker event is forwarded as (`None`: not forwarded — the worker's own
    /// `done`; the daemon's [`Done`] ends the stream).
    pub fn worker(event: &Event) -> Option<Line> {
        match event {
            Event::Done { .. } => None,
            other => Some(Line::Worker(other.clone())),
        }
    }

    /// Read one line of an answer; `None` for a line that is none of these (a newer daemon's
    /// event, a malformed line), which a client passes over.
    pub fn parse(text: &str) -> Option<Line> {
        serde_json::from_str(text).ok()
    }

    /// The line as written: one JSON object, then a newline.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// The memory figures of [`DaemonStatus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    /// The memory budget, bytes (`None`: no budget).
    pub budget: Option<u64>,
    /// Sum of the running compiles' estimates, bytes.
    pub in_use: u64,
}

/// How many compiles the daemon finished, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compiles {
    /// Compiles that ended.
    pub finished: u64,
    /// Of them, failed.
    pub failed: u64,
    /// Of them, cancelled.
    pub cancelled: u64,
}

/// The daemon's connections.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connections {
    /// Open now.
    pub open: usize,
    /// `--max-connections`.
    pub max: usize,
    /// `--max-connections-per-uid`.
    pub max_per_uid: usize,
}

/// The daemon's fork server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkServer {
    /// Its pid (`None`: it is not running now).
    pub pid: Option<u32>,
    /// How often it was started again.
    pub restarts: u64,
    /// Workers it started.
    pub workers_started: u64,
    /// Requests it started no worker for.
    pub workers_not_started: u64,
    /// Why the last of those was not started.
    pub last_not_started: Option<String>,
}

/// The daemon's compile cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    /// Its directory.
    pub dir: String,
    /// This daemon's hits.
    pub hits: u64,
    /// This daemon's misses.
    pub misses: u64,
    /// The directory's own counters (every process and host that uses it).
    pub counters: crate::cache::counters::Counters,
}

/// The answer of `GET /v1/status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DaemonStatus {
    /// nxcc's version.
    pub version: String,
    /// The driver version it reproduces.
    pub reproduces: String,
    /// The daemon's pid.
    pub pid: u32,
    /// Where it listens.
    pub socket: String,
    /// Seconds since it started.
    pub uptime_s: f64,
    /// Compiles running.
    pub running: usize,
    /// Compiles waiting for admission.
    pub queued: usize,
    /// `--max-concurrent`.
    pub max_concurrent: usize,
    /// The memory budget and what the running compiles take of it.
    pub memory: Memory,
    /// Admission's own figures.
    pub admission: Option<crate::admission::Snapshot>,
    /// Compiles finished.
    pub compiles: Compiles,
    /// Connections.
    pub connections: Connections,
    /// What runs the compiles.
    pub engine: String,
    /// The fork server, when there is one.
    pub fork_server: Option<ForkServer>,
    /// The compile cache, when there is one.
    pub cache: Option<Cache>,
    /// `--inactivity-timeout` (`None`: never).
    pub inactivity_timeout_s: Option<f64>,
    /// The daemon is stopping.
    pub stopping: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lines_are_the_protocols_json() {
        let log = Line::log("a b", Stream::Stderr);
        assert_eq!(
            serde_json::to_value(&log).unwrap(),
            json!({"event": "log", "line": "a b", "stream": "stderr"})
        );
        let started = Event::JobStarted {
            job: crate::jobs::Job::Frontend.into(),
            index: 2,
            total: 6,
        };
        let w = Line::worker(&started).unwrap();
        assert_eq!(
            serde_json::to_value(&w).unwrap(),
            json!({"event": "job_started", "job": "Frontend", "index": 2, "total": 6})
        );
        assert_eq!(
            Line::worker(&Event::Done {
                exit_status: 0,
                status: None
            }),
            None
        );
        let done = Line::Said(Said::Done(Done {
            exit_status: 70,
            output: Some("/w/m.neff".into()),
            cache: CacheUse::Off,
            error_lines: vec!["[ERROR] x".into()],
            failure: Some(Failure::Internal),
            wall_s: 1.5,
            status: Some(Status::Failed(Failure::Internal)),
        }));
        let v = serde_json::to_value(&done).unwrap();
        assert_eq!(v["event"], "done");
        assert_eq!(v["exit_status"], 70);
        assert_eq!(v["cache"], "off");
        assert_eq!(v["error_lines"][0], "[ERROR] x");
        assert_eq!(v["failure"], "internal");
        let named = EngineIdentity {
            engine: crate::cache::meta::EngineKind::External,
            compiler: Some("/opt/venv/bin/neuronx-cc".into()),
            identity: Some(
                json!({"kind": "external", "compiler": {"blake3": "ab", "size": 3}, "version": "neuronx-cc 2.24"}),
            ),
        };
        let engine = Line::Said(Said::Engine(named));
        assert_eq!(
            serde_json::to_value(&engine).unwrap(),
            json!({"event": "engine", "engine": "external", "compiler": "/opt/venv/bin/neuronx-cc",
                "identity": {"kind": "external", "compiler": {"blake3": "ab", "size": 3}, "version": "neuronx-cc 2.24"}})
        );
        let pipeline = Line::Said(Said::Engine(EngineIdentity::pipeline()));
        assert_eq!(
            serde_json::to_value(&pipeline).unwrap(),
            json!({"event": "engine", "engine": "pipeline", "compiler": null, "identity": null})
        );
        let toolchain = Line::Said(Said::Toolchain(ToolchainIdentity {
            bin: Some("/opt/tc/bin".into()),
            simulated: true,
            identity: Some(json!({"kind": "dir", "tools": {}})),
        }));
        assert_eq!(
            serde_json::to_value(&toolchain).unwrap(),
            json!({"event": "toolchain", "bin": "/opt/tc/bin", "simulated": true,
                "identity": {"kind": "dir", "tools": {}}})
        );
        // Each reads back as itself, from its bytes.
        for l in [engine, pipeline, toolchain, log, w, done] {
            let bytes = l.to_bytes();
            assert_eq!(bytes.last(), Some(&b'\n'));
            assert_eq!(Line::parse(std::str::from_utf8(&bytes).unwrap()), Some(l));
        }
    }

    #[test]
    fn a_client_reads_what_older_and_newer_daemons_write() {
        // A done line without the newer fields.
        let old = Line::parse(r#"{"event":"done","exit_status":70,"output":"/o","cache":"off"}"#);
        let Some(Line::Said(Said::Done(d))) = old else {
            panic!("{old:?}")
        };
        assert_eq!((d.exit_status, d.status, d.failure), (70, None, None));
        // An event this client does not know, and what is not JSON: passed over.
        assert_eq!(Line::parse(r#"{"event":"progress","percent":3}"#), None);
        assert_eq!(Line::parse("not json"), None);
        // A status with only some fields.
        let s: DaemonStatus = serde_json::from_str(r#"{"pid":7,"running":1}"#).unwrap();
        assert_eq!((s.pid, s.running, s.queued), (7, 1, 0));
    }
}
