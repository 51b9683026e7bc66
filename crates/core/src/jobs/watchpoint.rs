//! Watchpoint — `watchpoint_insert` per subgraph (debug; kept by the name filter only with
//! `--internal-compiler-debug-mode`).

use super::{exec, JobContext, Step};
use crate::error::NccError;

/// One step per subgraph: `watchpoint_insert --bir sgNN/bir.json --mode MODE` (`MODE` from
/// `--internal-compiler-debug-mode`, default `all`), rewriting the BIR in place.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let mode = ctx
        .inputs
        .internal_compiler_debug_mode
        .as_deref()
        .unwrap_or("all")
        .to_string();
    Ok(ctx
        .subgraphs
        .iter()
        .map(|sg| {
            let bir = format!("{sg}/bir.json");
            exec(
                ctx,
                "watchpoint_insert",
                vec!["--bir".into(), bir.clone(), "--mode".into(), mode.clone()],
                ".",
                vec![bir.clone()],
                vec![bir],
            )
        })
        .collect())
}
