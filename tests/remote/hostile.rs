//! A scripted REAPI server for the remote tests, on loopback: just the calls nxcc makes
//! (capabilities, action cache, CAS, ByteStream, execution, operations, and the Remote Workers
//! API's bots service for `nxcc worker`), each answering as the test's [`Script`] says — honestly,
//! with lies, by hanging, by streaming forever, with escape sequences and 3 MB lines. It records
//! what it was asked (methods, `RequestMetadata`, read offsets, bytes sent) for the tests to
//! check.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nxcc::remote::bots::{BotSession, CreateBotSessionRequest, Lease, UpdateBotSessionRequest};
use nxcc::remote::{digest, re};
use prost::Message;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use bazel_remote_apis::google::bytestream::{
    byte_stream_server::{ByteStream, ByteStreamServer},
    QueryWriteStatusRequest, QueryWriteStatusResponse, ReadRequest, ReadResponse, WriteRequest,
    WriteResponse,
};
use bazel_remote_apis::google::longrunning::{
    operation,
    operations_server::{Operations, OperationsServer},
    CancelOperationRequest, DeleteOperationRequest, GetOperationRequest, ListOperationsRequest,
    ListOperationsResponse, Operation, WaitOperationRequest,
};

use bazel_remote_apis::google::protobuf::Empty;

type Stream2<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// How the server answers a kind of call.
#[derive(Clone, Debug, Default)]
pub enum Answer<T> {
    /// As a real server would (the blobs it holds, a miss).
    #[default]
    Honest,
    /// With this.
    With(T),
    /// With this status.
    Fail(tonic::Code, String),
    /// Not at all: the call hangs until the client gives up.
    Hang,
}

/// How ByteStream reads of a blob are answered.
#[derive(Clone, Debug, Default)]
pub enum ReadMode {
    /// The blob's bytes.
    #[default]
    Honest,
    /// Bytes forever (`0x41`) for a blob the server does not hold, whatever it declares (the
    /// blobs it holds are read honestly).
    Endless,
    /// The first `n` bytes, then silence; later reads are honest.
    StallAfter(usize),
    /// For a blob the server does not hold: `n` bytes of [`noise`] from its start whatever
    /// offset is asked, then the end of the stream (a server that ignores `read_offset`).
    IgnoreOffset(usize),
    /// For a blob the server does not hold: `n` bytes from the offset asked, then silence.
    Trickle(usize),
}

/// Bytes that differ from place to place (a xorshift sequence): what a blob at offset `at` holds.
pub fn noise(at: usize, n: usize) -> Vec<u8> {
    (at..at + n)
        .map(|i| {
            let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            x ^= x >> 29;
            x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            (x >> 32) as u8
        })
        .collect()
}

/// What the server does, set by the test (and changed while it runs).
#[derive(Clone, Debug, Default)]
pub struct Script {
    /// `GetCapabilities`.
    pub capabilities: Answer<re::ServerCapabilities>,
    /// `GetActionResult` (honest: a miss).
    pub action_result: Answer<re::ActionResult>,
    /// `Execute`: `With(r)` sends one operation in progress, then the finished one with `r`;
    /// `Honest` one in progress, then silence; `Hang` silence from the start.
    pub execute: Answer<re::ExecuteResponse>,
    /// `Execute`: end the stream after the first operation this many times before answering.
    pub execute_breaks: u32,
    /// `WaitExecution` (honest: `NOT_FOUND`, as after a restart).
    pub wait_execution: Answer<re::ExecuteResponse>,
    /// `GetActionResult` fails with these codes first, one per call, in order.
    pub action_result_failures: Vec<tonic::Code>,
    /// ByteStream reads.
    pub read: ReadMode,
    /// ByteStream writes fail `UNAVAILABLE` after this many bytes, once.
    pub write_breaks_after: Option<usize>,
    /// Leases handed to bots (each once).
    pub leases: Vec<Lease>,
}

/// What the server saw.
#[derive(Default, Debug)]
pub struct Seen {
    /// Every call, by method name, in order.
    pub calls: Vec<String>,
    /// The `RequestMetadata` of each call that carried one: (method, metadata).
    pub metadata: Vec<(String, re::RequestMetadata)>,
    /// `ByteStream.Read` offsets asked for.
    pub read_offsets: Vec<i64>,
    /// `ByteStream.Write` first offsets.
    pub write_offsets: Vec<i64>,
    /// Byte sizes of `BatchUpdateBlobs` requests (the blobs' data).
    pub batch_sizes: Vec<usize>,
    /// Operations cancelled.
    pub cancelled: Vec<String>,
    /// Each `Execute`'s `skip_cache_lookup`.
    pub skip_cache_lookup: Vec<bool>,
    /// Leases bots reported back (completed or cancelled).
    pub reported: Vec<Lease>,
    /// `ActionResult`s stored.
    pub updated: Vec<re::ActionResult>,
}

/// The server's state, shared with the test.
#[derive(Default)]
pub struct State {
    pub script: Mutex<Script>,
    pub seen: Mutex<Seen>,
    pub blobs: Mutex<HashMap<String, Vec<u8>>>,
    /// Bytes ByteStream reads sent.
    pub read_bytes: AtomicU64,
    uploads: Mutex<HashMap<String, Vec<u8>>>,
    executes: AtomicU64,
}

impl State {
    pub fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }
    pub fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap()
    }
    /// Hold `bytes` in the CAS; their digest.
    pub fn put(&self, bytes: &[u8]) -> re::Digest {
        let d = digest::of_bytes(bytes);
        self.blobs
            .lock()
            .unwrap()
            .insert(d.hash.clone(), bytes.to_vec());
        d
    }
    fn note<T>(&self, method: &str, req: &Request<T>) {
        let mut seen = self.seen();
        seen.calls.push(method.to_string());
        if let Some(v) = req
            .metadata()
            .get_bin("build.bazel.remote.execution.v2.requestmetadata-bin")
        {
            if let Ok(b) = v.to_bytes() {
                if let Ok(m) = re::RequestMetadata::decode(b.as_ref()) {
                    seen.metadata.push((method.to_string(), m));
                }
            }
        }
    }
}

/// A running scripted server.
pub struct Hostile {
    pub port: u16,
    pub state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Hostile {
    pub fn start() -> Hostile {
        let state = Arc::new(State::default());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let s = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let svc = Svc(s);
                let _ = tonic::transport::Server::builder()
                    .add_service(re::capabilities_server::CapabilitiesServer::new(svc.clone()))
                    .add_service(re::action_cache_server::ActionCacheServer::new(svc.clone()))
                    .add_service(
                        re::content_addressable_storage_server::ContentAddressableStorageServer::new(
                            svc.clone(),
                        ),
                    )
                    .add_service(ByteStreamServer::new(svc.clone()))
                    .add_service(re::execution_server::ExecutionServer::new(svc.clone()))
                    .add_service(OperationsServer::new(svc.clone()))
                    .add_service(BotsServer(svc))
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    })
                    .await;
            });
            rt.shutdown_timeout(Duration::from_millis(100));
        });
        Hostile {
            port,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("grpc://127.0.0.1:{}", self.port)
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(Clone)]
struct Svc(Arc<State>);

async fn hang<T>() -> T {
    std::future::pending().await
}

fn op(name: &str, done: Option<&re::ExecuteResponse>) -> Operation {
    Operation {
        name: name.to_string(),
        metadata: None,
        done: done.is_some(),
        result: done.map(|r| {
            operation::Result::Response(prost_types_any(
                "type.googleapis.com/build.bazel.remote.execution.v2.ExecuteResponse",
                r.encode_to_vec(),
            ))
        }),
    }
}

fn prost_types_any(url: &str, value: Vec<u8>) -> bazel_remote_apis::google::protobuf::Any {
    bazel_remote_apis::google::protobuf::Any {
        type_url: url.to_string(),
        value,
    }
}

/// A stream of `items`, then silence when `then_hang`.
fn stream_of<T: Send + 'static>(items: Vec<Result<T, Status>>, then_hang: bool) -> Stream2<T> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        for i in items {
            if tx.send(i).await.is_err() {
                return;
            }
        }
        if then_hang {
            tx.closed().await;
        }
    });
    Box::pin(ReceiverStream::new(rx))
}

#[tonic::async_trait]
impl re::capabilities_server::Capabilities for Svc {
    async fn get_capabilities(
        &self,
        req: Request<re::GetCapabilitiesRequest>,
    ) -> Result<Response<re::ServerCapabilities>, Status> {
        self.0.note("GetCapabilities", &req);
        let a = self.0.script().capabilities.clone();
        match a {
            Answer::Honest => Ok(Response::new(re::ServerCapabilities {
                cache_capabilities: Some(re::CacheCapabilities {
                    digest_functions: vec![re::digest_function::Value::Sha256 as i32],
                    ..Default::default()
                }),
                ..Default::default()
            })),
            Answer::With(c) => Ok(Response::new(c)),
            Answer::Fail(c, m) => Err(Status::new(c, m)),
            Answer::Hang => hang().await,
        }
    }
}

#[tonic::async_trait]
impl re::action_cache_server::ActionCache for Svc {
    async fn get_action_result(
        &self,
        req: Request<re::GetActionResultRequest>,
    ) -> Result<Response<re::ActionResult>, Status> {
        self.0.note("GetActionResult", &req);
        let a = {
            let mut s = self.0.script();
            if !s.action_result_failures.is_empty() {
                let code = s.action_result_failures.remove(0);
                return Err(Status::new(code, "not now"));
            }
            s.action_result.clone()
        };
        match a {
            Answer::Honest => Err(Status::not_found("no such action")),
            Answer::With(r) => Ok(Response::new(r)),
            Answer::Fail(c, m) => Err(Status::new(c, m)),
            Answer::Hang => hang().await,
        }
    }

    async fn update_action_result(
        &self,
        req: Request<re::UpdateActionResultRequest>,
    ) -> Result<Response<re::ActionResult>, Status> {
        self.0.note("UpdateActionResult", &req);
        let r = req.into_inner().action_result.unwrap_or_default();
        self.0.seen().updated.push(r.clone());
        Ok(Response::new(r))
    }
}

#[tonic::async_trait]
impl re::content_addressable_storage_server::ContentAddressableStorage for Svc {
    async fn find_missing_blobs(
        &self,
        req: Request<re::FindMissingBlobsRequest>,
    ) -> Result<Response<re::FindMissingBlobsResponse>, Status> {
        self.0.note("FindMissingBlobs", &req);
        let blobs = self.0.blobs.lock().unwrap();
        let missing = req
            .into_inner()
            .blob_digests
            .into_iter()
            .filter(|d| !blobs.contains_key(&d.hash))
            .collect();
        Ok(Response::new(re::FindMissingBlobsResponse {
            missing_blob_digests: missing,
        }))
    }

    async fn batch_update_blobs(
        &self,
        req: Request<re::BatchUpdateBlobsRequest>,
    ) -> Result<Response<re::BatchUpdateBlobsResponse>, Status> {
        self.0.note("BatchUpdateBlobs", &req);
        let r = req.into_inner();
        let size = r.requests.iter().map(|x| x.data.len()).sum();
        self.0.seen().batch_sizes.push(size);
        let mut responses = Vec::new();
        for x in r.requests {
            let d = x.digest.unwrap_or_default();
            self.0.put(&x.data);
            responses.push(re::batch_update_blobs_response::Response {
                digest: Some(d),
                status: None,
            });
        }
        Ok(Response::new(re::BatchUpdateBlobsResponse { responses }))
    }

    async fn batch_read_blobs(
        &self,
        _req: Request<re::BatchReadBlobsRequest>,
    ) -> Result<Response<re::BatchReadBlobsResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    type GetTreeStream = Stream2<re::GetTreeResponse>;
    async fn get_tree(
        &self,
        _req: Request<re::GetTreeRequest>,
    ) -> Result<Response<Self::GetTreeStream>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn split_blob(
        &self,
        _req: Request<re::SplitBlobRequest>,
    ) -> Result<Response<re::SplitBlobResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    type GetChunkMappingStream = Stream2<re::GetChunkMappingResponse>;
    async fn get_chunk_mapping(
        &self,
        _req: Request<re::GetChunkMappingRequest>,
    ) -> Result<Response<Self::GetChunkMappingStream>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn splice_blob(
        &self,
        _req: Request<re::SpliceBlobRequest>,
    ) -> Result<Response<re::SpliceBlobResponse>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn register_chunk_mapping(
        &self,
        _req: Request<tonic::Streaming<re::RegisterChunkMappingRequest>>,
    ) -> Result<Response<re::RegisterChunkMappingResponse>, Status> {
        Err(Status::unimplemented(""))
    }
}

/// The hash in a ByteStream resource name (`[instance/]blobs/HASH/SIZE`,
/// `[instance/]uploads/UUID/blobs/HASH/SIZE`).
fn hash_of(resource: &str) -> String {
    let parts: Vec<&str> = resource.split('/').collect();
    let i = parts.iter().rposition(|p| *p == "blobs").unwrap_or(0);
    parts.get(i + 1).unwrap_or(&"").to_string()
}

#[tonic::async_trait]
impl ByteStream for Svc {
    type ReadStream = Stream2<ReadResponse>;

    async fn read(&self, req: Request<ReadRequest>) -> Result<Response<Self::ReadStream>, Status> {
        self.0.note("Read", &req);
        let r = req.into_inner();
        self.0.seen().read_offsets.push(r.read_offset);
        let mode = self.0.script().read.clone();
        let state = self.0.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<ReadResponse, Status>>(2);
        let held = state
            .blobs
            .lock()
            .unwrap()
            .contains_key(&hash_of(&r.resource_name));
        match mode {
            ReadMode::IgnoreOffset(n) if !held => {
                tokio::spawn(async move {
                    for chunk in noise(0, n).chunks(64 << 10) {
                        let len = chunk.len() as u64;
                        let data = chunk.to_vec();
                        if tx.send(Ok(ReadResponse { data })).await.is_err() {
                            return;
                        }
                        state.read_bytes.fetch_add(len, Ordering::SeqCst);
                    }
                });
            }
            ReadMode::Trickle(n) if !held => {
                let from = r.read_offset.max(0) as usize;
                tokio::spawn(async move {
                    let data = noise(from, n);
                    if tx.send(Ok(ReadResponse { data })).await.is_ok() {
                        state.read_bytes.fetch_add(n as u64, Ordering::SeqCst);
                        tx.closed().await;
                    }
                });
            }
            ReadMode::Endless if !held => {
                tokio::spawn(async move {
                    loop {
                        let data = vec![0x41u8; 64 << 10];
                        let n = data.len() as u64;
                        if tx.send(Ok(ReadResponse { data })).await.is_err() {
                            return;
                        }
                        state.read_bytes.fetch_add(n, Ordering::SeqCst);
                    }
                });
            }
            mode => {
                let blob = state
                    .blobs
                    .lock()
                    .unwrap()
                    .get(&hash_of(&r.resource_name))
                    .cloned();
                let Some(blob) = blob else {
                    return Err(Status::not_found("no such blob"));
                };
                let from = (r.read_offset.max(0) as usize).min(blob.len());
                let (upto, stall) = match mode {
                    ReadMode::StallAfter(n) if from < n => {
                        state.script().read = ReadMode::Honest;
                        (n.min(blob.len()), true)
                    }
                    _ => (blob.len(), false),
                };
                tokio::spawn(async move {
                    for chunk in blob[from..upto].chunks(16 << 10) {
                        let n = chunk.len() as u64;
                        if tx
                            .send(Ok(ReadResponse {
                                data: chunk.to_vec(),
                            }))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        state.read_bytes.fetch_add(n, Ordering::SeqCst);
                    }
                    if stall {
                        tx.closed().await;
                    }
                });
            }
        }
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn write(
        &self,
        req: Request<tonic::Streaming<WriteRequest>>,
    ) -> Result<Response<WriteResponse>, Status> {
        self.0.note("Write", &req);
        let mut stream = req.into_inner();
        let mut resource = String::new();
        let mut first = true;
        while let Some(m) = stream.message().await? {
            if !m.resource_name.is_empty() {
                resource = m.resource_name.clone();
            }
            if first {
                self.0.seen().write_offsets.push(m.write_offset);
                first = false;
            }
            let total = {
                let mut ups = self.0.uploads.lock().unwrap();
                let buf = ups.entry(resource.clone()).or_default();
                buf.truncate(m.write_offset as usize);
                buf.extend_from_slice(&m.data);
                buf.len()
            };
            let breaks = self.0.script().write_breaks_after;
            if let Some(n) = breaks {
                if total >= n {
                    self.0.script().write_breaks_after = None;
                    return Err(Status::unavailable("the connection broke"));
                }
            }
            if m.finish_write {
                let data = self
                    .0
                    .uploads
                    .lock()
                    .unwrap()
                    .remove(&resource)
                    .unwrap_or_default();
                let n = data.len() as i64;
                self.0.put(&data);
                return Ok(Response::new(WriteResponse { committed_size: n }));
            }
        }
        Err(Status::aborted("the write ended without finishing"))
    }

    async fn query_write_status(
        &self,
        req: Request<QueryWriteStatusRequest>,
    ) -> Result<Response<QueryWriteStatusResponse>, Status> {
        self.0.note("QueryWriteStatus", &req);
        let r = req.into_inner();
        let n = self
            .0
            .uploads
            .lock()
            .unwrap()
            .get(&r.resource_name)
            .map(|b| b.len() as i64)
            .unwrap_or(0);
        Ok(Response::new(QueryWriteStatusResponse {
            committed_size: n,
            complete: false,
        }))
    }
}

#[tonic::async_trait]
impl re::execution_server::Execution for Svc {
    type ExecuteStream = Stream2<Operation>;

    async fn execute(
        &self,
        req: Request<re::ExecuteRequest>,
    ) -> Result<Response<Self::ExecuteStream>, Status> {
        self.0.note("Execute", &req);
        self.0
            .seen()
            .skip_cache_lookup
            .push(req.get_ref().skip_cache_lookup);
        let n = self.0.executes.fetch_add(1, Ordering::SeqCst);
        let name = format!("operations/op-{n}");
        let (a, breaks) = {
            let mut s = self.0.script();
            let b = s.execute_breaks;
            if b > 0 {
                s.execute_breaks -= 1;
            }
            (s.execute.clone(), b > 0)
        };
        if breaks {
            return Ok(Response::new(stream_of(vec![Ok(op(&name, None))], false)));
        }
        match a {
            Answer::Honest => Ok(Response::new(stream_of(vec![Ok(op(&name, None))], true))),
            Answer::Hang => Ok(Response::new(stream_of(Vec::new(), true))),
            Answer::With(r) => Ok(Response::new(stream_of(
                vec![Ok(op(&name, None)), Ok(op(&name, Some(&r)))],
                false,
            ))),
            Answer::Fail(c, m) => Err(Status::new(c, m)),
        }
    }

    type WaitExecutionStream = Stream2<Operation>;

    async fn wait_execution(
        &self,
        req: Request<re::WaitExecutionRequest>,
    ) -> Result<Response<Self::WaitExecutionStream>, Status> {
        self.0.note("WaitExecution", &req);
        let name = req.into_inner().name;
        let a = self.0.script().wait_execution.clone();
        match a {
            Answer::Honest => Err(Status::not_found(format!("no operation {name}"))),
            Answer::With(r) => Ok(Response::new(stream_of(
                vec![Ok(op(&name, Some(&r)))],
                false,
            ))),
            Answer::Fail(c, m) => Err(Status::new(c, m)),
            Answer::Hang => Ok(Response::new(stream_of(vec![Ok(op(&name, None))], true))),
        }
    }
}

#[tonic::async_trait]
impl Operations for Svc {
    async fn list_operations(
        &self,
        _req: Request<ListOperationsRequest>,
    ) -> Result<Response<ListOperationsResponse>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn get_operation(
        &self,
        _req: Request<GetOperationRequest>,
    ) -> Result<Response<Operation>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn delete_operation(
        &self,
        _req: Request<DeleteOperationRequest>,
    ) -> Result<Response<Empty>, Status> {
        Err(Status::unimplemented(""))
    }
    async fn cancel_operation(
        &self,
        req: Request<CancelOperationRequest>,
    ) -> Result<Response<Empty>, Status> {
        self.0.note("CancelOperation", &req);
        self.0.seen().cancelled.push(req.into_inner().name);
        Ok(Response::new(Empty {}))
    }
    async fn wait_operation(
        &self,
        _req: Request<WaitOperationRequest>,
    ) -> Result<Response<Operation>, Status> {
        Err(Status::unimplemented(""))
    }
}

// The bots service, by hand (bazel-remote-apis does not generate it).

#[derive(Clone)]
struct BotsServer(Svc);

impl tonic::server::NamedService for BotsServer {
    const NAME: &'static str = "google.devtools.remoteworkers.v1test2.Bots";
}

impl Svc {
    /// The session with the next scripted lease, if any (else: a wait, then the session).
    async fn session(&self, mut s: BotSession) -> Result<Response<BotSession>, Status> {
        let lease = {
            let mut script = self.0.script();
            (!script.leases.is_empty()).then(|| script.leases.remove(0))
        };
        match lease {
            Some(l) => {
                if s.name.is_empty() {
                    s.name = format!("bots/{}", s.bot_id);
                }
                s.leases = vec![l];
                Ok(Response::new(s))
            }
            None => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if s.name.is_empty() {
                    s.name = format!("bots/{}", s.bot_id);
                }
                Ok(Response::new(s))
            }
        }
    }
}

macro_rules! unary_svc {
    ($name:ident, $req:ty, $body:expr) => {
        struct $name(Svc);
        impl tonic::server::UnaryService<$req> for $name {
            type Response = BotSession;
            type Future = Pin<
                Box<dyn std::future::Future<Output = Result<Response<BotSession>, Status>> + Send>,
            >;
            fn call(&mut self, req: Request<$req>) -> Self::Future {
                let svc = self.0.clone();
                #[allow(clippy::redundant_closure_call)]
                Box::pin(async move { ($body)(svc, req).await })
            }
        }
    };
}

unary_svc!(CreateSvc, CreateBotSessionRequest, |svc: Svc,
                                                req: Request<
    CreateBotSessionRequest,
>| async move {
    svc.0.note("CreateBotSession", &req);
    let s = req.into_inner().bot_session.unwrap_or_default();
    svc.session(s).await
});

unary_svc!(UpdateSvc, UpdateBotSessionRequest, |svc: Svc,
                                                req: Request<
    UpdateBotSessionRequest,
>| async move {
    svc.0.note("UpdateBotSession", &req);
    let mut s = req.into_inner().bot_session.unwrap_or_default();
    let done: Vec<Lease> = s
        .leases
        .iter()
        .filter(|l| l.state == 4 || l.state == 5)
        .cloned()
        .collect();
    if !done.is_empty() {
        svc.0.seen().reported.extend(done);
        s.leases.clear();
        return Ok(Response::new(s));
    }
    if s.leases.iter().any(|l| l.state == 2) {
        // A keep-alive: the lease stays.
        return Ok(Response::new(s));
    }
    s.leases.clear();
    svc.session(s).await
});

impl<B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for BotsServer
where
    B: tonic::codegen::Body + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
{
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: tonic::codegen::http::Request<B>) -> Self::Future {
        let svc = self.0.clone();
        match req.uri().path() {
            "/google.devtools.remoteworkers.v1test2.Bots/CreateBotSession" => {
                Box::pin(async move {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    Ok(grpc.unary(CreateSvc(svc), req).await)
                })
            }
            "/google.devtools.remoteworkers.v1test2.Bots/UpdateBotSession" => {
                Box::pin(async move {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    Ok(grpc.unary(UpdateSvc(svc), req).await)
                })
            }
            _ => Box::pin(async move { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}
