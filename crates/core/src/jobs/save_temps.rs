//! SaveTemps — in-process (WIKI): copy the whole work dir tree into the launch directory
//! (overwriting same-named files) and keep the work dir. Clients collect intermediate files with
//! `--pipeline compile SaveTemps`.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

/// One in-process step: copy the work dir into the launch directory (see [`run`]).
pub fn steps(_ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(vec![in_process(
        "copy the work dir into the launch directory; keep the work dir",
        ".",
        vec!["*".into()],
        vec!["<launch dir>/*".into()],
    )])
}

/// Copy the work dir tree into the launch directory (same-named files are overwritten; symbolic
/// links are recreated as links). The executor keeps the work dir when SaveTemps is planned.
pub fn run(ctx: &super::RunContext) -> Result<(), NccError> {
    let fail = |e: std::io::Error, p: &std::path::Path| {
        NccError::save_temps(p.display(), &e).caused_by(&e)
    };
    let mut copied = 0usize;
    copy_tree(ctx.work_dir, ctx.launch_dir, &mut copied).map_err(|(e, p)| fail(e, &p))?;
    ctx.info(&format!(
        "SaveTemps copied {} from {} to {}",
        crate::words::count(copied, "file", "files"),
        ctx.work_dir.display(),
        ctx.launch_dir.display()
    ));
    Ok(())
}

fn copy_tree(
    from: &std::path::Path,
    to: &std::path::Path,
    copied: &mut usize,
) -> Result<(), (std::io::Error, std::path::PathBuf)> {
    let entries = std::fs::read_dir(from).map_err(|e| (e, from.to_path_buf()))?;
    let mut names: Vec<_> = entries.flatten().collect();
    names.sort_by_key(|e| e.file_name());
    for entry in names {
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| (e, src.clone()))?;
        if kind.is_dir() {
            if !dst.is_dir() {
                std::fs::create_dir_all(&dst).map_err(|e| (e, dst.clone()))?;
            }
            copy_tree(&src, &dst, copied)?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| (e, src.clone()))?;
            if dst.symlink_metadata().is_ok() {
                std::fs::remove_file(&dst).map_err(|e| (e, dst.clone()))?;
            }
            std::os::unix::fs::symlink(&target, &dst).map_err(|e| (e, dst.clone()))?;
            *copied += 1;
        } else {
            std::fs::copy(&src, &dst).map_err(|e| (e, dst.clone()))?;
            *copied += 1;
        }
    }
    Ok(())
}
