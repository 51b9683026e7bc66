//! Kelper — the NEFF linker, in-process; nxcc implements it fully: packs the per-subgraph backend
//! artifacts into a NEFF (05-neff.md) and writes it to `--output` atomically (and, for the
//! compile cache, to a private file the cache names).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::{in_process, JobContext, Step};
use crate::error::NccError;
use crate::fsx::{AtomicFile, Durability};

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

/// The worker's environment variable naming a new file, in a directory private to the compile's
/// caller (the compile cache's temporary entry), that Kelper writes the NEFF to as well: the
/// cache stores what the compile wrote, never what is at `--output` afterwards.
pub const PRODUCT_ENV: &str = "NXCC_WORKER_PRODUCT";

/// Pack the NEFF and publish it at `--output` through an [`AtomicFile`], so the output is either
/// as it was or complete; first, when [`PRODUCT_ENV`] asks, write the same bytes to the product
/// file (created new, no link followed; an error there is a note, not a failure).
pub fn run(ctx: &super::RunContext) -> Result<(), NccError> {
    let mut opts = crate::neff::write::PackOptions::for_compile(
        ctx.job.inputs.arch(),
        ctx.job.inputs.enable_fast_loading_neuron_binaries,
        ctx.job.output,
    );
    // A NEFF of the simulated toolchain says so in its info.json (it cannot run on hardware).
    opts.simulated = ctx.job.toolchain.is_some_and(|t| t.simulated);
    let bytes = crate::neff::kelper::pack_work_dir(ctx.work_dir, ctx.job.subgraphs, &opts)
        .map_err(|e| {
            NccError::neff_pack(
                format!("Kelper could not pack the NEFF: {e}"),
                "Check the backend's outputs in the work directory.",
            )
        })?;
    if let Some(product) = std::env::var_os(PRODUCT_ENV) {
        let product = std::path::Path::new(&product);
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(product)
            .and_then(|mut f| f.write_all(&bytes));
        if let Err(e) = written {
            let _ = std::fs::remove_file(product);
            ctx.info(&format!(
                "could not write the NEFF for the cache to {}: {e}",
                product.display()
            ));
        }
    }
    let out = ctx.job.output;
    let publish = || -> std::io::Result<()> {
        if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        // No fsync (the original does not pay for durability across power loss either, and it
        // costs milliseconds on some file systems).
        let mut f = AtomicFile::create(out)?;
        f.write_all(&bytes)?;
        f.commit(Durability::Visible)
    };
    if let Err(e) = publish() {
        return Err(NccError::neff_pack(
            format!("Kelper could not write {}: {e}", out.display()),
            "Check that the output directory is writable.",
        )
        .caused_by(&e));
    }
    ctx.info(&format!("wrote {} ({} bytes)", out.display(), bytes.len()));
    Ok(())
}
