//! A remote result's NEFF, published only once it is one. The server's answer names a
//! `model.neff` by digest; the blob is downloaded beside `--output` under a temporary name
//! (bounded by its declared size, checked against its digest), then checked as a NEFF — the
//! header, the archive and its members, as `nxcc neff-info --verify` does — and only then copied
//! into the compile cache's temporary entry (with a note of where it came from, which the cache
//! records in the entry's `meta.json`) and renamed to `--output`. A result that fails any check
//! is an error and leaves nothing behind: no `--output`, no cache entry.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::action::OUTPUT;
use super::client::{Remote, RemoteError};
use super::digest;
use super::re;
use super::text;
use crate::cache::meta::ORIGIN_FILE;
use crate::neff::{verify, Neff};

/// How many of a NEFF's problems an error names.
const PROBLEMS_SHOWN: usize = 3;

/// A result's NEFF that was published.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// Its digest.
    pub digest: re::Digest,
}

/// The result's one `model.neff` (an error if it names none, or more than one).
pub fn neff_of(remote: &Remote, result: &re::ActionResult) -> Result<re::Digest, RemoteError> {
    let mut named = result.output_files.iter().filter(|f| f.path == OUTPUT);
    let (Some(f), None) = (named.next(), named.next()) else {
        return Err(remote.untrusted(format!(
            "the remote result names {} {OUTPUT} (one expected)",
            result
                .output_files
                .iter()
                .filter(|f| f.path == OUTPUT)
                .count()
        )));
    };
    f.digest
        .clone()
        .ok_or_else(|| remote.untrusted(format!("the remote result's {OUTPUT} has no digest")))
}

/// Check the NEFF at `path`: the problems `neff-info --verify` finds (none: it is a NEFF).
pub fn check(path: &Path) -> Result<(), String> {
    let neff = Neff::open(path).map_err(|e| text::message(&e.to_string()))?;
    let v = verify::verify(&neff);
    if v.is_ok() {
        return Ok(());
    }
    let mut shown: Vec<String> = v
        .problems
        .iter()
        .take(PROBLEMS_SHOWN)
        .map(|p| text::message(p))
        .collect();
    if v.problems.len() > PROBLEMS_SHOWN {
        shown.push(format!("and {} more", v.problems.len() - PROBLEMS_SHOWN));
    }
    Err(shown.join("; "))
}

/// Download the result's NEFF, check it, and publish it: into `product` (a new file in the
/// compile cache's temporary entry, with `origin` beside it) and at `output` (see the module
/// documentation).
pub fn deliver(
    remote: &Remote,
    result: &re::ActionResult,
    output: &Path,
    product: Option<&Path>,
    origin: &serde_json::Value,
) -> Result<Delivered, RemoteError> {
    let d = neff_of(remote, result)?;
    let partial = partial_path(output);
    remote.download_to(&d, &partial)?;
    let placed = check(&partial)
        .map_err(|why| {
            remote.untrusted(format!(
                "the remote result's {OUTPUT} ({}) is not a valid NEFF: {why}",
                digest::show(&d)
            ))
        })
        .and_then(|()| {
            publish(&partial, output, product, origin).map_err(|e| {
                remote.other(
                    nxcc_core::error::NccError::output_not_written(output.display(), e).to_string(),
                )
            })
        });
    if placed.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    placed.map(|()| Delivered { digest: d })
}

/// A temporary name beside `output` for its download.
fn partial_path(output: &Path) -> PathBuf {
    let name = output
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file.neff");
    output.with_file_name(crate::fsx::unique::name(&format!(
        ".{name}.nxcc-partial-remote-"
    )))
}

fn publish(
    partial: &Path,
    output: &Path,
    product: Option<&Path>,
    origin: &serde_json::Value,
) -> std::io::Result<()> {
    if let Some(p) = product {
        let mut src = std::fs::File::open(partial)?;
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p)?;
        std::io::copy(&mut src, &mut dst)?;
        let mut note = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(p.with_file_name(ORIGIN_FILE))?;
        note.write_all(origin.to_string().as_bytes())?;
    }
    std::fs::rename(partial, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_is_not_a_neff() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.neff");
        std::fs::write(&p, b"#!/bin/sh\necho owned\n").unwrap();
        assert!(check(&p).is_err());
        let mut bytes = vec![0u8; 2048];
        bytes[..4].copy_from_slice(b"NEFF");
        std::fs::write(&p, &bytes).unwrap();
        assert!(check(&p).is_err());
    }
}
