//! Writing a reproducer bundle (see [`super`]): its members gathered in memory, packed as a
//! deterministic tar ([`crate::neff::tar`], the writer the NEFF uses), gzip-compressed, and
//! published whole as one [`crate::fsx::AtomicFile`] made from the reproducer directory's
//! descriptor: nothing in that directory is followed through a link, a name another user planted
//! there is replaced (never written through), and a reader sees no bundle or a whole one. The
//! bundle is readable by its owner only (it holds the model and the environment).

use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{env_kept, Signature, FORMAT, MANIFEST, MODEL_DIR};
use crate::cache::{CacheConfig, EngineIdentity, Key, ToolchainIdentity};
use crate::engine::result::CompileResult;
use crate::engine::Engine;
use crate::fsx::{AtomicFile, Dir, Durability};
use crate::plan::Invocation;
use crate::result::Failure;
use crate::toolchain::Toolchain;

/// The most of a model read into a bundle, bytes.
pub const MAX_MODEL_BYTES: u64 = 4 << 30;
/// The most of a compile's log kept in a bundle (its last lines), bytes.
pub const MAX_LOG_BYTES: u64 = 16 << 20;

/// What ran a bundle's compile, and how the bundle knows it.
#[derive(Debug, Clone, Copy)]
pub enum Ran<'a> {
    /// This process ran it, on this engine.
    Here(&'a Engine),
    /// The daemon ran it, and its stream said on what (`engine`) and, once it planned the
    /// compile, with which toolchain (`toolchain`: the daemon's own when the client named none).
    /// `None`: it did not say — a daemon of an older nxcc, or, for the toolchain, a compile that
    /// ended before it was planned —; nxcc's pipeline, and the toolchain this process resolves,
    /// are assumed, and the bundle says so.
    InDaemon {
        /// What runs the compile, as the daemon said.
        engine: Option<&'a EngineIdentity>,
        /// The toolchain the compile ran with, as the daemon said.
        toolchain: Option<&'a ToolchainIdentity>,
    },
}

/// `versions.json`'s `engine_note` when the engine is assumed.
pub const ENGINE_ASSUMED: &str = "the daemon that ran the compile did not say what runs its compiles (a daemon of an older nxcc): nxcc's pipeline is assumed";

/// `versions.json`'s `toolchain_note` when the toolchain is assumed.
pub const TOOLCHAIN_ASSUMED: &str = "the daemon that ran the compile did not say which toolchain it ran with (a daemon of an older nxcc, or a compile that ended before it was planned): the toolchain the client resolves is assumed";

impl Ran<'_> {
    /// How the bundle knows the engine (`versions.json`'s `engine_from`): `local` (this process
    /// ran it), `daemon` (the daemon said), `assumed`.
    pub fn source(&self) -> &'static str {
        match self {
            Ran::Here(_) => "local",
            Ran::InDaemon {
                engine: Some(_), ..
            } => "daemon",
            Ran::InDaemon { engine: None, .. } => "assumed",
        }
    }

    /// How the bundle knows the toolchain (`versions.json`'s `toolchain_from`): `local`,
    /// `daemon`, `assumed`.
    pub fn toolchain_source(&self) -> &'static str {
        match self {
            Ran::Here(_) => "local",
            Ran::InDaemon {
                toolchain: Some(_), ..
            } => "daemon",
            Ran::InDaemon {
                toolchain: None, ..
            } => "assumed",
        }
    }

    /// The toolchain the compile ran with: as the daemon said, else as this process locates it
    /// (`located`), of the identity the compile's key records.
    fn toolchain(&self, located: Option<&Toolchain>, key: &Key) -> ToolchainIdentity {
        match self {
            Ran::InDaemon {
                toolchain: Some(t), ..
            } => (*t).clone(),
            _ => ToolchainIdentity::of(located, key.inputs.get("toolchain").cloned()),
        }
    }

    /// The engine, as this process can name it (an external compiler by its path).
    fn engine(&self) -> Engine {
        match self {
            Ran::Here(e) => (*e).clone(),
            Ran::InDaemon {
                engine:
                    Some(EngineIdentity {
                        compiler: Some(c), ..
                    }),
                ..
            } if self.is_external() => Engine::external(c.clone()),
            Ran::InDaemon { .. } => Engine::Pipeline,
        }
    }

    fn is_external(&self) -> bool {
        match self {
            Ran::Here(e) => matches!(e, Engine::External(_)),
            Ran::InDaemon { engine, .. } => engine.is_some_and(|n| n.name() == "external"),
        }
    }

    /// The compile's key (its model as `inv` names it): with the toolchain's identity the
    /// daemon computed when it said one (the toolchain's, else the external compiler's), else
    /// computed here.
    fn key(&self, inv: &Invocation) -> std::io::Result<Key> {
        let cfg = CacheConfig::off();
        let said = match self {
            Ran::InDaemon {
                toolchain:
                    Some(ToolchainIdentity {
                        identity: Some(id), ..
                    }),
                ..
            }
            | Ran::InDaemon {
                engine:
                    Some(EngineIdentity {
                        identity: Some(id), ..
                    }),
                ..
            } => Some(id),
            _ => None,
        };
        match said {
            Some(id) => cfg.key_with_identity(inv, id.clone()),
            None => cfg.key(inv, &self.engine()),
        }
    }

    /// The engine as the bundle names it: an external compiler's path, and its identity as the
    /// compile's key has it.
    fn named(&self, key: &Key) -> EngineIdentity {
        let engine = self.engine();
        let mut named = EngineIdentity {
            engine: (&engine).into(),
            compiler: None,
            identity: None,
        };
        if let Engine::External(c) = &engine {
            named.compiler = Some(crate::engine::resolve_program(&c.program));
            named.identity = key.inputs.get("toolchain").cloned();
        }
        named
    }
}

/// What a bundle is made from.
pub struct Request<'a> {
    /// The compile.
    pub invocation: &'a Invocation,
    /// What ran it.
    pub ran: Ran<'a>,
    /// How it ended.
    pub result: &'a CompileResult,
    /// Its cache key, when the compile had one (else it is computed).
    pub key: Option<&'a Key>,
    /// Where the compile's lines start in its log file.
    pub log_start: u64,
    /// The directory the bundle goes into.
    pub dir: &'a Path,
    /// Zero the model's constants (`--reproducer-strip-constants`).
    pub strip: bool,
    /// For a framework cache entry's compile, its private work directory, which holds the
    /// entry's flags as `compile_flags.json` (they go in).
    pub entry: Option<&'a Path>,
    /// The model as the compile read it — its private snapshot, when it took one
    /// ([`crate::compile::Compiled::snapshot`]).
    pub compiled: Option<&'a crate::snapshot::Snapshot>,
}

/// The bundle's file name for a compile's key.
pub fn file_name(key: &str) -> String {
    format!("nxcc-reproducer-{key}.tar.gz")
}

/// The model as the compile read it: its private snapshot, when it took one (the bundle then
/// holds exactly what was compiled), else the plan's model.
pub fn model_as_compiled<'r>(req: &'r Request) -> &'r Path {
    req.compiled
        .map_or(req.invocation.plan.model.as_path(), |s| s.path())
}

/// `--gen-reproducer`, after a compile of `invocation` that ended as `result`: its bundle, when
/// it is wanted, in `--reproducer-dir` (default: the launch directory), made from `compiled`
/// (the model as compiled) and the log from `log_start`. Where it went is said on stderr; a
/// bundle that cannot be written costs a warning, never the compile's exit status.
pub fn as_asked(
    invocation: &Invocation,
    ran: Ran,
    result: &CompileResult,
    key: Option<&Key>,
    compiled: Option<&crate::snapshot::Snapshot>,
    log_start: u64,
) {
    let err = crate::cli::subcommand::err;
    let wanted = &invocation.settings.reproducer;
    let Some(when) = wanted.when else {
        return;
    };
    if !super::wanted(when, &result.status) {
        return;
    }
    let launch_dir = &invocation.plan.launch_dir;
    let dir = wanted.dir.as_deref().map_or_else(
        || launch_dir.clone(),
        |d| crate::fsx::absolute(launch_dir, d),
    );
    let req = Request {
        invocation,
        ran,
        result,
        key,
        log_start,
        dir: &dir,
        strip: wanted.strip_constants,
        entry: None,
        compiled,
    };
    match write(&req) {
        Ok(path) => err(&format!(
            "Wrote a reproducer to {p} (send it with your report; `nxcc reproduce {p}` replays it)\n",
            p = path.display()
        )),
        Err(e) => err(&format!("WARNING: no reproducer was written: {e}\n")),
    }
}

/// Write the bundle; its path, or why it could not be written.
pub fn write(req: &Request) -> Result<PathBuf, String> {
    let key = match req.key {
        Some(k) => k.clone(),
        // Keyed as the compile's cache would have keyed what it compiled.
        None => {
            let mut inv = req.invocation.clone();
            inv.plan.model = model_as_compiled(req).to_path_buf();
            req.ran
                .key(&inv)
                .map_err(|e| format!("cannot key the compile: {e}"))?
        }
    };
    let mut members = model_members(model_as_compiled(req), req.strip)?;
    let model_name = members
        .first()
        .map(|(n, _)| {
            n.trim_start_matches("model/")
                .split('/')
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default();
    let json_member = |v: Value| {
        let mut t = serde_json::to_string_pretty(&v).unwrap_or_default();
        t.push('\n');
        t.into_bytes()
    };
    let replay_args = crate::remote::action::remote_arguments(req.invocation)?;
    members.push((
        "argv.json".into(),
        json_member(argv(req.invocation, &replay_args, &model_name)),
    ));
    if let Some(entry) = req.entry {
        let flags = Dir::open(entry)
            .and_then(|d| d.read(crate::neuron_cache::FLAGS_FILE))
            .map_err(|e| format!("cannot read the entry's flags: {e}"))?;
        members.push((crate::neuron_cache::FLAGS_FILE.into(), flags));
    }
    let named = req.ran.named(&key);
    let toolchain = req
        .ran
        .toolchain(req.invocation.plan.toolchain.as_ref(), &key);
    members.push((
        "versions.json".into(),
        json_member(versions(req, &named, &toolchain)),
    ));
    let env = environment();
    members.push(("env.json".into(), json_member(env.clone())));
    members.push((
        "log.txt".into(),
        log_lines(&req.invocation.plan.logfile, req.log_start),
    ));
    members.push(("failure.json".into(), json_member(failure(req.result))));
    members.push((
        "cache_key.json".into(),
        json_member(
            json!({"key": key.key, "args_key": key.args_key, "model_digest": key.model_digest,
            "model_size": key.model_size, "inputs": key.inputs}),
        ),
    ));
    members.push((
        "repro.sh".into(),
        script(&replay_args, &model_name, &env, &toolchain, &named).into_bytes(),
    ));
    let manifest = manifest(&members);
    members.push((MANIFEST.into(), json_member(manifest)));
    publish(req.dir, &file_name(&key.key), &members)
}

/// The model's files, as `model/<name>` (a directory model: `model/<dir>/<file>` for each
/// `*.pb`), their constants zeroed when asked.
fn model_members(model: &Path, strip: bool) -> Result<Vec<(String, Vec<u8>)>, String> {
    let name = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty() && n != "..")
        .ok_or_else(|| format!("the model {} has no file name", model.display()))?;
    let read = |p: &Path| {
        crate::fsx::regular::read(p, MAX_MODEL_BYTES)
            .map_err(|e| format!("cannot read the model {}: {e}", p.display()))
    };
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if model.is_dir() {
        let dir = Dir::open(model).map_err(|e| format!("cannot open {}: {e}", model.display()))?;
        let mut names: Vec<String> = dir
            .entries()
            .map_err(|e| format!("cannot read {}: {e}", model.display()))?
            .filter(|(_, t)| t.is_file())
            .filter_map(|(n, _)| n.into_string().ok())
            .filter(|n| n.ends_with(".pb"))
            .collect();
        names.sort();
        for n in names {
            let bytes = dir
                .read(&n)
                .map_err(|e| format!("cannot read {}/{n}: {e}", model.display()))?;
            files.push((format!("{MODEL_DIR}/{name}/{n}"), bytes));
        }
    } else {
        files.push((format!("{MODEL_DIR}/{name}"), read(model)?));
    }
    if strip {
        for (n, bytes) in &mut files {
            if bytes.trim_ascii_start().starts_with(b"HloModule") {
                return Err(format!(
                    "--reproducer-strip-constants: {n} is HLO text; only a binary HloModuleProto's constants can be zeroed (no bundle written)"
                ));
            }
            let (stripped, _) = crate::hlo::strip::strip_constants(bytes).map_err(|e| {
                format!("--reproducer-strip-constants: {n} is not an HloModuleProto: {e}")
            })?;
            *bytes = stripped;
        }
    }
    Ok(files)
}

fn argv(invocation: &Invocation, replay_args: &[String], model_name: &str) -> Value {
    json!({
        "prog": invocation.prog,
        "argv": invocation.argv,
        "launch_dir": invocation.plan.launch_dir,
        "model": invocation.plan.model,
        "model_name": model_name,
        "replay_args": replay_args,
    })
}

/// nxcc's version and identity; the engine (`named`: nxcc's pipeline, or an external compiler's
/// path and identity) and how the bundle knows it; the toolchain (`toolchain`: its directory,
/// whether it is simulated, its identity), what the command line asked for, and how the bundle
/// knows it.
fn versions(req: &Request, named: &EngineIdentity, toolchain: &ToolchainIdentity) -> Value {
    let exe = std::env::current_exe().ok();
    let exe_meta = exe.as_ref().and_then(|e| std::fs::metadata(e).ok());
    let mtime = exe_meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    let mut v = json!({
        "nxcc": {
            "version": crate::VERSION,
            "reproduces": crate::ORIGINAL_VERSION,
            "executable": exe,
            "size": exe_meta.as_ref().map(|m| m.len()),
            "modified": mtime,
        },
        "engine_from": req.ran.source(),
        "toolchain": toolchain,
        "toolchain_from": req.ran.toolchain_source(),
    });
    v["toolchain"]["request"] = json!(format!("{:?}", req.invocation.plan.toolchain_request));
    // The engine as its own JSON (`engine`, `compiler`, `identity`), beside the rest.
    if let (Some(all), Ok(Value::Object(engine))) = (v.as_object_mut(), serde_json::to_value(named))
    {
        all.extend(engine);
    }
    if req.ran.source() == "assumed" {
        v["engine_note"] = json!(ENGINE_ASSUMED);
    }
    if req.ran.toolchain_source() == "assumed" {
        v["toolchain_note"] = json!(TOOLCHAIN_ASSUMED);
    }
    v
}

/// The compiler's variables of this process, secrets left out by name (listed).
fn environment() -> Value {
    let mut kept = serde_json::Map::new();
    let mut left_out = Vec::new();
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    vars.sort();
    for (k, v) in vars {
        match env_kept(&k) {
            Ok(()) => {
                kept.insert(k, json!(v));
            }
            Err("a secret, by its name") => left_out.push(k),
            Err(_) => {}
        }
    }
    json!({"variables": kept, "left_out": left_out})
}

/// The compile's lines of its log (the last [`MAX_LOG_BYTES`] of them).
fn log_lines(logfile: &Path, start: u64) -> Vec<u8> {
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = crate::fsx::regular::open(logfile)?;
        let len = f.metadata()?.len();
        let from = start.min(len).max(len.saturating_sub(MAX_LOG_BYTES));
        f.seek(std::io::SeekFrom::Start(from))?;
        let mut v = Vec::new();
        f.take(MAX_LOG_BYTES).read_to_end(&mut v)?;
        Ok(v)
    };
    read().unwrap_or_else(|e| {
        format!("(the log {} could not be read: {e})\n", logfile.display()).into_bytes()
    })
}

/// How the compile ended, as data.
fn failure(r: &CompileResult) -> Value {
    let sig = Signature::of(r);
    let failure = r.failure();
    json!({
        "signature": sig,
        "describe": sig.describe(),
        "exit_status": r.exit_status(),
        "status": r.status,
        "signal": failure.and_then(Failure::signal).map(crate::run::signals::signal_text),
        "peak_rss_kb": r.peak_rss_kb(),
        "jobs": r.jobs,
        "error_lines": r.lines,
    })
}

/// `repro.sh`: the compile again, from the bundle's directory, with its environment — through
/// nxcc, or, for an external compiler's compile, that compiler run as nxcc ran it.
fn script(
    replay_args: &[String],
    model_name: &str,
    env: &Value,
    toolchain: &ToolchainIdentity,
    named: &EngineIdentity,
) -> String {
    let q = crate::shell::quote;
    let compiler = named
        .compiler
        .as_ref()
        .filter(|_| named.name() == "external");
    let mut s = String::from(
        "#!/bin/sh\n# Runs the compile this bundle was made from again (nxcc reproduce does the same, and\n# compares how it ends).",
    );
    match compiler {
        Some(c) => s.push_str(&format!(
            " It ran on the external compiler {}: NEURONX_CC names another\n# to run.\n",
            c.display()
        )),
        None => s.push_str(" NXCC names the nxcc to run (default: nxcc on PATH).\n"),
    }
    s.push_str("set -eu\nhere=$(cd \"$(dirname \"$0\")\" && pwd)\n");
    if let Some(vars) = env["variables"].as_object() {
        for (k, v) in vars {
            s.push_str(&format!("export {k}={}\n", q(v.as_str().unwrap_or(""))));
        }
    }
    let simulated = toolchain.simulated;
    let program = match compiler {
        Some(c) => {
            s.push_str(&format!(
                "compiler=${{NEURONX_CC:-{}}}\n",
                q(&c.display().to_string())
            ));
            "\"$compiler\""
        }
        None => "\"${NXCC:-nxcc}\"",
    };
    s.push_str(&format!(
        "mkdir -p \"$here/out\"\ncd \"$here/out\"\nexec {program} compile {} \"$here/{MODEL_DIR}/\"{} --output \"$here/out/model.neff\" --logfile \"$here/out/log-neuron-cc.txt\"{} \"$@\"\n",
        crate::shell::join(replay_args),
        q(model_name),
        if simulated && compiler.is_none() { " --toolchain sim" } else { "" }
    ));
    s
}

/// Every member's size and blake3.
fn manifest(members: &[(String, Vec<u8>)]) -> Value {
    let files: Vec<Value> = members
        .iter()
        .map(|(n, b)| json!({"name": n, "size": b.len(), "blake3": blake3::hash(b).to_hex().to_string()}))
        .collect();
    json!({"format": FORMAT, "nxcc_version": crate::VERSION, "files": files})
}

/// Pack the members and publish the bundle as `name` in `dir`.
fn publish(dir: &Path, name: &str, members: &[(String, Vec<u8>)]) -> Result<PathBuf, String> {
    let mut tar = Vec::new();
    for (n, bytes) in members {
        crate::neff::tar::append_file(&mut tar, n, bytes);
    }
    crate::neff::tar::finish(&mut tar);
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", dir.join(name).display());
    let d = Dir::open(dir).map_err(fail)?;
    let file = AtomicFile::create_in(&d, name)
        .map_err(fail)?
        .with_mode(0o600);
    let mut gz = flate2::write::GzEncoder::new(file.file(), flate2::Compression::default());
    gz.write_all(&tar).map_err(fail)?;
    gz.finish().map_err(fail)?;
    file.commit(Durability::Visible).map_err(fail)?;
    Ok(dir.join(name))
}
