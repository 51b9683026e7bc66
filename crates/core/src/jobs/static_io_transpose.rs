//! StaticIOTranspose — in-process (WIKI, CERTAIN); nxcc implements it fully:
//! - reads every `io_transposes.json` in the work dir and its `sgNN/` directories: a JSON array of
//!   `{"input_name": str, "reshape": [int], "transpose": [int]}` (WIKI schema);
//! - validates each entry (`transpose` a permutation of `0..len(reshape)`, at most 6 dims,
//!   positive dims) — else NCC_EDRV084;
//! - simplifies it (`crate::recon::jobs::simplify_transpose`) and rewrites the file;
//! - for each entry whose input `inputs/value_<input_name>.npy` exists, writes
//!   `transposed_inputs/value_<input_name>.npy` (the input reshaped then transposed, C order, same
//!   dtype), then links every file of `transposed_inputs/` into each `sgNN/` and `ncN/sgNN/`
//!   directory (relative symbolic links).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{in_process, JobContext, RunContext, Step};
use crate::error::NccError;
use crate::npy;

/// One in-process step: read the work dir's and each subgraph's `io_transposes.json` and
/// `inputs/value_*.npy`, write `transposed_inputs/`.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let mut reads = vec!["io_transposes.json".to_string()];
    reads.extend(
        ctx.subgraphs
            .iter()
            .map(|sg| format!("{sg}/io_transposes.json")),
    );
    reads.push("inputs/value_*.npy".into());
    Ok(vec![in_process(
        "validate and simplify io_transposes.json; transpose inputs",
        ".",
        reads,
        vec!["transposed_inputs/value_*.npy".into()],
    )])
}

/// One entry of `io_transposes.json`; unknown fields are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The model input it applies to (its file is `inputs/value_<input_name>.npy`).
    pub input_name: String,
    /// The shape the input is reshaped to first (positive dims, at most [`MAX_DIMS`]).
    pub reshape: Vec<i64>,
    /// The permutation of the reshaped dims applied next.
    pub transpose: Vec<i64>,
    /// Every other field, written back unchanged when the file is rewritten.
    #[serde(flatten)]
    pub other: serde_json::Map<String, serde_json::Value>,
}

/// The most dims an entry may have.
pub const MAX_DIMS: usize = 6;

fn illegal(e: &Entry) -> NccError {
    NccError::static_io(
        format!("Illegal static io reshape from {:?} to {:?}", e.reshape, e.transpose),
        format!(
            "The transpose of input {:?} must be a permutation of 0..{} over at most {MAX_DIMS} positive dims.",
            e.input_name,
            e.reshape.len()
        ),
    )
}

/// Check an entry; returns its dims and permutation as `usize`.
pub(crate) fn validate(e: &Entry) -> Result<(Vec<usize>, Vec<usize>), NccError> {
    let n = e.reshape.len();
    if n > MAX_DIMS || e.transpose.len() != n || e.reshape.iter().any(|d| *d <= 0) {
        return Err(illegal(e));
    }
    let mut seen = vec![false; n];
    for &t in &e.transpose {
        if t < 0 || t as usize >= n || seen[t as usize] {
            return Err(illegal(e));
        }
        seen[t as usize] = true;
    }
    Ok((
        e.reshape.iter().map(|d| *d as usize).collect(),
        e.transpose.iter().map(|t| *t as usize).collect(),
    ))
}

fn io_error<E: std::fmt::Display + 'static>(what: &str, path: &Path, e: E) -> NccError {
    let err = NccError::static_io(
        format!("StaticIOTranspose could not {what} {}: {e}", path.display()),
        "Check the work directory.",
    );
    // An I/O error keeps its number (a full disk is not the model's fault).
    match (&e as &dyn std::any::Any).downcast_ref::<std::io::Error>() {
        Some(io) => err.caused_by(io),
        None => err,
    }
}

/// Every `io_transposes.json` of the work dir, its own first, then the subgraphs' in order.
fn transpose_files(work_dir: &Path, subgraphs: &[String]) -> Vec<PathBuf> {
    std::iter::once(work_dir.join("io_transposes.json"))
        .chain(
            subgraphs
                .iter()
                .map(|sg| work_dir.join(sg).join("io_transposes.json")),
        )
        .filter(|p| p.is_file())
        .collect()
}

/// Subgraph directories inputs are linked into: `sgNN/` and `ncN/sgNN/`.
fn link_dirs(work_dir: &Path, subgraphs: &[String]) -> Vec<(PathBuf, &'static str)> {
    let mut dirs: Vec<(PathBuf, &'static str)> = subgraphs
        .iter()
        .map(|sg| (work_dir.join(sg), ".."))
        .collect();
    if let Ok(rd) = std::fs::read_dir(work_dir) {
        let mut ncs: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.is_dir()
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                        n.starts_with("nc")
                            && n[2..].chars().all(|c| c.is_ascii_digit())
                            && n.len() > 2
                    })
            })
            .collect();
        ncs.sort();
        for nc in ncs {
            if let Ok(rd) = std::fs::read_dir(&nc) {
                let mut sgs: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.is_dir()
                            && p.file_name()
                                .and_then(|n| n.to_str())
                                .is_some_and(|n| n.starts_with("sg"))
                    })
                    .collect();
                sgs.sort();
                dirs.extend(sgs.into_iter().map(|p| (p, "../..")));
            }
        }
    }
    dirs
}

/// Rewrite a file of the compile's own work directory. The old file is removed first, so the
/// new one is renamed onto a free name: a rename that replaces a file makes ext4 write the new
/// file's blocks at once (`auto_da_alloc`), and the work directory's removal then waits for
/// them to be freed, where a short-lived file is otherwise never written at all.
fn write_replacing(path: &Path, bytes: &[u8]) -> Result<(), NccError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io_error("write", path, e));
        }
        _ => {}
    }
    crate::fsx::atomic::write_file(path, bytes, crate::fsx::Durability::Visible)
        .map_err(|e| io_error("write", path, e))
}

/// Validate, simplify and rewrite every `io_transposes.json`, transpose the inputs that exist and
/// link them into each subgraph directory (see the module documentation).
pub fn run(ctx: &RunContext) -> Result<(), NccError> {
    let files = transpose_files(ctx.work_dir, ctx.job.subgraphs);
    if files.is_empty() {
        ctx.info("no io_transposes.json; nothing to transpose");
        return Ok(());
    }
    let out_dir = ctx.work_dir.join("transposed_inputs");
    let mut written = 0usize;
    for file in &files {
        let text = std::fs::read(file).map_err(|e| io_error("read", file, e))?;
        let entries: Vec<Entry> =
            serde_json::from_slice(&text).map_err(|e| io_error("parse", file, e))?;
        let mut simplified = Vec::with_capacity(entries.len());
        for e in &entries {
            let (dims, perm) = validate(e)?;
            let (new_dims, new_perm) = crate::recon::jobs::simplify_transpose(&dims, &perm);
            simplified.push(Entry {
                input_name: e.input_name.clone(),
                reshape: new_dims.iter().map(|d| *d as i64).collect(),
                transpose: new_perm.iter().map(|p| *p as i64).collect(),
                other: e.other.clone(),
            });
            let input = ctx
                .work_dir
                .join("inputs")
                .join(format!("value_{}.npy", e.input_name));
            if input.is_file() {
                transpose_input(&input, &out_dir, e, &new_dims, &new_perm)?;
                written += 1;
            }
        }
        let mut json =
            serde_json::to_vec_pretty(&simplified).map_err(|e| io_error("serialise", file, e))?;
        json.push(b'\n');
        write_replacing(file, &json)?;
        ctx.info(&format!(
            "{}: {} entries validated and simplified",
            file.strip_prefix(ctx.work_dir).unwrap_or(file).display(),
            entries.len()
        ));
    }
    if written > 0 {
        link_inputs(&out_dir, ctx.work_dir, ctx.job.subgraphs)?;
        ctx.info(&format!(
            "transposed {written} inputs into transposed_inputs/"
        ));
    }
    Ok(())
}

fn transpose_input(
    input: &Path,
    out_dir: &Path,
    e: &Entry,
    dims: &[usize],
    perm: &[usize],
) -> Result<(), NccError> {
    let bytes = std::fs::read(input).map_err(|err| io_error("read", input, err))?;
    let array = npy::parse(&bytes).map_err(|err| io_error("read", input, err))?;
    let count: usize = array.shape.iter().product();
    let wanted: usize = e.reshape.iter().map(|d| *d as usize).product();
    if count != wanted {
        return Err(NccError::static_io(
            format!(
                "Illegal static io reshape from {:?} to {:?}",
                e.reshape, e.transpose
            ),
            format!(
                "Input {:?} has shape {:?} ({count} elements), which cannot be reshaped to {:?}.",
                e.input_name, array.shape, e.reshape
            ),
        ));
    }
    let data = npy::to_c_order(&array);
    let moved = npy::transpose(dims, perm, array.itemsize, &data);
    let out_shape: Vec<usize> = e
        .transpose
        .iter()
        .map(|&t| e.reshape[t as usize] as usize)
        .collect();
    std::fs::create_dir_all(out_dir).map_err(|err| io_error("create", out_dir, err))?;
    let out = out_dir.join(format!("value_{}.npy", e.input_name));
    write_replacing(&out, &npy::write(&array.descr, &out_shape, &moved))
}

fn link_inputs(out_dir: &Path, work_dir: &Path, subgraphs: &[String]) -> Result<(), NccError> {
    let mut files: Vec<String> = std::fs::read_dir(out_dir)
        .map_err(|e| io_error("read", out_dir, e))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.ends_with(".nxcc-tmp"))
        .collect();
    files.sort();
    for (dir, up) in link_dirs(work_dir, subgraphs) {
        if !dir.is_dir() {
            continue;
        }
        for f in &files {
            let link = dir.join(f);
            if link.symlink_metadata().is_ok() {
                std::fs::remove_file(&link).map_err(|e| io_error("replace", &link, e))?;
            }
            std::os::unix::fs::symlink(Path::new(up).join("transposed_inputs").join(f), &link)
                .map_err(|e| io_error("link", &link, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recon::jobs::simplify_transpose;

    fn entry(reshape: &[i64], transpose: &[i64]) -> Entry {
        Entry {
            input_name: "x".into(),
            reshape: reshape.to_vec(),
            transpose: transpose.to_vec(),
            other: Default::default(),
        }
    }

    #[test]
    fn validation() {
        assert!(validate(&entry(&[2, 3], &[1, 0])).is_ok());
        for (r, t) in [
            (&[2, 3][..], &[0, 0][..]),
            (&[2, 3], &[1]),
            (&[2, 0], &[1, 0]),
            (&[2, -1], &[1, 0]),
            (&[2, 3], &[2, 0]),
            (&[1, 1, 1, 1, 1, 1, 1], &[0, 1, 2, 3, 4, 5, 6]),
        ] {
            let err = validate(&entry(r, t)).unwrap_err().to_string();
            assert!(
                err.starts_with("[ERROR] [NCC_EDRV084] Illegal static io reshape from"),
                "{err}"
            );
        }
    }

    #[test]
    fn simplification() {
        // Size-1 dims go, adjacent in-order axes merge.
        assert_eq!(
            simplify_transpose(&[1, 4, 1, 6], &[0, 3, 2, 1]),
            (vec![4, 6], vec![1, 0])
        );
        assert_eq!(
            simplify_transpose(&[2, 3, 4], &[0, 1, 2]),
            (vec![24], vec![0])
        );
        assert_eq!(
            simplify_transpose(&[2, 3, 4], &[2, 0, 1]),
            (vec![6, 4], vec![1, 0])
        );
        assert_eq!(
            simplify_transpose(&[2, 3, 4, 5], &[1, 0, 3, 2]),
            (vec![2, 3, 4, 5], vec![1, 0, 3, 2])
        );
        assert_eq!(simplify_transpose(&[1, 1], &[1, 0]), (vec![], vec![]));
    }

    proptest::proptest! {
        /// The simplified entry moves every element exactly where the original entry does.
        #[test]
        fn simplification_preserves_the_transposition(dims in proptest::collection::vec(1usize..4, 1..6), seed in proptest::prelude::any::<u64>()) {
            let n = dims.len();
            let mut perm: Vec<usize> = (0..n).collect();
            let mut s = seed;
            for i in (1..n).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                perm.swap(i, (s >> 33) as usize % (i + 1));
            }
            let count: usize = dims.iter().product();
            let data: Vec<u8> = (0..count).flat_map(|i| (i as u16).to_le_bytes()).collect();
            let direct = npy::transpose(&dims, &perm, 2, &data);
            let (sd, sp) = simplify_transpose(&dims, &perm);
            let simplified = if sd.is_empty() { data.clone() } else { npy::transpose(&sd, &sp, 2, &data) };
            proptest::prop_assert_eq!(direct, simplified);
        }
    }
}
