//! XLAInferGoldens — the golden evaluator for the XLA framework (SEED: slot 1 of the front list).
//!
//! Runs `xla_infergoldens` in the work dir on the model and the `value_input*.npy` files found
//! there; writes `value_output0.npy` and `gold-000.p`. Skipped when `gold-000.p` already exists
//! (WIKI).

use super::{exec, Action, JobContext, Step};
use crate::error::NccError;

/// The log line of the skip (WIKI).
pub const SKIP_MESSAGE: &str = "Detected gold-000.p, dumping goldens and skipping XLAInferGoldens";

/// One step: `xla_infergoldens` on the model and the work dir's `value_input*.npy`; a skip step
/// instead when `gold-000.p` exists.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    if ctx.gold_exists {
        return Ok(vec![Step {
            action: Action::Skip {
                reason: SKIP_MESSAGE.to_string(),
            },
            cwd: ".".into(),
            reads: vec!["gold-000.p".into()],
            writes: vec![],
            also_write: Vec::new(),
        }]);
    }
    let mut args = vec![
        "--module".to_string(),
        ctx.model.display().to_string(),
        "--module-type".to_string(),
        ctx.model_format.as_str().to_string(),
        "--input-type".to_string(),
        "numpy".to_string(),
        "--output".to_string(),
        "value_output0".to_string(),
    ];
    for input in ctx.value_inputs {
        args.push("--input".to_string());
        args.push(input.clone());
    }
    args.extend(crate::recon::jobs::xla_infergoldens_optional_flags(
        ctx.inputs,
    ));
    let mut reads = vec![ctx.model.display().to_string()];
    reads.extend(ctx.value_inputs.iter().cloned());
    Ok(vec![exec(
        ctx,
        "xla_infergoldens",
        args,
        ".",
        reads,
        vec!["value_output0.npy".into(), "gold-000.p".into()],
    )])
}
