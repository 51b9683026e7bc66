//! `neff-info --verify`: is a NEFF consistent? The header's fields and layout, the archive length,
//! the IR signature (header and `info.json` against the members), the UUID (well-formed version
//! 4; for NEFFs nxcc wrote, derived from the signature), `info.json` against the header, and the
//! manifest's subgraphs against the members. Unreadable archives are a problem too, not a panic.

use serde_json::Value;

use super::header::{self, FORMAT_VERSION, HEADER_SIZE, VERSION_STRING};
use super::read::{Inspection, Neff};
use crate::recon::neff::{engines_present, uuid_from_signature, ENGINE_ORDER};

/// What a verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Each inconsistency, in a sentence. Empty: the NEFF is valid.
    pub problems: Vec<String>,
    /// `info.json` names nxcc as the producer (so the stricter nxcc rules were checked).
    pub nxcc_written: bool,
    /// What the members hash to (when the archive could be read).
    pub computed_signature: Option<String>,
}

impl Verification {
    /// No problem was found: the NEFF is valid.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verify a NEFF (reading its archive once).
pub fn verify(neff: &Neff) -> Verification {
    match neff.inspect() {
        Ok(ins) => verify_inspection(neff, &ins),
        Err(e) => {
            let mut v = Verification {
                problems: header_problems(neff),
                nxcc_written: false,
                computed_signature: None,
            };
            v.problems.push(format!("archive: {e}"));
            v
        }
    }
}

/// The problems of the header alone (its layout, fixed values, and the archive length).
pub(crate) fn header_problems(neff: &Neff) -> Vec<String> {
    let mut p = Vec::new();
    let (Some(h), Some(bytes)) = (neff.header(), neff.header_bytes()) else {
        return p;
    };
    p.extend(header::layout_problems(bytes));
    if h.format_version != FORMAT_VERSION {
        p.push(format!(
            "header: the format version is {}, expected {FORMAT_VERSION}",
            h.format_version
        ));
    }
    if h.header_size != HEADER_SIZE as u64 {
        p.push(format!(
            "header: the header size is {}, expected {HEADER_SIZE}",
            h.header_size
        ));
    }
    if h.version_string != VERSION_STRING {
        p.push(format!(
            "header: the version string is '{}', expected '{VERSION_STRING}'",
            h.version_string
        ));
    }
    if !header::is_md5_hex(&h.ir_signature) {
        p.push(format!(
            "header: the IR signature '{}' is not 32 lower-case hex characters",
            h.ir_signature.escape_default()
        ));
    }
    if !header::is_v4(&h.uuid) {
        p.push(format!(
            "header: the UUID {} is not an RFC 4122 version-4 UUID",
            header::format_uuid(&h.uuid)
        ));
    }
    if h.archive_length != neff.archive_len() {
        p.push(format!(
            "archive length: the header says {} bytes, the file holds {} bytes after the header",
            h.archive_length,
            neff.archive_len()
        ));
    }
    p
}

fn parse_json(ins: &Inspection, name: &str, p: &mut Vec<String>) -> Option<Value> {
    if ins.not_kept.iter().any(|n| n == name) {
        p.push(format!("{name} is too large to check"));
        return None;
    }
    let bytes = ins.kept.get(name)?;
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Some(v),
        Err(e) => {
            p.push(format!("{name} is not valid JSON ({e})"));
            None
        }
    }
}

/// Verify with an inspection already made.
pub(crate) fn verify_inspection(neff: &Neff, ins: &Inspection) -> Verification {
    let mut p = header_problems(neff);
    let computed = &ins.computed_signature;
    let h = neff.header();
    if let Some(h) = h {
        if &h.ir_signature != computed {
            p.push(format!(
                "IR signature: the header says {}, the members hash to {computed}",
                h.ir_signature.escape_default()
            ));
        }
    }
    let has = |name: &str| ins.members.iter().any(|m| m.name == name);

    let mut nxcc_written = false;
    let info = parse_json(ins, "info.json", &mut p);
    if !has("info.json") {
        p.push("info.json is missing".to_string());
    }
    if let Some(info) = &info {
        nxcc_written = info
            .get("producer")
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with("nxcc "));
        check_info(info, h, ins, nxcc_written, &mut p);
    }

    let manifest = parse_json(ins, "neff.json", &mut p);
    if !has("neff.json") {
        p.push("neff.json is missing".to_string());
    }
    if let Some(m) = &manifest {
        check_manifest(m, ins, &mut p);
    }
    for name in ins.kept.keys() {
        if name.contains('/') {
            parse_json(ins, name, &mut p);
        }
    }
    Verification {
        problems: p,
        nxcc_written,
        computed_signature: Some(computed.clone()),
    }
}

fn check_info(
    info: &Value,
    h: Option<&header::Header>,
    ins: &Inspection,
    nxcc_written: bool,
    p: &mut Vec<String>,
) {
    let computed = &ins.computed_signature;
    match info.get("ir_signature").and_then(Value::as_str) {
        Some(s) if s == computed => {}
        Some(s) => p.push(format!(
            "IR signature: info.json says {}, the members hash to {computed}",
            s.escape_default()
        )),
        None => p.push("info.json has no ir_signature".to_string()),
    }
    let uuid = info_uuid(info, p);
    if let (Some(u), Some(h)) = (uuid, h) {
        if u != h.uuid {
            p.push(format!(
                "UUID: info.json says {}, the header says {}",
                header::format_uuid(&u),
                header::format_uuid(&h.uuid)
            ));
        }
    }
    if nxcc_written {
        check_nxcc_written(info, uuid.or(h.map(|h| h.uuid)), ins, p);
    }
    if let Some(h) = h {
        check_against_header(info, h, p);
    }
}

/// `info.json`'s uuid, when it is an RFC 4122 version-4 UUID (else why not, in `p`).
fn info_uuid(info: &Value, p: &mut Vec<String>) -> Option<[u8; 16]> {
    match info.get("uuid").and_then(Value::as_str) {
        None => {
            p.push("info.json has no uuid".to_string());
            None
        }
        Some(text) => match header::parse_uuid(text) {
            Some(u) if header::is_v4(&u) => Some(u),
            _ => {
                p.push(format!(
                    "info.json: the uuid '{}' is not an RFC 4122 version-4 UUID",
                    text.escape_default()
                ));
                None
            }
        },
    }
}

/// What nxcc's own NEFFs hold besides: the UUID derived from the IR signature, members in byte
/// order of their names, the engines of the binaries present.
fn check_nxcc_written(info: &Value, uuid: Option<[u8; 16]>, ins: &Inspection, p: &mut Vec<String>) {
    let expected = uuid_from_signature(&ins.computed_signature);
    if let Some(u) = uuid {
        if u != expected {
            p.push(format!(
                "UUID: {} is not the one derived from the IR signature ({})",
                header::format_uuid(&u),
                header::format_uuid(&expected)
            ));
        }
    }
    let names: Vec<&str> = ins.members.iter().map(|m| m.name.as_str()).collect();
    if names.windows(2).any(|w| w[0].as_bytes() >= w[1].as_bytes()) {
        p.push("members are not in byte order of their names".to_string());
    }
    let derived = engines_present(names.iter().copied());
    if let Some(engines) = info_engines(info) {
        if engines != derived {
            p.push(format!(
                "engines: info.json says [{}], the members have binaries for [{}]",
                header::engine_names(&engines).join(", "),
                header::engine_names(&derived).join(", ")
            ));
        }
    }
}

/// `info.json` against the header: versions, feature flags, file name, engines.
fn check_against_header(info: &Value, h: &header::Header, p: &mut Vec<String>) {
    let num = |ptr: &str| info.pointer(ptr).and_then(Value::as_u64);
    let field_checks: [(&str, Option<u64>, u64); 3] = [
        (
            "version major",
            num("/version/major"),
            u64::from(h.version_major),
        ),
        (
            "version minor",
            num("/version/minor"),
            u64::from(h.version_minor),
        ),
        ("feature flags", num("/feature_flags"), h.feature_flags),
    ];
    for (what, in_info, in_header) in field_checks {
        match in_info {
            Some(v) if v == in_header => {}
            Some(v) => p.push(format!(
                "{what}: info.json says {v}, the header says {in_header}"
            )),
            None => p.push(format!("info.json has no {what}")),
        }
    }
    match info.get("neff_filename").and_then(Value::as_str) {
        Some(n) if n == h.neff_filename => {}
        Some(n) => p.push(format!(
            "NEFF file name: info.json says '{}', the header says '{}'",
            n.escape_default(),
            h.neff_filename.escape_default()
        )),
        None => p.push("info.json has no neff_filename".to_string()),
    }
    match info_engines(info) {
        Some(e) if e == h.engines => {}
        Some(e) => p.push(format!(
            "engines: info.json says [{}], the header says [{}]",
            header::engine_names(&e).join(", "),
            h.engine_names().join(", ")
        )),
        None => p.push("info.json has no engines map".to_string()),
    }
}

/// The engine flags of `info.json`'s `engines` map (absent engines are not present).
fn info_engines(info: &Value) -> Option<[bool; 5]> {
    let map = info.get("engines")?.as_object()?;
    let mut e = [false; 5];
    for (i, name) in ENGINE_ORDER.iter().enumerate() {
        e[i] = map.get(*name).and_then(Value::as_bool).unwrap_or(false);
    }
    Some(e)
}

fn check_manifest(m: &Value, ins: &Inspection, p: &mut Vec<String>) {
    let Some(graphs) = m.get("graphs").and_then(Value::as_object) else {
        p.push("neff.json has no graphs object".to_string());
        return;
    };
    for (key, g) in graphs {
        let Some(sg) = g.get("sg").and_then(Value::as_str) else {
            p.push(format!("neff.json: graph '{key}' names no subgraph (sg)"));
            continue;
        };
        for file in ["def.json", "tensor_map.json"] {
            let name = format!("{sg}/{file}");
            if !ins.members.iter().any(|m| m.name == name) {
                p.push(format!(
                    "neff.json: graph '{key}' is subgraph {sg}, but {name} is missing"
                ));
            }
        }
    }
}
