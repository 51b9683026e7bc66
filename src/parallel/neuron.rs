//! `parallel-compile --neuron-cache DIR|s3://BUCKET/PREFIX`: the entries to do of the
//! framework's compile cache ([`crate::neuron_cache`], in a directory or a bucket: its
//! [`Place`]) as the batch's inputs, and what happens around each one's compile.
//!
//! - [`discover`], under the cache-wide lock (a directory's): the version's entries; those to do
//!   become inputs (a stale lock — a dead run's, an expired lease — counts as none; a failed
//!   entry only with `--retry_failed_compilation`, a foreign lock only with `--break-locks`);
//!   each one's graph and flags are copied (downloaded, bounded) into a private work directory
//!   of its own (outside the cache), so a graph being written is never compiled. Every other
//!   entry is reported as skipped, with why — entries whose flags are not compile semantics
//!   only among them.
//! - Each input compiles as the framework's wrapper runs the compiler
//!   ([`crate::recon::framework`]): `compile <args after --> --framework=XLA
//!   <work dir>/model.MODULE_<key>.hlo_module.pb --output <work dir>/model.MODULE_<key>.neff
//!   <the entry's flags>`, the work dir being the compile's launch (and working) directory; the
//!   wrapper's own flags are dropped from the entry's.
//! - [`before`], once the scheduler admitted the compile: the entry's lock is taken (a directory's
//!   in the lock keeper, [`crate::lockfile::keeper`]; a bucket's a lock object), the entry looked
//!   at again under it (done or locked by another meanwhile: skipped), what dead earlier runs
//!   left removed.
//! - [`after`], only while the entry's lock is still ours and its graph still the one
//!   compiled (its blake3 as it was copied): a success is published (`model.neff`,
//!   then `model.done`: in a directory by a rename under the cache-wide lock, in a bucket created
//!   only if absent); a failure of the graph
//!   (one [`crate::recon::cache::remembers`], served from nxcc's cache or just compiled) that
//!   will not be retried leaves `model.log` (the error lines, then the tail of the compile's log); an
//!   interrupt, a timeout, a kill or a failure of the environment leaves nothing. A lost lock
//!   gives the result up: `lost the lock of <entry>`.

use std::io::{self, Read, Seek};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;

use super::Input;
use crate::engine::result::CompileResult;
use crate::engine::Engine;
use crate::lockfile::keeper::Locker;
use crate::neuron_cache::place::{Compiled, EntryLock, Place, Taken};
use crate::neuron_cache::publish::NotWritten;
use crate::neuron_cache::{self as nc, Class, Location, LockOwner, NeuronCache};
use crate::objstore::StorageError;
use crate::recon::framework;
use crate::result::Status;

/// The compile's log file in its work directory (the compiler's default name there).
pub const WORK_LOG: &str = "log-neuron-cc.txt";
/// How many lines of the compile's log `model.log` ends with.
pub const LOG_TAIL_LINES: usize = 50;

/// The local label of the version nxcc's pipeline on the simulated toolchain writes under:
/// `neuronxcc-2.24.5133.0+nxcc-sim`, a directory no framework looks in by itself.
pub const SIM_LABEL: &str = "+nxcc-sim";

/// How the batch treats the framework's cache.
#[derive(Debug, Clone)]
pub struct Run {
    /// The cache: a directory or a bucket.
    pub place: Arc<dyn Place>,
    /// The compiler version whose directory is compiled.
    pub version: String,
    /// Take over lock files others made and nobody holds an `flock` on (`--break-locks`).
    pub break_locks: bool,
    /// Compile failed entries again (`--retry_failed_compilation`).
    pub retry_failed: bool,
    /// The private directory the entries' work directories are made in.
    pub work_root: PathBuf,
    /// The lock keeper (a directory's entries' locks are held there), which also removes the work
    /// directories when the run is killed.
    _keeper: Locker,
    /// It, removed when the last copy of the run goes.
    _work: Arc<tempfile::TempDir>,
}

impl Run {
    /// The version's directory (or folder), as shown.
    pub fn version_shown(&self) -> String {
        let shown = self.place.shown();
        Path::new(&shown)
            .join(nc::version_dir_name(&self.version))
            .display()
            .to_string()
    }
}

/// Where one input's compile goes: an entry of the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The entry (its directory; in a bucket, its URL).
    pub entry: PathBuf,
    /// The entry directory's name (`MODULE_<key>`).
    pub name: String,
    /// The graph's file name in it.
    pub graph: &'static str,
    /// The flags the compiler gets (the entry's, without the wrapper's own).
    pub flags: Vec<String>,
    /// The entry's private work directory (outside the cache).
    pub work_dir: PathBuf,
    /// The blake3 of the graph as it was copied (what is compiled): a result is written into the
    /// entry only while the entry's graph still has it.
    pub graph_blake3: String,
}

impl Target {
    /// `<work dir>/model.MODULE_<key>.hlo_module.pb`: the graph's copy the compile reads.
    pub fn work_graph(&self) -> PathBuf {
        self.work_dir
            .join(framework::work_names(&self.name, self.graph).0)
    }

    /// `<work dir>/model.MODULE_<key>.neff`.
    pub fn output(&self) -> PathBuf {
        self.work_dir
            .join(framework::work_names(&self.name, self.graph).1)
    }

    /// `<work dir>/log-neuron-cc.txt`.
    pub fn log(&self) -> PathBuf {
        self.work_dir.join(WORK_LOG)
    }

    /// The compile's arguments after `compile`: `shared` (the arguments after `--`), then the
    /// framework's ([`framework::compile_args`]).
    pub fn compile_args(&self, shared: &[String]) -> Vec<String> {
        let mut argv = shared.to_vec();
        argv.extend(framework::compile_args(
            &self.work_graph().display().to_string(),
            &self.output().display().to_string(),
            &self.flags,
        ));
        argv
    }
}

/// An entry not compiled, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The entry directory.
    pub entry: String,
    /// Its class (`done`, `locked`, `failed`, `refused`, `foreign`).
    pub class: &'static str,
    /// Why it is not compiled.
    pub why: String,
}

/// What [`discover`] found.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The entries to compile, as inputs.
    pub inputs: Vec<Input>,
    /// The others.
    pub skipped: Vec<Skipped>,
    /// Flags dropped from entries as the framework's wrapper drops them (entry, flag).
    pub dropped: Vec<(String, String)>,
}

/// Say something on stderr (waiting for the cache lock).
fn say(m: &str) {
    crate::cli::subcommand::err(&format!("{m}\n"));
}

/// Whether an entry of this class is compiled, or why not.
fn to_compile(run: &Run, e: &nc::Entry) -> Result<(), String> {
    match &e.class {
        Class::ToDo => Ok(()),
        Class::Done => Err("done".into()),
        Class::Failed if run.retry_failed => Ok(()),
        Class::Failed => Err(format!(
            "failed earlier (see {}; --retry_failed_compilation compiles it again)",
            e.path.join(nc::LOG_FILE).display()
        )),
        Class::Locked(o) if o.is_stale() => Ok(()),
        Class::Locked(o) if o.is_foreign() && run.break_locks => Ok(()),
        Class::Locked(o) => {
            let mut why = o.describe();
            if o.is_foreign() {
                why.push_str("; --break-locks takes it over");
            }
            Err(why)
        }
        Class::Refused(why) => Err(format!("refused: {why}")),
        Class::Foreign(what) => Err(format!("not an entry: {what}")),
    }
}

/// The flags file a work directory holds for the entry's reproducer: the entry's flags as a JSON
/// list.
pub const WORK_FLAGS: &str = nc::FLAGS_FILE;

/// Copy the entry's graph (at most what the HLO reader reads) and flags into a fresh private
/// work directory (under the cache-wide lock, a directory's); the graph copy's blake3.
fn copy_inputs(run: &Run, e: &nc::Entry, t: &Target, raw: &[String]) -> io::Result<String> {
    std::fs::DirBuilder::new().mode(0o700).create(&t.work_dir)?;
    let limit = crate::hlo::READ_LIMIT;
    run.place.copy(e, t.graph, limit, &t.work_graph())?;
    let flags = serde_json::to_vec(raw).map_err(io::Error::other)?;
    std::fs::write(t.work_dir.join(WORK_FLAGS), flags)?;
    let graph = t.work_graph();
    graph_digest(&std::fs::File::open(&graph)?, &graph)
}

/// The blake3 of an open graph (`path` names it in errors).
fn graph_digest(f: &std::fs::File, path: &Path) -> io::Result<String> {
    let mut h = blake3::Hasher::new();
    crate::cache::key::hash_open_into(f, path, &mut h)?;
    Ok(h.finalize().to_hex().to_string())
}

/// The flags of `e` as written (read when its classification did not read them).
fn raw_flags(run: &Run, e: &nc::Entry) -> Result<Vec<String>, String> {
    match &e.flags {
        Some(f) => Ok(f.clone()),
        None => nc::classify::read_flags(&|n| run.place.read(e, n, nc::FLAGS_LIMIT)),
    }
}

/// The entries of `run`'s version: the inputs to compile and the skipped.
pub fn discover(run: &Run) -> io::Result<Discovery> {
    let _held = run.place.hold(&say)?;
    let scan = run.place.scan(Some(&run.version))?;
    let mut d = Discovery::default();
    for e in scan.versions.iter().flat_map(|v| &v.entries) {
        let shown = e.path.display().to_string();
        let skip = |class: &'static str, why: String| Skipped {
            entry: shown.clone(),
            class,
            why,
        };
        if let Err(why) = to_compile(run, e) {
            d.skipped.push(skip(e.class.name(), why));
            continue;
        }
        let (Some(graph), Ok(raw)) = (e.graph, raw_flags(run, e)) else {
            d.skipped.push(skip(
                "refused",
                "refused: no graph, or its compile_flags.json does not read".into(),
            ));
            continue;
        };
        let flags = match nc::compile_flags(&raw) {
            Ok(f) => f,
            Err(why) => {
                d.skipped.push(skip("refused", format!("refused: {why}")));
                continue;
            }
        };
        d.dropped
            .extend(flags.dropped.iter().map(|f| (shown.clone(), f.clone())));
        let mut t = Target {
            entry: e.path.clone(),
            name: e.name.clone(),
            graph,
            flags: flags.flags,
            work_dir: run.work_root.join(&e.name),
            graph_blake3: String::new(),
        };
        match copy_inputs(run, e, &t, &raw) {
            Ok(digest) => t.graph_blake3 = digest,
            Err(err) => {
                d.skipped.push(skip(
                    "refused",
                    format!("refused: its graph cannot be copied: {err}"),
                ));
                continue;
            }
        }
        d.inputs.push(Input {
            model: e.path.join(graph),
            stem: e.name.clone(),
            neuron: Some(t),
        });
    }
    Ok(d)
}

/// An entry locked and ready for its compile.
#[derive(Debug)]
pub struct Prepared {
    lock: Box<dyn EntryLock>,
    /// The lock taken over, if one was (a dead run's, an expired lease, a broken foreign one).
    pub took_over: Option<LockOwner>,
}

/// What [`before`] decided.
#[derive(Debug)]
pub enum Before {
    /// Compile.
    Go(Prepared),
    /// Do not: the reason (locked by another meanwhile, done meanwhile).
    Skip(String),
}

/// Lock the entry (see the module documentation). `Err`: an error line (the entry cannot be
/// opened or locked).
pub fn before(run: &Run, t: &Target) -> Result<Before, String> {
    let fail = |e: &dyn std::fmt::Display| {
        format!(
            "[ERROR] cannot lock the neuron cache entry {}: {e}",
            t.entry.display()
        )
    };
    let lock = match run
        .place
        .lock(&run.version, &t.name, t.graph, run.break_locks)
    {
        Taken::Locked(l) => l,
        Taken::Busy(o) => return Ok(Before::Skip(o.describe())),
        Taken::Refused(why) => return Err(fail(&why)),
    };
    match lock.look() {
        Class::Done => return Ok(Before::Skip("done meanwhile".into())),
        Class::Refused(why) => return Err(fail(&why)),
        Class::Locked(o) => return Ok(Before::Skip(o.describe())),
        Class::Failed if !run.retry_failed => return Ok(Before::Skip("failed meanwhile".into())),
        _ => {}
    }
    lock.tidy();
    let took_over = lock.took_over().cloned();
    Ok(Before::Go(Prepared { lock, took_over }))
}

/// The last `n` lines of a file (at most its last 1 MiB read).
fn tail(path: &Path, n: usize) -> String {
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(io::SeekFrom::Start(len.saturating_sub(1 << 20)));
    let mut b = Vec::new();
    let _ = f.read_to_end(&mut b);
    let text = String::from_utf8_lossy(&b);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = lines[lines.len().saturating_sub(n)..].join("\n");
    out.push('\n');
    out
}

/// The entry's `model.log`, when it has one (a plain file) in a directory: the only log of its
/// compile that is kept (one an attempt wrote into a bucket, [`after`] tells).
pub fn kept_log(t: &Target) -> Option<String> {
    let log = t.entry.join(nc::LOG_FILE);
    std::fs::symlink_metadata(&log)
        .is_ok_and(|m| m.is_file())
        .then(|| log.display().to_string())
}

/// What `model.log` holds: the error lines, then the tail of the compile's log.
pub fn log_text(error_lines: &[String], log: &Path) -> String {
    let mut t = String::new();
    for l in error_lines {
        t.push_str(l);
        t.push('\n');
    }
    t.push_str(&format!(
        "--- the last {LOG_TAIL_LINES} lines of the compile's log ---\n"
    ));
    t.push_str(&tail(log, LOG_TAIL_LINES));
    t
}

/// Finish an attempt (see the module documentation): where the entry's `model.log` was written
/// (its path, or its `s3://` URL), if it was; `Err` is an error line when a result could not be
/// written (a successful compile's NEFF not put in place: the attempt failed).
pub fn after(
    p: Prepared,
    t: &Target,
    outcome: &CompileResult,
    will_retry: bool,
    interrupted: bool,
) -> Result<Option<String>, String> {
    let compiled = Compiled {
        graph: t.graph,
        blake3: &t.graph_blake3,
    };
    let lost = |e: NotWritten, what: &str| {
        match e {
        NotWritten::Lost(why) => format!(
            "[ERROR] lost the lock of {} ({why}): its {what} is given up",
            t.entry.display()
        ),
        NotWritten::Io(e) => format!(
            "[ERROR] cannot write the {what} into the neuron cache entry {}: {e}",
            t.entry.display()
        ),
        NotWritten::Changed(why) => format!(
            "[ERROR] the graph of {} changed while it was compiled ({why}): its {what} is given up, the entry stays to do",
            t.entry.display()
        ),
    }
    };
    if outcome.ok() {
        let written = p.lock.publish_neff(&t.output(), &compiled);
        let _ = std::fs::remove_file(t.output());
        return written.map(|()| None).map_err(|e| lost(e, "NEFF"));
    }
    // A failure of the graph: one the cache remembers (served from nxcc's cache, or just
    // compiled). An interrupt, a timeout, a kill or the environment leaves the entry to do.
    let of_the_graph = match &outcome.status {
        Status::Failed(f) => crate::recon::cache::remembers(f),
        _ => false,
    };
    if of_the_graph && !will_retry && !interrupted {
        let text = log_text(&outcome.lines, &t.log());
        p.lock
            .write_log(&text, &compiled)
            .map_err(|e| lost(e, nc::LOG_FILE))?;
        return Ok(Some(t.entry.join(nc::LOG_FILE).display().to_string()));
    }
    Ok(None)
}

/// What the command line asks of the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The cache: a directory (absolute) or a bucket.
    pub cache: &'a Location,
    /// `--neuron-version`.
    pub version: Option<&'a str>,
    /// `--allow-simulated`.
    pub allow_simulated: bool,
    /// `--break-locks`.
    pub break_locks: bool,
    /// `--retry_failed_compilation`.
    pub retry_failed: bool,
}

/// How long a compiler may take to say its version.
const VERSION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// What `PATH --version` says is its version.
pub fn ask_version(program: &Path) -> Result<String, String> {
    use std::process::{Command, Stdio};
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {} --version: {e}", program.display()))?;
    let deadline = std::time::Instant::now() + VERSION_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} --version did not answer within {} s",
                    program.display(),
                    VERSION_TIMEOUT.as_secs()
                ));
            }
        }
    }
    let mut out = String::new();
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut out);
    }
    nc::version_in(&out).ok_or_else(|| {
        format!(
            "{} --version printed no version ({:?})",
            program.display(),
            out.trim()
        )
    })
}

/// The toolchain nxcc's pipeline would ask for with these compile arguments (`--toolchain`,
/// else `NXCC_TOOLCHAIN`).
fn toolchain_request(
    prog: &str,
    shared: &[String],
    launch_dir: &Path,
) -> crate::toolchain::Request {
    let mut argv: Vec<String> = vec!["compile".into()];
    argv.extend(shared.iter().cloned());
    argv.push("model.hlo_module.pb".into());
    let option = match crate::cli::parse(prog, &argv) {
        Ok(crate::cli::Command::Compile(a)) => a.settings.toolchain,
        _ => None,
    };
    let env = std::env::var(crate::recon::toolchain::TOOLCHAIN_ENV).ok();
    crate::toolchain::Request::from(option.as_deref(), env.as_deref(), launch_dir)
}

/// Whether nxcc's pipeline would run on the simulated toolchain with these compile arguments
/// (`--toolchain sim`, or a directory or `NXCC_TOOLCHAIN` that is a simulated layout); `None`
/// when the toolchain would be looked for as an installed package.
fn pipeline_toolchain(prog: &str, shared: &[String], launch_dir: &Path) -> Option<bool> {
    match toolchain_request(prog, shared, launch_dir) {
        crate::toolchain::Request::Simulated => Some(true),
        crate::toolchain::Request::Dir(d) => Some(crate::toolchain::from_dir(&d).simulated),
        crate::toolchain::Request::Auto => None,
    }
}

/// nxcc's own files are never put inside the framework's cache `dir` (its tools would take them
/// for the framework's: upload, clean, unlock them): nxcc's cache (`cache_dir`), and the
/// simulated toolchain the run would lay out under `XDG_CACHE_HOME` (`--toolchain sim` on nxcc's
/// pipeline). `Err`: a usage error's message naming both and the fix.
pub fn outside(
    prog: &str,
    dir: &Path,
    cache_dir: Option<&Path>,
    engine: &Engine,
    shared: &[String],
    launch_dir: &Path,
) -> Result<(), String> {
    // A shared tier (s3://...) keeps its local tier in nxcc's default directory.
    let local = cache_dir.map(|c| match c.to_str().is_some_and(crate::objstore::is_url) {
        true => PathBuf::from(crate::cache::default_dir()),
        false => c.to_path_buf(),
    });
    if let Some(c) = local.filter(|c| nc::within(dir, c)) {
        return Err(format!(
            "argument --cache_dir: nxcc's cache {} is inside the framework's cache {}, whose tools would take its files for the framework's; give --cache_dir a directory outside {} (nxcc's own default is under XDG_CACHE_HOME), or --no_cache",
            c.display(),
            dir.display(),
            dir.display()
        ));
    }
    let simulated = *engine == Engine::Pipeline
        && toolchain_request(prog, shared, launch_dir) == crate::toolchain::Request::Simulated;
    let home = crate::toolchain::simulated_home();
    if simulated && nc::within(dir, &home) {
        return Err(format!(
            "argument --toolchain: the simulated toolchain would be laid out in {} (under XDG_CACHE_HOME), inside the framework's cache {}, whose tools would take its files for the framework's; set XDG_CACHE_HOME to a directory outside {}, or lay a toolchain out elsewhere (nxcc toolchain sim DIR) and give --toolchain DIR",
            home.display(),
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// The batch's [`Run`]: the version directory (`--neuron-version`; else what `--compiler PATH
/// --version` says; else, on the simulated toolchain, the version it simulates with
/// [`SIM_LABEL`]), and the refusal of the simulated toolchain without `--allow-simulated`.
pub fn prepare(
    prog: &str,
    req: &Request,
    engine: &Engine,
    shared: &[String],
    launch_dir: &Path,
) -> Result<Run, Refused> {
    let version = version_of(prog, req, engine, shared, launch_dir).map_err(Refused::Usage)?;
    // Private (0700): the entries' work directories, named after their keys, are in it.
    let work = tempfile::Builder::new()
        .prefix("nxcc-neuron-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| {
            Refused::Usage(format!(
                "argument --neuron-cache: cannot make a private work directory: {e}"
            ))
        })?;
    let lease = crate::lockfile::lease();
    let locker = match crate::lockfile::keeper::Keeper::start(lease, Some(work.path())) {
        Ok(k) => Locker::Kept(k),
        Err(e) => {
            say(&format!("warning: the entries' locks are held in this process ({e}): a killed run leaves them until `nxcc cache clean --locks`"));
            Locker::Local(lease)
        }
    };
    let place = open_place(req.cache, &version, &locker)?;
    Ok(Run {
        place,
        version,
        break_locks: req.break_locks,
        retry_failed: req.retry_failed,
        _keeper: locker,
        work_root: work.path().to_path_buf(),
        _work: Arc::new(work),
    })
}

/// The compiler version whose directory the run fills: `--neuron-version`, the external
/// compiler's own, or the simulated toolchain's (allowed only with `--allow-simulated`).
fn version_of(
    prog: &str,
    req: &Request,
    engine: &Engine,
    shared: &[String],
    launch_dir: &Path,
) -> Result<String, String> {
    let simulated = match engine {
        Engine::Pipeline => pipeline_toolchain(prog, shared, launch_dir),
        Engine::External(_) => Some(false),
    };
    if simulated == Some(true) && !req.allow_simulated {
        return Err("argument --neuron-cache: the simulated toolchain's NEFFs cannot run on Neuron hardware and are not written into a framework's cache (--allow-simulated does, for tests)".into());
    }
    let version = match (req.version, engine, simulated) {
        (Some(v), _, _) => v.to_string(),
        (None, Engine::External(c), _) => ask_version(&c.program)
            .map_err(|e| format!("argument --neuron-version: {e}; give the version"))?,
        (None, Engine::Pipeline, Some(true)) => format!(
            "{}{SIM_LABEL}",
            crate::ORIGINAL_VERSION.rsplit(' ').next().unwrap_or_default()
        ),
        (None, Engine::Pipeline, _) => {
            return Err("argument --neuron-version: required with --neuron-cache on nxcc's pipeline and a real toolchain (the version `neuronx-cc --version` prints, e.g. 2.24.5133.0+58f8de22), or use --compiler PATH".into())
        }
    };
    nc::check_version(&version).map_err(|e| format!("argument --neuron-version: {e}"))?;
    Ok(version)
}

/// Why the batch cannot start on the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A usage error's message (a wrong path, version, or option).
    Usage(String),
    /// The cache cannot be read (a bucket that does not exist, a request denied, an endpoint
    /// that cannot be reached): an error's message.
    Unusable(String),
}

/// The framework's cache at `loc`, with its `version`: a directory checked (entries' flags are
/// instructions: a cache others can write is refused before anything in it is read), its
/// entries' locks taken by `locker`; or a bucket. A missing cache or version is a wrong path, a
/// wrong bucket or a version the framework did not use: which is said.
fn open_place(loc: &Location, version: &str, locker: &Locker) -> Result<Arc<dyn Place>, Refused> {
    let (place, shown): (Arc<dyn Place>, String) = match loc {
        Location::Bucket(url) => {
            let b = nc::bucket::Bucket::open(url).map_err(|e| match e {
                StorageError::Other(why) => {
                    Refused::Usage(format!("argument --neuron-cache: {why}"))
                }
                e => Refused::Unusable(format!("cannot read the neuron cache {url}: {e}")),
            })?;
            (Arc::new(b), url.clone())
        }
        Location::Dir(dir) => {
            let place = open_dir(dir, version, locker).map_err(Refused::Usage)?;
            (place, dir.display().to_string())
        }
    };
    let present = place
        .versions()
        .map_err(|e| Refused::Unusable(format!("cannot read the neuron cache {shown}: {e}")))?;
    if !present.iter().any(|v| v == version) {
        return Err(Refused::Usage(format!(
            "argument --neuron-version: {shown} has no {} directory ({}); give the version the framework compiled with (--neuron-version)",
            nc::version_dir_name(version),
            if present.is_empty() {
                "it has no neuronxcc-<version> directory: run the framework's extraction phase first".to_string()
            } else {
                format!("it has: {}", present.join(", "))
            }
        )));
    }
    Ok(place)
}

/// The framework's cache in the directory `dir`, checked by the trust rule, with its
/// cache-wide lock.
fn open_dir(dir: &Path, version: &str, locker: &Locker) -> Result<Arc<dyn Place>, String> {
    let cache = NeuronCache::new(dir);
    if let Err(u) = cache.check(Some(version)) {
        return Err(format!("argument --neuron-cache: {u}"));
    }
    let top = match cache.open() {
        Ok(Some(top)) => top,
        Ok(None) => {
            return Err(format!(
                "argument --neuron-cache: {} does not exist",
                dir.display()
            ))
        }
        Err(e) => return Err(format!("argument --neuron-cache: {}: {e}", dir.display())),
    };
    let cache_lock = nc::lock::CacheLock::open(&top, dir).map_err(|e| {
        format!(
            "argument --neuron-cache: cannot open its lock {}: {e}",
            dir.join(framework::CACHE_LOCK).display()
        )
    })?;
    let place = nc::directory::Directory::new(cache, locker.clone(), Some(Arc::new(cache_lock)));
    Ok(Arc::new(place))
}

/// What is said before the batch: the version directory, how many entries are to do, and every
/// entry skipped that someone may want to know about (done ones are only counted).
pub fn announce(run: &Run, found: &Discovery) -> String {
    let done = found.skipped.iter().filter(|s| s.class == "done").count();
    let mut t = format!(
        "neuron cache {}: {} to compile, {done} done, {} skipped\n",
        run.version_shown(),
        crate::words::count(found.inputs.len(), "entry", "entries"),
        found.skipped.len() - done
    );
    for s in found.skipped.iter().filter(|s| s.class != "done") {
        t.push_str(&format!("skipped {} ({}): {}\n", s.entry, s.class, s.why));
    }
    for (entry, flag) in &found.dropped {
        t.push_str(&format!(
            "dropped {flag} from the flags of {entry} (the framework's wrapper keeps it to itself)\n"
        ));
    }
    t
}

/// The compile arguments after `--` with a relative `--toolchain DIR` made absolute against
/// `launch_dir`: an entry's compile runs in its own work directory.
pub fn anchor_toolchain(shared: &[String], launch_dir: &Path) -> Vec<String> {
    let anchor = |v: &str| match v {
        "sim" => v.to_string(),
        v => crate::fsx::absolute(launch_dir, v).display().to_string(),
    };
    let mut out = Vec::with_capacity(shared.len());
    let mut next_is_dir = false;
    for a in shared {
        if next_is_dir {
            out.push(anchor(a));
            next_is_dir = false;
        } else if let Some(v) = a.strip_prefix("--toolchain=") {
            out.push(format!("--toolchain={}", anchor(v)));
        } else {
            next_is_dir = a == "--toolchain";
            out.push(a.clone());
        }
    }
    out
}

/// The report's `neuron_cache` object.
pub fn report_json(run: &Run, skipped: &[Skipped]) -> serde_json::Value {
    serde_json::json!({
        "dir": run.place.shown(),
        "version": run.version,
        "version_dir": run.version_shown(),
        "skipped": skipped,
    })
}
