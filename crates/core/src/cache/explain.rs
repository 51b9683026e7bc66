//! Why a compile hit or missed: the key, whether an entry has it, and on a miss the nearest
//! entries ([`super::index`]: the same model, the same arguments, the same model file name) and
//! what differs, input by input — each argument (entry → now), the plan the arguments derived,
//! the plan format, the toolchain (which tool, or the compiler's version), the model (its bytes,
//! and whether only its op metadata differs). What `nxcc cache explain`, a compile's miss line
//! (`--verbose info`), a hit-only cache's refusal and the miss counters ([`MissReason`]) say.
//!
//! Anchors: ccache's debug mode, JAX's cache-key logging, `TORCH_LOGS=recompiles`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::counters::MissReason;
use super::digests::Table;
use super::index::{self, By, Groups};
use super::key::{self, Key};
use super::meta::Meta;
use super::store::{Cache, Lookup};

/// Exit status of `nxcc cache explain` (and `exit_status` of the daemon's `/v1/explain`) when
/// the compile would miss.
pub const EXIT_MISS: i32 = 1;
/// How many keys of each group are looked at.
pub const PER_GROUP: usize = 8;
/// How many nearest entries an explanation shows.
pub const SHOWN: usize = 3;

/// One input that differs between an entry and this compile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Difference {
    /// `argument`, `plan`, `plan_version`, `toolchain`, `tool` or `model`.
    pub what: &'static str,
    /// Which one: the flag (`--optlevel`), the tool (`walrus_driver`), `model`, ...
    pub name: String,
    /// The entry's value (`null`: not set).
    pub entry: Value,
    /// This compile's value.
    pub now: Value,
    /// What else is known (`only op metadata differs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A short rendering of a value: strings bare, digests to 12 digits, null as `(not set)`.
fn short(v: &Value) -> String {
    match v {
        Value::Null => "(not set)".to_string(),
        Value::String(s) if s.is_empty() => "\"\"".to_string(),
        Value::String(s) => s.clone(),
        Value::Object(o) if o.contains_key("blake3") => {
            let d = o["blake3"].as_str().unwrap_or("");
            format!("blake3 {}…", &d[..d.len().min(12)])
        }
        Value::Object(o) if o.get("missing") == Some(&Value::Bool(true)) => "missing".to_string(),
        other => other.to_string(),
    }
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {} → {}",
            self.what,
            self.name,
            short(&self.entry),
            short(&self.now)
        )?;
        if let Some(n) = &self.note {
            write!(f, " ({n})")?;
        }
        Ok(())
    }
}

/// An entry near the key and how it differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Near {
    /// Its key.
    pub key: String,
    /// Its directory.
    pub entry: PathBuf,
    /// How it was found: `same model`, `same arguments`, `same model name`.
    pub found_by: &'static str,
    /// When it was made (UTC).
    pub created: String,
    /// `ok` or `failed`.
    pub status: String,
    /// What differs, input by input.
    pub differences: Vec<Difference>,
}

impl Near {
    fn same_model(&self) -> bool {
        !self.differences.iter().any(|d| d.what == "model")
    }

    /// Why a compile this entry is nearest to missed.
    pub fn reason(&self) -> MissReason {
        let has = |w: &str| self.differences.iter().any(|d| d.what == w);
        if !self.same_model() {
            MissReason::Model
        } else if has("argument") || has("plan") {
            MissReason::Arguments
        } else if has("toolchain") || has("tool") {
            MissReason::Toolchain
        } else {
            MissReason::Other
        }
    }

    /// One line: `<key12> (same model name) differs in argument --optlevel: 2 → 1`.
    pub fn summary(&self) -> String {
        let diffs: Vec<String> = self
            .differences
            .iter()
            .take(3)
            .map(|d| d.to_string())
            .collect();
        let more = self.differences.len().saturating_sub(3);
        let mut s = format!(
            "the nearest entry {} ({}) differs in {}",
            &self.key[..12],
            self.found_by,
            if diffs.is_empty() {
                "nothing nxcc records".to_string()
            } else {
                diffs.join("; ")
            }
        );
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    }
}

/// Whether and how the key is in the cache.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// A NEFF is there.
    Hit {
        /// The entry.
        entry: PathBuf,
        /// Found in a secondary cache (its directory), not the primary.
        #[serde(skip_serializing_if = "Option::is_none")]
        secondary: Option<PathBuf>,
        /// When the entry was keyed without op metadata: how the model compares with the
        /// entry's (`the model's bytes are the entry's`, `only op metadata differs`).
        #[serde(skip_serializing_if = "Option::is_none")]
        sloppy: Option<String>,
    },
    /// A remembered failed compile is there.
    Failed {
        /// The entry.
        entry: PathBuf,
        /// Its exit status.
        exit_status: i32,
    },
    /// Nothing usable.
    Miss {
        /// Why, in one line.
        why: String,
        /// The reason counted.
        reason: MissReason,
    },
}

/// An explanation of one compile's key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The cache (`DIR/nxcc-v1`).
    pub cache: PathBuf,
    /// The key.
    pub key: String,
    /// The model digest in the key, and how it was taken (`blake3`, `hlo_metadata`).
    pub model_digest: String,
    /// `blake3` or `hlo_metadata`.
    pub model_digest_kind: &'static str,
    /// Hit, failed or miss.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// On a miss, the nearest entries, nearest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nearest: Vec<Near>,
}

impl Explanation {
    /// In one line: on a miss what differs from the nearest entry (what a compile's miss line
    /// and a hit-only refusal say); else where the entry is.
    pub fn line(&self) -> String {
        match &self.verdict {
            Verdict::Hit { entry, .. } => format!("hit: {}", entry.display()),
            Verdict::Failed { entry, .. } => format!("remembered failure: {}", entry.display()),
            Verdict::Miss { why, .. } => why.clone(),
        }
    }
}

/// What is known of the model being compiled, computed once.
struct Model {
    blake3: Option<String>,
    hlo_metadata: Option<String>,
    size: u64,
}

fn model_facts(path: &Path, key: &Key, table: &Table) -> Model {
    let blake3 = if key.sloppy {
        key::hash_model_with(path, table)
            .ok()
            .map(|(h, _)| h.to_hex().to_string())
    } else {
        Some(key.model_digest.clone())
    };
    let hlo_metadata = if key.sloppy {
        Some(key.model_digest.clone())
    } else if path.is_file() {
        key::hlo_metadata_digest(path, table)
            .ok()
            .flatten()
            .map(|(d, _)| d)
    } else {
        None
    };
    Model {
        blake3,
        hlo_metadata,
        size: key.model_size,
    }
}

/// The groups a key is listed under ([`index`]).
pub fn groups(key: &Key, model: &Path, model_blake3: &str) -> Groups {
    Groups {
        model: model_blake3.to_string(),
        args: key.args_key.clone(),
        name: model
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

/// Explain a compile of `inv` on `engine` in the cache `cfg` names (its secondaries too), as
/// the cache would key it, writing nothing: what `nxcc cache explain` and the daemon's
/// `/v1/explain` say. `Err`: the error line (the cache is off, or the key cannot be computed).
pub fn of_invocation(
    inv: &crate::plan::Invocation,
    cfg: &super::CacheConfig,
    engine: &crate::engine::Engine,
) -> Result<Explanation, String> {
    let Some(cache) = cfg.cache() else {
        return Err("[ERROR] the compile does not use a cache (--no_cache)".to_string());
    };
    let mut cfg = cfg.clone();
    // Explaining writes nothing, not even a remembered digest.
    cfg.settings.mode = super::settings::Mode::ReadOnly;
    let table = cfg.table();
    let key =
        Key::compute(inv, engine, cfg.settings.sloppiness.hlo_metadata, &table).map_err(|e| {
            format!(
                "[ERROR] cannot compute the cache key of {}: {e}",
                inv.plan.model.display()
            )
        })?;
    let secondaries: Vec<Cache> = cfg.settings.secondaries.iter().map(Cache::new).collect();
    Ok(explain(&cache, &secondaries, &key, &inv.plan.model, &table))
}

/// Explain `key` (of a compile of `model`) in `cache`, then in `secondaries`.
pub fn explain(
    cache: &Cache,
    secondaries: &[Cache],
    key: &Key,
    model: &Path,
    table: &Table,
) -> Explanation {
    let mut e = Explanation {
        cache: cache.root().to_path_buf(),
        key: key.key.clone(),
        model_digest: key.model_digest.clone(),
        model_digest_kind: key.model_digest_kind(),
        verdict: Verdict::Miss {
            why: String::new(),
            reason: MissReason::Model,
        },
        nearest: Vec::new(),
    };
    let facts = model_facts(model, key, table);
    for (i, c) in std::iter::once(cache).chain(secondaries).enumerate() {
        let secondary = (i > 0).then(|| c.dir().to_path_buf());
        match c.lookup(&key.key) {
            Lookup::Hit(m) => {
                e.verdict = Verdict::Hit {
                    entry: c.entry_dir(&key.key),
                    secondary,
                    sloppy: sloppy_note(&m, &facts),
                };
                return e;
            }
            Lookup::Failed(m, f) => {
                e.verdict = Verdict::Failed {
                    entry: c.entry_dir(&key.key),
                    exit_status: if f.exit_status == 0 {
                        m.exit_status
                    } else {
                        f.exit_status
                    },
                };
                return e;
            }
            Lookup::Absent | Lookup::Corrupt(_) => {}
        }
    }
    let model_blake3 = facts.blake3.clone().unwrap_or_default();
    let found = index::near(
        cache,
        &groups(key, model, &model_blake3),
        PER_GROUP,
        &key.key,
    );
    let mut nearest: Vec<Near> = found
        .into_iter()
        .filter_map(|(by, k)| near_entry(cache, by, &k, key, &facts))
        .collect();
    // Nearest first: the same model, then the fewest differences, then the newest.
    nearest.sort_by(|a, b| {
        b.same_model()
            .cmp(&a.same_model())
            .then(a.differences.len().cmp(&b.differences.len()))
            .then(b.created.cmp(&a.created))
    });
    nearest.truncate(SHOWN);
    e.verdict = match nearest.first() {
        Some(n) => Verdict::Miss {
            why: n.summary(),
            reason: n.reason(),
        },
        None => Verdict::Miss {
            why: "a new model (no entry has the same model, arguments or model name)".to_string(),
            reason: MissReason::Model,
        },
    };
    e.nearest = nearest;
    e
}

fn sloppy_note(m: &Meta, facts: &Model) -> Option<String> {
    if m.model_digest_kind.as_deref() != Some("hlo_metadata") {
        return None;
    }
    Some(match &facts.blake3 {
        Some(b) if *b == m.model_blake3 => "keyed without op metadata; the model's bytes are the entry's".to_string(),
        Some(_) => "served by the model without its op metadata: only op metadata differs from the entry's model".to_string(),
        None => "keyed without op metadata".to_string(),
    })
}

fn near_entry(cache: &Cache, by: By, k: &str, key: &Key, facts: &Model) -> Option<Near> {
    let (meta, status) = match cache.lookup(k) {
        Lookup::Hit(m) => (m, "ok"),
        Lookup::Failed(m, _) => (m, "failed"),
        _ => return None,
    };
    Some(Near {
        key: k.to_string(),
        entry: cache.entry_dir(k),
        found_by: by.words(),
        created: meta.created.clone(),
        status: status.to_string(),
        differences: differences(&meta, key, facts),
    })
}

/// What differs between an entry's recorded inputs and this key's.
fn differences(meta: &Meta, key: &Key, facts: &Model) -> Vec<Difference> {
    let (old, new) = (&meta.inputs, &key.inputs);
    let mut out = Vec::new();
    if old["plan_version"] != new["plan_version"] {
        out.push(diff(
            "plan_version",
            "nxcc plan format",
            &old["plan_version"],
            &new["plan_version"],
        ));
    }
    for dest in union(&old["args"], &new["args"]) {
        let (a, b) = (&old["args"][&dest], &new["args"][&dest]);
        if a != b {
            let name =
                crate::cli::flags::by_dest(&dest).map_or(dest.clone(), |f| f.spelling.to_string());
            out.push(diff("argument", &name, a, b));
        }
    }
    // What the plan derived: shown when no argument explains it (another environment).
    if !out.iter().any(|d| d.what == "argument") {
        for part in ["pipeline", "walrus_passes", "subgraphs"] {
            let (a, b) = (&old["plan"][part], &new["plan"][part]);
            if a != b {
                out.push(diff("plan", part, a, b));
            }
        }
    }
    out.extend(toolchain_differences(&old["toolchain"], &new["toolchain"]));
    if let Some(d) = model_difference(meta, facts) {
        out.push(d);
    }
    out
}

fn diff(what: &'static str, name: &str, entry: &Value, now: &Value) -> Difference {
    Difference {
        what,
        name: name.to_string(),
        entry: entry.clone(),
        now: now.clone(),
        note: None,
    }
}

fn union(a: &Value, b: &Value) -> BTreeSet<String> {
    let keys = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    keys(a).into_iter().chain(keys(b)).collect()
}

fn toolchain_differences(old: &Value, new: &Value) -> Vec<Difference> {
    if old == new {
        return Vec::new();
    }
    if old["kind"] != new["kind"] {
        return vec![diff("toolchain", "kind", &old["kind"], &new["kind"])];
    }
    let mut out = Vec::new();
    if old["nxcc_version"] != new["nxcc_version"] {
        out.push(diff(
            "toolchain",
            "nxcc version",
            &old["nxcc_version"],
            &new["nxcc_version"],
        ));
    }
    if old["compiler"] != new["compiler"] {
        out.push(diff("tool", "compiler", &old["compiler"], &new["compiler"]));
    }
    if old["version"] != new["version"] {
        out.push(diff(
            "toolchain",
            "compiler version",
            &old["version"],
            &new["version"],
        ));
    }
    for tool in union(&old["tools"], &new["tools"]) {
        let (a, b) = (&old["tools"][&tool], &new["tools"][&tool]);
        if a != b {
            out.push(diff("tool", &tool, a, b));
        }
    }
    if out.is_empty() {
        out.push(diff("toolchain", "identity", old, new));
    }
    out
}

fn model_difference(meta: &Meta, facts: &Model) -> Option<Difference> {
    let now = facts.blake3.as_deref()?;
    if now == meta.model_blake3 {
        return None;
    }
    let only_metadata = matches!(
        (&meta.model_hlo_metadata, &facts.hlo_metadata),
        (Some(a), Some(b)) if a == b
    );
    Some(Difference {
        what: "model",
        name: "model".to_string(),
        entry: serde_json::json!({ "blake3": meta.model_blake3, "size": meta.model_size }),
        now: serde_json::json!({ "blake3": now, "size": facts.size }),
        note: only_metadata.then(|| "only op metadata differs".to_string()),
    })
}

/// The explanation in words, for `nxcc cache explain`.
pub fn text(e: &Explanation) -> String {
    let mut t = format!("cache: {}\nkey: {}\n", e.cache.display(), e.key);
    t.push_str(&format!(
        "model digest: {} ({})\n",
        e.model_digest, e.model_digest_kind
    ));
    match &e.verdict {
        Verdict::Hit {
            entry,
            secondary,
            sloppy,
        } => {
            t.push_str(&format!("hit: {}\n", entry.display()));
            if let Some(s) = secondary {
                t.push_str(&format!("found in the secondary cache {}\n", s.display()));
            }
            if let Some(s) = sloppy {
                t.push_str(&format!("sloppiness hlo_metadata: {s}\n"));
            }
        }
        Verdict::Failed { entry, exit_status } => t.push_str(&format!(
            "hit: a remembered failed compile (exit {exit_status}) at {}; --retry_failed_compilation compiles it again\n",
            entry.display()
        )),
        Verdict::Miss { why, .. } => {
            t.push_str(&format!("miss: {why}\n"));
            for n in &e.nearest {
                t.push_str(&format!(
                    "near: {} ({}, {}, created {}): {} difference{}\n",
                    n.key,
                    n.found_by,
                    n.status,
                    n.created,
                    n.differences.len(),
                    if n.differences.len() == 1 { "" } else { "s" }
                ));
                for d in &n.differences {
                    t.push_str(&format!("  {d}\n"));
                }
            }
        }
    }
    t
}
