//! WalrusDriver — ONE `walrus_driver` process per subgraph directory, carrying the whole walrus
//! pass list as `--pass` (SEED: one job, not one per pass; with one subgraph, exactly one
//! process). With `--enable-internal-fork-walrus` the same argv goes to `run_backend_driver` of
//! the toolchain's `libwalrus.so`, in process (SEED/WIKI).
//!
//! Never `--optlevel` or `--allocator` together with `--pass` (WIKI DVR003, DVR005).
//! Writes per subgraph: `def.json`, `tensor_map.json`, `neff.json` and the engine `.bin` files.

use super::{exec, shell_split, Action, JobContext, Step};
use crate::error::NccError;

/// The engines a backend may write a `.bin` for.
pub const ENGINES: [&str; 5] = ["PE", "Pool", "Activation", "SP", "DVE"];

/// The arguments after the program name (and the `bir.json` input).
pub fn args(ctx: &JobContext) -> Result<Vec<String>, NccError> {
    let mut a = vec![
        "bir.json".to_string(),
        "--pass".to_string(),
        ctx.walrus_passes.join(","),
        "--memory-analysis-dump=memory-pressure".to_string(),
        "--memory-analysis-mem-types=dram".to_string(),
    ];
    a.extend(crate::recon::jobs::walrus_driver_optional_flags(
        ctx.ns,
        ctx.dge_on_levels,
    ));
    if let Some(extra) = ctx.ns.str("internal_backend_options") {
        a.extend(shell_split(extra, "internal_backend_options")?);
    }
    Ok(a)
}

pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let args = args(ctx)?;
    let mut writes = vec![
        "def.json".to_string(),
        "tensor_map.json".to_string(),
        "neff.json".to_string(),
        "*.bin".to_string(),
    ];
    if ctx.ns.bool("enable_internal_walrus_replay_script") {
        writes.push("replay_walrus.sh".into());
    }
    let fork = ctx.ns.bool("enable_internal_fork_walrus");
    Ok(ctx
        .subgraphs
        .iter()
        .map(|sg| {
            let reads = vec!["bir.json".to_string()];
            match (fork, ctx.toolchain) {
                (true, Some(tc)) => {
                    let mut argv = vec!["walrus_driver".to_string()];
                    argv.extend(args.iter().cloned());
                    Step {
                        action: Action::Library {
                            library: tc.libwalrus(),
                            symbol: "run_backend_driver",
                            argv,
                        },
                        cwd: sg.clone(),
                        reads,
                        writes: writes.clone(),
                    }
                }
                _ => exec(
                    ctx,
                    "walrus_driver",
                    args.clone(),
                    sg,
                    reads,
                    writes.clone(),
                ),
            }
        })
        .collect())
}
