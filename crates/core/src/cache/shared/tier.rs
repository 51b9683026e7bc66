//! The shared tier as a layer of the compile stack, between the secondary caches and the local
//! miss ([`crate::cache::layer::Keep`]): it acts only on a key the local directory missed.
//!
//! 1. The key's entry is fetched from the store into the local directory ([`objects::fetch`]:
//!    its NEFF verified before it is kept) and served from there as a local hit is. A stored
//!    entry that is not usable is said and compiled again.
//! 2. A miss in a read-write cache takes the key's lock object ([`lock`]), waiting for a
//!    compile of the same key on another host, then looks again (locally, then in the store):
//!    the other host's result is a hit. Otherwise the rest of the stack compiles and keeps the
//!    result locally, and this layer publishes the local entry to the store
//!    ([`objects::publish`], the marker created only if absent, only while the lock is still
//!    this compile's). A read-only or hit-only cache reads the store and writes nothing there.
//! 3. Shared secondaries (`--cache-secondary s3://...`) are searched next, in order, read-only
//!    (never locked, marked used or written); a hit there is kept locally as well. One that
//!    cannot be used is warned about and skipped, as a secondary directory is.
//! 4. A store that does not exist, refuses the credentials or cannot be reached when the key
//!    is looked up fails the compile (NCC_EDRV117, exit 70) — never a wrong NEFF, never a
//!    silent fallback. A lock or publication that fails afterwards costs a warning, never the
//!    compile.

use std::path::Path;
use std::sync::Arc;

use super::objects::{self, FetchError, Published};
use super::{lock, Storage};
use crate::cache::key::Key;
use crate::cache::layer::{warn, LocalStore, TIER_LOCAL, TIER_SHARED, TIER_SHARED_SECONDARY};
use crate::cache::settings::Mode;
use crate::cache::store::Cache;
use crate::engine::log;
use crate::engine::result::CompileResult;
use crate::engine::session::Session;
use crate::engine::strategy::{Layer, Strategy};
use crate::error::NccError;
use crate::result::{CancelReason, Environment, Failure, Status};

/// The shared tier of one compile's cache.
pub struct SharedTier<'s> {
    local: &'s LocalStore<'s>,
}

impl<'s> SharedTier<'s> {
    /// The shared tier behind `local` (inactive unless its configuration names one).
    pub fn new(local: &'s LocalStore<'s>) -> SharedTier<'s> {
        SharedTier { local }
    }
}

impl SharedTier<'_> {
    /// Serve the key from the first shared secondary (`--cache-secondary s3://...`, read-only:
    /// never locked, marked used or written) that has it; one that cannot be used is warned
    /// about and skipped, as a secondary directory is.
    fn secondaries<'v, 's>(
        &self,
        session: &Session,
        visit: &dyn Fn(&str, &'static str) -> Result<Visit<'v, 's>, super::StorageError>,
    ) -> Option<CompileResult> {
        let urls = &self.local.config().settings.secondaries;
        for url in urls
            .iter()
            .filter_map(|p| p.to_str())
            .filter(|u| crate::objstore::is_url(u))
        {
            let looked = visit(url, TIER_SHARED_SECONDARY).and_then(|v| v.look_read_only());
            match looked {
                Ok(Looked::Hit(done)) => return Some(*done),
                Ok(_) => {}
                Err(e) => warn(session, &format!("skipping the secondary cache {url}: {e}")),
            }
        }
        None
    }
}

/// One compile's visit to the store.
struct Visit<'v, 's> {
    local: &'v LocalStore<'v>,
    session: &'v Session<'s>,
    store: Arc<dyn Storage>,
    cache: Cache,
    key: Key,
    /// The tier a hit from this store is said to come from.
    tier: &'static str,
}

impl Layer for SharedTier<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let cfg = self.local.config();
        let (Some(key), Some(cache)) = (self.local.missed_key(), cfg.cache()) else {
            return next.run(session, product);
        };
        let visit = |url: &str, tier: &'static str| {
            crate::objstore::open(url).map(|store| Visit {
                local: self.local,
                session,
                store,
                cache: cache.clone(),
                key: key.clone(),
                tier,
            })
        };
        let primary = match cfg.shared.as_deref().map(|u| visit(u, TIER_SHARED)) {
            None => None,
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => return unusable(session, cfg.shared.as_deref().unwrap_or(""), &e),
        };
        if let Some(v) = &primary {
            match v.look() {
                Ok(Looked::Hit(done)) => return *done,
                Ok(_) => {}
                Err(e) => return unusable(session, v.url(), &e),
            }
        }
        if let Some(done) = self.secondaries(session, &visit) {
            return done;
        }
        match primary {
            Some(v) if cfg.settings.mode == Mode::ReadWrite => v.compile(product, next),
            _ => next.run(session, product),
        }
    }
}

/// What the store holds for the key.
enum Looked {
    /// A usable entry, served.
    Hit(Box<CompileResult>),
    /// No entry.
    Absent,
    /// An entry that cannot be used (said): compiled again, and replaced by a read-write cache.
    Bad,
}

/// Fail the compile: the store cannot be used.
fn unusable(session: &Session, url: &str, why: &dyn std::fmt::Display) -> CompileResult {
    session.fail(
        &NccError::shared_cache(url, why),
        Failure::Environment(Environment::CacheDir),
    )
}

impl Visit<'_, '_> {
    fn url(&self) -> &str {
        self.store.url()
    }

    /// Serve the key from the store if it holds a usable entry; `Err`: the store cannot be used.
    fn look(&self) -> Result<Looked, super::StorageError> {
        self.look_touching(self.local.config().settings.mode.writes())
    }

    /// [`Visit::look`] in a store this compile never writes.
    fn look_read_only(&self) -> Result<Looked, super::StorageError> {
        self.look_touching(false)
    }

    /// [`Visit::look`]; `touch`: a hit marks the entry used.
    fn look_touching(&self, touch: bool) -> Result<Looked, super::StorageError> {
        let max_size = self.local.config().settings.max_size;
        match objects::fetch(
            self.store.as_ref(),
            &self.cache,
            &self.key.key,
            max_size,
            touch,
        ) {
            Ok(Some(entry)) => {
                self.session.log().info(
                    log::DRIVER,
                    &format!(
                        "Fetched the entry of key {} from {} into {}",
                        self.key.key,
                        self.url(),
                        entry.display()
                    ),
                );
                Ok(match self.local.serve_now(self.session, self.tier) {
                    Some(done) => Looked::Hit(Box::new(done)),
                    None => Looked::Absent,
                })
            }
            Ok(None) => Ok(Looked::Absent),
            Err(FetchError::Store(e)) => Err(e),
            Err(e) => {
                let what = format!(
                    "the entry of key {} in {} cannot be used ({e}); compiling again",
                    self.key.key,
                    self.url()
                );
                warn(self.session, &what);
                Ok(Looked::Bad)
            }
        }
    }

    /// A miss in a read-write cache: compile under the key's lock object and publish.
    fn compile(&self, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        let session = self.session;
        let waiting = |who: &str| {
            let line = format!(
                "Waiting for another compile of the same model and arguments (lock {}/{}, {who})",
                self.url(),
                lock::lock_name(&self.key.key)
            );
            session.log().info(log::DRIVER, &line)
        };
        let cancel = Some(session.cancel().flag());
        let held = match lock::acquire(&self.store, &self.key.key, cancel, &mut { waiting }) {
            Ok(Some(l)) => l,
            Ok(None) => {
                let stopped = session.cancel().status();
                return session.result(stopped.unwrap_or(Status::Cancelled(CancelReason::Stopped)));
            }
            Err(e) => {
                let what = format!(
                    "cannot lock the key in {} ({e}); compiling without publishing there",
                    self.url()
                );
                warn(session, &what);
                return next.run(session, product);
            }
        };
        if let Some(why) = &held.replaced {
            warn(
                session,
                &format!("took over the lock in {} ({})", self.url(), why.describe()),
            );
        }
        // Another compile may have finished the key meanwhile, here or on another host.
        if let Some(done) = self.local.serve_now(session, TIER_LOCAL) {
            return done;
        }
        match self.look() {
            Ok(Looked::Hit(done)) => return *done,
            Ok(Looked::Absent) => {}
            // Under the lock, the unusable entry's marker goes: this compile's takes its place.
            Ok(Looked::Bad) => {
                let marker = format!("{}/{}", objects::key_dir(&self.key.key), objects::DONE);
                let _ = self.store.delete(&marker);
            }
            Err(e) => return unusable(session, self.url(), &e),
        }
        let result = next.run(session, product);
        if self.local.status() == crate::cache::CacheStatus::Miss && self.local.entry().is_some() {
            self.publish(&held);
        }
        result
    }

    /// Count `bytes` published against the tier's `max_size`, evicting if it is passed.
    fn keep_size(&self, bytes: u64) {
        let now = crate::cache::meta::now_ms();
        match super::maintain::after_publish(self.store.as_ref(), bytes, now) {
            Ok(Some(r)) if r.evicted > 0 => self.session.log().info(
                log::DRIVER,
                &format!(
                    "Evicted {} least recently used entries ({} bytes) from {} to stay under its max_size",
                    r.evicted, r.freed_bytes, self.url()
                ),
            ),
            Ok(_) => {}
            Err(e) => warn(
                self.session,
                &format!("could not keep {} under its max_size ({e})", self.url()),
            ),
        }
    }

    /// Publish the local entry to the store.
    fn publish(&self, held: &lock::ObjectLock) {
        let key = &self.key.key;
        let verify = || held.verify();
        match objects::publish(self.store.as_ref(), &self.cache, key, &verify) {
            Ok(Published::Done { bytes }) => {
                self.session.log().info(
                    log::DRIVER,
                    &format!(
                        "Published the entry of key {key} to {} ({bytes} bytes)",
                        self.url()
                    ),
                );
                self.keep_size(bytes);
            }
            Ok(Published::Beaten) => self.session.log().info(
                log::DRIVER,
                &format!("Another host published key {key} to {} first", self.url()),
            ),
            Err(e) => warn(
                self.session,
                &format!("could not publish the entry to {} ({e})", self.url()),
            ),
        }
    }
}
