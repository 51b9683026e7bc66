//! Kelper — the NEFF linker, in-process; nxcc implements it fully: packs the per-subgraph backend
//! artifacts into a NEFF (05-neff.md) and writes it to `--output` atomically.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

/// One in-process step: read every subgraph's `def.json`, `tensor_map.json`, `neff.json` and engine
/// `.bin` files, write `--output`.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let mut reads = Vec::new();
    for sg in ctx.subgraphs {
        reads.push(format!("{sg}/def.json"));
        reads.push(format!("{sg}/tensor_map.json"));
        reads.push(format!("{sg}/neff.json"));
        reads.push(format!("{sg}/*.bin"));
    }
    Ok(vec![in_process(
        "pack the NEFF",
        ".",
        reads,
        vec![ctx.output.display().to_string()],
    )])
}

/// Pack the NEFF and publish it at `--output`: written to the partial path beside it, then
/// renamed, so the output is either absent or complete.
pub fn run(ctx: &super::RunContext) -> Result<(), NccError> {
    let opts = crate::neff::write::PackOptions::for_compile(ctx.job.ns, ctx.job.output);
    let bytes = crate::neff::kelper::pack_work_dir(ctx.work_dir, ctx.job.subgraphs, &opts)
        .map_err(|e| {
            NccError::neff_pack(
                format!("Kelper could not pack the NEFF: {e}"),
                "Check the backend's outputs in the work directory.",
            )
        })?;
    let out = ctx.job.output;
    let publish = || -> std::io::Result<()> {
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // Atomic visibility comes from the rename; no fsync (the original does not pay for
        // durability across power loss either, and it costs milliseconds on some file systems).
        std::fs::write(ctx.output_partial, &bytes)?;
        std::fs::rename(ctx.output_partial, out)
    };
    if let Err(e) = publish() {
        let _ = std::fs::remove_file(ctx.output_partial);
        return Err(NccError::neff_pack(
            format!("Kelper could not write {}: {e}", out.display()),
            "Check that the output directory is writable.",
        ));
    }
    ctx.info(&format!("wrote {} ({} bytes)", out.display(), bytes.len()));
    Ok(())
}
