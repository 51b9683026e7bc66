//! WalrusDriver — ONE `walrus_driver` process per subgraph directory, carrying the whole walrus
//! pass list as `--pass` (SEED: one job, not one per pass; with one subgraph, exactly one
//! process). With `--enable-internal-fork-walrus` the same argv goes to `run_backend_driver` of
//! the toolchain's `libwalrus.so`, in process (SEED/WIKI); nxcc never changes its directory, so
//! the library gets the input as an absolute path and writes its outputs beside it.
//!
//! Never `--optlevel` or `--allocator` together with `--pass` (WIKI DVR003, DVR005).
//! Writes per subgraph: `def.json`, `tensor_map.json`, `neff.json` and the engine `.bin` files;
//! with `--enable-internal-walrus-replay-script` also `replay_walrus.sh` (WIKI).

use super::{exec, shell_split, Action, JobContext, Step};
use crate::error::NccError;
use crate::run::process::Spec;

/// The engines a backend may write a `.bin` for.
pub const ENGINES: [&str; 5] = ["PE", "Pool", "Activation", "SP", "DVE"];

/// The arguments after the program name, with the `bir.json` input as given.
pub fn args(ctx: &JobContext, bir: &str) -> Result<Vec<String>, NccError> {
    let mut a = vec![
        bir.to_string(),
        "--pass".to_string(),
        ctx.walrus_passes.join(","),
        "--memory-analysis-dump=memory-pressure".to_string(),
        "--memory-analysis-mem-types=dram".to_string(),
    ];
    a.extend(crate::recon::jobs::walrus_driver_optional_flags(
        ctx.inputs,
        ctx.dge_on_levels,
    ));
    if let Some(extra) = &ctx.inputs.internal_backend_options {
        a.extend(shell_split(extra, "internal_backend_options")?);
    }
    Ok(a)
}

/// The replay script: `#!/bin/bash` and the exact invocation, run from the subgraph directory.
pub(crate) fn replay_script(command: &Spec) -> String {
    format!("#!{}\n# Replays this subgraph's walrus_driver run.\ncd \"$(dirname \"$0\")\" || exit 1\nexec {command}\n", super::SHELL)
}

/// One step per subgraph directory: `walrus_driver` there with [`args`], or with
/// `--enable-internal-fork-walrus` the toolchain's `run_backend_driver` in process; each with its
/// replay script when asked for.
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let mut writes = vec![
        "def.json".to_string(),
        "tensor_map.json".to_string(),
        "neff.json".to_string(),
        "*.bin".to_string(),
    ];
    let replay = ctx.inputs.enable_internal_walrus_replay_script;
    if replay {
        writes.push("replay_walrus.sh".into());
    }
    let fork = ctx.inputs.enable_internal_fork_walrus;
    let mut steps = Vec::with_capacity(ctx.subgraphs.len());
    for sg in ctx.subgraphs {
        let reads = vec!["bir.json".to_string()];
        let mut step = match (fork, ctx.toolchain) {
            (true, Some(tc)) => {
                // In process the call runs in the launch directory (nothing changes directory):
                // the input is named by its path in the work dir.
                let bir = match ctx.work_dir {
                    Some(w) => w.join(sg).join("bir.json").display().to_string(),
                    None => format!("<work dir>/{sg}/bir.json"),
                };
                let mut argv = vec!["walrus_driver".to_string()];
                argv.extend(args(ctx, &bir)?);
                Step {
                    action: Action::Library {
                        library: tc.libwalrus(),
                        symbol: "run_backend_driver",
                        argv,
                    },
                    cwd: sg.clone(),
                    reads,
                    writes: writes.clone(),
                    also_write: Vec::new(),
                }
            }
            _ => exec(
                ctx,
                "walrus_driver",
                args(ctx, "bir.json")?,
                sg,
                reads,
                writes.clone(),
            ),
        };
        if replay {
            if let Some(command) = step.shown_command() {
                step.also_write.push((
                    "replay_walrus.sh".to_string(),
                    replay_script(&command),
                    true,
                ));
            }
        }
        steps.push(step);
    }
    Ok(steps)
}
