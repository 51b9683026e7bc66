//! `nxcc reproduce BUNDLE [--toolchain DIR|sim] [--compiler PATH] [--keep]`: replay a reproducer
//! bundle (see [`super`]) and say whether the same failure recurred.
//!
//! The bundle is untrusted input, whoever sent it:
//!
//! - it is read only if it is a regular file, at most [`MAX_BUNDLE_BYTES`], and unpacked by the
//!   distrustful archive reader ([`crate::neff::extract`]): no links, devices, absolute or `..`
//!   names, at most [`MAX_UNPACKED_BYTES`] and [`MAX_MEMBERS`] members, into a fresh private
//!   scratch directory;
//! - every file must be in its manifest with the size and blake3 it says, and nothing else is
//!   there;
//! - its arguments must be compile semantics only ([`crate::cli::semantics`], the rule `nxcc
//!   worker` applies to remote actions): no path, log, report, cache or toolchain of its own;
//! - of its environment, only the compiler's variables (`NEURON_*`, `XLA_*`) and, when the replay
//!   runs the simulated toolchain, its injection variables (`NXCC_SIM_*`) are set; where the cache
//!   and the toolchain are is this machine's choice;
//! - the external compiler it names (`versions.json`: its path, the blake3 and size of its bytes,
//!   its version line) is run only from a directory and as a file that pass the trust rule
//!   ([`crate::fsx::trust`]: nobody but its owner or root can change them), and only when its
//!   bytes, then its version line, are those recorded; `--compiler PATH` names another (said
//!   when it is not the one recorded).
//!
//! The compile runs through the entry point handed down (without a cache: a remembered failure
//! must not pass for a replay), in the scratch directory, which is removed afterwards unless
//! `--keep`. Exit status: 0 when the replay ended as the original did (the same job, status and
//! code), 1 when it did not (what differed is said), 2 when the bundle cannot be used.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{env_kept, Signature, FORMAT, MANIFEST, MODEL_DIR};
use crate::cache::digests::Table;
use crate::cache::EngineIdentity;
use crate::cli::subcommand::{err, out, parse, DriverOptions};
use crate::engine::result::CompileResult;
use crate::engine::session::Options;
use crate::engine::strategy::Entry;
use crate::engine::Engine;
use crate::plan::{Invocation, Refusal, RequestProbe, SystemProbe};
use crate::result::Failure;

/// The largest bundle read, bytes (compressed).
pub const MAX_BUNDLE_BYTES: u64 = 4 << 30;
/// The most bytes a bundle may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = (4 << 30) + (256 << 20);
/// The most members a bundle may hold.
pub const MAX_MEMBERS: u64 = 10_000;
/// The largest JSON member read.
const MAX_JSON_BYTES: u64 = 64 << 20;
/// Exit status: the replay did not end as the original did.
pub const EXIT_NOT_REPRODUCED: i32 = 1;
/// Exit status: the bundle cannot be used.
pub const EXIT_BAD_BUNDLE: i32 = 2;

/// Replay a reproducer bundle and say whether the same failure recurs.
#[derive(Debug, clap::Parser)]
pub(crate) struct Reproduce {
    /// A reproducer bundle, nxcc-reproducer-<key>.tar.gz (compile --gen-reproducer).
    #[arg(value_name = "BUNDLE")]
    pub(crate) bundle: PathBuf,
    /// The toolchain to replay with (a directory, or sim) [default: sim for a bundle of the
    /// simulated toolchain, else NXCC_TOOLCHAIN or the installed one].
    #[arg(long, value_name = "TOOLCHAIN")]
    pub(crate) toolchain: Option<String>,
    /// Replay a bundle of an external compiler's compile with this compiler (an installed
    /// neuronx-cc) [default: the compiler the bundle names, when it is on this host, where only
    /// its owner or root can change it, and the same: its bytes and its version].
    #[arg(long, value_name = "COMPILER")]
    pub(crate) compiler: Option<PathBuf>,
    /// Keep the scratch directory (the unpacked bundle, the replay's log and outputs) and say
    /// where.
    #[arg(long)]
    pub(crate) keep: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

/// What the bundle says.
struct Bundle {
    /// The unpacked bundle.
    root: PathBuf,
    replay_args: Vec<String>,
    model_name: String,
    simulated: bool,
    /// What ran the original compile, as the bundle names it.
    engine: EngineIdentity,
    /// How the bundle knows it: `local`, `daemon`, `assumed` (absent in older bundles: local).
    engine_from: String,
    env: Vec<(String, String)>,
    original: Signature,
}

/// Run `reproduce`; returns the exit status. `compile` is the entry point a compile goes through.
pub fn main(prog: &str, args: &[String], compile: Entry) -> i32 {
    let cmd: Reproduce = match parse(prog, "reproduce", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let bundle = cmd.bundle.clone();
    let scratch = match tempfile::Builder::new().prefix("nxcc-reproduce-").tempdir() {
        Ok(d) => d,
        Err(e) => {
            err(&format!(
                "{prog} reproduce: error: cannot make a scratch directory: {e}\n"
            ));
            return EXIT_BAD_BUNDLE;
        }
    };
    let status = match run(&cmd, &bundle, scratch.path(), compile) {
        Ok(status) => status,
        Err(why) => {
            err(&format!(
                "{prog} reproduce: error: {}: {why}\n",
                bundle.display()
            ));
            EXIT_BAD_BUNDLE
        }
    };
    if cmd.keep {
        let kept = scratch.keep();
        out(&format!("kept: {}\n", kept.display()));
    }
    status
}

fn run(cmd: &Reproduce, bundle: &Path, scratch: &Path, compile: Entry) -> Result<i32, String> {
    let b = open(bundle, scratch)?;
    let toolchain = match &cmd.toolchain {
        Some(t) => Some(t.clone()),
        None => b.simulated.then(|| "sim".to_string()),
    };
    let (engine, said) = replay_engine(&b, cmd.compiler.as_deref())?;
    let simulated = toolchain.as_deref() == Some("sim") || b.simulated && toolchain.is_none();
    let (env, dropped) = replay_env(&b.env, simulated);
    out(&format!(
        "replaying {} in {}\n{said}",
        bundle.display(),
        scratch.display()
    ));
    if !dropped.is_empty() {
        out(&format!(
            "not set from the bundle: {}\n",
            dropped.join(", ")
        ));
    }
    let result = replay(&b, scratch, toolchain.as_deref(), &env, &engine, compile);
    let again = Signature::of(&result);
    out(&format!(
        "the original compile: {}\nthe replay:           {}\n",
        b.original.describe(),
        again.describe()
    ));
    let differences = b.original.differences(&again);
    if differences.is_empty() {
        out(match again.outcome.as_str() {
            "failed" => "reproduced: the same failure recurred\n",
            _ => "reproduced: the compile ended as it did\n",
        });
        return Ok(0);
    }
    let mut t = String::from("not reproduced:\n");
    for d in differences {
        t.push_str(&format!("  {d}\n"));
    }
    out(&t);
    Ok(EXIT_NOT_REPRODUCED)
}

/// Unpack and check the bundle, and read what it says.
fn open(bundle: &Path, scratch: &Path) -> Result<Bundle, String> {
    let bytes = crate::fsx::regular::read(bundle, MAX_BUNDLE_BYTES)
        .map_err(|e| format!("cannot read it: {e}"))?;
    let limits = crate::neff::read::Limits {
        max_decompressed_bytes: MAX_UNPACKED_BYTES,
        max_members: MAX_MEMBERS,
        ..crate::neff::read::Limits::default()
    };
    let refused = |e: crate::neff::NeffError| {
        use crate::neff::NeffError as E;
        match e {
            E::NotNeff(d) | E::Corrupt(d) | E::Unsafe(d) | E::Limit(d) => {
                format!("not a bundle nxcc unpacks: {d}")
            }
            other => format!("cannot unpack it: {other}"),
        }
    };
    let archive = crate::neff::read::Neff::from_bytes_with(bytes, limits).map_err(refused)?;
    let root = scratch.join("bundle");
    crate::neff::extract::extract_all(&archive, &root).map_err(refused)?;
    check_manifest(&root)?;
    let argv = read_json(&root, "argv.json")?;
    let versions = read_json(&root, "versions.json")?;
    let env = read_json(&root, "env.json")?;
    let failure = read_json(&root, "failure.json")?;
    let strings = |v: &Value| -> Option<Vec<String>> {
        v.as_array()?
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let replay_args = strings(&argv["replay_args"]).ok_or("argv.json has no replay_args")?;
    let model_name = argv["model_name"]
        .as_str()
        .filter(|n| plain_name(n))
        .ok_or("argv.json names no model (a plain file name)")?
        .to_string();
    let mut check = replay_args.clone();
    check.extend([model_name.clone(), "--output".into(), "model.neff".into()]);
    crate::remote::worker::check_compile_args(&check)
        .map_err(|e| format!("its arguments cannot be replayed: {e}"))?;
    let original: Signature = serde_json::from_value(failure["signature"].clone())
        .map_err(|e| format!("failure.json has no signature: {e}"))?;
    let mut engine: EngineIdentity = serde_json::from_value(versions.clone())
        .map_err(|e| format!("versions.json names no engine: {e}"))?;
    // A bundle made before the engine's identity was recorded beside it: its key's.
    if engine.identity.is_none() && versions["toolchain"]["identity"]["kind"] == "external" {
        engine.identity = Some(versions["toolchain"]["identity"].clone());
    }
    let env = env["variables"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default();
    Ok(Bundle {
        root,
        replay_args,
        model_name,
        simulated: versions["toolchain"]["simulated"] == Value::Bool(true),
        engine,
        engine_from: versions["engine_from"]
            .as_str()
            .unwrap_or("local")
            .to_string(),
        env,
        original,
    })
}

/// The engine the replay runs on: `--compiler` when given (said whether it is the compiler the
/// bundle names: the same bytes, then the same version line), else nxcc's pipeline when the
/// bundle names it. A bundle is untrusted input, so the external compiler it names is never run
/// unless the user names it with `--compiler`: such a bundle without it is refused, saying which
/// compiler it names and the command that replays with it. With the engine, the lines that say
/// which it is, when the bundle does not name it plainly.
fn replay_engine(b: &Bundle, given: Option<&Path>) -> Result<(Engine, String), String> {
    let external = b.engine.name() == "external";
    let mut said = String::new();
    if b.engine_from == "assumed" {
        said.push_str(&format!("note: {}\n", super::write::ENGINE_ASSUMED));
    }
    let Some(c) = given else {
        return match external {
            false => Ok((Engine::Pipeline, said)),
            true => Err(names_a_compiler(b)),
        };
    };
    if external {
        let program = crate::engine::resolve_program(c);
        let differences = b.engine.compiler_differences(&program, &Table::off());
        said.push_str(&match differences.is_empty() {
            true => format!(
                "with the external compiler {} (the one the bundle names: the same bytes and version)\n",
                program.display()
            ),
            false => format!(
                "note: {} is not the compiler the bundle names: {}; replaying with it\n",
                c.display(),
                differences.join("; ")
            ),
        });
    }
    Ok((Engine::external(c), said))
}

/// Why a bundle of an external compiler's compile is not replayed without `--compiler`: the
/// compiler it names (never run, nor read, on the bundle's word) and how to replay with it.
fn names_a_compiler(b: &Bundle) -> String {
    match &b.engine.compiler {
        Some(named) => format!(
            "it was compiled by the external compiler {} ({}); a bundle never has nxcc run a program it names: replay it with --compiler {} (or another compiler)",
            named.display(),
            b.engine.described(),
            named.display()
        ),
        None => "it was compiled by an external compiler it does not name: replay it with --compiler PATH".into(),
    }
}

/// A file name of one component, not a flag, not `.` or `..`.
fn plain_name(n: &str) -> bool {
    !n.is_empty() && !n.contains('/') && !n.starts_with('-') && n != "." && n != ".."
}

fn read_json(root: &Path, name: &str) -> Result<Value, String> {
    let bytes = crate::fsx::regular::read(&root.join(name), MAX_JSON_BYTES)
        .map_err(|e| format!("{name}: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{name} is not JSON: {e}"))
}

/// Every file unpacked is in the manifest with its size and blake3, and every file the manifest
/// lists is there.
fn check_manifest(root: &Path) -> Result<(), String> {
    let m = read_json(root, MANIFEST)?;
    if m["format"] != FORMAT {
        return Err(format!("its manifest is not of the format {FORMAT}"));
    }
    let listed = m["files"].as_array().ok_or("its manifest lists no files")?;
    let mut names = BTreeSet::new();
    for f in listed {
        let name = f["name"].as_str().ok_or("a manifest entry has no name")?;
        if name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(format!(
                "the manifest names {name:?}, not a path inside the bundle"
            ));
        }
        let bytes = crate::fsx::regular::read(&root.join(name), MAX_UNPACKED_BYTES)
            .map_err(|e| format!("{name} (in its manifest): {e}"))?;
        let hash = blake3::hash(&bytes).to_hex().to_string();
        if f["size"].as_u64() != Some(bytes.len() as u64) || f["blake3"].as_str() != Some(&hash) {
            return Err(format!(
                "{name} is not what its manifest says (size or blake3 differ)"
            ));
        }
        names.insert(name.to_string());
    }
    for found in files_under(root, "")? {
        if found != MANIFEST && !names.contains(&found) {
            return Err(format!("{found} is not in its manifest"));
        }
    }
    Ok(())
}

/// Every file under `dir`, as paths relative to the bundle's root (links are not followed: the
/// unpacker made none).
fn files_under(root: &Path, rel: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let dir = root.join(rel);
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let name = e.file_name().to_string_lossy().into_owned();
        let path = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let t = e.file_type().map_err(|e| e.to_string())?;
        if t.is_dir() {
            out.extend(files_under(root, &path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

/// The bundle's variables a replay sets, and those it does not (with why).
fn replay_env(vars: &[(String, String)], simulated: bool) -> (Vec<(String, String)>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (k, v) in vars {
        let why = if env_kept(k).is_err() || v.contains('\0') {
            Some("not a compiler variable")
        } else if k.starts_with(crate::environ::TEST_PREFIX) {
            (!simulated).then_some("the simulated toolchain's, and this replay runs another")
        } else if k.starts_with("NXCC_") || k == crate::cache::CACHE_URL_ENV {
            Some("this machine's choice")
        } else {
            None
        };
        match why {
            None => kept.push((k.clone(), v.clone())),
            Some(w) => dropped.push(format!("{k} ({w})")),
        }
    }
    (kept, dropped)
}

/// Compile the bundle's model with its arguments and environment, in `scratch`.
fn replay(
    b: &Bundle,
    scratch: &Path,
    toolchain: Option<&str>,
    env: &[(String, String)],
    engine: &Engine,
    compile: Entry,
) -> CompileResult {
    let model = b.root.join(MODEL_DIR).join(&b.model_name);
    let out_dir = scratch.join("out");
    let _ = std::fs::create_dir_all(&out_dir);
    let mut argv: Vec<String> = vec!["compile".into()];
    argv.extend(b.replay_args.iter().cloned());
    argv.push(model.display().to_string());
    for (flag, value) in [
        ("--output", out_dir.join("model.neff").display().to_string()),
        (
            "--logfile",
            out_dir.join("log-neuron-cc.txt").display().to_string(),
        ),
    ] {
        argv.extend([flag.to_string(), value]);
    }
    if let Some(t) = toolchain {
        argv.extend(["--toolchain".to_string(), t.to_string()]);
    }
    let not_planned = |line: String| CompileResult::failed(Failure::Plan, vec![line]);
    let probe = RequestProbe {
        system: SystemProbe::at(scratch),
        env,
    };
    let invocation = match Invocation::from_argv("nxcc", &argv, &probe) {
        Ok(inv) => inv,
        Err(Refusal::NotACompile(_) | Refusal::Help(_) | Refusal::Version) => {
            return not_planned("the bundle's arguments are not a compile".into())
        }
        Err(r) => return not_planned(r.render().trim_end().to_string()),
    };
    let mut options = Options::quiet();
    options.worker_env = env.to_vec();
    options.install_signals = true;
    options.work_root = Some(out_dir);
    compile(&invocation, options, engine)
}

/// `reproduce`'s command line as clap defines it (nxcc's completions and manual page).
pub(crate) fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<Reproduce>(prog, "reproduce")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_sets_only_the_compilers_variables() {
        let v = |a: &[(&str, &str)]| -> Vec<(String, String)> {
            a.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let vars = v(&[
            ("NEURON_CC_FLAGS", "--model-type=transformer"),
            ("XLA_FLAGS", "--xla_dump_to=x"),
            ("NXCC_SIM_FAULT", "walrus_driver:exit=3"),
            ("NXCC_TOOLCHAIN", "/evil"),
            ("NEURON_COMPILE_CACHE_URL", "/var/tmp/c"),
            ("LD_PRELOAD", "/evil.so"),
            ("NEURON_X", "a\0b"),
        ]);
        let (kept, dropped) = replay_env(&vars, true);
        assert_eq!(
            kept,
            v(&[
                ("NEURON_CC_FLAGS", "--model-type=transformer"),
                ("XLA_FLAGS", "--xla_dump_to=x"),
                ("NXCC_SIM_FAULT", "walrus_driver:exit=3"),
            ])
        );
        assert_eq!(dropped.len(), 4, "{dropped:?}");
        let (kept, _) = replay_env(&vars, false);
        assert!(!kept.iter().any(|(k, _)| k.starts_with("NXCC_")));
        assert!(
            plain_name("m.pb") && !plain_name("../m.pb") && !plain_name("-rf") && !plain_name("..")
        );
    }
}
