//! A cache entry as objects, relative to the store's prefix:
//!
//! - `nxcc-v1/<2 hex>/<key>/<id>/` — the entry's files (`meta.json`, `log.txt`, `model.neff` or
//!   `failed.json`), as a cache directory's entry holds them, under the id of one publication;
//! - `nxcc-v1/<2 hex>/<key>/done` — the entry: `nxcc-entry id=<id> bytes=<size>`, created after
//!   every file is written and only if absent (`If-None-Match: *`). Two hosts that compiled the
//!   same key never both publish; a publication killed before its marker leaves files nobody
//!   reads (removed by `nxcc cache gc`), never half an entry.
//!
//! A fetch reads the marker, then `meta.json` (its key must be the key), then the files into a
//! temporary entry of the local directory — the NEFF hashed as it arrives and kept only if its
//! size and blake3 are those `meta.json` records — and publishes it there as any entry is
//! (within `max_size`). Every size read from the store is bounded before it is read.

use std::io::Write;
use std::path::PathBuf;

use super::{Put, PutMode, Storage, StorageError};
use crate::cache::evict;
use crate::cache::meta::{Meta, FAILED_FILE, LOG_FILE, META_FILE, NEFF_FILE};
use crate::cache::store::Cache;

/// The entries' top level, as in a cache directory.
pub const TOP: &str = "nxcc-v1";
/// The marker that makes a publication the entry.
pub const DONE: &str = "done";
/// What a marker's text starts with.
const MARK: &str = "nxcc-entry ";
/// The largest marker, `meta.json` or `failed.json` read.
pub const SMALL_LIMIT: u64 = 1 << 20;
/// How stale a marker gets before a hit records its use (the entry's last use, for eviction).
pub const TOUCH_EVERY_MS: u64 = 3_600_000;
/// The largest `log.txt` read.
pub const LOG_LIMIT: u64 = 64 << 20;

/// The folder of `key`'s objects.
pub(crate) fn key_dir(key: &str) -> String {
    format!("{TOP}/{}/{key}", &key[..2.min(key.len())])
}

/// Why an entry could not be fetched.
#[derive(Debug)]
pub enum FetchError {
    /// The store did not answer as asked.
    Store(StorageError),
    /// What the store holds for the key is not a good entry (said why).
    Corrupt(String),
    /// The local directory could not take it.
    Local(std::io::Error),
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Store(e) => write!(f, "{e}"),
            FetchError::Corrupt(why) => write!(f, "the stored entry is not usable: {why}"),
            FetchError::Local(e) => write!(f, "the local cache cannot keep it: {e}"),
        }
    }
}

impl From<StorageError> for FetchError {
    /// An object larger than allowed is a bad entry (compiled again), not a store that cannot
    /// be used.
    fn from(e: StorageError) -> FetchError {
        match e {
            StorageError::TooLarge(why) => FetchError::Corrupt(why),
            e => FetchError::Store(e),
        }
    }
}

/// The publication id a marker names; `None`: not a marker of nxcc's.
pub(crate) fn parse_done(text: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(text).ok()?.trim_end();
    let id = text
        .strip_prefix(MARK)?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("id="))?;
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ok.then(|| id.to_string())
}

/// The publication id `key`'s marker names, and the marker; `None` if the key has no entry.
pub(crate) fn published_id(
    store: &dyn Storage,
    key: &str,
) -> Result<Option<(String, super::Object)>, FetchError> {
    let Some(done) = store.get(&format!("{}/{DONE}", key_dir(key)), SMALL_LIMIT)? else {
        return Ok(None);
    };
    parse_done(&done.bytes)
        .map(|id| Some((id, done)))
        .ok_or_else(|| FetchError::Corrupt(format!("its {DONE} marker is not nxcc's")))
}

/// A writer that hashes what it writes.
struct Hashing<W> {
    out: W,
    hasher: blake3::Hasher,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

/// A published entry's `meta.json`, read and checked to be of `key`.
struct Found {
    /// The folder of its files.
    dir: String,
    meta: Meta,
    meta_bytes: Vec<u8>,
    marker: super::Object,
}

fn find(store: &dyn Storage, key: &str) -> Result<Option<Found>, FetchError> {
    let Some((id, marker)) = published_id(store, key)? else {
        return Ok(None);
    };
    let dir = format!("{}/{id}", key_dir(key));
    let meta_bytes = store
        .get(&format!("{dir}/{META_FILE}"), SMALL_LIMIT)?
        .ok_or_else(|| gone(META_FILE))?
        .bytes;
    let meta: Meta = serde_json::from_slice(&meta_bytes)
        .map_err(|e| FetchError::Corrupt(format!("{META_FILE}: {e}")))?;
    if meta.key != key {
        return Err(FetchError::Corrupt(format!(
            "{META_FILE} is of another key ({})",
            meta.key
        )));
    }
    Ok(Some(Found {
        dir,
        meta,
        meta_bytes,
        marker,
    }))
}

fn gone(what: &str) -> FetchError {
    FetchError::Corrupt(format!("its {what} is missing"))
}

/// Stream the entry's NEFF into `out`, checked against the size and blake3 `neff` records
/// (the stream is refused past that size).
fn copy_neff(
    store: &dyn Storage,
    dir: &str,
    neff: &crate::cache::meta::NeffInfo,
    out: impl Write,
) -> Result<(), FetchError> {
    let mut out = Hashing {
        out,
        hasher: blake3::Hasher::new(),
        bytes: 0,
    };
    store
        .get_into(&format!("{dir}/{NEFF_FILE}"), neff.size, &mut out)?
        .ok_or_else(|| gone(NEFF_FILE))?;
    out.flush().map_err(FetchError::Local)?;
    let hash = out.hasher.finalize().to_hex().to_string();
    if out.bytes != neff.size || hash != neff.blake3 {
        return Err(FetchError::Corrupt(format!(
            "its {NEFF_FILE} ({} bytes, blake3 {hash}) is not the one {META_FILE} records ({} bytes, blake3 {})",
            out.bytes, neff.size, neff.blake3
        )));
    }
    Ok(())
}

/// A failed compile's `failed.json`, read and checked.
fn failed_json(store: &dyn Storage, dir: &str) -> Result<Vec<u8>, FetchError> {
    let failed = store
        .get(&format!("{dir}/{FAILED_FILE}"), SMALL_LIMIT)?
        .ok_or_else(|| gone(FAILED_FILE))?;
    serde_json::from_slice::<crate::cache::meta::Failed>(&failed.bytes)
        .map_err(|e| FetchError::Corrupt(format!("{FAILED_FILE}: {e}")))?;
    Ok(failed.bytes)
}

/// Check `key`'s entry as a fetch would, keeping nothing (`Ok` also when there is none).
pub fn check(store: &dyn Storage, key: &str) -> Result<(), FetchError> {
    let Some(f) = find(store, key)? else {
        return Ok(());
    };
    match &f.meta.neff {
        Some(neff) => copy_neff(store, &f.dir, neff, std::io::sink()),
        None => failed_json(store, &f.dir).map(|_| ()),
    }
}

/// Copy `key`'s entry from `store` into the local `cache` (within `max_size`); the local entry,
/// or `None` if the store has none for the key. With `touch`, an entry last used more than
/// [`TOUCH_EVERY_MS`] ago is marked used (its marker rewritten if unchanged).
pub fn fetch(
    store: &dyn Storage,
    cache: &Cache,
    key: &str,
    max_size: Option<u64>,
    touch: bool,
) -> Result<Option<PathBuf>, FetchError> {
    let Some(found) = find(store, key)? else {
        return Ok(None);
    };
    let pending = cache.begin(key).map_err(FetchError::Local)?;
    let tmp = pending.dir();
    let local = |e: std::io::Error| FetchError::Local(e);
    match &found.meta.neff {
        Some(neff) => {
            let file = tmp.create_file(NEFF_FILE).map_err(local)?;
            copy_neff(store, &found.dir, neff, std::io::BufWriter::new(file))?;
        }
        None => write_new(tmp, FAILED_FILE, &failed_json(store, &found.dir)?).map_err(local)?,
    }
    if let Some(log) = store.get(&format!("{}/{LOG_FILE}", found.dir), LOG_LIMIT)? {
        write_new(tmp, LOG_FILE, &log.bytes).map_err(local)?;
    }
    write_new(tmp, META_FILE, &found.meta_bytes).map_err(local)?;
    let published = evict::publish(cache, key, pending, max_size).map_err(local)?;
    if touch {
        mark_used(store, key, &found.marker);
    }
    Ok(Some(published.entry))
}

/// Rewrite the marker (only if it is still `marker`) when it was last written long ago: the
/// entry's last use, for eviction. A refusal (another host did it, a read-only credential)
/// costs nothing.
fn mark_used(store: &dyn Storage, key: &str, marker: &super::Object) {
    let now = crate::cache::meta::now_ms();
    let age = now.saturating_sub(marker.info.modified_ms);
    if let (true, Some(etag)) = (age >= TOUCH_EVERY_MS, &marker.info.etag) {
        let name = format!("{}/{DONE}", key_dir(key));
        let _ = store.put(&name, marker.bytes.clone(), PutMode::Replace(etag.clone()));
    }
}

fn write_new(dir: &crate::fsx::Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    dir.create_file(name)?.write_all(bytes)
}

/// What a publication did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The entry is this publication's; its size in the store.
    Done {
        /// The bytes written.
        bytes: u64,
    },
    /// Another host published the key first; nothing of this one is kept.
    Beaten,
}

/// A new publication id: this host, this process, the time, and chance.
fn new_id() -> String {
    let name = crate::fsx::unique::name("");
    let host: String = crate::lockfile::host_name()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    let tail: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    format!("{host}-{tail}")
}

/// Publish the local entry of `key` in `cache` to `store`: its files under a new publication
/// id, then — if `still_ours` says the caller still holds the key — the marker, only if the key
/// has none.
pub fn publish(
    store: &dyn Storage,
    cache: &Cache,
    key: &str,
    still_ours: &dyn Fn() -> Result<(), String>,
) -> Result<Published, FetchError> {
    let local = |e: std::io::Error| FetchError::Local(e);
    let (_, entry) = cache
        .open_entry(key)
        .map_err(local)?
        .ok_or_else(|| FetchError::Local(std::io::ErrorKind::NotFound.into()))?;
    let id = new_id();
    let dir = format!("{}/{id}", key_dir(key));
    let mut bytes = 0;
    // meta.json last: a reader reaches the files through the marker only, but a listing of
    // the id shows a whole publication only once meta.json is there.
    for name in [NEFF_FILE, FAILED_FILE, LOG_FILE, META_FILE] {
        let file = match entry.open_file(name) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(local(e)),
        };
        bytes += file.metadata().map_err(local)?.len();
        store.put_file(&format!("{dir}/{name}"), file, PutMode::Overwrite)?;
    }
    let abandon = |store: &dyn Storage| {
        for name in [NEFF_FILE, FAILED_FILE, LOG_FILE, META_FILE] {
            let _ = store.delete(&format!("{dir}/{name}"));
        }
    };
    if let Err(why) = still_ours() {
        abandon(store);
        return Err(FetchError::Store(StorageError::Other(format!(
            "the key's lock was lost before the entry was published ({why})"
        ))));
    }
    let marker = format!("{MARK}id={id} bytes={bytes}\n").into_bytes();
    match store.put(&format!("{}/{DONE}", key_dir(key)), marker, PutMode::Create)? {
        Put::Done(_) => Ok(Published::Done { bytes }),
        Put::Refused => {
            abandon(store);
            Ok(Published::Beaten)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_names_a_plain_id_or_nothing() {
        assert_eq!(
            parse_done(b"nxcc-entry id=host-1-abc bytes=12\n").as_deref(),
            Some("host-1-abc")
        );
        for bad in [
            &b"nxcc-entry id=../../etc bytes=1"[..],
            b"nxcc-entry id= bytes=1",
            b"something else",
            b"nxcc-entry id=a/b",
            b"\xff\xfe",
        ] {
            assert_eq!(parse_done(bad), None, "{bad:?}");
        }
    }
}
