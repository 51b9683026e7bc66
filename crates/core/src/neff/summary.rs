//! What `neff-info` shows, as one JSON object: the layout, the header's fields, the members, and
//! per subgraph the manifest entry of `neff.json` with summaries of its `def.json` and
//! `tensor_map.json`. The member lists are serialised from the inspection as they are written,
//! never copied into a JSON tree, so a NEFF of many members costs little more than its list.
//! Unknown JSON fields are kept (shown as they are, or as item counts when they are large), never
//! rejected, so NEFFs written by the real compiler read too.

use std::collections::{HashMap, HashSet};

use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{json, Map, Value};

use super::header::{self, Header};
use super::read::{Inspection, Member, Neff};
use crate::recon::neff::ENGINE_ORDER;

/// The header's fields as JSON.
pub(crate) fn header_json(h: &Header) -> Value {
    let mut engines = Map::new();
    for (name, present) in ENGINE_ORDER.iter().zip(&h.engines) {
        engines.insert(name.to_string(), json!(present));
    }
    json!({
        "format_version": h.format_version,
        "header_size": h.header_size,
        "archive_length": h.archive_length,
        "ir_signature": h.ir_signature,
        "version_string": h.version_string,
        "version_major": h.version_major,
        "version_minor": h.version_minor,
        "feature_flags": h.feature_flags,
        "uuid": header::format_uuid(&h.uuid),
        "neff_filename": h.neff_filename,
        "engines": engines,
        "world_size": h.world_size,
        "arch_mode": h.arch_mode,
    })
}

/// A JSON value in brief: scalars as they are, arrays as `{"items": n}`, objects as
/// `{"keys": n}`.
pub(crate) fn brief(v: &Value) -> Value {
    match v {
        Value::Array(a) => json!({"items": a.len()}),
        Value::Object(o) => json!({"keys": o.len()}),
        scalar => scalar.clone(),
    }
}

/// Every top-level field of an object in brief (a non-object is given in brief itself).
pub(crate) fn object_brief(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), brief(v))).collect()),
        other => brief(other),
    }
}

/// A `tensor_map.json` summary: the input count and names, the alias map as it is, and every
/// other field in brief.
pub(crate) fn tensor_map_summary(v: &Value) -> Value {
    let Some(o) = v.as_object() else {
        return brief(v);
    };
    let mut out = Map::new();
    if let Some(inputs) = o.get("inputs") {
        match inputs.as_array() {
            Some(list) => {
                let names: Vec<Value> = list
                    .iter()
                    .map(|i| match i {
                        Value::String(_) => i.clone(),
                        Value::Object(o) => o.get("name").cloned().unwrap_or(Value::Null),
                        _ => Value::Null,
                    })
                    .collect();
                out.insert("inputs".into(), json!(list.len()));
                out.insert("input_names".into(), Value::Array(names));
            }
            None => {
                out.insert("inputs".into(), brief(inputs));
            }
        }
    }
    if let Some(alias) = o.get("alias_map") {
        out.insert("alias_map".into(), alias.clone());
    }
    for (k, v) in o {
        if k != "inputs" && k != "alias_map" {
            out.insert(k.clone(), brief(v));
        }
    }
    Value::Object(out)
}

fn kept_json(
    ins: &Inspection,
    not_kept: &HashSet<&str>,
    name: &str,
) -> Option<Result<Value, String>> {
    if not_kept.contains(name) {
        return Some(Err(format!("{name} is too large to summarise")));
    }
    let bytes = ins.kept.get(name)?;
    Some(serde_json::from_slice(bytes).map_err(|e| format!("{name} is not valid JSON ({e})")))
}

/// What `neff.json` and the subgraph's own JSON members say about one subgraph (absent for a
/// directory the manifest does not name and that has neither member).
#[derive(Debug, Clone, Default)]
pub struct Detail {
    /// The key in `neff.json`'s `graphs` (`None`: a directory the manifest does not name).
    pub key: Option<String>,
    /// The entry's `op` (`Null` when it has none).
    pub op: Value,
    /// The entry's other fields, as they are.
    pub fields: Map<String, Value>,
    /// `def.json` in brief (`Null` when missing).
    pub def: Value,
    /// `tensor_map.json`'s summary (`Null` when missing).
    pub tensor_map: Value,
}

/// One subgraph of a summary: the manifest's entry (or a directory it does not name) with its
/// `def.json` and `tensor_map.json` in brief and its files.
#[derive(Debug, Clone)]
pub struct Subgraph {
    /// Its directory in the archive (`sg00`): the manifest entry's `sg`, or the directory's name
    /// for one the manifest does not name; `None` for an entry without `sg`.
    pub sg: Option<String>,
    detail: Option<Box<Detail>>,
    /// Where its files are in [`Summary`]'s grouped member indices.
    files: std::ops::Range<u32>,
}

static NO_DETAIL: std::sync::LazyLock<Detail> = std::sync::LazyLock::new(Detail::default);

impl Subgraph {
    /// What the manifest and its JSON members say about it (an empty [`Detail`] when nothing does).
    pub(crate) fn detail(&self) -> &Detail {
        self.detail.as_deref().unwrap_or(&NO_DETAIL)
    }
}

/// What `neff-info` shows. Member lists are not copied: they are serialised (or rendered)
/// straight from the inspection, so memory stays a small multiple of the member list itself.
pub struct Summary<'a> {
    /// The NEFF summarised (its layout and header).
    pub neff: &'a Neff,
    /// Its regular-file members, in archive order.
    pub members: &'a [Member],
    /// `info.json` as it is (`None` when missing or unreadable; the reason is in
    /// [`Summary::notes`]).
    pub info: Option<Value>,
    /// `neff.json`'s fields other than `graphs`, in brief (`Null` without a manifest).
    pub manifest: Value,
    /// The manifest's graphs in its order, then any directory it does not name.
    pub subgraphs: Vec<Subgraph>,
    /// Why a JSON member could not be summarised (too large to keep, not valid JSON), one sentence
    /// each.
    pub notes: Vec<String>,
    /// Indices of the members under a directory, grouped by directory.
    grouped: Vec<u32>,
}

impl Summary<'_> {
    /// The files under a subgraph's directory: (name within it, size).
    pub fn files<'m>(&'m self, g: &'m Subgraph) -> impl Iterator<Item = (&'m str, u64)> {
        let prefix_len = g.sg.as_ref().map_or(0, |s| s.len() + 1);
        self.grouped[g.files.start as usize..g.files.end as usize]
            .iter()
            .map(move |&i| {
                let m = &self.members[i as usize];
                (&m.name[prefix_len..], m.size)
            })
    }
}

/// The whole summary of a NEFF, as one JSON value (for callers that want a tree; `neff-info`
/// serialises [`Summary`] directly).
pub fn summary(neff: &Neff, ins: &Inspection) -> Value {
    serde_json::to_value(summarise(neff, ins)).unwrap_or(Value::Null)
}

/// The members under each top-level directory, in archive order: the directories in order of
/// first appearance with the range of each in the grouped indices.
fn group_by_dir(members: &[Member]) -> (Vec<(&str, std::ops::Range<u32>)>, Vec<u32>) {
    fn dir_of(m: &Member) -> Option<&str> {
        m.name.split_once('/').map(|(d, _)| d)
    }
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut dirs: Vec<(&str, std::ops::Range<u32>)> = Vec::new();
    for m in members {
        if let Some(d) = dir_of(m) {
            let i = *index.entry(d).or_insert_with(|| {
                dirs.push((d, 0..0));
                dirs.len() - 1
            });
            dirs[i].1.end += 1;
        }
    }
    let mut at = 0u32;
    for (_, r) in &mut dirs {
        let n = r.end;
        *r = at..at;
        at += n;
    }
    let mut grouped = vec![0u32; at as usize];
    for (i, m) in members.iter().enumerate() {
        if let Some(d) = dir_of(m) {
            let r = &mut dirs[index[d]].1;
            grouped[r.end as usize] = i as u32;
            r.end += 1;
        }
    }
    (dirs, grouped)
}

/// The summary of a NEFF from its inspection.
pub(crate) fn summarise<'a>(neff: &'a Neff, ins: &'a Inspection) -> Summary<'a> {
    let not_kept: HashSet<&str> = ins.not_kept.iter().map(String::as_str).collect();
    let mut notes: Vec<String> = Vec::new();
    let mut take = |name: &str| match kept_json(ins, &not_kept, name) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => {
            notes.push(e);
            None
        }
    };
    let info = take("info.json");
    let manifest = take("neff.json");
    let (dirs, grouped) = group_by_dir(&ins.members);

    // Subgraphs: the manifest's graphs in order, then any subgraph directory it does not name.
    let mut subgraphs: Vec<Subgraph> = Vec::new();
    let mut manifest_fields = Value::Null;
    if let Some(Value::Object(m)) = &manifest {
        manifest_fields = Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "graphs")
                .map(|(k, v)| (k.clone(), brief(v)))
                .collect(),
        );
        if let Some(Value::Object(graphs)) = m.get("graphs") {
            for (key, g) in graphs {
                let fields: Map<String, Value> = g
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter(|(k, _)| k.as_str() != "sg" && k.as_str() != "op")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                subgraphs.push(Subgraph {
                    sg: g.get("sg").and_then(Value::as_str).map(str::to_string),
                    detail: Some(Box::new(Detail {
                        key: Some(key.clone()),
                        op: g.get("op").cloned().unwrap_or(Value::Null),
                        fields,
                        ..Detail::default()
                    })),
                    files: 0..0,
                });
            }
        }
    }
    let named: HashSet<String> = subgraphs.iter().filter_map(|s| s.sg.clone()).collect();
    for (dir, _) in &dirs {
        if !named.contains(*dir) {
            subgraphs.push(Subgraph {
                sg: Some(dir.to_string()),
                detail: None,
                files: 0..0,
            });
        }
    }
    let ranges: HashMap<&str, std::ops::Range<u32>> = dirs.into_iter().collect();
    for s in &mut subgraphs {
        let Some(sg) = s.sg.as_deref() else {
            continue;
        };
        let def = take(&format!("{sg}/def.json")).map(|v| object_brief(&v));
        let tensor_map = take(&format!("{sg}/tensor_map.json")).map(|v| tensor_map_summary(&v));
        if def.is_some() || tensor_map.is_some() {
            let d = s.detail.get_or_insert_with(Box::default);
            d.def = def.unwrap_or(Value::Null);
            d.tensor_map = tensor_map.unwrap_or(Value::Null);
        }
        s.files = ranges.get(sg).cloned().unwrap_or(0..0);
    }
    Summary {
        neff,
        members: &ins.members,
        info,
        manifest: manifest_fields,
        subgraphs,
        notes,
        grouped,
    }
}

/// A subgraph's files, serialised as `[{"name", "size"}, ...]` without copying them.
struct Files<'a>(&'a Summary<'a>, &'a Subgraph);

impl Serialize for Files<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut seq = ser.serialize_seq(Some(self.1.files.len()))?;
        #[derive(Serialize)]
        struct File<'a> {
            name: &'a str,
            size: u64,
        }
        for (name, size) in self.0.files(self.1) {
            seq.serialize_element(&File { name, size })?;
        }
        seq.end()
    }
}

struct SubgraphJson<'a>(&'a Summary<'a>, &'a Subgraph);

impl Serialize for SubgraphJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let g = self.1;
        let d = g.detail();
        // An entry that names no subgraph directory has nothing more to show.
        let mut map = ser.serialize_map(Some(if g.sg.is_some() { 7 } else { 4 }))?;
        map.serialize_entry("key", &d.key)?;
        map.serialize_entry("op", &d.op)?;
        map.serialize_entry("sg", &g.sg)?;
        map.serialize_entry("fields", &d.fields)?;
        if g.sg.is_none() {
            return map.end();
        }
        map.serialize_entry("def", &d.def)?;
        map.serialize_entry("tensor_map", &d.tensor_map)?;
        map.serialize_entry("files", &Files(self.0, g))?;
        map.end()
    }
}

struct Subgraphs<'a>(&'a Summary<'a>);

impl Serialize for Subgraphs<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut seq = ser.serialize_seq(Some(self.0.subgraphs.len()))?;
        for g in &self.0.subgraphs {
            seq.serialize_element(&SubgraphJson(self.0, g))?;
        }
        seq.end()
    }
}

impl Serialize for Summary<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut map = ser.serialize_map(Some(9))?;
        map.serialize_entry("file", &self.neff.path().map(|p| p.display().to_string()))?;
        map.serialize_entry("file_size", &self.neff.file_len())?;
        map.serialize_entry("layout", &self.neff.layout())?;
        map.serialize_entry("header", &self.neff.header().map(header_json))?;
        map.serialize_entry("members", self.members)?;
        map.serialize_entry("info", &self.info)?;
        map.serialize_entry("manifest", &self.manifest)?;
        map.serialize_entry("subgraphs", &Subgraphs(self))?;
        map.serialize_entry("notes", &self.notes)?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_grouped_by_directory_in_archive_order() {
        let m = |n: &str| Member {
            name: n.to_string(),
            size: n.len() as u64,
        };
        let members = [m("b/1"), m("top"), m("a/1"), m("b/2"), m("a/x/2"), m("b/3")];
        let (dirs, grouped) = group_by_dir(&members);
        let names = |r: &std::ops::Range<u32>| -> Vec<&str> {
            grouped[r.start as usize..r.end as usize]
                .iter()
                .map(|&i| members[i as usize].name.as_str())
                .collect()
        };
        assert_eq!(dirs.len(), 2);
        assert_eq!(dirs[0].0, "b");
        assert_eq!(names(&dirs[0].1), ["b/1", "b/2", "b/3"]);
        assert_eq!(dirs[1].0, "a");
        assert_eq!(names(&dirs[1].1), ["a/1", "a/x/2"]);
        assert_eq!(grouped.len(), 5);
    }

    #[test]
    fn brief_keeps_scalars_and_counts_collections() {
        let v =
            json!({"schema_version": "0.6", "n": 3, "ops": [1, 2, 3], "extra": {"a": 1, "b": 2}});
        assert_eq!(
            object_brief(&v),
            json!({"schema_version": "0.6", "n": 3, "ops": {"items": 3}, "extra": {"keys": 2}})
        );
    }

    #[test]
    fn tensor_map_summary_names_inputs_and_keeps_unknown_fields() {
        let v = json!({
            "inputs": ["a", {"name": "b", "shape": [1]}],
            "alias_map": [{"input_name": "a", "output_name": "o", "must_alias": true, "x": 1}],
            "future_field": [1, 2]
        });
        let s = tensor_map_summary(&v);
        assert_eq!(s["inputs"], 2);
        assert_eq!(s["input_names"], json!(["a", "b"]));
        assert_eq!(s["alias_map"][0]["x"], 1);
        assert_eq!(s["future_field"], json!({"items": 2}));
    }
}
