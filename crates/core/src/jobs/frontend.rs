//! Frontend — the HLO/Penguin frontend, in-process in the original (SEED: no `hlo-opt`, no Popen).
//!
//! nxcc cannot contain Penguin, so:
//! - with the simulated toolchain, the simulated frontend runs in-process;
//! - with a real toolchain, the installed package's own driver runs this one job (CLIENTS: the way
//!   public clients call it), as a subprocess whose command is shown below. That path cannot be
//!   tested without a real Neuron install.
//!
//! Writes, per subgraph, `sgNN/bir.json`, `sgNN/tensor_map.json`, `sgNN/io_transposes.json`, and
//! `hlo_netlist.json` in the work dir.

use super::{in_process, Action, JobContext, Step};
use crate::error::NccError;

/// The Python bridge that runs the installed driver's Frontend job alone.
pub const BRIDGE: &str = "import sys; from neuronxcc.driver.CommandDriver import main; sys.argv = ['neuronx-cc'] + sys.argv[1:]; sys.exit(main())";

fn writes(ctx: &JobContext) -> Vec<String> {
    let mut w = Vec::new();
    for sg in ctx.subgraphs {
        for f in ["bir.json", "tensor_map.json", "io_transposes.json"] {
            w.push(format!("{sg}/{f}"));
        }
    }
    w.push("hlo_netlist.json".into());
    w
}

/// One step: the installed driver's Frontend through [`BRIDGE`] with a real toolchain; in process
/// otherwise (the simulated frontend, or a plan made before the toolchain is known).
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let reads = vec![ctx.model.display().to_string(), "penguin.py".to_string()];
    match ctx.toolchain {
        Some(tc) if !tc.simulated => {
            // `--temp-dir` is the real work dir at run time; the plan (no work dir yet) shows `.`.
            let mut args = vec![
                "-c".to_string(),
                BRIDGE.to_string(),
                "compile".to_string(),
                ctx.model.display().to_string(),
                "--framework".to_string(),
                "XLA".to_string(),
                "--target".to_string(),
                ctx.target().to_string(),
                "--lnc".to_string(),
                ctx.logical_nc_config().to_string(),
                "--pipeline".to_string(),
                "Frontend".to_string(),
                "--temp-dir".to_string(),
                ctx.work_dir
                    .map_or_else(|| ".".to_string(), |w| w.display().to_string()),
            ];
            if let Some(t) = &ctx.inputs.tensorizer_options {
                args.push(format!("--tensorizer-options={t}"));
            }
            Ok(vec![Step {
                action: Action::Exec {
                    tool: "python3",
                    program: None,
                    args,
                },
                cwd: ".".into(),
                reads,
                writes: writes(ctx),
                also_write: Vec::new(),
            }])
        }
        Some(_) => Ok(vec![in_process(
            "simulated frontend (nxcc-sim)",
            ".",
            reads,
            writes(ctx),
        )]),
        None => Ok(vec![in_process(
            "frontend (toolchain not resolved yet)",
            ".",
            reads,
            writes(ctx),
        )]),
    }
}

/// The in-process frontend: the simulated one (a real toolchain's frontend runs as the bridge
/// subprocess above, so this is reached only with the simulated toolchain, or with none).
pub fn run(ctx: &super::RunContext) -> Result<(), NccError> {
    if !ctx.job.toolchain.is_some_and(|t| t.simulated) {
        return Err(NccError::tool_not_found("a toolchain for the Frontend"));
    }
    let override_n = std::env::var(crate::toolchain::SIM_SUBGRAPHS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok());
    let simulator = crate::toolchain::simulator()
        .ok_or_else(|| NccError::simulated_toolchain(crate::toolchain::no_simulator()))?;
    let subgraphs = simulator.frontend(ctx.job.model, ctx.work_dir, override_n)?;
    ctx.info(&format!(
        "simulated frontend wrote {} subgraph(s): {}",
        subgraphs.len(),
        subgraphs.join(", ")
    ));
    Ok(())
}
