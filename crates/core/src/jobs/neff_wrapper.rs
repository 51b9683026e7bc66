//! NeffWrapper — `hlo-neff-wrapper` (WIKI): wraps the NEFF into an HLO module beside the output.

use super::{exec, JobContext, Step};
use crate::error::NccError;

/// `<output dir>/<output stem>.wrapped.hlo.pb`.
pub(crate) fn wrapped_path(output: &std::path::Path) -> std::path::PathBuf {
    let stem = output
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("file");
    output.with_file_name(format!("{stem}.wrapped.hlo.pb"))
}

/// One step: `hlo-neff-wrapper` on the model, the NEFF and the netlist with every subgraph's
/// `io_transposes.json`, writing [`wrapped_path`].
pub fn steps(ctx: &JobContext) -> Result<Vec<Step>, NccError> {
    let wrapped = wrapped_path(ctx.output);
    let mut args = vec![
        "--hlo".to_string(),
        ctx.model.display().to_string(),
        "--neff".to_string(),
        ctx.output.display().to_string(),
        "--output".to_string(),
        wrapped.display().to_string(),
        "--netlist".to_string(),
        "hlo_netlist.json".to_string(),
    ];
    let transposes: Vec<String> = ctx
        .subgraphs
        .iter()
        .map(|sg| format!("{sg}/io_transposes.json"))
        .collect();
    if transposes.len() == 1 {
        args.push("--io_transposes".into());
        args.push(transposes[0].clone());
    } else {
        args.push("--modular-io-transposes".into());
        args.push(transposes.join(" "));
    }
    let mut reads = vec![
        ctx.model.display().to_string(),
        ctx.output.display().to_string(),
        "hlo_netlist.json".to_string(),
    ];
    reads.extend(transposes);
    Ok(vec![exec(
        ctx,
        "hlo-neff-wrapper",
        args,
        ".",
        reads,
        vec![wrapped.display().to_string()],
    )])
}
