//! What the in-process Kelper job does (03-jobs.md, 05-neff.md): pack the NEFF from the work
//! directory's per-subgraph backend outputs.
//!
//! For each subgraph directory `sgNN` the backend wrote `def.json`, `tensor_map.json`, `neff.json`
//! and zero or more `<Engine>.bin`. Kelper packs `def.json`, `tensor_map.json` and every `*.bin`
//! as they are; folds each subgraph's `neff.json` into the top-level manifest
//! `{"schema_version": "0.5", "graphs": {"sg_coreV1<i>": {"op": "__kelf", "sg": "sgNN", ...}}}`
//! (the per-subgraph files are not packed); and the packer adds `info.json`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::write::{pack, PackOptions};
use super::NeffError;

/// The manifest's schema version.
pub const MANIFEST_SCHEMA_VERSION: &str = "0.5";
/// The op every manifest graph entry names.
pub const KELF_OP: &str = "__kelf";
/// The prefix of a manifest graph key; the subgraph index follows.
pub const GRAPH_KEY_PREFIX: &str = "sg_coreV1";
/// The files every subgraph directory must hold, packed as they are.
pub const PACKED_INPUTS: [&str; 2] = ["def.json", "tensor_map.json"];
/// The per-subgraph manifest piece the backend writes (folded, not packed).
pub const SUBGRAPH_MANIFEST: &str = "neff.json";

fn read_input(path: &Path) -> Result<Vec<u8>, NeffError> {
    match std::fs::read(path) {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(NeffError::MissingInput(path.to_path_buf()))
        }
        Err(e) => Err(NeffError::BadInput {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

fn parse_object(path: &Path, bytes: &[u8]) -> Result<Map<String, Value>, NeffError> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(o)) => Ok(o),
        Ok(_) => Err(NeffError::BadInput {
            path: path.to_path_buf(),
            reason: "not a JSON object".to_string(),
        }),
        Err(e) => Err(NeffError::BadInput {
            path: path.to_path_buf(),
            reason: format!("not valid JSON ({e})"),
        }),
    }
}

/// A subgraph directory name must be one plain path component.
fn check_subgraph_name(sg: &str) -> Result<(), NeffError> {
    if sg.is_empty() || sg == "." || sg == ".." || sg.contains('/') || sg.contains('\0') {
        return Err(NeffError::Invalid(format!(
            "'{}' is not a subgraph directory name",
            sg.escape_default()
        )));
    }
    Ok(())
}

/// The engine binaries of a subgraph directory (`*.bin` regular files), sorted by name.
fn binaries(dir: &Path) -> Result<Vec<String>, NeffError> {
    let entries = std::fs::read_dir(dir).map_err(|e| NeffError::io(dir, e))?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| NeffError::io(dir, e))?;
        let path = entry.path();
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            if entry.file_name().as_encoded_bytes().ends_with(b".bin") {
                return Err(NeffError::BadInput {
                    path,
                    reason: "the file name is not UTF-8".to_string(),
                });
            }
            continue;
        };
        if !name.ends_with(".bin") {
            continue;
        }
        let meta = std::fs::metadata(&path).map_err(|e| NeffError::io(&path, e))?;
        if meta.is_file() {
            out.push(name);
        }
    }
    out.sort();
    Ok(out)
}

/// Pack the NEFF from `work_dir`'s subgraph directories (in sorted order, whatever order they are
/// given in). Errors name the file that is missing or unusable.
pub fn pack_work_dir(
    work_dir: &Path,
    subgraphs: &[String],
    opts: &PackOptions,
) -> Result<Vec<u8>, NeffError> {
    if subgraphs.is_empty() {
        return Err(NeffError::Invalid(
            "there are no subgraphs to pack".to_string(),
        ));
    }
    let mut sorted: Vec<&String> = subgraphs.iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut members: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut graphs = Map::new();
    for (i, sg) in sorted.iter().enumerate() {
        check_subgraph_name(sg)?;
        let dir = work_dir.join(sg.as_str());
        if !dir.is_dir() {
            return Err(NeffError::MissingInput(dir));
        }
        for file in PACKED_INPUTS {
            let path = dir.join(file);
            let bytes = read_input(&path)?;
            parse_object(&path, &bytes)?;
            members.insert(format!("{sg}/{file}"), bytes);
        }
        let manifest_path = dir.join(SUBGRAPH_MANIFEST);
        let piece = parse_object(&manifest_path, &read_input(&manifest_path)?)?;
        if let Some(named) = piece.get("sg") {
            if named.as_str() != Some(sg.as_str()) {
                return Err(NeffError::BadInput {
                    path: manifest_path,
                    reason: format!("it names subgraph {named}, not \"{sg}\""),
                });
            }
        }
        let mut entry = Map::new();
        entry.insert("op".into(), Value::String(KELF_OP.into()));
        entry.insert("sg".into(), Value::String(sg.to_string()));
        for (k, v) in piece {
            if k != "schema_version" && k != "sg" && k != "op" {
                entry.insert(k, v);
            }
        }
        graphs.insert(format!("{GRAPH_KEY_PREFIX}{i}"), Value::Object(entry));
        for bin in binaries(&dir)? {
            let path = dir.join(&bin);
            let bytes = read_input(&path)?;
            members.insert(format!("{sg}/{bin}"), bytes);
        }
    }
    let mut manifest = Map::new();
    manifest.insert(
        "schema_version".into(),
        Value::String(MANIFEST_SCHEMA_VERSION.into()),
    );
    manifest.insert("graphs".into(), Value::Object(graphs));
    let mut bytes =
        serde_json::to_vec_pretty(&Value::Object(manifest)).expect("JSON of parsed values");
    bytes.push(b'\n');
    members.insert("neff.json".to_string(), bytes);
    pack(members, opts)
}
