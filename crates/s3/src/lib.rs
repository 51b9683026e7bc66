//! nxcc's caches in Amazon S3 and S3-compatible servers: the object-store client behind the
//! object-store seam ([`nxcc_core::objstore::Storage`]) that nxcc's cache and the framework's
//! cache in a bucket are reached through, registered by the program ([`register`]).
//!
//! The client is Apache Arrow's `object_store` (its S3 store): conditional puts (`If-None-Match:
//! *` for a create, `If-Match` for a replace), the credential chain of [`config`], retries with
//! exponential pauses within a deadline. Its calls run on one small runtime per process, owned
//! here; callers block on them from any thread (a compile's, a daemon's).
//!
//! Everything a server answers is untrusted: a read is refused past the size the caller allows
//! — before the body when the server says its length, and as the bytes arrive when it lies —
//! and the caller verifies what it keeps.

#![forbid(unsafe_code)]

pub mod config;

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures_util::StreamExt;
use nxcc_core::objstore::{self, Info, Level, Object, Put, PutMode, Storage, StorageError};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::list::{PaginatedListOptions, PaginatedListStore};
use object_store::path::Path as ObjPath;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, ObjectStore, ObjectStoreExt, PutOptions, RetryConfig,
    UpdateVersion,
};

/// Register this client as the program's object-store client.
pub fn register() {
    objstore::register(open);
}

/// The process's runtime for the client's calls.
fn runtime() -> Result<&'static tokio::runtime::Runtime, StorageError> {
    static RT: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("nxcc-s3")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| StorageError::Other(format!("cannot start the S3 client: {e}")))
}

/// Run `fut` on the client's runtime and wait for it (from any thread, inside another runtime
/// or not).
fn block<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, StorageError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime()?.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv()
        .map_err(|_| StorageError::Other("the S3 client stopped".into()))
}

/// One bucket and prefix.
pub struct S3 {
    url: String,
    prefix: String,
    store: Arc<AmazonS3>,
}

/// Open the store at `url` (once per process and URL; later calls share it).
pub fn open(url: &str) -> Result<Arc<dyn Storage>, StorageError> {
    static OPEN: OnceLock<Mutex<HashMap<String, Arc<S3>>>> = OnceLock::new();
    let mut open = OPEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(s) = open.get(url) {
        return Ok(Arc::clone(s) as Arc<dyn Storage>);
    }
    let s = Arc::new(S3::new(url)?);
    open.insert(url.to_string(), Arc::clone(&s));
    Ok(s)
}

impl S3 {
    fn new(url: &str) -> Result<S3, StorageError> {
        let loc = config::parse_url(url).map_err(StorageError::Other)?;
        // The signing and TLS crypto: ring, for the process (a no-op if one is installed).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: 10,
            retry_timeout: config::retry_timeout(),
        };
        let mut options = ClientOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(300));
        let mut b = AmazonS3Builder::from_env()
            .with_bucket_name(&loc.bucket)
            .with_region(config::region())
            .with_retry(retry);
        if let Some(ep) = config::endpoint() {
            options = options.with_allow_http(ep.starts_with("http://"));
            b = b.with_endpoint(ep).with_virtual_hosted_style_request(false);
        }
        match config::profile_keys() {
            Some(k) => {
                b = b
                    .with_access_key_id(k.access_key_id)
                    .with_secret_access_key(k.secret_access_key);
                if let Some(t) = k.token {
                    b = b.with_token(t);
                }
            }
            None if !config::configured_before_metadata() && !config::metadata_allowed() => {
                return Err(StorageError::Denied(format!(
                    "{url}: no AWS credentials (none in the environment, the profile, web identity or the container; AWS_EC2_METADATA_DISABLED is set)"
                )));
            }
            None => {}
        }
        let store = b
            .with_client_options(options)
            .build()
            .map_err(|e| StorageError::Other(format!("{url}: {e}")))?;
        Ok(S3 {
            url: url.to_string(),
            prefix: loc.prefix,
            store: Arc::new(store),
        })
    }

    fn path(&self, name: &str) -> ObjPath {
        if self.prefix.is_empty() {
            ObjPath::from(name)
        } else {
            ObjPath::from(format!("{}/{name}", self.prefix))
        }
    }

    fn relative(&self, p: &ObjPath) -> String {
        let s = p.as_ref();
        match self.prefix.as_str() {
            "" => s.to_string(),
            pre => s
                .strip_prefix(pre)
                .map_or(s, |r| r.trim_start_matches('/'))
                .to_string(),
        }
    }

    fn info(&self, m: &object_store::ObjectMeta) -> Info {
        Info {
            name: self.relative(&m.location),
            size: m.size,
            etag: m.e_tag.clone(),
            modified_ms: m.last_modified.timestamp_millis().max(0) as u64,
        }
    }

    fn put_payload(
        &self,
        name: &str,
        payload: bytes::Bytes,
        mode: PutMode,
    ) -> Result<Put, StorageError> {
        let mode = match mode {
            PutMode::Overwrite => object_store::PutMode::Overwrite,
            PutMode::Create => object_store::PutMode::Create,
            PutMode::Replace(e_tag) => object_store::PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag),
                version: None,
            }),
        };
        let (store, path) = (Arc::clone(&self.store), self.path(name));
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        let r = block(async move { store.put_opts(&path, payload.into(), opts).await })?;
        match r {
            Ok(p) => Ok(Put::Done(p.e_tag)),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(Put::Refused),
            Err(e) => Err(classify(&self.url, e)),
        }
    }
}

/// What an object_store error means to the cache, said briefly: the S3 error code when the
/// server gave one, else the transport's last words.
fn classify(url: &str, e: object_store::Error) -> StorageError {
    let chain = {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(x) = src {
            s.push_str(": ");
            s.push_str(&x.to_string());
            src = x.source();
        }
        one_line(&s)
    };
    let code = chain
        .split_once("<Code>")
        .and_then(|(_, r)| r.split_once("</Code>"))
        .map(|(c, _)| c.chars().take(64).collect::<String>());
    let bucket = config::parse_url(url).map(|l| l.bucket).unwrap_or_default();
    if chain.contains("169.254.169.254") || chain.contains("/latest/api/token") {
        return StorageError::Denied(format!(
            "{url}: no AWS credentials (none in the environment, the profile, web identity or the container, and the instance metadata service did not give any)"
        ));
    }
    if code.as_deref() == Some("NoSuchBucket") {
        return StorageError::NoBucket(format!("the bucket {bucket} does not exist"));
    }
    let status = |fallback: &str| code.clone().unwrap_or_else(|| fallback.to_string());
    match e {
        object_store::Error::InvalidPath { .. } => {
            StorageError::BadName(format!("{url}: {}", one_line(&e.to_string())))
        }
        object_store::Error::PermissionDenied { .. } => {
            StorageError::Denied(format!("{url} ({})", status("403 Forbidden")))
        }
        object_store::Error::Unauthenticated { .. } => {
            StorageError::Denied(format!("{url} ({})", status("401 Unauthorized")))
        }
        _ if code.is_none()
            && (chain.contains("error sending request")
                || chain.contains("onnect")
                || chain.contains("timed out")
                || chain.contains("dns error")) =>
        {
            let endpoint = config::endpoint().unwrap_or_else(|| "the S3 endpoint".into());
            let retries = config::retry_timeout().as_secs_f64();
            StorageError::Unreachable(format!(
                "{endpoint} (retried for {retries:.0} s): {}",
                last_words(&chain)
            ))
        }
        _ => StorageError::Other(format!("{url}: {}", code.unwrap_or(chain))),
    }
}

/// The end of an error chain: what the transport finally said.
fn last_words(chain: &str) -> String {
    let tail = chain.rsplit(": ").next().unwrap_or(chain);
    tail.chars().take(200).collect()
}

/// `s` on one line, at most 2000 characters (a server's body may be anything).
fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    flat.chars().take(2000).collect()
}

/// Chunks of a body, sent to the waiting caller as they arrive.
type Chunk = Result<bytes::Bytes, StorageError>;

impl S3 {
    /// Stream `name` into `sink` (called on the caller's thread), refusing past `limit` bytes.
    fn stream(
        &self,
        name: &str,
        limit: u64,
        sink: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<Option<Info>, StorageError> {
        let (store, path, url) = (Arc::clone(&self.store), self.path(name), self.url.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(8);
        let (meta_tx, meta_rx) = std::sync::mpsc::sync_channel(1);
        runtime()?.spawn(async move {
            let got = store.get_opts(&path, GetOptions::default()).await;
            let res = match got {
                Ok(r) => r,
                Err(e) => {
                    let _ = meta_tx.send(missing_or(&url, e));
                    return;
                }
            };
            let _ = meta_tx.send(Ok(Some(res.meta.clone())));
            if res.meta.size > limit {
                return;
            }
            let mut body = res.into_stream();
            while let Some(c) = body.next().await {
                let c = c.map_err(|e| classify(&url, e));
                let stop = c.is_err();
                if tx.send(c).is_err() || stop {
                    return;
                }
            }
        });
        let meta = meta_rx
            .recv()
            .map_err(|_| StorageError::Other("the S3 client stopped".into()))??;
        let Some(meta) = meta else { return Ok(None) };
        let info = self.info(&meta);
        if meta.size > limit {
            return Err(too_large(&self.url, name, meta.size, limit));
        }
        let mut got = 0u64;
        for chunk in rx {
            let chunk = chunk?;
            got += chunk.len() as u64;
            if got > limit {
                return Err(too_large(&self.url, name, got, limit));
            }
            sink(&chunk).map_err(|e| StorageError::Other(format!("writing {name}: {e}")))?;
        }
        if got != meta.size {
            return Err(StorageError::Other(format!(
                "{}: {name}: the body ended after {got} of {} bytes",
                self.url, meta.size
            )));
        }
        Ok(Some(info))
    }
}

/// A missing object (`Ok(None)`) — but a 404 for a missing bucket is an error, told by its body.
fn missing_or<T>(url: &str, e: object_store::Error) -> Result<Option<T>, StorageError> {
    let missing = matches!(e, object_store::Error::NotFound { .. });
    match classify(url, e) {
        StorageError::Other(_) if missing => Ok(None),
        e => Err(e),
    }
}

fn too_large(url: &str, name: &str, size: u64, limit: u64) -> StorageError {
    StorageError::TooLarge(format!("{url}: {name} has {size} bytes, more than {limit}"))
}

impl Storage for S3 {
    fn url(&self) -> &str {
        &self.url
    }

    fn get(&self, name: &str, limit: u64) -> Result<Option<Object>, StorageError> {
        let mut bytes = Vec::new();
        let info = self.stream(name, limit, &mut |c| {
            bytes.extend_from_slice(c);
            Ok(())
        })?;
        Ok(info.map(|info| Object { bytes, info }))
    }

    fn get_into(
        &self,
        name: &str,
        limit: u64,
        out: &mut dyn Write,
    ) -> Result<Option<u64>, StorageError> {
        let info = self.stream(name, limit, &mut |c| out.write_all(c))?;
        Ok(info.map(|i| i.size))
    }

    fn put(&self, name: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Put, StorageError> {
        self.put_payload(name, bytes::Bytes::from(bytes), mode)
    }

    fn put_file(&self, name: &str, mut file: File, mode: PutMode) -> Result<Put, StorageError> {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| StorageError::Other(format!("reading {name}: {e}")))?;
        self.put_payload(name, bytes::Bytes::from(bytes), mode)
    }

    fn head(&self, name: &str) -> Result<Option<Info>, StorageError> {
        let (store, path) = (Arc::clone(&self.store), self.path(name));
        match block(async move { store.head(&path).await })? {
            Ok(m) => Ok(Some(self.info(&m))),
            Err(e) => missing_or(&self.url, e),
        }
    }

    fn delete(&self, name: &str) -> Result<(), StorageError> {
        let (store, path) = (Arc::clone(&self.store), self.path(name));
        match block(async move { store.delete(&path).await })? {
            Ok(()) => Ok(()),
            Err(e) => missing_or::<()>(&self.url, e).map(|_| ()),
        }
    }

    fn list(&self, prefix: &str, max: usize) -> Result<Vec<Info>, StorageError> {
        let level = self.pages(prefix, None, max)?;
        Ok(level.objects)
    }

    fn list_dir(&self, dir: &str, max: usize) -> Result<Level, StorageError> {
        self.pages(dir, Some("/"), max)
    }
}

impl S3 {
    /// The listing of the folder `dir` (with `delimiter`: one level of it), page after page,
    /// refused past `max` names.
    fn pages(
        &self,
        dir: &str,
        delimiter: Option<&'static str>,
        max: usize,
    ) -> Result<Level, StorageError> {
        let folder = [self.prefix.as_str(), dir.trim_matches('/')]
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| format!("{p}/"))
            .collect::<String>();
        let store = Arc::clone(&self.store);
        let r = block(async move {
            let mut out = object_store::ListResult {
                common_prefixes: Vec::new(),
                objects: Vec::new(),
                extensions: Default::default(),
            };
            let mut token = None;
            loop {
                let opts = PaginatedListOptions {
                    delimiter: delimiter.map(Into::into),
                    page_token: token,
                    ..Default::default()
                };
                let prefix = (!folder.is_empty()).then_some(folder.as_str());
                let page = store.list_paginated(prefix, opts).await?;
                out.common_prefixes.extend(page.result.common_prefixes);
                out.objects.extend(page.result.objects);
                token = page.page_token;
                if token.is_none() || out.common_prefixes.len() + out.objects.len() > max {
                    return Ok::<_, object_store::Error>(out);
                }
            }
        })?;
        let r = r.map_err(|e| classify(&self.url, e))?;
        if r.common_prefixes.len() + r.objects.len() > max {
            return Err(StorageError::TooLarge(format!(
                "{}: {dir}/ holds more than {max} objects",
                self.url
            )));
        }
        Ok(Level {
            folders: r
                .common_prefixes
                .iter()
                .filter_map(|p| p.filename().map(str::to_string))
                .collect(),
            objects: r.objects.iter().map(|m| self.info(m)).collect(),
        })
    }
}
