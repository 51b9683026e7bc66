//! The memory estimate of a compile (spec 07-cache-parallel.md), used by `parallel-compile` and the
//! daemon to admit compiles within a memory budget: the peak RSS recorded in the cache for the same
//! key; else the peak of the most similar earlier compile — the same arguments (the same args key),
//! the nearest graph by its [`Features`] (file size, parameter and result bytes, instruction count;
//! see `distance`); else the named formula [`FORMULA`] over those features
//! ([`formula_estimate`]).
//!
//! Every successful compile through the cache appends one line to a small index,
//! `nxcc-v1/estimates/<args key>.jsonl` (`{"key", "model_size", "parameter_bytes",
//! "result_bytes", "instructions", "peak_rss_kb", "at_ms"}`; lines written before the graph
//! features existed read as features of 0), so a lookup reads one small file instead of scanning
//! every entry; the index outlives evictions (what a compile needed stays true after its NEFF is
//! gone). A file that grows past [`COMPACT_AT`] lines is rewritten with the newest line per key,
//! keeping [`KEEP`].

use std::io::{BufRead, Write};

use rustix::fs::OFlags;

use serde::{Deserialize, Serialize};

pub use super::features::Features;
use super::key::Key;
use super::store::{Cache, Lookup};
use crate::fsx::{AtomicFile, Dir, Durability};

/// The formula's name and definition, as estimates report it.
pub const FORMULA: &str =
    "graph-v1: 320 MiB + 4 × file size + 8 × (parameter + result bytes) + 16 KiB × instructions";
/// [`FORMULA`]'s name alone.
pub const FORMULA_NAME: &str = "graph-v1";
/// [`FORMULA`]: the fixed part (above the ~303 MiB a small compile was measured to use).
pub const DEFAULT_BASE_BYTES: u64 = 320 << 20;
/// [`FORMULA`]: bytes per byte of the model file.
pub const DEFAULT_MODEL_FACTOR: u64 = 4;
/// [`FORMULA`]: bytes per byte of the entry computation's parameters and results.
pub const TENSOR_FACTOR: u64 = 8;
/// [`FORMULA`]: bytes per HLO instruction.
pub const INSTRUCTION_BYTES: u64 = 16 << 10;
/// Index lines that trigger a compaction.
pub const COMPACT_AT: usize = 512;
/// Lines a compaction keeps (the newest, one per key).
pub const KEEP: usize = 256;

/// [`FORMULA`] over a compile's features.
pub fn formula_estimate(f: &Features) -> u64 {
    DEFAULT_BASE_BYTES
        .saturating_add(f.model_size.saturating_mul(DEFAULT_MODEL_FACTOR))
        .saturating_add(
            f.parameter_bytes
                .saturating_add(f.result_bytes)
                .saturating_mul(TENSOR_FACTOR),
        )
        .saturating_add(f.instructions.saturating_mul(INSTRUCTION_BYTES))
}

/// [`FORMULA`] for a model known only by its size: 4 × the model size + 320 MiB.
#[cfg(test)]
pub(crate) fn default_estimate(model_size: u64) -> u64 {
    formula_estimate(&Features::of_size(model_size))
}

/// How unlike two compiles' models are: the sum over file size, parameter plus result bytes and
/// instruction count of |log2(1 + a) − log2(1 + b)| (so a model twice as large in one figure is
/// one unit away, whatever its scale).
pub(crate) fn distance(a: &Features, b: &Features) -> f64 {
    let d = |x: u64, y: u64| ((1.0 + x as f64).log2() - (1.0 + y as f64).log2()).abs();
    d(a.model_size, b.model_size)
        + d(
            a.parameter_bytes.saturating_add(a.result_bytes),
            b.parameter_bytes.saturating_add(b.result_bytes),
        )
        + d(a.instructions, b.instructions)
}

/// Where an estimate comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "basis", rename_all = "snake_case")]
pub enum Basis {
    /// The peak recorded for this very key.
    Recorded,
    /// The peak of the earlier compile with the same arguments whose graph is nearest
    /// (`distance`); its features.
    Similar {
        /// The earlier compile's key.
        key: String,
        /// Its model's features.
        #[serde(flatten)]
        features: Features,
    },
    /// Nothing known: [`FORMULA`].
    #[serde(rename = "formula")]
    Default {
        /// The formula's name, [`FORMULA_NAME`].
        formula: &'static str,
    },
}

impl Basis {
    /// The formula's basis.
    pub fn formula() -> Basis {
        Basis::Default {
            formula: FORMULA_NAME,
        }
    }

    /// Its short name: `recorded`, `similar`, or the formula's name.
    pub fn name(&self) -> &'static str {
        match self {
            Basis::Recorded => "recorded",
            Basis::Similar { .. } => "similar",
            Basis::Default { formula } => formula,
        }
    }

    /// What an estimate came from, in words.
    pub fn describe(&self) -> String {
        match self {
            Basis::Recorded => "the peak recorded for this compile".into(),
            Basis::Similar { key, .. } => format!(
                "the peak of the nearest earlier compile with the same arguments ({})",
                &key[..key.len().min(12)]
            ),
            Basis::Default { .. } => format!("the formula {FORMULA}"),
        }
    }
}

/// A compile's estimated peak memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Estimate {
    /// The estimated peak resident memory, bytes.
    pub bytes: u64,
    /// What the figure came from.
    #[serde(flatten)]
    pub basis: Basis,
}

/// One line of the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The compile's key (64 hex digits).
    pub key: String,
    /// Its model's features, to find the nearest compile by.
    #[serde(flatten)]
    pub features: Features,
    /// The compile's peak RSS (the largest of its jobs'), KiB.
    pub peak_rss_kb: u64,
    /// When it was recorded, milliseconds since the Unix epoch.
    pub at_ms: u64,
}

fn index_name(args_key: &str) -> String {
    format!("{args_key}.jsonl")
}

/// Open the index file `name` of `dir` under an exclusive lock (the file locked is checked to
/// still be the one at the name: a compaction replaces it). A link there is refused.
pub(crate) fn open_locked(dir: &Dir, name: &str) -> std::io::Result<std::fs::File> {
    loop {
        let f = dir.open_file_with(name, OFlags::RDWR | OFlags::APPEND | OFlags::CREATE, 0o666)?;
        fs4::fs_std::FileExt::lock_exclusive(&f)?;
        let held = rustix::fs::fstat(&f)?;
        match dir.stat(name) {
            Ok(now) if now.st_ino == held.st_ino && now.st_dev == held.st_dev => return Ok(f),
            _ => continue,
        }
    }
}

fn read_records(dir: Option<&Dir>, name: &str) -> Vec<Record> {
    let Some(Ok(f)) = dir.map(|d| d.open_file(name)) else {
        return Vec::new();
    };
    std::io::BufReader::new(f)
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// Append a compile's figures to the index of its arguments.
pub fn record(cache: &Cache, args_key: &str, rec: &Record) -> std::io::Result<()> {
    let dir = cache
        .estimates_dir(true)?
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))?;
    let name = index_name(args_key);
    let mut f = open_locked(&dir, &name)?;
    let mut line = serde_json::to_vec(rec).map_err(std::io::Error::other)?;
    line.push(b'\n');
    f.write_all(&line)?;
    let records = read_records(Some(&dir), &name);
    if records.len() >= COMPACT_AT {
        let mut newest: Vec<Record> = Vec::new();
        for r in records.into_iter().rev() {
            if newest.len() < KEEP && !newest.iter().any(|n| n.key == r.key) {
                newest.push(r);
            }
        }
        newest.reverse();
        let mut out = AtomicFile::create_in(&dir, &name)?;
        for r in &newest {
            out.write_all(&serde_json::to_vec(r).map_err(std::io::Error::other)?)?;
            out.write_all(b"\n")?;
        }
        out.commit(Durability::Visible)?;
    }
    Ok(())
}

/// The estimate for a compile with this key (see the module documentation), its model's
/// features those of the key. With no cache, the formula.
pub fn estimate(cache: Option<&Cache>, key: &Key) -> Estimate {
    let default = Estimate {
        bytes: formula_estimate(&key.features),
        basis: Basis::formula(),
    };
    let Some(cache) = cache else {
        return default;
    };
    if let Lookup::Hit(m) = cache.lookup(&key.key) {
        if m.peak_rss_kb > 0 {
            return Estimate {
                bytes: m.peak_rss_kb.saturating_mul(1024),
                basis: Basis::Recorded,
            };
        }
    }
    let dir = cache.estimates_dir(false).ok().flatten();
    let records = read_records(dir.as_ref(), &index_name(&key.args_key));
    if let Some(r) = records
        .iter()
        .rev()
        .find(|r| r.key == key.key && r.peak_rss_kb > 0)
    {
        return Estimate {
            bytes: r.peak_rss_kb.saturating_mul(1024),
            basis: Basis::Recorded,
        };
    }
    let nearest = records.iter().filter(|r| r.peak_rss_kb > 0).min_by(|a, b| {
        distance(&a.features, &key.features)
            .total_cmp(&distance(&b.features, &key.features))
            .then(b.peak_rss_kb.cmp(&a.peak_rss_kb))
    });
    match nearest {
        Some(r) => Estimate {
            bytes: r.peak_rss_kb.saturating_mul(1024),
            basis: Basis::Similar {
                key: r.key.clone(),
                features: r.features,
            },
        },
        None => default,
    }
}

/// The estimate a dry run reports: the learned one when the plan has a cache (`--cache_dir`)
/// and a resolved toolchain (keying it never spawns a process then), else the formula over the
/// plan's features. Reads, never writes.
pub(crate) fn for_dry_run(inv: &crate::plan::Invocation) -> Estimate {
    let formula = || Estimate {
        bytes: formula_estimate(&Features::of_plan(&inv.plan)),
        basis: Basis::formula(),
    };
    let Ok(mut cfg) = super::CacheConfig::of(inv, None) else {
        return formula();
    };
    cfg.settings.mode = super::settings::Mode::ReadOnly;
    match (cfg.cache(), &inv.plan.toolchain) {
        (Some(cache), Some(_)) if cache.root().is_dir() => {
            match cfg.key(inv, &crate::engine::Engine::Pipeline) {
                Ok(key) => estimate(Some(&cache), &key),
                Err(_) => formula(),
            }
        }
        _ => formula(),
    }
}

/// What a dry run of `inv` says of its memory (`for_dry_run`), as JSON and in words.
pub fn dry_run_memory(inv: &crate::plan::Invocation) -> crate::plan::dryrun::Memory {
    let e = for_dry_run(inv);
    crate::plan::dryrun::Memory {
        json: to_json(&e),
        text: format!(
            "{} (from {})",
            crate::hlo::summary::human(e.bytes),
            e.basis.describe()
        ),
    }
}

/// An estimate as JSON: `{bytes, basis, ...basis fields, "from": words}`.
pub fn to_json(e: &Estimate) -> serde_json::Value {
    let mut v = serde_json::to_value(e).unwrap_or(serde_json::Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("from".into(), e.basis.describe().into());
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(args: &str, model: &str, size: u64) -> Key {
        Key::from_parts(
            serde_json::json!({ "args": args }),
            &blake3::hash(model.as_bytes()),
            size,
        )
    }

    fn rec(k: &Key, peak_mb: u64) -> Record {
        Record {
            key: k.key.clone(),
            features: k.features,
            peak_rss_kb: peak_mb * 1024,
            at_ms: 1,
        }
    }

    /// A key whose model has these graph features.
    fn graph_key(args: &str, model: &str, size: u64, tensors: u64, instructions: u64) -> Key {
        let mut k = key(args, model, size);
        k.features = Features {
            model_size: size,
            parameter_bytes: tensors / 2,
            result_bytes: tensors - tensors / 2,
            instructions,
        };
        k
    }

    #[test]
    fn the_formula_and_its_terms() {
        let f = Features {
            model_size: 1_000,
            parameter_bytes: 2_688,
            result_bytes: 1_024,
            instructions: 10,
        };
        assert_eq!(
            formula_estimate(&f),
            (320 << 20) + 4 * 1_000 + 8 * (2_688 + 1_024) + 10 * (16 << 10)
        );
        assert_eq!(default_estimate(1_000), (320 << 20) + 4_000);
        assert_eq!(formula_estimate(&Features::of_size(u64::MAX)), u64::MAX);
        assert!(FORMULA.starts_with(FORMULA_NAME));
        // The same file size, a graph with more instructions: a larger estimate.
        assert!(
            formula_estimate(&Features {
                instructions: 10_000,
                ..f
            }) > formula_estimate(&f) + (100 << 20)
        );
        assert_eq!(distance(&f, &f), 0.0);
    }

    #[test]
    fn the_nearest_compile_is_nearest_by_graph_not_by_file_size() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        // Two earlier compiles of files of the same size: one a small graph with a large constant,
        // one a graph of many instructions and large tensors.
        let constant = graph_key("O2", "constant", 4 << 20, 64 << 10, 4);
        let wide = graph_key("O2", "wide", 4 << 20, 64 << 20, 40_000);
        record(&cache, &constant.args_key, &rec(&constant, 350)).unwrap();
        record(&cache, &wide.args_key, &rec(&wide, 2_000)).unwrap();
        // A new model, smaller file, but a graph like the wide one: the wide one's peak.
        let new = graph_key("O2", "new", 1 << 20, 60 << 20, 35_000);
        let e = estimate(Some(&cache), &new);
        assert_eq!(e.bytes, 2_000 << 20);
        assert!(
            matches!(&e.basis, Basis::Similar { key, features } if *key == wide.key && features.instructions == 40_000),
            "{e:?}"
        );
        assert!(e.basis.describe().contains("nearest earlier compile"));
        // A record written before the graph features existed still reads (features of 0).
        let old = serde_json::from_str::<Record>(
            r#"{"key":"k","model_size":5,"peak_rss_kb":7,"at_ms":1}"#,
        )
        .unwrap();
        assert_eq!(old.features, Features::of_size(5));
        // With nothing known: the formula over the new model's features.
        let e = estimate(None, &new);
        assert_eq!(e.bytes, formula_estimate(&new.features));
        assert_eq!(
            serde_json::to_value(&e).unwrap()["basis"],
            serde_json::json!("formula")
        );
        assert_eq!(serde_json::to_value(&e).unwrap()["formula"], FORMULA_NAME);
    }

    #[test]
    fn recorded_then_similar_then_the_formula() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let small = key("O2", "small", 1_000);
        let big = key("O2", "big", 100_000);
        let other_args = key("O1", "x", 1_000);
        assert_eq!(
            estimate(Some(&cache), &small),
            Estimate {
                bytes: 4_000 + (320 << 20),
                basis: Basis::formula()
            }
        );
        assert_eq!(estimate(None, &small).basis, Basis::formula());
        record(&cache, &small.args_key, &rec(&small, 300)).unwrap();
        record(&cache, &big.args_key, &rec(&big, 900)).unwrap();
        record(&cache, &other_args.args_key, &rec(&other_args, 5)).unwrap();
        assert_eq!(
            estimate(Some(&cache), &small),
            Estimate {
                bytes: 300 << 20,
                basis: Basis::Recorded
            }
        );
        // A new model near the small one's size takes its peak; near the big one, the big one's.
        let near_small = key("O2", "near small", 1_200);
        let e = estimate(Some(&cache), &near_small);
        assert_eq!(e.bytes, 300 << 20);
        assert!(matches!(
            e.basis,
            Basis::Similar { features, .. } if features.model_size == 1_000
        ));
        assert_eq!(
            estimate(Some(&cache), &key("O2", "near big", 90_000)).bytes,
            900 << 20
        );
        // Other arguments know nothing of these.
        assert_eq!(
            estimate(Some(&cache), &key("O3", "small", 1_000)).basis,
            Basis::formula()
        );
        // The newest record of a key wins.
        record(&cache, &small.args_key, &rec(&small, 310)).unwrap();
        assert_eq!(estimate(Some(&cache), &small).bytes, 310 << 20);
    }

    #[test]
    fn the_index_is_compacted() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path());
        let mut last = key("a", "m0", 0);
        for i in 0..COMPACT_AT + 10 {
            last = key("a", &format!("m{}", i % 300), i as u64);
            record(&cache, &last.args_key, &rec(&last, 1 + i as u64)).unwrap();
        }
        let dir = cache.estimates_dir(false).unwrap();
        let lines = read_records(dir.as_ref(), &index_name(&last.args_key));
        assert!(lines.len() <= COMPACT_AT, "{}", lines.len());
        assert!(lines.len() >= KEEP.min(300) / 2);
        assert_eq!(estimate(Some(&cache), &last).basis, Basis::Recorded);
    }
}
