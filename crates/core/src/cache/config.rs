//! Whether and where a compile uses the compile cache ([`CacheConfig`]: the compile's own
//! `--cache_dir`, `--no_cache` and `--retry_failed_compilation` over its caller's default, its
//! cache flags over the directory's configuration file, [`super::settings`]), the default
//! directory, and what the cache had to do with a compile ([`CacheStatus`]).

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::digests::Table;
use super::key::Key;
use super::settings::{Mode, Settings};
use super::store::Cache;
use crate::engine::Engine;
use crate::error::NccError;
use crate::plan::Invocation;

/// How the default cache directory is written in help texts ([`default_dir`]).
pub const DEFAULT_DIR_TEXT: &str = "$XDG_CACHE_HOME/nxcc, else ~/.cache/nxcc";

/// The environment variable the ecosystem points *its* compile cache with (CLIENTS: the
/// PyTorch integration reads it). nxcc's own cache never defaults to it.
pub const CACHE_URL_ENV: &str = "NEURON_COMPILE_CACHE_URL";

/// The cache directory `parallel-compile` and the daemon use unless told otherwise: a per-user
/// directory of nxcc's own, `$XDG_CACHE_HOME/nxcc` (else `~/.cache/nxcc`), its entries in its
/// `nxcc-v1/`; without those, the user's home directory from the password database, else a
/// per-user name in the temporary directory ([`crate::toolchain::user_cache_dir`]). Never inside
/// the framework's cache root, where the framework's tools upload, clean and unlock whatever they
/// find.
pub fn default_dir() -> String {
    crate::toolchain::user_cache_dir().display().to_string()
}

/// Whether and where a compile uses the cache.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CacheConfig {
    /// The cache directory; `None`: the cache is off.
    pub dir: Option<PathBuf>,
    /// Compile again even if the cache holds a failed result (`--retry_failed_compilation`).
    pub retry_failed: bool,
    /// The compile's cache flags over the cache's configuration file ([`super::settings`]).
    pub settings: Settings,
    /// The shared tier behind the directory (`--cache_dir s3://BUCKET/PREFIX`: the directory
    /// is then the default one, the local tier, [`super::shared`]).
    pub shared: Option<String>,
}

/// Whether the compile's result came from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheStatus {
    /// Served from the cache (a NEFF, or a remembered failure); nothing ran.
    Hit,
    /// Compiled (and stored, when the result is cacheable).
    Miss,
    /// The cache was not used.
    #[default]
    Off,
}

impl CacheStatus {
    /// The status as `--json` and the daemon's answer spell it: `hit`, `miss` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
            CacheStatus::Off => "off",
        }
    }
}

/// Refuse a remote cache location (any `scheme://`) but a shared tier the program has a client
/// for (`s3://...`, [`super::shared`]).
pub fn check_local(dir: &str) -> Result<(), NccError> {
    if crate::objstore::is_url(dir) && crate::objstore::available() {
        return Ok(());
    }
    match dir.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Err(NccError::remote_cache(dir))
        }
        _ => Ok(()),
    }
}

impl CacheConfig {
    /// The cache off.
    pub fn off() -> CacheConfig {
        CacheConfig::default()
    }

    /// The cache in `dir` (`None`: off) for a compile of `inv`: its `--retry_failed_compilation`,
    /// its cache flags over the directory's configuration file.
    pub fn in_dir(inv: &Invocation, dir: Option<PathBuf>) -> Result<CacheConfig, NccError> {
        let cache = dir.as_ref().map(Cache::new);
        let settings = Settings::of(inv, cache.as_ref()).map_err(NccError::cache_setting)?;
        if cache.is_none() && settings.mode == Mode::HitOnly {
            // A host that must never compile would compile: there is no cache to hit.
            return Err(NccError::cache_setting(
                "argument --cache-mode: hit-only needs a cache, and this compile has none \
                 (give --cache_dir DIR, without --no_cache)",
            ));
        }
        Ok(CacheConfig {
            dir,
            retry_failed: inv.settings.cache.retry_failed,
            settings,
            shared: None,
        })
    }

    /// Where this compile's digests are remembered ([`super::digests`]): the cache's table
    /// (made and written unless the cache is read-only), this process's memory when the cache
    /// cannot be used, nothing with `--cache-rehash`.
    pub fn table(&self) -> Table {
        if !self.settings.stat_digests {
            return Table::off();
        }
        let writes = self.settings.mode.writes();
        match self
            .cache()
            .and_then(|c| c.open_root(writes).ok().flatten())
        {
            Some(root) => Table::in_cache(root, writes),
            None => Table::memory_only(),
        }
    }

    /// The key of a compile of `inv` on `engine` under these settings.
    pub fn key(&self, inv: &Invocation, engine: &Engine) -> std::io::Result<Key> {
        Key::compute(
            inv,
            engine,
            self.settings.sloppiness.hlo_metadata,
            &self.table(),
        )
    }

    /// The key of a compile of `inv` whose toolchain's identity is `toolchain` (as
    /// [`super::identity::of`] gives it), computed by the process that ran it — the daemon that
    /// said which compiler it runs —, under these settings.
    pub fn key_with_identity(
        &self,
        inv: &Invocation,
        toolchain: serde_json::Value,
    ) -> std::io::Result<Key> {
        Key::compute_with_identity(
            inv,
            toolchain,
            self.settings.sloppiness.hlo_metadata,
            &self.table(),
        )
    }

    /// From a compile's own flags: `--no_cache` turns it off; `--cache_dir DIR` (relative to the
    /// launch dir) turns it on; else `default_dir` (`None` for `nxcc compile`, [`default_dir()`]
    /// for parallel-compile and the daemon). `--retry_failed_compilation` and the cache flags are
    /// read too. A remote URL is refused ([`check_local`]).
    pub fn of(inv: &Invocation, default_dir: Option<&Path>) -> Result<CacheConfig, NccError> {
        let flags = &inv.settings.cache;
        if flags.no_cache {
            return CacheConfig::in_dir(inv, None);
        }
        let dir = match flags.dir.as_deref().filter(|d| !d.is_empty()) {
            Some(d) => {
                check_local(d)?;
                if crate::objstore::is_url(d) {
                    return CacheConfig::shared(inv, d, default_dir);
                }
                Some(crate::fsx::absolute(&inv.plan.launch_dir, d))
            }
            None => default_dir.map(Path::to_path_buf),
        };
        CacheConfig::at(inv, dir)
    }

    /// [`CacheConfig::in_dir`], where `dir` may name a shared tier (`s3://...`, as a caller's
    /// default may): then the local tier is [`default_dir()`].
    pub fn at(inv: &Invocation, dir: Option<PathBuf>) -> Result<CacheConfig, NccError> {
        match dir.as_deref().and_then(Path::to_str) {
            Some(url) if crate::objstore::is_url(url) => CacheConfig::shared(inv, url, None),
            _ => CacheConfig::in_dir(inv, dir),
        }
    }

    /// The shared tier at `url` behind the local directory: the caller's default, else
    /// [`default_dir()`].
    pub fn shared(
        inv: &Invocation,
        url: &str,
        default_dir: Option<&Path>,
    ) -> Result<CacheConfig, NccError> {
        let local =
            default_dir.map_or_else(|| PathBuf::from(self::default_dir()), Path::to_path_buf);
        let mut cfg = CacheConfig::in_dir(inv, Some(local))?;
        cfg.shared = Some(url.to_string());
        Ok(cfg)
    }

    /// The cache, when on.
    pub fn cache(&self) -> Option<Cache> {
        self.dir.as_ref().map(Cache::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_locations_are_refused() {
        for url in ["s3://bucket/prefix", "gs://b", "https://x/y", "file://tmp"] {
            let e = check_local(url).unwrap_err().to_string();
            assert!(
                e.starts_with("[ERROR] [NCC_EDRV110] Remote compile caches are not supported: "),
                "{e}"
            );
        }
        for local in ["/var/tmp/c", "cache", "./a:b", "dir/with://inside"] {
            assert!(check_local(local).is_ok(), "{local}");
        }
    }
}
