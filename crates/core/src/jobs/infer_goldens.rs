//! InferGoldens / MetaInferGoldens — in-process golden evaluators of the original for frameworks
//! other than XLA. nxcc compiles only XLA models, so running either fails with a clear message
//! (EDRV083). They are reachable only through `--pipeline`.

use super::{in_process, JobContext, Step};
use crate::error::NccError;

/// The failure of running one of these jobs.
pub fn unavailable(job: &str) -> NccError {
    NccError::not_for_xla(job)
}

/// InferGoldens' one in-process step (which fails when run).
pub(crate) fn steps_infer(_ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(vec![in_process(
        "fails: InferGoldens is only available for non-XLA frameworks",
        ".",
        vec![],
        vec![],
    )])
}

/// MetaInferGoldens' one in-process step (which fails when run).
pub(crate) fn steps_meta(_ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(vec![in_process(
        "fails: MetaInferGoldens is only available for non-XLA frameworks",
        ".",
        vec![],
        vec![],
    )])
}

/// Running InferGoldens: always NCC_EDRV083.
pub(crate) fn run_infer(_ctx: &super::RunContext) -> Result<(), NccError> {
    Err(unavailable("InferGoldens"))
}

/// Running MetaInferGoldens: always NCC_EDRV083.
pub(crate) fn run_meta(_ctx: &super::RunContext) -> Result<(), NccError> {
    Err(unavailable("MetaInferGoldens"))
}
