//! The one entry point of a compile: the command line, `parallel-compile`, the daemon (and, through
//! the daemon, the shim) and `nxcc worker` all compile through [`compile`]. A [`Request`] — the
//! plan, how to run it, and the caller's cache and remote settings — becomes one session
//! ([`Session`]: the log opened once, the events written in one place, the cancellation) and one
//! stack of cache layers over one way of running the plan ([`Stack`]), composed here and
//! nowhere else ([`compile`]):
//!
//! 1. the local store's lookup ([`LocalStore`]), outermost (it answers a hit before anything
//!    else is asked; it is off when the configuration says so);
//! 2. the read-only secondary caches (`--cache-secondary`, [`crate::cache::layer::Secondaries`]);
//! 3. the shared tier (`--cache_dir s3://...`, [`crate::cache::shared::tier::SharedTier`]): the
//!    key fetched from the object store into the local directory, or compiled under the key's
//!    lock object and published there;
//! 4. the local store's miss ([`crate::cache::layer::Keep`]: explained, counted, compiled under
//!    the key's lock and stored, unless the cache is read-only or hit-only);
//! 5. with `--remote-cache`, the server's action cache ([`ActionCache`]);
//! 6. a hit-only cache's refusal of a miss ([`crate::cache::layer::HitOnly`]), innermost;
//! 7. the way the plan runs: with `--remote`, remote execution ([`Execution`]); else the
//!    [`Engine`] — nxcc's pipeline, or an external compiler.
//!
//! A cache layer to come (the framework's cache) is one more entry in the layer list.

use std::path::PathBuf;

use crate::cache::shared::tier::SharedTier;
use crate::cache::{CacheConfig, CacheStatus, Key, LocalStore};
use crate::engine::result::CompileResult;
use crate::engine::session::{Options, Session};
use crate::engine::strategy::{Layer, Stack, Strategy};
use crate::engine::Engine;
use crate::plan::Plan;
use crate::remote::compile::{ActionCache, Execution};
use crate::remote::{Mode, RemoteConfig};

/// What to compile and how.
pub struct Request<'a> {
    /// The plan.
    pub plan: &'a Plan,
    /// How the compile runs: console, cancellation, events, worker.
    pub options: Options<'a>,
    /// What runs the plan here: nxcc's pipeline or an external compiler.
    pub engine: &'a Engine,
    /// Whether and where the local cache is used.
    pub cache: CacheConfig,
    /// The cache key, when the caller computed it already (a scheduler that estimated memory
    /// from it).
    pub key: Option<Key>,
    /// A Remote Execution API server, and what it is used for.
    pub remote: Option<RemoteConfig>,
}

/// What a compile gave: its result, and what the local cache had to do with it.
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The compile's result (or the one the cache recorded, on a hit).
    pub result: CompileResult,
    /// Whether the cache served it, stored it, or was not used.
    pub cache: CacheStatus,
    /// The key, when the cache was used.
    pub key: Option<Key>,
    /// The cache entry served or published, if any.
    pub entry: Option<PathBuf>,
}

impl Compiled {
    /// A result the cache had nothing to do with.
    pub fn uncached(result: CompileResult) -> Compiled {
        Compiled {
            result,
            cache: CacheStatus::Off,
            key: None,
            entry: None,
        }
    }
}

/// [`compile`] without a cache or a remote server: what a caller below this layer is handed as
/// its entry point ([`crate::engine::strategy::Entry`]: `nxcc worker`).
pub fn here(plan: &Plan, options: Options<'_>, engine: &Engine) -> CompileResult {
    compile(Request {
        plan,
        options,
        engine,
        cache: CacheConfig::off(),
        key: None,
        remote: None,
    })
    .result
}

/// Compile (see the module documentation).
pub fn compile(request: Request) -> Compiled {
    let Request {
        plan,
        options,
        engine,
        cache,
        key,
        remote,
    } = request;
    let session = match Session::open(plan, options) {
        Ok(s) => s,
        Err(result) => return Compiled::uncached(*result),
    };
    let store = LocalStore::new(&cache, engine, key);
    let remote_cache = remote
        .as_ref()
        .filter(|r| r.mode == Mode::CacheOnly)
        .map(|r| ActionCache {
            address: &r.address,
            engine,
        });
    let execution = remote
        .as_ref()
        .filter(|r| r.mode == Mode::Execute)
        .map(|r| Execution {
            address: &r.address,
            engine,
        });
    let (secondaries, keep, hit_only) = (store.secondaries(), store.keep(), store.hit_only());
    let shared = SharedTier::new(&store);
    let mut layers: Vec<&dyn Layer> = vec![&store, &secondaries, &shared, &keep];
    if let Some(c) = &remote_cache {
        layers.push(c);
    }
    layers.push(&hit_only);
    let base: &dyn Strategy = match &execution {
        Some(e) => e,
        None => engine,
    };
    let result = Stack::new(&layers, base).run(&session, None);
    session.done(&result);
    Compiled {
        result,
        cache: store.status(),
        key: store.key(),
        entry: store.entry(),
    }
}
