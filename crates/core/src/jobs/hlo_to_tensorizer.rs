//! HLOToTensorizer — the `hlo2penguin` lowering, always the first job (SEED).
//!
//! Runs `hlo2penguin` in the work dir. Reads the model; writes `penguin.py`.
//! Argv spellings are WIKI facts; which optional flags appear when is in
//! [`crate::recon::jobs::hlo2penguin_optional_flags`].

use super::{exec, shell_split, JobContext, Step};
use crate::cli::level;
use crate::error::NccError;

/// One step: `hlo2penguin` in the work dir on the model, with the compile's target, LNC and log
/// settings, the optional flags, then `--internal-hlo2tensorizer-options`.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let mut args = vec![
        "--input".to_string(),
        ctx.model.display().to_string(),
        "--out-dir".to_string(),
        "./".to_string(),
        "--output".to_string(),
        "penguin.py".to_string(),
        format!("--target-instance={}", ctx.target()),
        format!("--logical-nc-config={}", ctx.logical_nc_config()),
        format!("--verbose={}", level::name(ctx.log.console_level())),
        format!("--logfile={}", ctx.logfile.display()),
        format!("--logfile-verbose={}", level::name(ctx.log.file_level)),
    ];
    args.extend(crate::recon::jobs::hlo2penguin_optional_flags(ctx.inputs));
    if let Some(extra) = &ctx.inputs.internal_hlo2tensorizer_options {
        args.extend(shell_split(extra, "internal_hlo2tensorizer_options")?);
    }
    Ok(vec![exec(
        ctx,
        "hlo2penguin",
        args,
        ".",
        vec![ctx.model.display().to_string()],
        vec!["penguin.py".into()],
    )])
}
