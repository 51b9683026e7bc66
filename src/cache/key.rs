//! The cache key of a compile (07): blake3 over
//!
//! - the model's bytes (a file: its bytes, so the digest is what `b3sum` prints; a directory: its
//!   sorted relative paths and contents), hashed streaming with a large buffer;
//! - the normalised plan arguments (`plan.ns`), canonically serialised (keys sorted), without the
//!   dests in [`EXCLUDED_ARGS`] — everything that cannot change the output — plus what the plan
//!   derived from them and the environment (the job list, the walrus passes, the subgraphs);
//! - the toolchain identity: for each tool the plan uses, its resolved path, size, mtime and inode
//!   (the simulated toolchain: nxcc's version; an external compiler: the same figures of its
//!   executable);
//! - the plan format version [`crate::plan::PLAN_VERSION`].
//!
//! Two keys come out: the *args key* (everything but the model: "the same arguments", which the
//! memory estimate groups compiles by) and the *key* (args key and model digest). Everything that
//! went into them is kept in clear ([`Key::inputs`]) for `meta.json`.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::cli::namespace::Dest;
use crate::engine::Engine;
use crate::plan::Plan;
use crate::toolchain::{self, Request, Toolchain};

/// The plan arguments that cannot change the output, left out of the key. This list is the one
/// place that decides it: the output and log locations, console and log levels, the work dir,
/// the dry run, reports (`--timings`, `--trace`, metrics), the cache's own flags, the job
/// timeout, keeping the work dir, the daemon switch, `--toolchain` (the toolchain's identity
/// is hashed instead of its spelling), and where a remote service is (`--remote*`).
pub const EXCLUDED_ARGS: &[Dest] = &[
    Dest::Output,
    Dest::Logfile,
    Dest::LogfileVerbose,
    Dest::Verbose,
    Dest::TempDir,
    Dest::DryRun,
    Dest::Timings,
    Dest::Trace,
    Dest::CacheDir,
    Dest::NoCache,
    Dest::RetryFailedCompilation,
    Dest::JobTimeout,
    Dest::KeepWorkDir,
    Dest::Daemon,
    Dest::SubmitMetrics,
    Dest::RunId,
    Dest::MetricsTimestamp,
    Dest::Toolchain,
    Dest::Remote,
    Dest::RemoteCache,
    Dest::RemoteInstance,
];

/// The chunk size model files are read in while hashing.
pub const HASH_BUFFER: usize = super::chunks::CHUNK;

/// A compile's cache key, with its inputs in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// 64 hex digits: blake3 of the args key and the model digest.
    pub key: String,
    /// 64 hex digits: blake3 of everything but the model.
    pub args_key: String,
    /// 64 hex digits: blake3 of the model (a file: of its bytes).
    pub model_digest: String,
    /// The model's size in bytes (a directory: the sum of its files).
    pub model_size: u64,
    /// What the memory estimate knows of the model (its size, and its graph's figures when the
    /// plan read it); not part of the key.
    pub features: super::features::Features,
    /// What went into the args key, in clear: `plan_version`, `args`, `plan`, `toolchain`.
    pub inputs: Value,
}

impl Key {
    /// The key of a compile of `plan` by `engine`. Reads the model once; for an auto-located
    /// toolchain it may run the one `python3` probe.
    pub fn compute(plan: &Plan, engine: &Engine) -> std::io::Result<Key> {
        let inputs = args_inputs(plan, engine);
        let (digest, size) = hash_model(&plan.model)?;
        let mut key = Key::from_parts(inputs, &digest, size);
        key.features = super::features::Features {
            model_size: size,
            ..super::features::Features::of_plan(plan)
        };
        Ok(key)
    }

    /// The key from the args inputs (as [`args_inputs`] builds them) and the model's digest.
    pub fn from_parts(inputs: Value, model_digest: &blake3::Hash, model_size: u64) -> Key {
        let mut h = blake3::Hasher::new();
        h.update(b"nxcc-cache-args\0");
        h.update(&serde_json::to_vec(&inputs).unwrap_or_default());
        let args_key = h.finalize().to_hex().to_string();
        let model_digest = model_digest.to_hex().to_string();
        let mut h = blake3::Hasher::new();
        h.update(b"nxcc-cache-key\0");
        h.update(args_key.as_bytes());
        h.update(b"\0");
        h.update(model_digest.as_bytes());
        Key {
            key: h.finalize().to_hex().to_string(),
            args_key,
            model_digest,
            model_size,
            features: super::features::Features::of_size(model_size),
            inputs,
        }
    }

    /// The first two hex digits: the shard directory the entry lives in.
    pub fn shard(&self) -> &str {
        &self.key[..2]
    }
}

/// The normalised arguments that can change the output, canonically ordered (sorted by dest).
pub fn canonical_args(plan: &Plan) -> Value {
    let map: BTreeMap<&str, Value> = plan
        .ns
        .iter()
        .filter(|(dest, _)| !EXCLUDED_ARGS.iter().any(|d| d.name() == *dest))
        .map(|(dest, v)| (dest, serde_json::to_value(v).unwrap_or(Value::Null)))
        .collect();
    serde_json::to_value(map).unwrap_or(Value::Null)
}

/// Everything of the key but the model, in clear (deterministic: built in a fixed order).
pub fn args_inputs(plan: &Plan, engine: &Engine) -> Value {
    json!({
        "plan_version": crate::plan::PLAN_VERSION,
        "args": canonical_args(plan),
        "plan": {
            "pipeline": plan.pipeline,
            "walrus_passes": plan.walrus_passes,
            "subgraphs": plan.subgraphs,
        },
        "toolchain": toolchain_identity(plan, engine),
    })
}

/// A file's identity: resolved path, size, mtime (ns) and inode; `null` figures if it is gone.
pub fn file_identity(path: &Path) -> Value {
    let resolved = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match std::fs::metadata(&resolved) {
        Ok(m) => json!({
            "path": resolved.display().to_string(),
            "size": m.len(),
            "mtime_ns": i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            "inode": m.ino(),
        }),
        Err(_) => json!({ "path": resolved.display().to_string(), "missing": true }),
    }
}

/// The identity of what will run the compile: nxcc's version for the simulated toolchain; each
/// tool the plan uses (resolved in its toolchain, private first) for a toolchain directory or an
/// installed package; the executable for an external compiler.
pub fn toolchain_identity(plan: &Plan, engine: &Engine) -> Value {
    if let Engine::External(ext) = engine {
        return json!({
            "kind": "external",
            "compiler": file_identity(&crate::engine::resolve_program(&ext.program)),
        });
    }
    let located: Option<Toolchain> = match &plan.toolchain_request {
        Request::Simulated => {
            return json!({ "kind": "simulated", "nxcc_version": crate::VERSION });
        }
        Request::Dir(_) => plan.toolchain.clone(),
        Request::Auto => toolchain::locate(&Request::Auto),
    };
    let Some(tc) = located else {
        return json!({ "kind": "none" });
    };
    let mut tools: BTreeMap<String, Value> = BTreeMap::new();
    for job in &plan.jobs {
        for step in &job.steps {
            let (Some(tool), path) = (step.tool(), step.tool_path()) else {
                continue;
            };
            let path: Option<PathBuf> = match &step.action {
                crate::jobs::Action::Library { library, .. } => Some(library.clone()),
                _ => tc.resolve(tool).or_else(|| path.map(Path::to_path_buf)),
            };
            let name = match &step.action {
                crate::jobs::Action::Library { .. } => toolchain::LIBWALRUS.to_string(),
                _ => tool.to_string(),
            };
            let id = match path {
                Some(p) => file_identity(&p),
                None => json!({ "missing": true }),
            };
            tools.insert(name, id);
        }
    }
    json!({
        "kind": if tc.simulated { "simulated-dir" } else { "dir" },
        "bin": tc.bin.display().to_string(),
        "nxcc_version": if tc.simulated { Value::from(crate::VERSION) } else { Value::Null },
        "tools": tools,
    })
}

/// The blake3 of a model and its size: a file's bytes, or a directory's regular files (recursively,
/// by sorted relative path; for each: the path, a NUL, the length as 8 little-endian bytes, the
/// bytes). Symbolic links to files are followed; links to directories are not descended into.
pub fn hash_model(path: &Path) -> std::io::Result<(blake3::Hash, u64)> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        let mut h = blake3::Hasher::new();
        let n = hash_file_into(path, &mut h)?;
        return Ok((h.finalize(), n));
    }
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    collect_files(path, "", &mut files)?;
    files.sort();
    let mut h = blake3::Hasher::new();
    let mut total = 0u64;
    for (rel, full) in files {
        let len = std::fs::metadata(&full)?.len();
        h.update(rel.as_bytes());
        h.update(&[0]);
        h.update(&len.to_le_bytes());
        let n = hash_file_into(&full, &mut h)?;
        if n != len {
            return Err(std::io::Error::other(format!(
                "{} changed while it was being read",
                full.display()
            )));
        }
        total += n;
    }
    Ok((h.finalize(), total))
}

/// Files at least this large are hashed memory-mapped, on every core (`BENCHMARKS.md`, "Hashing
/// a large model"); smaller ones are read.
pub const MAP_FROM: u64 = 1 << 20;

/// Feed a file into a hasher; returns the number of bytes hashed. A file of at least
/// [`MAP_FROM`] bytes is mapped ([`crate::fsx::Mapped`]) and hashed by blake3 on every core
/// (`update_rayon`); a smaller one, or one that cannot be mapped, is read, the reads overlapped
/// with hashing ([`super::chunks`]). A file that shrank while it was mapped, or whose size or
/// modification time changed while it was hashed, is an error: what was hashed is not the file.
/// Never a SIGBUS, even in the daemon.
pub fn hash_file_into(path: &Path, h: &mut blake3::Hasher) -> std::io::Result<u64> {
    // A regular file only, opened without waiting: a FIFO or a device never holds up a compile.
    let f = crate::fsx::regular::open(path)?;
    let len = f.metadata()?.len();
    if len >= MAP_FROM {
        if let Some(r) = hash_mapped_into(&f, path, h) {
            return r;
        }
    }
    hash_read_into(&f, h)
}

/// Feed an open file into a hasher by reading it (from its current position), the reads
/// overlapped with hashing.
pub fn hash_read_into(f: &std::fs::File, h: &mut blake3::Hasher) -> std::io::Result<u64> {
    super::chunks::for_each_chunk(f, &mut |c| {
        h.update(c);
        Ok(())
    })
}

/// Feed a regular file into a hasher through a mapping, hashed on every core; `None` when it
/// cannot be mapped (nothing was hashed then). `path` names it in the error of a file that
/// changed meanwhile.
pub fn hash_mapped_into(
    f: &std::fs::File,
    path: &Path,
    h: &mut blake3::Hasher,
) -> Option<std::io::Result<u64>> {
    let before = f.metadata().ok().filter(|m| m.is_file())?;
    let m = crate::fsx::Mapped::new(f, before.len())?;
    h.update_rayon(m.bytes());
    let changed = match f.metadata() {
        Ok(after) => {
            m.truncated()
                || after.len() != before.len()
                || after.modified().ok() != before.modified().ok()
        }
        Err(e) => return Some(Err(e)),
    };
    if changed {
        return Some(Err(std::io::Error::other(format!(
            "{} changed while it was being read",
            path.display()
        ))));
    }
    Some(Ok(before.len()))
}

fn collect_files(
    dir: &Path,
    prefix: &str,
    out: &mut Vec<(String, PathBuf)>,
) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let p = e.path();
        let ft = e.file_type()?;
        if ft.is_dir() {
            collect_files(&p, &rel, out)?;
        } else if ft.is_file() || (ft.is_symlink() && p.is_file()) {
            out.push((rel, p));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{self, Command};
    use crate::plan::SystemProbe;

    fn plan_in(dir: &Path, args: &[&str]) -> Plan {
        let argv: Vec<String> = std::iter::once("compile")
            .chain(args.iter().copied())
            .map(str::to_string)
            .collect();
        let Command::Compile(c) = cli::parse("nxcc", &argv).unwrap() else {
            panic!("not a compile")
        };
        crate::plan::build(
            &c,
            &SystemProbe {
                launch_dir: dir.to_path_buf(),
            },
        )
        .unwrap()
    }

    fn key(dir: &Path, args: &[&str]) -> Key {
        Key::compute(&plan_in(dir, args), &Engine::Pipeline).unwrap()
    }

    #[test]
    fn output_neutral_flags_do_not_change_the_key_and_others_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.pb"), b"model bytes").unwrap();
        let base = ["m.pb", "--target", "trn2", "--toolchain", "sim"];
        let k0 = key(dir.path(), &base);
        assert_eq!(k0.key.len(), 64);
        let with = |extra: &[&str]| {
            let mut v: Vec<&str> = base.to_vec();
            v.extend_from_slice(extra);
            key(dir.path(), &v)
        };
        for neutral in [
            &["--output", "x.neff"][..],
            &["--verbose", "debug"],
            &["--temp-dir", "w"],
            &["--logfile", "l.txt"],
            &["--cache_dir", "c"],
            &["--job-timeout", "5"],
            &["--retry_failed_compilation"],
        ] {
            assert_eq!(with(neutral).key, k0.key, "{neutral:?}");
        }
        for relevant in [
            &["-O1"][..],
            &["--lnc", "1"],
            &["--model-type", "transformer"],
            &["--tensorizer-options=--foo=1"],
        ] {
            let k = with(relevant);
            assert_ne!(k.key, k0.key, "{relevant:?}");
            assert_ne!(k.args_key, k0.args_key, "{relevant:?}");
        }
        // Another model, same arguments: same args key, another key.
        std::fs::write(dir.path().join("n.pb"), b"other model").unwrap();
        let mut other = base.to_vec();
        other[0] = "n.pb";
        let k = key(dir.path(), &other);
        assert_eq!(k.args_key, k0.args_key);
        assert_ne!(k.key, k0.key);
        assert_eq!(k.model_size, 11);
        // The same model elsewhere: the same key.
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        std::fs::copy(dir.path().join("m.pb"), sub.join("m.pb")).unwrap();
        assert_eq!(key(&sub, &base).key, k0.key);
    }

    #[test]
    fn a_mapped_file_hashes_as_a_read_one_and_a_directory_of_them_too() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("m");
        std::fs::create_dir(&m).unwrap();
        let len = MAP_FROM as usize + 4097;
        let data: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(m.join("a.bin"), &data).unwrap();
        let (d, n) = hash_model(&m.join("a.bin")).unwrap();
        assert_eq!((d, n), (blake3::hash(&data), len as u64));
        // The directory digest over the mapped file equals the one over its bytes.
        let mut h = blake3::Hasher::new();
        h.update(b"a.bin");
        h.update(&[0]);
        h.update(&(len as u64).to_le_bytes());
        h.update(&data);
        assert_eq!(hash_model(&m).unwrap(), (h.finalize(), len as u64));
    }

    #[test]
    fn a_file_digest_is_the_plain_blake3_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        let data: Vec<u8> = (0..9 * HASH_BUFFER + 17).map(|i| (i * 7) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let (d, n) = hash_model(&p).unwrap();
        assert_eq!(d, blake3::hash(&data));
        assert_eq!(n, data.len() as u64);
    }

    #[test]
    fn a_directory_digest_covers_names_and_contents() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("model");
        std::fs::create_dir_all(m.join("sub")).unwrap();
        std::fs::write(m.join("a.pb"), b"a").unwrap();
        std::fs::write(m.join("sub/b.pb"), b"b").unwrap();
        let (d0, n) = hash_model(&m).unwrap();
        assert_eq!(n, 2);
        std::fs::rename(m.join("sub/b.pb"), m.join("sub/c.pb")).unwrap();
        let (d1, _) = hash_model(&m).unwrap();
        assert_ne!(d0, d1, "a renamed file changes the digest");
        std::fs::write(m.join("sub/c.pb"), b"c").unwrap();
        let (d2, _) = hash_model(&m).unwrap();
        assert_ne!(d1, d2, "changed contents change the digest");
        std::fs::write(m.join("sub/c.pb"), b"b").unwrap();
        assert_eq!(hash_model(&m).unwrap().0, d1);
    }

    #[test]
    fn the_toolchain_identity_follows_the_tools() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.pb"), b"model").unwrap();
        let tc = dir.path().join("tc");
        std::fs::create_dir(&tc).unwrap();
        for t in crate::toolchain::TOOLS {
            let p = tc.join(t);
            std::fs::write(&p, b"#!/bin/sh\n").unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let args = ["m.pb", "--target", "trn2", "--toolchain", "tc"];
        let k0 = key(dir.path(), &args);
        assert_eq!(k0.inputs["toolchain"]["kind"], "dir");
        assert!(k0.inputs["toolchain"]["tools"]["walrus_driver"]["inode"].is_u64());
        // Replacing a tool (a new inode and size) changes the key.
        std::fs::remove_file(tc.join("walrus_driver")).unwrap();
        std::fs::write(tc.join("walrus_driver"), b"#!/bin/sh\n# v2\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            tc.join("walrus_driver"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        assert_ne!(key(dir.path(), &args).key, k0.key);
        let sim = key(
            dir.path(),
            &["m.pb", "--target", "trn2", "--toolchain", "sim"],
        );
        assert_eq!(sim.inputs["toolchain"]["nxcc_version"], crate::VERSION);
    }
}
