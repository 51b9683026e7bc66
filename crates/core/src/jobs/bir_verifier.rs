//! BIRVerifier / BIRSim — `walrus_driver` in verify-only (`--pass birverifier`) or simulate-only
//! (`--pass bir_sim`) mode, per subgraph (WIKI/RECON). Reachable only through `--pipeline`.

use super::{exec, JobContext, Step};
use crate::error::NccError;

fn per_subgraph(ctx: &JobContext, pass: &str) -> Vec<Step> {
    ctx.subgraphs
        .iter()
        .map(|sg| {
            exec(
                ctx,
                "walrus_driver",
                vec!["bir.json".into(), "--pass".into(), pass.into()],
                sg,
                vec!["bir.json".into()],
                vec![],
            )
        })
        .collect()
}

/// BIRVerifier's steps: `walrus_driver bir.json --pass birverifier` in each subgraph directory.
pub(crate) fn steps_verify(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(per_subgraph(ctx, "birverifier"))
}

/// BIRSim's steps: `walrus_driver bir.json --pass bir_sim` in each subgraph directory.
pub(crate) fn steps_sim(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    Ok(per_subgraph(ctx, "bir_sim"))
}
