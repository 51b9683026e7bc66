//! The object-store seam: a small key-value interface ([`Storage`]: get within a size bound,
//! put in one of three modes, head, delete, list) that nxcc reaches a bucket through — nxcc's
//! own cache's shared tier ([`crate::cache::shared`]) and the framework's compile cache in a
//! bucket ([`crate::neuron_cache`]) alike. nxcc-core knows no client: a backend is registered by
//! the program ([`register`]; `nxcc` registers the S3 client of `nxcc-s3`), as the simulated
//! toolchain is. Every answer is untrusted: the caller bounds what it reads and verifies it.

#[cfg(test)]
pub(crate) mod memory;

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, OnceLock};

/// The most objects a listing returns: past it, the listing is refused
/// ([`StorageError::TooLarge`]) rather than read whole into memory.
pub const LIST_LIMIT: usize = 1_000_000;

/// The URL schemes an object store is named by.
pub const SCHEMES: &[&str] = &["s3"];

/// What an object store said of a request that did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StorageError {
    /// The bucket does not exist.
    NoBucket(String),
    /// The credentials may not do this (403), or none were found.
    Denied(String),
    /// The endpoint could not be reached, or stopped answering within the deadline.
    Unreachable(String),
    /// The object is larger than the caller allows: an answer nxcc does not take.
    TooLarge(String),
    /// A listing holds a name this client cannot address (a `.` or `..` segment, an empty one,
    /// a control character): said, never followed.
    BadName(String),
    /// Anything else (a server error after the retries, a malformed answer).
    Other(String),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::NoBucket(m) => f.write_str(m),
            StorageError::Denied(m) => write!(f, "access denied: {m}"),
            StorageError::Unreachable(m) => write!(f, "the endpoint cannot be reached: {m}"),
            StorageError::TooLarge(m) => write!(f, "an object is larger than allowed: {m}"),
            StorageError::BadName(m) => write!(f, "a name nxcc does not follow: {m}"),
            StorageError::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for StorageError {}

/// How a put treats an object already at the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Replace it.
    Overwrite,
    /// Only if there is none (`If-None-Match: *`).
    Create,
    /// Only if it is still the version with this entity tag (`If-Match`).
    Replace(String),
}

/// What a put did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Put {
    /// Written; the new version's entity tag.
    Done(Option<String>),
    /// Not written: the condition did not hold (an object is there, or another version).
    Refused,
}

/// An object's description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    /// Its name, relative to the store's prefix.
    pub name: String,
    /// Its size, bytes.
    pub size: u64,
    /// Its entity tag.
    pub etag: Option<String>,
    /// When it was last written, milliseconds since the epoch (the server's clock).
    pub modified_ms: u64,
}

/// An object read whole.
#[derive(Debug, Clone)]
pub struct Object {
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// Its description.
    pub info: Info,
}

/// One level of a folder ([`Storage::list_dir`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    /// The names of the folders directly in it.
    pub folders: Vec<String>,
    /// The objects directly in it.
    pub objects: Vec<Info>,
}

/// A small key-value store of objects, named relative to a prefix (the seam: every call is
/// blocking, every answer untrusted — the caller bounds what it reads and verifies it).
pub trait Storage: Send + Sync {
    /// The store's URL, as the user gave it (`s3://bucket/prefix`).
    fn url(&self) -> &str;
    /// The object `name` whole, refused past `limit` bytes; `None` if there is none.
    fn get(&self, name: &str, limit: u64) -> Result<Option<Object>, StorageError>;
    /// The object `name` streamed into `out`, refused past `limit` bytes; its size, `None` if
    /// there is none.
    fn get_into(
        &self,
        name: &str,
        limit: u64,
        out: &mut dyn Write,
    ) -> Result<Option<u64>, StorageError>;
    /// Write `bytes` at `name`, as `mode` says.
    fn put(&self, name: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Put, StorageError>;
    /// Write the open `file` (from its start) at `name`, streamed, as `mode` says.
    fn put_file(&self, name: &str, file: File, mode: PutMode) -> Result<Put, StorageError>;
    /// The description of `name`; `None` if there is none.
    fn head(&self, name: &str) -> Result<Option<Info>, StorageError>;
    /// Remove `name` (nothing if there is none).
    fn delete(&self, name: &str) -> Result<(), StorageError>;
    /// The objects below the folder `prefix` (`prefix/...`, at any depth), read page by page and
    /// refused past `max` of them.
    fn list(&self, prefix: &str, max: usize) -> Result<Vec<Info>, StorageError>;
    /// One level of the folder `dir` (`""`: the top): the names of the folders directly in it
    /// (`dir/<name>/...`, each once) and the objects directly in it, refused past `max` of both.
    fn list_dir(&self, dir: &str, max: usize) -> Result<Level, StorageError>;
}

/// What opens a store from its URL.
pub type Opener = fn(&str) -> Result<Arc<dyn Storage>, StorageError>;

static OPENER: OnceLock<Opener> = OnceLock::new();

/// Register the program's object-store client (once; later calls are ignored).
pub fn register(opener: Opener) {
    let _ = OPENER.set(opener);
}

/// Whether `dir` names an object store (`s3://...`) rather than a directory.
pub fn is_url(dir: &str) -> bool {
    SCHEMES
        .iter()
        .any(|s| dir.strip_prefix(s).is_some_and(|r| r.starts_with("://")))
}

/// Open the store at `url` with the registered client; why not, in words.
pub fn open(url: &str) -> Result<Arc<dyn Storage>, StorageError> {
    match OPENER.get() {
        Some(open) => open(url),
        None => Err(StorageError::Other(format!(
            "this program has no object-store client for {url}"
        ))),
    }
}

/// Whether a client is registered.
pub fn available() -> bool {
    OPENER.get().is_some()
}
