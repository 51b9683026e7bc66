//! The content-addressed store: which blobs the server lacks (`FindMissingBlobs`), uploads
//! (`BatchUpdateBlobs` within the server's batch limit, ByteStream `Write` streamed from the
//! file for larger blobs: a model is never held in memory whole), and downloads (ByteStream
//! `Read`, written as they come).
//!
//! What the server sends is not trusted: a blob that declares more than the largest accepted
//! (`NXCC_REMOTE_MAX_BLOB`) or than the room free where it goes is refused before a byte is
//! written, as is a blob read into memory that declares more than the caller's bound; a
//! download stops at the size its digest declares (the first byte past it is an error; the
//! extra bytes are never written) and is checked against its digest. A stream that moves less
//! than the minimum rate over an idle timeout (`NXCC_REMOTE_MIN_RATE`; nothing at all, for an
//! idle timeout, at any rate) fails; a stream that breaks (a server restart) is resumed from the
//! bytes already received (a read, which asks for its last bytes again and checks them, so a
//! server that ignores `read_offset` is caught) or from the size the server says it committed
//! (`QueryWriteStatus`, a write), with backoff, within the retry budget counted as the time
//! spent failing over every attempt (`retry::Backoff::pause_after`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bazel_remote_apis::google::bytestream::{
    byte_stream_client::ByteStreamClient, QueryWriteStatusRequest, ReadRequest, WriteRequest,
};

use super::client::{Remote, RemoteError};
use super::connection::seconds;
use super::digest::{self, CHUNK};
use super::re;
use super::re::content_addressable_storage_client::ContentAddressableStorageClient;
use super::retry::{worth_retrying, Backoff};
use super::text;

/// Blobs up to this size go in batches (when the server's batch limit allows); larger ones
/// through ByteStream.
pub const BATCH_BLOB_MAX: i64 = 1 << 20;

/// The per-blob overhead counted against a batch's size (the digest and framing).
const BATCH_ENTRY_OVERHEAD: i64 = 128;

/// A blob to upload: bytes in memory (a message) or a file read when sent.
#[derive(Debug, Clone)]
pub enum Blob {
    /// In memory.
    Bytes(Vec<u8>),
    /// A file, read in chunks when sent.
    File(PathBuf),
}

impl Blob {
    /// The blob from `offset` on, as a reader.
    fn open_at(&self, offset: u64) -> std::io::Result<Box<dyn Read + Send>> {
        match self {
            Blob::Bytes(b) => {
                let start = (offset as usize).min(b.len());
                Ok(Box::new(std::io::Cursor::new(b[start..].to_vec())))
            }
            Blob::File(p) => {
                let mut f = std::fs::File::open(p)?;
                f.seek(SeekFrom::Start(offset))?;
                Ok(Box::new(f))
            }
        }
    }
}

/// What an upload sent: blobs and bytes (figures for logs and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Blobs uploaded (the server lacked them).
    pub blobs: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// How a stream attempt ended.
enum Attempt<T> {
    Done(T),
    /// Failed with a status, after this long without moving at the minimum rate (what it
    /// costs the retry budget).
    Failed(tonic::Status, Duration),
}

impl Remote {
    /// The digests among `digests` the server does not hold.
    pub fn find_missing(&self, digests: &[re::Digest]) -> Result<Vec<re::Digest>, RemoteError> {
        if digests.is_empty() {
            return Ok(Vec::new());
        }
        let cas = ContentAddressableStorageClient::new(self.conn.channel.clone());
        let req = re::FindMissingBlobsRequest {
            instance_name: self.address.instance.clone(),
            blob_digests: digests.to_vec(),
            digest_function: 0,
        };
        self.unary("FindMissingBlobs", || {
            let (mut cas, req) = (cas.clone(), self.request(req.clone()));
            async move {
                cas.find_missing_blobs(req?)
                    .await
                    .map(|r| r.into_inner().missing_blob_digests)
            }
        })
    }

    /// Upload what the server lacks of `blobs` (deduplicated by digest).
    pub fn upload_missing(&self, blobs: &[(re::Digest, Blob)]) -> Result<Sent, RemoteError> {
        let mut seen = std::collections::HashSet::new();
        let unique: Vec<&(re::Digest, Blob)> = blobs
            .iter()
            .filter(|(d, _)| seen.insert(digest::show(d)))
            .collect();
        let digests: Vec<re::Digest> = unique.iter().map(|(d, _)| d.clone()).collect();
        let missing: std::collections::HashSet<String> = self
            .find_missing(&digests)?
            .iter()
            .map(digest::show)
            .collect();
        let limit = self.limits().batch_bytes;
        let mut sent = Sent::default();
        let mut batch: Vec<(re::Digest, Vec<u8>)> = Vec::new();
        let mut batch_bytes = 0i64;
        for (d, blob) in unique {
            if !missing.contains(&digest::show(d)) {
                continue;
            }
            sent.blobs += 1;
            sent.bytes += d.size_bytes as u64;
            let cost = d.size_bytes + BATCH_ENTRY_OVERHEAD;
            if cost > limit.min(BATCH_BLOB_MAX) {
                self.write_stream(d, blob)?;
                continue;
            }
            let bytes = match blob {
                Blob::Bytes(b) => b.clone(),
                Blob::File(p) => std::fs::read(p)
                    .map_err(|e| self.other(format!("cannot read {}: {e}", p.display())))?,
            };
            if batch_bytes + cost > limit {
                self.batch_update(std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
            batch_bytes += cost;
            batch.push((d.clone(), bytes));
        }
        self.batch_update(batch)?;
        Ok(sent)
    }

    fn batch_update(&self, batch: Vec<(re::Digest, Vec<u8>)>) -> Result<(), RemoteError> {
        if batch.is_empty() {
            return Ok(());
        }
        let cas = ContentAddressableStorageClient::new(self.conn.channel.clone());
        let req = re::BatchUpdateBlobsRequest {
            instance_name: self.address.instance.clone(),
            requests: batch
                .into_iter()
                .map(|(digest, data)| re::batch_update_blobs_request::Request {
                    digest: Some(digest),
                    data,
                    compressor: 0,
                })
                .collect(),
            digest_function: 0,
        };
        let resp = self.unary("BatchUpdateBlobs", || {
            let (mut cas, req) = (cas.clone(), self.request(req.clone()));
            async move { cas.batch_update_blobs(req?).await.map(|r| r.into_inner()) }
        })?;
        for r in resp.responses {
            if let Some(st) = r.status.filter(|s| s.code != 0) {
                return Err(self.error(
                    &format!(
                        "BatchUpdateBlobs of {}",
                        text::message(&r.digest.as_ref().map(digest::show).unwrap_or_default())
                    ),
                    &tonic::Status::new(tonic::Code::from(st.code), st.message),
                ));
            }
        }
        Ok(())
    }

    /// Upload one blob through ByteStream `Write`, in [`CHUNK`]s read as they are sent; resumed
    /// from the committed size after a failure worth another try.
    fn write_stream(&self, d: &re::Digest, blob: &Blob) -> Result<(), RemoteError> {
        let resource = self.address.resource(&format!(
            "uploads/{}/blobs/{}/{}",
            super::metadata::uuid(),
            d.hash,
            d.size_bytes
        ));
        let mut backoff = Backoff::new(self.settings.retry);
        let mut offset = 0i64;
        loop {
            match self.write_attempt(&resource, d.size_bytes, blob, offset)? {
                Attempt::Done(()) => return Ok(()),
                Attempt::Failed(s, _) if !worth_retrying(&s) => {
                    return Err(self.error("ByteStream.Write", &s))
                }
                Attempt::Failed(s, failing) => {
                    let Some(p) = backoff.pause_after(failing) else {
                        return Err(self.gave_up("ByteStream.Write", &s, &backoff));
                    };
                    self.pause(p)
                        .ok_or_else(|| self.cancelled_error("ByteStream.Write"))?;
                    offset = match self.committed(&resource) {
                        Some((_, true)) => return Ok(()),
                        Some((n, false)) => n.clamp(0, d.size_bytes),
                        None => 0,
                    };
                }
            }
        }
    }

    /// `QueryWriteStatus`: how much of an upload the server holds and whether it is complete
    /// (`None`: it cannot say).
    fn committed(&self, resource: &str) -> Option<(i64, bool)> {
        let mut bs = ByteStreamClient::new(self.conn.channel.clone());
        let req = self
            .request(QueryWriteStatusRequest {
                resource_name: resource.to_string(),
            })
            .ok()?;
        let deadline = self.settings.call;
        let r =
            self.block(async { tokio::time::timeout(deadline, bs.query_write_status(req)).await });
        match r {
            Some(Ok(Ok(r))) => {
                let r = r.into_inner();
                Some((r.committed_size, r.complete))
            }
            _ => None,
        }
    }

    /// One `Write` from `offset`: the chunks are read by a thread (at most two in flight); the
    /// bytes taken must keep to the minimum rate ([`Pace`]).
    fn write_attempt(
        &self,
        resource: &str,
        total: i64,
        blob: &Blob,
        offset: i64,
    ) -> Result<Attempt<()>, RemoteError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteRequest>(2);
        let src = blob
            .open_at(offset as u64)
            .map_err(|e| self.other(format!("cannot read the blob to upload: {e}")))?;
        let sent = Arc::new(AtomicU64::new(0));
        let reader = send_chunks(src, resource.to_string(), offset, total, tx, sent.clone());
        let mut bs = ByteStreamClient::new(self.conn.channel.clone());
        let req = self
            .request_within(tokio_stream::wrappers::ReceiverStream::new(rx), None)
            .map_err(|s| self.error("ByteStream.Write", &s))?;
        let mut pace = Pace::new(self.settings.idle, self.settings.min_rate);
        let outcome = self.block(async {
            let write = bs.write(req);
            tokio::pin!(write);
            let mut seen = 0u64;
            loop {
                tokio::select! {
                    r = &mut write => return r.map(|r| r.into_inner().committed_size),
                    () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {
                        let now = sent.load(Ordering::SeqCst);
                        pace.moved(now - seen);
                        seen = now;
                        if pace.left().is_zero() {
                            return Err(pace.too_slow());
                        }
                    }
                }
            }
        });
        let read = reader.join();
        let committed = match outcome {
            None => return Err(self.cancelled_error("ByteStream.Write")),
            Some(Err(s)) => return Ok(Attempt::Failed(s, pace.failing())),
            Some(Ok(c)) => c,
        };
        if let Ok(Err(e)) = read {
            return Err(self.other(format!("cannot read the blob to upload: {e}")));
        }
        if committed != total {
            return Err(self.untrusted(format!(
                "ByteStream.Write committed {committed} of {total} bytes"
            )));
        }
        Ok(Attempt::Done(()))
    }

    /// A blob's bytes in memory (a message, a log), verified; one that declares more than `max`
    /// bytes is refused before anything is read.
    pub fn read_blob(&self, d: &re::Digest, max: u64) -> Result<Vec<u8>, RemoteError> {
        if d.size_bytes < 0 || d.size_bytes as u64 > max {
            return Err(self.untrusted(format!(
                "the blob {} declares {} bytes, more than the {max} accepted here",
                text::message(&digest::show(d)),
                d.size_bytes
            )));
        }
        let mut out = Vec::with_capacity(d.size_bytes as usize);
        self.read_into(d, &mut out)?;
        Ok(out)
    }

    /// The last `max` bytes of a blob (all of it, verified, when it is no larger; otherwise
    /// unverified: a log's tail).
    pub fn read_tail(&self, d: &re::Digest, max: u64) -> Result<Vec<u8>, RemoteError> {
        if d.size_bytes >= 0 && d.size_bytes as u64 <= max {
            return self.read_blob(d, max);
        }
        let from = d.size_bytes - max as i64;
        let mut out = Vec::with_capacity(max as usize);
        let mut got = Received::new(d, from, &mut out);
        self.read_range(&mut got)?;
        Ok(out)
    }

    /// Download a blob into a new file at `path` (created, never replacing anything), verified
    /// against its digest; on any failure the file is removed. A blob that declares more than
    /// the largest accepted (`NXCC_REMOTE_MAX_BLOB`) or than the room free on `path`'s file
    /// system is refused before anything is created.
    pub fn download_to(&self, d: &re::Digest, path: &Path) -> Result<(), RemoteError> {
        self.download(d, path, Some(self.settings.max_blob))
    }

    /// [`Remote::download_to`] for an input of a tree already checked whole against its own
    /// limit (`nxcc worker --max-input-bytes`): bounded by the free space alone.
    pub fn download_input(&self, d: &re::Digest, path: &Path) -> Result<(), RemoteError> {
        self.download(d, path, None)
    }

    fn download(&self, d: &re::Digest, path: &Path, max: Option<u64>) -> Result<(), RemoteError> {
        self.fits(d, path, max)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| self.other(format!("cannot create {}: {e}", path.display())))?;
        let r = self.read_into(d, &mut f).and_then(|()| {
            f.flush()
                .map_err(|e| self.other(format!("cannot write {}: {e}", path.display())))
        });
        if r.is_err() {
            let _ = std::fs::remove_file(path);
        }
        r
    }

    /// Whether the blob `d` may be written at `path`: no larger than `max` (the largest
    /// accepted), nor than the room free for this user on its file system.
    fn fits(&self, d: &re::Digest, path: &Path, max: Option<u64>) -> Result<(), RemoteError> {
        let size = d.size_bytes.max(0) as u64;
        let blob = || text::message(&digest::show(d));
        if let Some(max) = max.filter(|m| size > *m) {
            return Err(self.untrusted(format!(
                "the blob {} declares {size} bytes, more than the largest accepted ({max} bytes, NXCC_REMOTE_MAX_BLOB); nothing was written",
                blob()
            )));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        match rustix::fs::statvfs(dir) {
            Ok(st) if st.f_bavail.saturating_mul(st.f_frsize) < size => Err(self.other(format!(
                "the blob {} declares {size} bytes, more than the {} bytes free on the file system of {}; nothing was written",
                blob(),
                st.f_bavail.saturating_mul(st.f_frsize),
                dir.display()
            ))),
            _ => Ok(()),
        }
    }

    fn read_into(&self, d: &re::Digest, out: &mut dyn Write) -> Result<(), RemoteError> {
        if d.size_bytes < 0 {
            return Err(self.untrusted(format!(
                "a digest with a negative size: {}",
                text::message(&digest::show(d))
            )));
        }
        if *d == digest::of_bytes(b"") {
            return Ok(());
        }
        let mut got = Received::new(d, 0, out);
        self.read_range(&mut got)?;
        let hash = got.hash.finish();
        if hash != *d {
            return Err(self.untrusted(format!(
                "the blob {} came back as {} (corrupt download)",
                text::message(&digest::show(d)),
                digest::show(&hash)
            )));
        }
        Ok(())
    }

    /// Read the rest of a blob into `got`, resuming after a broken stream, within the retry
    /// budget spent failing ([`Backoff::pause_after`]).
    fn read_range(&self, got: &mut Received<'_>) -> Result<(), RemoteError> {
        let resource = self
            .address
            .resource(&format!("blobs/{}/{}", got.d.hash, got.d.size_bytes));
        let mut backoff = Backoff::new(self.settings.retry);
        loop {
            match self.read_attempt(&resource, got)? {
                Attempt::Done(()) => return Ok(()),
                Attempt::Failed(s, _) if !worth_retrying(&s) => {
                    return Err(self.error("ByteStream.Read", &s))
                }
                Attempt::Failed(s, failing) => {
                    let Some(p) = backoff.pause_after(failing) else {
                        return Err(self.gave_up("ByteStream.Read", &s, &backoff));
                    };
                    self.pause(p)
                        .ok_or_else(|| self.cancelled_error("ByteStream.Read"))?;
                }
            }
        }
    }

    /// One `Read` from where `got` is, within the minimum rate ([`Pace`]). A resumed read asks
    /// again for the last bytes received and checks them: a server that does not honour
    /// `read_offset` is caught there. The first byte past the declared size is an error
    /// (nothing of that message is written).
    fn read_attempt(
        &self,
        resource: &str,
        got: &mut Received<'_>,
    ) -> Result<Attempt<()>, RemoteError> {
        let size = got.d.size_bytes;
        let overlap = got.tail.len() as i64;
        let from = got.offset - overlap;
        let req = ReadRequest {
            resource_name: resource.to_string(),
            read_offset: from,
            read_limit: size - from,
        };
        let req = self
            .request_within(req, None)
            .map_err(|s| self.error("ByteStream.Read", &s))?;
        let mut bs = ByteStreamClient::new(self.conn.channel.clone());
        let mut pace = Pace::new(self.settings.idle, self.settings.min_rate);
        let started = self.block(async {
            tokio::time::timeout(pace.left(), bs.read(req))
                .await
                .map_err(|_| pace.too_slow())?
        });
        let mut stream = match started {
            None => return Err(self.cancelled_error("ByteStream.Read")),
            Some(Err(s)) => return Ok(Attempt::Failed(s, pace.failing())),
            Some(Ok(r)) => r.into_inner(),
        };
        let mut check = overlap as usize;
        loop {
            let next = self.block(async {
                tokio::time::timeout(pace.left(), stream.message())
                    .await
                    .map_err(|_| pace.too_slow())?
            });
            let msg = match next {
                None => return Err(self.cancelled_error("ByteStream.Read")),
                Some(Err(s)) => return Ok(Attempt::Failed(s, pace.failing())),
                Some(Ok(None)) if got.offset == size && check == 0 => return Ok(Attempt::Done(())),
                Some(Ok(None)) => {
                    let s = tonic::Status::unavailable(format!(
                        "the stream ended at byte {} of {size}",
                        got.offset
                    ));
                    return Ok(Attempt::Failed(s, pace.failing()));
                }
                Some(Ok(Some(m))) => m,
            };
            pace.moved(msg.data.len() as u64);
            let data = got.check_overlap(&msg.data, &mut check).map_err(|at| {
                self.untrusted(format!(
                    "ByteStream.Read of the blob {} does not honour read_offset: asked from byte {from}, it sent other bytes than before for byte {at}",
                    text::message(&got.d.hash),
                ))
            })?;
            if data.len() as i64 > size - got.offset {
                return Err(self.untrusted(format!(
                    "ByteStream.Read sent more than the {size} bytes of the blob {}: byte {} is one too many",
                    text::message(&got.d.hash),
                    size + 1
                )));
            }
            got.take(data)
                .map_err(|e| self.other(format!("cannot write a download: {e}")))?;
        }
    }
}

/// How many of the last bytes received a resumed read asks for again, to check them.
const OVERLAP: usize = 4096;

/// A download under way: the blob, where it is, the last bytes received (to check a resumed
/// stream against), where they go and their hash.
struct Received<'a> {
    d: &'a re::Digest,
    offset: i64,
    tail: Vec<u8>,
    out: &'a mut dyn Write,
    hash: digest::Hasher,
}

impl<'a> Received<'a> {
    fn new(d: &'a re::Digest, from: i64, out: &'a mut dyn Write) -> Received<'a> {
        Received {
            d,
            offset: from,
            tail: Vec::new(),
            out,
            hash: digest::Hasher::default(),
        }
    }

    /// `data` past the bytes of the overlap still to check (`*check` of them), which must be
    /// the last bytes received; `Err`: the offset in the blob of the first one that is not.
    fn check_overlap<'d>(&self, data: &'d [u8], check: &mut usize) -> Result<&'d [u8], i64> {
        let n = (*check).min(data.len());
        let at = self.tail.len() - *check;
        if let Some(i) = (0..n).find(|&i| data[i] != self.tail[at + i]) {
            return Err(self.offset - *check as i64 + i as i64);
        }
        *check -= n;
        Ok(&data[n..])
    }

    /// Write, hash and remember `data`, the next bytes of the blob.
    fn take(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.hash.update(data);
        self.out.write_all(data)?;
        self.offset += data.len() as i64;
        self.tail.extend_from_slice(data);
        let extra = self.tail.len().saturating_sub(OVERLAP);
        self.tail.drain(..extra);
        Ok(())
    }
}

/// The minimum rate of a transfer: within each idle timeout it must move at least the minimum
/// rate times the timeout (at least one byte); a window that does not ends the attempt. What is
/// left of the window bounds each wait.
struct Pace {
    idle: Duration,
    need: u64,
    min_rate: u64,
    since: Instant,
    moved: u64,
    /// When the attempt last met the rate (its start, at first).
    last_met: Instant,
}

impl Pace {
    fn new(idle: Duration, min_rate: u64) -> Pace {
        let need = ((min_rate as f64 * idle.as_secs_f64()) as u64).max(1);
        let now = Instant::now();
        Pace {
            idle,
            need,
            min_rate,
            since: now,
            moved: 0,
            last_met: now,
        }
    }

    /// What is left of the current window.
    fn left(&self) -> Duration {
        (self.since + self.idle).saturating_duration_since(Instant::now())
    }

    /// `n` more bytes moved; a window that met the rate starts the next.
    fn moved(&mut self, n: u64) {
        self.moved += n;
        if self.moved >= self.need {
            self.since = Instant::now();
            self.last_met = self.since;
            self.moved = 0;
        }
    }

    /// The time the attempt has spent failing: since it last met the rate.
    fn failing(&self) -> Duration {
        self.last_met.elapsed()
    }

    /// The status of a window that ended short.
    fn too_slow(&self) -> tonic::Status {
        let idle = seconds(self.idle);
        tonic::Status::deadline_exceeded(match self.moved {
            0 => format!("no data for {idle}"),
            n => format!(
                "{n} bytes in {idle}, less than the minimum rate of {} bytes/s (NXCC_REMOTE_MIN_RATE)",
                self.min_rate
            ),
        })
    }
}

/// A thread that reads `src` (the blob from `offset`) in [`CHUNK`]s and sends them as
/// `WriteRequest`s (at most two in flight), counting the bytes of each one taken in `sent`; it
/// ends after the last chunk, or when the call no longer takes them.
fn send_chunks(
    mut src: Box<dyn Read + Send>,
    resource: String,
    mut offset: i64,
    total: i64,
    tx: tokio::sync::mpsc::Sender<WriteRequest>,
    sent: Arc<AtomicU64>,
) -> std::thread::JoinHandle<std::io::Result<()>> {
    std::thread::spawn(move || {
        let mut first = true;
        loop {
            let mut buf = vec![0u8; CHUNK];
            let mut n = 0;
            while n < CHUNK {
                let k = src.read(&mut buf[n..])?;
                if k == 0 {
                    break;
                }
                n += k;
            }
            buf.truncate(n);
            let finish = offset + n as i64 >= total || n == 0;
            let req = WriteRequest {
                resource_name: if first {
                    resource.clone()
                } else {
                    String::new()
                },
                write_offset: offset,
                finish_write: finish,
                data: buf,
            };
            first = false;
            offset += n as i64;
            if tx.blocking_send(req).is_err() || finish {
                return Ok(());
            }
            sent.fetch_add(n as u64, Ordering::SeqCst);
        }
    })
}
