//! `nxcc neff-info FILE [--json] [--extract MEMBER] [--extract-all DIR] [--verify]`: inspect,
//! verify or unpack a NEFF.
//!
//! Default output: the layout, the header's fields, the member list, and the subgraphs from
//! `neff.json` with a summary of each one's `def.json` and `tensor_map.json`; `--json` prints the
//! same as one JSON object. `--extract` writes one member's bytes to stdout; `--extract-all`
//! unpacks under a directory. `--verify` prints `OK` or the problems (exit 0 or 1). A file that is
//! not a NEFF or cannot be read: a message on stderr, exit 1. Usage errors: clap's words,
//! exit 2.

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value};

use super::read::Neff;
use super::summary::Summary;
use super::{extract, summary, verify, NeffError};
use crate::cli::subcommand::{err, out, parse, DriverOptions};

/// Exit status of a NEFF that is invalid, unreadable or not a NEFF.
pub const EXIT_INVALID: i32 = 1;

/// Inspect, verify or unpack a NEFF.
#[derive(Debug, clap::Parser)]
pub(crate) struct NeffInfo {
    /// The NEFF file.
    #[arg(value_name = "FILE")]
    pub(crate) file: String,
    /// Print the same information as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the bytes of one member to stdout.
    #[arg(long, value_name = "MEMBER", conflicts_with_all = ["json", "verify", "extract_all"])]
    pub(crate) extract: Option<String>,
    /// Unpack every member under DIR (created if missing); nothing is written outside it.
    #[arg(long = "extract-all", value_name = "DIR", conflicts_with_all = ["json", "verify"])]
    pub(crate) extract_all: Option<String>,
    /// Check the header, the archive length, the IR signature and the UUID; print OK or the
    /// problems; exit 1 when the NEFF is invalid.
    #[arg(long)]
    pub(crate) verify: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

/// Run `neff-info` with its arguments; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let cmd: NeffInfo = match parse(prog, "neff-info", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let file = cmd.file.clone();
    // An I/O error or an unusable target directory names its own path; any other is about the
    // file.
    let fail = |e: &NeffError| {
        match e {
            NeffError::Io { .. } | NeffError::Target { .. } => {
                err(&format!("{prog} neff-info: error: {e}\n"))
            }
            _ => err(&format!("{prog} neff-info: error: {file}: {e}\n")),
        }
        EXIT_INVALID
    };
    let neff = match Neff::open(Path::new(&file)) {
        Ok(n) => n,
        Err(e) => return fail(&e),
    };
    let done = match (&cmd.extract, &cmd.extract_all) {
        (Some(member), _) => extract_member(&neff, member),
        (None, Some(dir)) => extract_all(&neff, dir),
        (None, None) if cmd.verify => return verified(&neff, &file, cmd.json),
        (None, None) => show(&neff, cmd.json),
    };
    match done {
        Ok(()) => 0,
        Err(Some(e)) => fail(&e),
        // The reader went away (`| head`): nothing more to say.
        Err(None) => EXIT_INVALID,
    }
}

/// A member's bytes on stdout; `Err(None)`: stdout was closed.
fn extract_member(neff: &Neff, member: &str) -> Result<(), Option<NeffError>> {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let result = neff
        .copy_member(member, &mut lock)
        .and_then(|_| lock.flush().map_err(|e| NeffError::io("<stdout>", e)));
    match result {
        Err(NeffError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            Err(None)
        }
        other => other.map_err(Some),
    }
}

/// Every member under `dir`, and how many.
fn extract_all(neff: &Neff, dir: &str) -> Result<(), Option<NeffError>> {
    let members = extract::extract_all(neff, Path::new(dir)).map_err(Some)?;
    out(&format!(
        "extracted {} member(s) into {dir}\n",
        members.len()
    ));
    Ok(())
}

/// `--verify`: OK, or the problems (as JSON with `--json`); exit 0 or [`EXIT_INVALID`].
fn verified(neff: &Neff, file: &str, as_json: bool) -> i32 {
    let v = verify::verify(neff);
    if as_json {
        let j = json!({
            "file": file,
            "ok": v.is_ok(),
            "problems": v.problems,
            "nxcc_written": v.nxcc_written,
            "computed_ir_signature": v.computed_signature,
        });
        out(&format!("{}\n", pretty(&j)));
    } else if v.is_ok() {
        out("OK\n");
    } else {
        let mut text = String::new();
        for p in &v.problems {
            text.push_str(p);
            text.push('\n');
        }
        text.push_str(&format!("INVALID ({} problem(s))\n", v.problems.len()));
        out(&text);
    }
    if v.is_ok() {
        0
    } else {
        EXIT_INVALID
    }
}

/// The summary, as text or JSON, written as it is produced: a NEFF of many members is never
/// held as one text. `Err(None)`: stdout was closed.
fn show(neff: &Neff, as_json: bool) -> Result<(), Option<NeffError>> {
    let ins = neff.inspect().map_err(Some)?;
    let s = summary::summarise(neff, &ins);
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let written = if as_json {
        serde_json::to_writer_pretty(&mut w, &s)
            .map_err(std::io::Error::from)
            .and_then(|()| w.write_all(b"\n"))
    } else {
        render_text(&s, &mut w)
    };
    match written.and_then(|()| w.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(None),
        Err(e) => Err(Some(NeffError::io("<stdout>", e))),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| "null".to_string())
}

/// A value for a text line: strings bare (control characters escaped), briefs as
/// `[n items]` / `{n keys}`, anything else as compact JSON.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => super::names::shown(s),
        Value::Object(o) if o.len() == 1 && o.contains_key("items") => {
            format!("[{} items]", o["items"])
        }
        Value::Object(o) if o.len() == 1 && o.contains_key("keys") => {
            format!("{{{} keys}}", o["keys"])
        }
        other => other.to_string(),
    }
}

fn fields_line(o: &serde_json::Map<String, Value>) -> String {
    o.iter()
        .map(|(k, v)| format!("{k} {}", text_of(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The default (text) output, written to `w` line by line.
pub(crate) fn render_text(s: &Summary, w: &mut dyn Write) -> std::io::Result<()> {
    let file = s
        .neff
        .path()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "<memory>".to_string());
    writeln!(w, "file: {file} ({} bytes)", s.neff.file_len())?;
    writeln!(w, "layout: {}", s.neff.layout().describe())?;
    if let Some(h) = s.neff.header() {
        render_header(h, w)?;
    }
    if let Some(p) = s.info.as_ref().and_then(|i| i.get("producer")) {
        writeln!(w, "producer: {}", text_of(p))?;
    }
    let total: u64 = s.members.iter().map(|m| m.size).sum();
    writeln!(w, "members ({}, {total} bytes):", s.members.len())?;
    for m in s.members {
        writeln!(w, "  {:>12}  {}", m.size, super::names::shown(&m.name))?;
    }
    if let Some(fields) = s.manifest.as_object() {
        if !fields.is_empty() {
            writeln!(w, "neff.json: {}", fields_line(fields))?;
        }
    }
    writeln!(w, "subgraphs ({}):", s.subgraphs.len())?;
    for g in &s.subgraphs {
        render_subgraph(s, g, w)?;
    }
    for n in &s.notes {
        writeln!(w, "note: {}", super::names::shown(n))?;
    }
    Ok(())
}

/// The header's fields, one a line.
fn render_header(h: &super::header::Header, w: &mut dyn Write) -> std::io::Result<()> {
    let h = summary::header_json(h);
    writeln!(w, "header:")?;
    let engines: Vec<&str> = h["engines"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(_, p)| p.as_bool() == Some(true))
                .map(|(n, _)| n.as_str())
                .collect()
        })
        .unwrap_or_default();
    let flags = h["feature_flags"].as_u64().unwrap_or(0);
    let rows = [
        ("format version", text_of(&h["format_version"])),
        ("header size", text_of(&h["header_size"])),
        ("archive length", text_of(&h["archive_length"])),
        ("IR signature", text_of(&h["ir_signature"])),
        ("version string", text_of(&h["version_string"])),
        (
            "version",
            format!("{}.{}", h["version_major"], h["version_minor"]),
        ),
        ("feature flags", format!("{flags:#x}")),
        ("UUID", text_of(&h["uuid"])),
        ("NEFF file name", text_of(&h["neff_filename"])),
        (
            "engines",
            if engines.is_empty() {
                "none".to_string()
            } else {
                engines.join(", ")
            },
        ),
        ("world size", text_of(&h["world_size"])),
        ("arch mode", text_of(&h["arch_mode"])),
    ];
    for (k, v) in rows {
        writeln!(w, "  {k:<16}{v}")?;
    }
    Ok(())
}

/// One subgraph: its key, op and directory, its fields, `def.json`, `tensor_map.json` and files.
fn render_subgraph(
    s: &Summary,
    g: &super::summary::Subgraph,
    w: &mut dyn Write,
) -> std::io::Result<()> {
    let d = g.detail();
    let key = d
        .key
        .as_deref()
        .map(super::names::shown)
        .unwrap_or_else(|| "(not in neff.json)".to_string());
    let mut line = format!("  {key}");
    if !d.op.is_null() {
        line.push_str(&format!("  op {}", text_of(&d.op)));
    }
    if let Some(sg) = &g.sg {
        line.push_str(&format!("  sg {}", super::names::shown(sg)));
    }
    writeln!(w, "{line}")?;
    if !d.fields.is_empty() {
        writeln!(w, "    fields: {}", fields_line(&d.fields))?;
    }
    match d.def.as_object() {
        Some(d) => writeln!(w, "    def.json: {}", fields_line(d))?,
        None => writeln!(w, "    def.json: (none)")?,
    }
    match d.tensor_map.as_object() {
        Some(tm) => writeln!(w, "    tensor_map.json: {}", tensor_map_line(tm))?,
        None => writeln!(w, "    tensor_map.json: (none)")?,
    }
    if g.sg.is_some() {
        write!(w, "    files: ")?;
        for (i, (name, size)) in s.files(g).enumerate() {
            if i > 0 {
                write!(w, ", ")?;
            }
            write!(w, "{} ({size})", super::names::shown(name))?;
        }
        writeln!(w)?;
    }
    Ok(())
}

fn tensor_map_line(tm: &serde_json::Map<String, Value>) -> String {
    let mut parts = Vec::new();
    if let Some(n) = tm.get("inputs") {
        let names: Vec<String> = tm
            .get("input_names")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(text_of).collect())
            .unwrap_or_default();
        if names.is_empty() {
            parts.push(format!("{} input(s)", text_of(n)));
        } else {
            parts.push(format!("{} input(s) ({})", text_of(n), names.join(", ")));
        }
    }
    if let Some(alias) = tm.get("alias_map") {
        match alias.as_array() {
            Some(list) if list.is_empty() => parts.push("no aliases".to_string()),
            Some(list) => {
                let items: Vec<String> = list
                    .iter()
                    .map(|a| {
                        let must = match a.get("must_alias") {
                            Some(Value::Bool(true)) => " (must alias)",
                            _ => "",
                        };
                        format!(
                            "{} -> {}{must}",
                            a.get("input_name").map(text_of).unwrap_or_default(),
                            a.get("output_name").map(text_of).unwrap_or_default()
                        )
                    })
                    .collect();
                parts.push(format!("alias_map: {}", items.join(", ")));
            }
            None => parts.push(format!("alias_map {}", text_of(alias))),
        }
    }
    for (k, v) in tm {
        if !matches!(k.as_str(), "inputs" | "input_names" | "alias_map") {
            parts.push(format!("{k} {}", text_of(v)));
        }
    }
    parts.join("; ")
}

/// `neff-info`'s command line as clap defines it (nxcc's completions and manual page).
pub fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<NeffInfo>(prog, "neff-info")
}
