//! `parallel-compile --neuron-cache DIR`: the entries to do of the framework's compile cache
//! ([`crate::neuron_cache`]) as the batch's inputs, and what happens around each one's compile.
//!
//! - [`discover`]: the version directory's entries; those to do become inputs (a dead nxcc
//!   run's lock counts as none; a failed entry only with `--retry_failed_compilation`, a foreign
//!   lock only with `--break-locks`); every other entry is reported as skipped, with why.
//! - Each input compiles `<args after --> <entry's compile_flags.json> <graph> --output
//!   <entry>/<staging>/model.neff --logfile <entry>/<staging>/log-neuron-cc.txt`, so the NEFF is
//!   the one a compile to a file named `model.neff` writes.
//! - [`before`], once the scheduler admitted the compile: the entry's lock is taken (its lock file
//!   and an `flock`), the entry looked at again under it (done meanwhile: skipped), staging
//!   directories of dead runs removed, a fresh one made.
//! - [`after`]: a success is published (`model.neff` by a rename, then `model.done`); a failure
//!   of the graph (one [`crate::recon::cache::remembers`], served from nxcc's cache or just compiled)
//!   that will not be retried leaves `model.log` (the error lines, then the tail of the compile's
//!   log); an interrupt, a timeout, a kill or a failure of the environment leaves nothing. The
//!   staging directory and the lock go either way.

use std::io::{self, Read, Seek};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Input;
use crate::engine::result::CompileResult;
use crate::engine::Engine;
use crate::fsx::Dir;
use crate::neuron_cache::lock::{self, Acquire, EntryLock};
use crate::neuron_cache::publish::{self, Staging};
use crate::neuron_cache::{self as nc, Class, LockOwner, NeuronCache};
use crate::result::Status;

/// The compile's log file in the staging directory.
pub const STAGING_LOG: &str = "log-neuron-cc.txt";
/// How many lines of the compile's log `model.log` ends with.
pub const LOG_TAIL_LINES: usize = 50;

/// The local label of the version nxcc's pipeline on the simulated toolchain writes under:
/// `neuronxcc-2.24.5133.0+nxcc-sim`, a directory no framework looks in by itself.
pub const SIM_LABEL: &str = "+nxcc-sim";

/// How the batch treats the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The cache.
    pub cache: NeuronCache,
    /// The compiler version whose directory is compiled.
    pub version: String,
    /// Take over lock files others made and nobody holds an `flock` on (`--break-locks`).
    pub break_locks: bool,
    /// Compile failed entries again (`--retry_failed_compilation`).
    pub retry_failed: bool,
}

/// Where one input's compile goes: an entry of the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The entry directory.
    pub entry: PathBuf,
    /// The entry directory's name.
    pub name: String,
    /// The graph's file name in it.
    pub graph: &'static str,
    /// Its compile flags.
    pub flags: Vec<String>,
    /// The name of its staging directory (made when the compile starts).
    pub staging: String,
}

impl Target {
    /// `<entry>/<staging>/model.neff`.
    pub fn output(&self) -> PathBuf {
        self.entry.join(&self.staging).join(nc::NEFF_FILE)
    }

    /// `<entry>/<staging>/log-neuron-cc.txt`.
    pub fn log(&self) -> PathBuf {
        self.entry.join(&self.staging).join(STAGING_LOG)
    }
}

/// An entry not compiled, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The entry directory.
    pub entry: String,
    /// Its class (`done`, `locked`, `failed`, `refused`).
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
}

fn owner_text(o: &LockOwner) -> String {
    o.describe()
}

/// The entries of `run`'s version directory: the inputs to compile and the skipped.
pub fn discover(run: &Run) -> io::Result<Discovery> {
    let scan = run.cache.scan(Some(&run.version))?;
    let mut d = Discovery::default();
    for e in scan.versions.iter().flat_map(|v| &v.entries) {
        let shown = e.path.display().to_string();
        let skip = |why: String| Skipped {
            entry: shown.clone(),
            class: e.class.name(),
            why,
        };
        let go = match &e.class {
            Class::ToDo => true,
            Class::Done => {
                d.skipped.push(skip("done".into()));
                false
            }
            Class::Failed if run.retry_failed => true,
            Class::Failed => {
                d.skipped.push(skip(format!(
                    "failed earlier (see {}; --retry_failed_compilation compiles it again)",
                    e.path.join(nc::LOG_FILE).display()
                )));
                false
            }
            Class::Locked(LockOwner::DeadNxcc { .. }) => true,
            Class::Locked(LockOwner::Foreign { .. }) if run.break_locks => true,
            Class::Locked(o) => {
                let mut why = owner_text(o);
                if matches!(o, LockOwner::Foreign { .. }) {
                    why.push_str("; --break-locks takes it over");
                }
                d.skipped.push(skip(why));
                false
            }
            Class::Refused(why) => {
                d.skipped.push(skip(format!("refused: {why}")));
                false
            }
        };
        if !go {
            continue;
        }
        // The flags of entries not classified as to do were not read yet.
        let flags = match &e.flags {
            Some(f) => Ok(f.clone()),
            None => nc::maintain::open_entry(&run.cache, e)
                .map_err(|err| err.to_string())
                .and_then(|dir| nc::read_flags(&dir)),
        };
        let (Some(graph), Ok(flags)) = (e.graph, flags) else {
            d.skipped.push(Skipped {
                entry: shown,
                class: "refused",
                why: "refused: no graph, or its compile_flags.json does not read".into(),
            });
            continue;
        };
        d.inputs.push(Input {
            model: e.path.join(graph),
            stem: e.name.clone(),
            neuron: Some(Target {
                entry: e.path.clone(),
                name: e.name.clone(),
                graph,
                flags,
                staging: publish::staging_name(),
            }),
        });
    }
    Ok(d)
}

/// An entry locked and ready for its compile.
#[derive(Debug)]
pub struct Prepared {
    dir: Dir,
    staging: Staging,
    _lock: EntryLock,
    /// The lock taken over, if one was (a dead run's, or a broken foreign one).
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

fn open_entry_dir(run: &Run, t: &Target) -> io::Result<Dir> {
    let top = run
        .cache
        .open()?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
    top.open_dir(&nc::version_dir_name(&run.version))?
        .open_dir(&t.name)
}

/// Lock the entry and make its staging directory (see the module documentation). `Err`: an
/// error line (the entry cannot be opened or locked).
pub fn before(run: &Run, t: &Target) -> Result<Before, String> {
    let fail = |e: &dyn std::fmt::Display| {
        format!(
            "[ERROR] cannot lock the neuron cache entry {}: {e}",
            t.entry.display()
        )
    };
    let dir = open_entry_dir(run, t).map_err(|e| fail(&e))?;
    let lock = match lock::acquire(&dir, t.graph, run.break_locks).map_err(|e| fail(&e))? {
        Acquire::Locked(l) => l,
        Acquire::Held(o) => return Ok(Before::Skip(owner_text(&o))),
        Acquire::Refused(why) => return Err(fail(&why)),
    };
    let mut now = nc::Entry {
        version: run.version.clone(),
        name: t.name.clone(),
        path: t.entry.clone(),
        graph: None,
        flags: None,
        class: Class::ToDo,
        bytes: 0,
    };
    nc::classify(&dir, &mut now);
    // (Our own lock now makes the entry `locked`: done and refused take precedence over it,
    // a failure is looked for by hand.)
    match &now.class {
        Class::Done => return Ok(Before::Skip("done meanwhile".into())),
        Class::Refused(why) => return Err(fail(why)),
        _ => {}
    }
    let failed = dir.stat(nc::LOG_FILE).is_ok() && dir.stat(nc::NEFF_FILE).is_err();
    if failed && !run.retry_failed {
        return Ok(Before::Skip("failed meanwhile".into()));
    }
    publish::remove_leftovers(&dir);
    let staging = Staging::create(&dir, &t.staging).map_err(|e| fail(&e))?;
    let took_over = lock.took_over.clone();
    Ok(Before::Go(Prepared {
        dir,
        staging,
        _lock: lock,
        took_over,
    }))
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

/// Finish an attempt (see the module documentation): `Err` is an error line when a successful
/// compile's NEFF could not be put in place (the attempt then failed).
pub fn after(
    p: Prepared,
    t: &Target,
    outcome: &CompileResult,
    will_retry: bool,
    interrupted: bool,
) -> Result<(), String> {
    if outcome.ok() {
        let Prepared { dir, staging, .. } = p;
        let r = staging.publish().map_err(|e| {
            format!(
                "[ERROR] cannot put the NEFF in place in the neuron cache entry {}: {e}",
                t.entry.display()
            )
        });
        drop(dir);
        return r;
    }
    // A failure of the graph: one the cache remembers (served from nxcc's cache, or just
    // compiled). An interrupt, a timeout, a kill or the environment leaves the entry to do.
    let of_the_graph = match &outcome.status {
        Status::Failed(f) => crate::recon::cache::remembers(f),
        _ => false,
    };
    if of_the_graph && !will_retry && !interrupted {
        let text = log_text(&outcome.lines, &t.log());
        if let Err(e) = publish::write_log(&p.dir, &text) {
            return Err(format!(
                "[ERROR] cannot write {} in the neuron cache entry {}: {e}",
                nc::LOG_FILE,
                t.entry.display()
            ));
        }
    }
    Ok(())
}

/// What the command line asks of the framework's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request<'a> {
    /// The cache directory (absolute).
    pub dir: &'a Path,
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

/// Whether nxcc's pipeline would run on the simulated toolchain with these compile arguments
/// (`--toolchain sim`, or a directory or `NXCC_TOOLCHAIN` that is a simulated layout); `None`
/// when the toolchain would be looked for as an installed package.
fn pipeline_toolchain(prog: &str, shared: &[String], launch_dir: &Path) -> Option<bool> {
    let mut argv: Vec<String> = vec!["compile".into()];
    argv.extend(shared.iter().cloned());
    argv.push("model.hlo_module.pb".into());
    let option = match crate::cli::parse(prog, &argv) {
        Ok(crate::cli::Command::Compile(a)) => a.ns.str("toolchain").map(str::to_string),
        _ => None,
    };
    let env = std::env::var(crate::recon::toolchain::TOOLCHAIN_ENV).ok();
    match crate::toolchain::Request::from(option.as_deref(), env.as_deref(), launch_dir) {
        crate::toolchain::Request::Simulated => Some(true),
        crate::toolchain::Request::Dir(d) => Some(crate::toolchain::from_dir(&d).simulated),
        crate::toolchain::Request::Auto => None,
    }
}

/// The batch's [`Run`]: the version directory (`--neuron-version`; else what `--compiler PATH
/// --version` says; else, on the simulated toolchain, the version it simulates with
/// [`SIM_LABEL`]), and the refusal of the simulated toolchain without `--allow-simulated`.
/// `Err`: a usage error's message.
pub fn prepare(
    prog: &str,
    req: &Request,
    engine: &Engine,
    shared: &[String],
    launch_dir: &Path,
) -> Result<Run, String> {
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
    // A missing directory is a wrong path or a version the framework did not use: say which.
    let cache = NeuronCache::new(req.dir);
    match cache.open() {
        Ok(None) => {
            return Err(format!(
                "argument --neuron-cache: {} does not exist",
                req.dir.display()
            ))
        }
        Err(e) => {
            return Err(format!(
                "argument --neuron-cache: {}: {e}",
                req.dir.display()
            ))
        }
        Ok(Some(_)) => {}
    }
    if !cache.version_path(&version).exists() {
        let present: Vec<String> = cache
            .scan(None)
            .map(|s| s.versions.into_iter().map(|v| v.version).collect())
            .unwrap_or_default();
        return Err(format!(
            "argument --neuron-version: {} has no {} directory ({}); give the version the framework compiled with (--neuron-version)",
            req.dir.display(),
            nc::version_dir_name(&version),
            if present.is_empty() {
                "it has no neuronxcc-<version> directory: run the framework's extraction phase first".to_string()
            } else {
                format!("it has: {}", present.join(", "))
            }
        ));
    }
    Ok(Run {
        cache,
        version,
        break_locks: req.break_locks,
        retry_failed: req.retry_failed,
    })
}

/// What is said before the batch: the version directory, how many entries are to do, and every
/// entry skipped that someone may want to know about (done ones are only counted).
pub fn announce(run: &Run, found: &Discovery) -> String {
    let done = found.skipped.iter().filter(|s| s.class == "done").count();
    let mut t = format!(
        "neuron cache {}: {} entries to compile, {done} done, {} skipped\n",
        run.cache.version_path(&run.version).display(),
        found.inputs.len(),
        found.skipped.len() - done
    );
    for s in found.skipped.iter().filter(|s| s.class != "done") {
        t.push_str(&format!("skipped {} ({}): {}\n", s.entry, s.class, s.why));
    }
    t
}

/// The report's `neuron_cache` object.
pub fn report_json(run: &Run, skipped: &[Skipped]) -> serde_json::Value {
    serde_json::json!({
        "dir": run.cache.dir().display().to_string(),
        "version": run.version,
        "version_dir": run.cache.version_path(&run.version).display().to_string(),
        "skipped": skipped,
    })
}
