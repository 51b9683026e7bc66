//! StaticIOTranspose — in-process (WIKI, CERTAIN); nxcc implements it fully: validates and
//! simplifies every `io_transposes.json`, and writes transposed copies of the inputs that have
//! one, linked into each subgraph directory.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

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
