//! Kelper — the NEFF linker, in-process; nxcc implements it fully: packs the per-subgraph backend
//! artifacts into a NEFF (05-neff.md) and writes it to `--output` atomically.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

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
