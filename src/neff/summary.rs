//! What `neff-info` shows, as one JSON value: the layout, the header's fields, the members, and
//! per subgraph the manifest entry of `neff.json` with summaries of its `def.json` and
//! `tensor_map.json`. Unknown JSON fields are kept (shown as they are, or as item counts when they
//! are large), never rejected, so NEFFs written by the real compiler read too.

use serde_json::{json, Map, Value};

use super::header::{self, Header};
use super::read::{Inspection, Neff};
use crate::recon::neff::ENGINE_ORDER;

/// The header's fields as JSON.
pub fn header_json(h: &Header) -> Value {
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
pub fn brief(v: &Value) -> Value {
    match v {
        Value::Array(a) => json!({"items": a.len()}),
        Value::Object(o) => json!({"keys": o.len()}),
        scalar => scalar.clone(),
    }
}

/// Every top-level field of an object in brief (a non-object is given in brief itself).
pub fn object_brief(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), brief(v))).collect()),
        other => brief(other),
    }
}

/// A `tensor_map.json` summary: the input count and names, the alias map as it is, and every
/// other field in brief.
pub fn tensor_map_summary(v: &Value) -> Value {
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

fn kept_json(ins: &Inspection, name: &str) -> Option<Result<Value, String>> {
    if ins.not_kept.iter().any(|n| n == name) {
        return Some(Err(format!("{name} is too large to summarise")));
    }
    let bytes = ins.kept.get(name)?;
    Some(serde_json::from_slice(bytes).map_err(|e| format!("{name} is not valid JSON ({e})")))
}

/// The whole summary of a NEFF.
pub fn summary(neff: &Neff, ins: &Inspection) -> Value {
    let mut notes: Vec<String> = Vec::new();
    let mut take = |name: &str| match kept_json(ins, name) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(e)) => {
            notes.push(e);
            None
        }
    };
    let info = take("info.json");
    let manifest = take("neff.json");

    // Subgraphs: the manifest's graphs in order, then any subgraph directory it does not name.
    let mut subgraphs: Vec<Value> = Vec::new();
    let mut named: Vec<String> = Vec::new();
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
                let sg = g.get("sg").and_then(Value::as_str).map(str::to_string);
                let fields: Map<String, Value> = g
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .filter(|(k, _)| k.as_str() != "sg" && k.as_str() != "op")
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect()
                    })
                    .unwrap_or_default();
                subgraphs.push(json!({
                    "key": key,
                    "op": g.get("op").cloned().unwrap_or(Value::Null),
                    "sg": sg,
                    "fields": fields,
                }));
                if let Some(sg) = sg {
                    named.push(sg);
                }
            }
        }
    }
    let mut dirs: Vec<String> = Vec::new();
    for m in &ins.members {
        if let Some((dir, _)) = m.name.split_once('/') {
            if !named.iter().any(|n| n == dir) && !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_string());
            }
        }
    }
    for dir in dirs {
        subgraphs.push(json!({"key": null, "op": null, "sg": dir, "fields": {}}));
    }
    for s in &mut subgraphs {
        let Some(sg) = s.get("sg").and_then(Value::as_str).map(str::to_string) else {
            continue;
        };
        let def = take(&format!("{sg}/def.json")).map(|v| object_brief(&v));
        let tm = take(&format!("{sg}/tensor_map.json")).map(|v| tensor_map_summary(&v));
        let prefix = format!("{sg}/");
        let files: Vec<Value> = ins
            .members
            .iter()
            .filter_map(|m| {
                m.name
                    .strip_prefix(&prefix)
                    .map(|f| json!({"name": f, "size": m.size}))
            })
            .collect();
        let o = s.as_object_mut().expect("built as an object");
        o.insert("def".into(), def.unwrap_or(Value::Null));
        o.insert("tensor_map".into(), tm.unwrap_or(Value::Null));
        o.insert("files".into(), Value::Array(files));
    }

    json!({
        "file": neff.path().map(|p| p.display().to_string()),
        "file_size": neff.file_len(),
        "layout": neff.layout(),
        "header": neff.header().map(header_json),
        "members": ins.members,
        "info": info,
        "manifest": manifest_fields,
        "subgraphs": subgraphs,
        "notes": notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
