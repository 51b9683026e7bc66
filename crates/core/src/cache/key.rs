//! The cache key of a compile (spec 07-cache-parallel.md): blake3 over
//!
//! - the model's bytes (a file: its bytes, so the digest is what `b3sum` prints; a directory: its
//!   sorted relative paths, sizes and each file's blake3) — or, with the `hlo_metadata`
//!   sloppiness and a binary HLO module, the module without its op metadata
//!   (`crate::hlo::digest`); each file's digest remembered per stat identity
//!   ([`super::digests`]), so an unchanged model is not hashed again;
//! - the invocation's normalised inputs ([`crate::cli::inputs::CompileInputs`]: every flag that
//!   can change the output, and only those — the driver's settings live elsewhere), canonically
//!   serialised (keys sorted), plus what the plan derived from them and the environment (the job
//!   list, the walrus passes, the subgraphs);
//! - the toolchain's identity: what the tools are, not where ([`super::identity`]);
//! - the plan format version [`crate::plan::PLAN_VERSION`].
//!
//! Two keys come out: the *args key* (everything but the model: "the same arguments", which the
//! memory estimate groups compiles by) and the *key* (args key and model digest). Everything that
//! went into them is kept in clear ([`Key::inputs`]) for `meta.json`.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

pub use super::hashing::{hash_mapped_into, hash_open_into, hash_read_into, MAP_FROM};

use super::digests::{Kind, Table};
use super::identity::{self, Tools};
use crate::engine::Engine;
use crate::plan::Invocation;

/// The chunk size model files are read in while hashing.
pub const HASH_BUFFER: usize = super::chunks::CHUNK;

/// A compile's cache key, with its inputs in clear.
#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    /// 64 hex digits: blake3 of the args key and the model digest.
    pub key: String,
    /// 64 hex digits: blake3 of everything but the model.
    pub args_key: String,
    /// 64 hex digits: the model's digest in the key — the blake3 of its bytes, or (when
    /// [`Key::sloppy`]) of the module without its op metadata.
    pub model_digest: String,
    /// The model digest is the module without its op metadata (the `hlo_metadata` sloppiness
    /// applied).
    pub sloppy: bool,
    /// The model's size in bytes (a directory: the sum of its files).
    pub model_size: u64,
    /// What the memory estimate knows of the model (its size, and its graph's figures when the
    /// plan read it); not part of the key.
    pub features: super::features::Features,
    /// What went into the args key, in clear: `plan_version`, `args`, `plan`, `toolchain`.
    pub inputs: Value,
}

impl Key {
    /// The key of a compile of `inv` by `engine` (`hlo_metadata`: the model keyed without its
    /// op metadata, when it is a binary HLO module), remembering digests in `table`. Reads the
    /// model once at most (not at all when its digest is remembered); for an auto-located
    /// toolchain it may run the one `python3` probe.
    pub fn compute(
        inv: &Invocation,
        engine: &Engine,
        hlo_metadata: bool,
        table: &Table,
    ) -> std::io::Result<Key> {
        Key::compute_from(args_inputs(inv, engine, table), inv, hlo_metadata, table)
    }

    /// [`Key::compute`] for a compile whose toolchain's identity is known: `toolchain`, as
    /// [`identity::of`] gives it, computed by the process that ran the compile (the daemon that
    /// said which compiler it runs).
    pub(crate) fn compute_with_identity(
        inv: &Invocation,
        toolchain: Value,
        hlo_metadata: bool,
        table: &Table,
    ) -> std::io::Result<Key> {
        Key::compute_from(args_inputs_with(inv, toolchain), inv, hlo_metadata, table)
    }

    fn compute_from(
        inputs: Value,
        inv: &Invocation,
        hlo_metadata: bool,
        table: &Table,
    ) -> std::io::Result<Key> {
        let m = model_digest(&inv.plan.model, hlo_metadata, table)?;
        let mut key = Key::from_digest(inputs, &m.digest, m.size, m.sloppy);
        key.features = super::features::Features {
            model_size: m.size,
            ..super::features::Features::of_plan(&inv.plan)
        };
        Ok(key)
    }

    /// The key from the args inputs (as [`args_inputs`] builds them) and the model's blake3.
    #[cfg(test)]
    pub(crate) fn from_parts(inputs: Value, model_digest: &blake3::Hash, model_size: u64) -> Key {
        Key::from_digest(inputs, model_digest.to_hex().as_str(), model_size, false)
    }

    /// The key from the args inputs and the model's digest in hex (`sloppy`: the module's
    /// digest without op metadata).
    pub(crate) fn from_digest(
        inputs: Value,
        model_digest: &str,
        model_size: u64,
        sloppy: bool,
    ) -> Key {
        let mut h = blake3::Hasher::new();
        h.update(b"nxcc-cache-args\0");
        h.update(&serde_json::to_vec(&inputs).unwrap_or_default());
        let args_key = h.finalize().to_hex().to_string();
        let mut h = blake3::Hasher::new();
        h.update(b"nxcc-cache-key\0");
        h.update(args_key.as_bytes());
        h.update(b"\0");
        if sloppy {
            h.update(b"hlo_metadata:");
        }
        h.update(model_digest.as_bytes());
        Key {
            key: h.finalize().to_hex().to_string(),
            args_key,
            model_digest: model_digest.to_string(),
            sloppy,
            model_size,
            features: super::features::Features::of_size(model_size),
            inputs,
        }
    }

    /// The first two hex digits: the shard directory the entry lives in.
    pub fn shard(&self) -> &str {
        &self.key[..2]
    }

    /// How the model digest was taken: `blake3` or `hlo_metadata`.
    pub fn model_digest_kind(&self) -> &'static str {
        if self.sloppy {
            Kind::HloMetadata.name()
        } else {
            Kind::Blake3.name()
        }
    }
}

/// The normalised inputs — every flag that can change the output —, canonically ordered (sorted
/// by dest).
pub(crate) fn canonical_args(inv: &Invocation) -> Value {
    let map: BTreeMap<String, Value> = match serde_json::to_value(&inv.inputs) {
        Ok(Value::Object(fields)) => fields.into_iter().collect(),
        _ => BTreeMap::new(),
    };
    serde_json::to_value(map).unwrap_or(Value::Null)
}

/// Everything of the key but the model, in clear (deterministic: built in a fixed order).
pub(crate) fn args_inputs(inv: &Invocation, engine: &Engine, table: &Table) -> Value {
    let plan = &inv.plan;
    let toolchain = identity::of(
        &plan.toolchain_request,
        plan.toolchain.as_ref(),
        engine,
        Tools::OfPlan(plan),
        table,
    );
    args_inputs_with(inv, toolchain)
}

/// [`args_inputs`] with the toolchain's identity given.
fn args_inputs_with(inv: &Invocation, toolchain: Value) -> Value {
    let plan = &inv.plan;
    json!({
        "plan_version": crate::plan::PLAN_VERSION,
        "args": canonical_args(inv),
        "plan": {
            "pipeline": plan.pipeline,
            "walrus_passes": plan.walrus_passes,
            "subgraphs": plan.subgraphs,
        },
        "toolchain": toolchain,
    })
}

/// A model's digest as the key takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelDigest {
    /// 64 hex digits.
    pub digest: String,
    /// The model's size, bytes.
    pub size: u64,
    /// The digest is of the module without its op metadata.
    pub sloppy: bool,
}

/// The model's digest for the key: with `hlo_metadata` sloppiness and a binary HLO module, the
/// module without its op metadata; else the blake3 of its bytes (`hash_model`'s). Remembered
/// per stat identity in `table`.
pub fn model_digest(
    path: &Path,
    hlo_metadata: bool,
    table: &Table,
) -> std::io::Result<ModelDigest> {
    if hlo_metadata && std::fs::metadata(path)?.is_file() {
        if let Some((digest, size)) = hlo_metadata_digest(path, table)? {
            return Ok(ModelDigest {
                digest,
                size,
                sloppy: true,
            });
        }
    }
    let (h, size) = hash_model_with(path, table)?;
    Ok(ModelDigest {
        digest: h.to_hex().to_string(),
        size,
        sloppy: false,
    })
}

/// What the table remembers for a file that is not a binary HLO module.
const NOT_A_MODULE: &str = "-";

/// The digest of the binary HLO module at `path` without its op metadata and its size; `None`
/// when it is HLO text or not a module.
pub(crate) fn hlo_metadata_digest(
    path: &Path,
    table: &Table,
) -> std::io::Result<Option<(String, u64)>> {
    let got = table.get(path, Kind::HloMetadata, &mut |f| {
        let d = with_bytes(f, path, &mut |b| {
            if crate::jobs::ModelFormat::detect(b) == crate::jobs::ModelFormat::Text {
                return None;
            }
            crate::hlo::digest::without_op_metadata(b)
        })?;
        Ok(d.map_or_else(|| NOT_A_MODULE.to_string(), |h| h.to_hex().to_string()))
    })?;
    Ok((got.value != NOT_A_MODULE).then_some((got.value, got.size)))
}

/// Call `f` with the whole contents of an open file: mapped when large (a file truncated
/// meanwhile is an error), else read.
fn with_bytes<T>(f: &File, path: &Path, each: &mut dyn FnMut(&[u8]) -> T) -> std::io::Result<T> {
    let len = f.metadata()?.len();
    if len >= MAP_FROM {
        if let Some(m) = crate::fsx::Mapped::new(f, len) {
            let r = each(m.bytes());
            if m.truncated() {
                return Err(std::io::Error::other(format!(
                    "{} changed while it was being read",
                    path.display()
                )));
            }
            return Ok(r);
        }
    }
    let mut bytes = Vec::with_capacity(len as usize);
    std::io::Read::read_to_end(&mut &*f, &mut bytes)?;
    Ok(each(&bytes))
}

/// The blake3 of a model and its size: a file's bytes, or a directory's regular files (recursively,
/// by sorted relative path; for each: the path, a NUL, the length as 8 little-endian bytes, the
/// file's blake3). Symbolic links to files are followed; links to directories are not descended
/// into. Every file is hashed.
#[cfg(test)]
pub(crate) fn hash_model(path: &Path) -> std::io::Result<(blake3::Hash, u64)> {
    hash_model_with(path, &Table::off())
}

/// [`hash_model`], each file's blake3 remembered per stat identity in `table`.
pub(crate) fn hash_model_with(path: &Path, table: &Table) -> std::io::Result<(blake3::Hash, u64)> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        let (hex, n) = file_blake3(path, table)?;
        let h = blake3::Hash::from_hex(hex).map_err(std::io::Error::other)?;
        return Ok((h, n));
    }
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    collect_files(path, "", &mut files)?;
    files.sort();
    let mut h = blake3::Hasher::new();
    let mut total = 0u64;
    for (rel, full) in files {
        let (hex, len) = file_blake3(&full, table)?;
        let d = blake3::Hash::from_hex(hex).map_err(std::io::Error::other)?;
        h.update(rel.as_bytes());
        h.update(&[0]);
        h.update(&len.to_le_bytes());
        h.update(d.as_bytes());
        total += len;
    }
    Ok((h.finalize(), total))
}

/// A file's blake3 (hex) and size, remembered per stat identity in `table`.
pub(crate) fn file_blake3(path: &Path, table: &Table) -> std::io::Result<(String, u64)> {
    let got = table.get(path, Kind::Blake3, &mut |f| {
        let mut h = blake3::Hasher::new();
        hash_open_into(f, path, &mut h)?;
        Ok(h.finalize().to_hex().to_string())
    })?;
    Ok((got.value, got.size))
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
    use crate::plan::SystemProbe;

    fn plan_in(dir: &Path, args: &[&str]) -> Invocation {
        let argv: Vec<String> = std::iter::once("compile")
            .chain(args.iter().copied())
            .map(str::to_string)
            .collect();
        Invocation::from_argv("nxcc", &argv, &SystemProbe::at(dir)).unwrap()
    }

    fn key(dir: &Path, args: &[&str]) -> Key {
        Key::compute(&plan_in(dir, args), &Engine::Pipeline, false, &Table::off()).unwrap()
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
        // The directory digest: its files' names, sizes and digests.
        let mut h = blake3::Hasher::new();
        h.update(b"a.bin");
        h.update(&[0]);
        h.update(&(len as u64).to_le_bytes());
        h.update(blake3::hash(&data).as_bytes());
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
        assert!(k0.inputs["toolchain"]["tools"]["walrus_driver"]["blake3"].is_string());
        // The same tools at another path, with other times: the same key.
        let other = dir.path().join("elsewhere");
        std::fs::create_dir(&other).unwrap();
        for t in crate::toolchain::TOOLS {
            std::fs::copy(tc.join(t), other.join(t)).unwrap();
        }
        let moved = key(
            dir.path(),
            &["m.pb", "--target", "trn2", "--toolchain", "elsewhere"],
        );
        assert_eq!(moved.key, k0.key);
        // Replacing a tool with other bytes changes the key.
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

    #[test]
    fn a_key_made_with_the_identity_another_process_computed_is_the_key_computed_here() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("m.pb"), b"model").unwrap();
        let compiler = dir.path().join("neuronx-cc");
        std::fs::write(&compiler, b"#!/bin/sh\necho 'neuronx-cc 2.24'\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
        let inv = plan_in(dir.path(), &["m.pb", "--target", "trn2"]);
        let engine = Engine::external(&compiler);
        let here = Key::compute(&inv, &engine, false, &Table::off()).unwrap();
        let said = crate::cache::EngineIdentity::of(&engine, &Table::off());
        let given =
            Key::compute_with_identity(&inv, said.identity.unwrap(), false, &Table::off()).unwrap();
        assert_eq!(given, here);
        let other = Key::compute_with_identity(
            &inv,
            serde_json::json!({"kind": "external", "compiler": {"missing": true}, "version": "x"}),
            false,
            &Table::off(),
        )
        .unwrap();
        assert_ne!(other.key, here.key);
        assert_eq!(other.model_digest, here.model_digest);
    }

    #[test]
    fn sloppiness_keys_a_module_without_its_op_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        let bytes = std::fs::read(models.join("mlp.hlo_module.pb")).unwrap();
        std::fs::write(dir.path().join("a.pb"), &bytes).unwrap();
        let mut moved = bytes.clone();
        for w in 0..moved.len() - 10 {
            if &moved[w..w + 10] == b"jit(layer)" {
                moved[w + 4..w + 9].copy_from_slice(b"LAYER");
            }
        }
        std::fs::write(dir.path().join("b.pb"), &moved).unwrap();
        std::fs::copy(models.join("mlp.hlo"), dir.path().join("t.hlo")).unwrap();
        let sloppy = true;
        let k = |m: &str, s: bool| {
            let plan = plan_in(dir.path(), &[m, "--target", "trn2", "--toolchain", "sim"]);
            Key::compute(&plan, &Engine::Pipeline, s, &Table::off()).unwrap()
        };
        let (a, b) = (k("a.pb", sloppy), k("b.pb", sloppy));
        assert!(a.sloppy && b.sloppy);
        assert_eq!(a.key, b.key, "only op metadata differs");
        assert_eq!(a.model_digest_kind(), "hlo_metadata");
        // Exact: the two differ; and an exact key is never a sloppy one.
        let (ea, eb) = (k("a.pb", false), k("b.pb", false));
        assert_ne!(ea.key, eb.key);
        assert_ne!(ea.key, a.key);
        assert_eq!(ea.model_digest, blake3::hash(&bytes).to_hex().as_str());
        // HLO text: sloppiness does not apply, the bytes count.
        let t = k("t.hlo", sloppy);
        assert!(!t.sloppy);
        assert_eq!(t.key, k("t.hlo", false).key);
    }
}
