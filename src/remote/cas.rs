//! The content-addressed store: which blobs the server lacks (`FindMissingBlobs`), uploads
//! (`BatchUpdateBlobs` for small blobs, ByteStream `Write` streamed from the file for large ones:
//! a model is never held in memory whole), and downloads verified against their digest (ByteStream
//! `Read`, written as they come).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bazel_remote_apis::google::bytestream::{
    byte_stream_client::ByteStreamClient, ReadRequest, WriteRequest,
};

use super::client::{Remote, RemoteError, CALL_TIMEOUT};
use super::digest::{self, CHUNK};
use super::re;
use super::re::content_addressable_storage_client::ContentAddressableStorageClient;

/// Blobs up to this size go in batches; larger ones through ByteStream.
pub const BATCH_BLOB_MAX: i64 = 1 << 20;

/// At most this many bytes in one batch request (below gRPC's 4 MiB message limit).
pub const BATCH_BYTES_MAX: i64 = 3 << 20;

/// A blob to upload: bytes in memory (a message) or a file read when sent.
#[derive(Debug, Clone)]
pub enum Blob {
    /// In memory.
    Bytes(Vec<u8>),
    /// A file, read in chunks when sent.
    File(PathBuf),
}

/// What an upload sent: blobs and bytes (figures for logs and benchmarks).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sent {
    /// Blobs uploaded (the server lacked them).
    pub blobs: u64,
    /// Their bytes.
    pub bytes: u64,
}

impl Remote {
    /// The digests among `digests` the server does not hold.
    pub fn find_missing(&self, digests: &[re::Digest]) -> Result<Vec<re::Digest>, RemoteError> {
        if digests.is_empty() {
            return Ok(Vec::new());
        }
        let cas = ContentAddressableStorageClient::new(self.channel.clone());
        let req = re::FindMissingBlobsRequest {
            instance_name: self.address.instance.clone(),
            blob_digests: digests.to_vec(),
            digest_function: 0,
        };
        self.retry("FindMissingBlobs", || {
            let (mut cas, req) = (cas.clone(), req.clone());
            async move {
                cas.find_missing_blobs(Remote::request(req, CALL_TIMEOUT))
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
        let mut sent = Sent::default();
        let mut batch: Vec<(re::Digest, Vec<u8>)> = Vec::new();
        let mut batch_bytes = 0i64;
        for (d, blob) in unique {
            if !missing.contains(&digest::show(d)) {
                continue;
            }
            sent.blobs += 1;
            sent.bytes += d.size_bytes as u64;
            if d.size_bytes > BATCH_BLOB_MAX {
                self.write_stream(d, blob)?;
                continue;
            }
            let bytes = match blob {
                Blob::Bytes(b) => b.clone(),
                Blob::File(p) => std::fs::read(p)
                    .map_err(|e| self.other(format!("cannot read {}: {e}", p.display())))?,
            };
            if batch_bytes + d.size_bytes > BATCH_BYTES_MAX {
                self.batch_update(std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
            batch_bytes += d.size_bytes;
            batch.push((d.clone(), bytes));
        }
        self.batch_update(batch)?;
        Ok(sent)
    }

    fn batch_update(&self, batch: Vec<(re::Digest, Vec<u8>)>) -> Result<(), RemoteError> {
        if batch.is_empty() {
            return Ok(());
        }
        let cas = ContentAddressableStorageClient::new(self.channel.clone());
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
        let resp = self.retry("BatchUpdateBlobs", || {
            let (mut cas, req) = (cas.clone(), req.clone());
            async move {
                cas.batch_update_blobs(Remote::request(req, CALL_TIMEOUT))
                    .await
                    .map(|r| r.into_inner())
            }
        })?;
        for r in resp.responses {
            if let Some(st) = r.status.filter(|s| s.code != 0) {
                return Err(self.other(format!(
                    "BatchUpdateBlobs refused {}: {} (code {})",
                    r.digest.as_ref().map(digest::show).unwrap_or_default(),
                    st.message,
                    st.code
                )));
            }
        }
        Ok(())
    }

    /// Upload one blob through ByteStream `Write`, in [`CHUNK`]s read as they are sent.
    fn write_stream(&self, d: &re::Digest, blob: &Blob) -> Result<(), RemoteError> {
        let resource = {
            let uuid = crate::fsx::unique::name("nxcc-");
            let prefix = if self.address.instance.is_empty() {
                String::new()
            } else {
                format!("{}/", self.address.instance)
            };
            format!("{prefix}uploads/{uuid}/blobs/{}/{}", d.hash, d.size_bytes)
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<WriteRequest>(2);
        let total = d.size_bytes;
        let blob = blob.clone();
        // The reader: a thread that sends chunk after chunk (at most two in flight).
        let reader = std::thread::spawn(move || -> std::io::Result<()> {
            let mut src: Box<dyn Read> = match &blob {
                Blob::Bytes(b) => Box::new(std::io::Cursor::new(b.clone())),
                Blob::File(p) => Box::new(std::fs::File::open(p)?),
            };
            let mut offset = 0i64;
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
            }
        });
        let mut bs = ByteStreamClient::new(self.channel.clone());
        let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
        let result = self.rt.block_on(bs.write(stream));
        let read = reader.join();
        if let Ok(Err(e)) = read {
            return Err(self.other(format!("cannot read the blob to upload: {e}")));
        }
        let resp = result.map_err(|s| self.error("ByteStream.Write", &s))?;
        let committed = resp.into_inner().committed_size;
        if committed != total {
            return Err(self.other(format!(
                "ByteStream.Write committed {committed} of {total} bytes"
            )));
        }
        Ok(())
    }

    /// A small blob's bytes (a message), verified.
    pub fn read_blob(&self, d: &re::Digest) -> Result<Vec<u8>, RemoteError> {
        let mut out = Vec::new();
        self.read_into(d, &mut out)?;
        Ok(out)
    }

    /// Download a blob into a new file at `path` (created, never replacing anything), verified
    /// against its digest; on any failure the file is removed.
    pub fn download_to(&self, d: &re::Digest, path: &Path) -> Result<(), RemoteError> {
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

    fn read_into(&self, d: &re::Digest, out: &mut dyn Write) -> Result<(), RemoteError> {
        if *d == digest::of_bytes(b"") {
            return Ok(());
        }
        let prefix = if self.address.instance.is_empty() {
            String::new()
        } else {
            format!("{}/", self.address.instance)
        };
        let req = ReadRequest {
            resource_name: format!("{prefix}blobs/{}/{}", d.hash, d.size_bytes),
            read_offset: 0,
            read_limit: 0,
        };
        let mut h = digest::Hasher::default();
        let mut bs = ByteStreamClient::new(self.channel.clone());
        self.rt.block_on(async {
            let mut stream = bs
                .read(req)
                .await
                .map_err(|s| self.error("ByteStream.Read", &s))?
                .into_inner();
            while let Some(msg) = stream
                .message()
                .await
                .map_err(|s| self.error("ByteStream.Read", &s))?
            {
                h.update(&msg.data);
                out.write_all(&msg.data)
                    .map_err(|e| self.other(format!("cannot write a download: {e}")))?;
            }
            Ok::<(), RemoteError>(())
        })?;
        let got = h.finish();
        if got != *d {
            return Err(self.other(format!(
                "the blob {} came back as {} (corrupt download)",
                digest::show(d),
                digest::show(&got)
            )));
        }
        Ok(())
    }
}
