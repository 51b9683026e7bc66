//! Backend — the experimental legacy-standalone executor (WIKI): `nn_executor` through
//! `/bin/bash -c "ulimit -t <s> && ..."`, the one job the original runs through a shell.
//! The real `nn_executor` is not shipped with the compiler; the simulated one is.

use super::{Action, JobContext, Step};
use crate::error::NccError;

/// One step: `nn_executor` on the first subgraph's BIR and tensor map, through `/bin/bash -c` under
/// `ulimit -t`.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let program = ctx.tool_path("nn_executor");
    let exe = program
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "nn_executor".to_string());
    let sg = ctx.subgraphs.first().map(String::as_str).unwrap_or("sg00");
    let script = format!(
        "ulimit -t {} && {} --bir {sg}/bir.json --tensor_map {sg}/tensor_map.json --sunda --json backend.json",
        crate::recon::jobs::BACKEND_CPU_LIMIT_S,
        crate::shell::quote(&exe)
    );
    Ok(vec![Step {
        action: Action::Shell {
            tool: "nn_executor",
            program,
            script,
        },
        cwd: ".".into(),
        reads: vec![format!("{sg}/bir.json"), format!("{sg}/tensor_map.json")],
        writes: vec!["backend.bir".into()],
        also_write: Vec::new(),
    }])
}
