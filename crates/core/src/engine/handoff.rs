//! The one hand-off from a supervisor to its worker, however the worker is started — forked from
//! the command line, forked by the daemon's fork server ([`crate::forkserver`]), or this binary
//! executed (the bytes on a descriptor, `crate::run::handoff`): the same [`payload`] — the
//! invocation the supervisor built, itself, with the toolchain it resolved, the work dir it
//! made, the worker's environment and the cache's product path — and the same [`run`] that runs
//! it. The worker never plans again: it runs exactly the plan its supervisor built (and showed).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plan::Invocation;
use crate::result::Failure;
use crate::run::events::EventWriter;
use crate::toolchain::Toolchain;

/// The payload's format: a worker refuses any other (a supervisor and its worker are one build).
pub const FORMAT: u32 = 1;

/// Everything a worker needs: the supervisor writes it with the invocation it holds (`I` a
/// reference), the worker reads it with its own (`I` the value).
#[derive(Debug, Serialize, Deserialize)]
struct Handoff<I> {
    format: u32,
    invocation: I,
    toolchain: Option<Toolchain>,
    work_dir: PathBuf,
    env: Vec<(String, String)>,
    product: Option<PathBuf>,
}

/// What a worker gets for `inv` (JSON): the invocation, the toolchain, the work dir, the worker's
/// environment, and the file the NEFF is also written to (`crate::jobs::kelper::PRODUCT_ENV`).
pub fn payload(
    inv: &Invocation,
    toolchain: Option<&Toolchain>,
    work_dir: &Path,
    env: &[(String, String)],
    product: Option<&Path>,
) -> Vec<u8> {
    serde_json::to_vec(&Handoff {
        format: FORMAT,
        invocation: inv,
        toolchain: toolchain.cloned(),
        work_dir: work_dir.to_path_buf(),
        env: env.to_vec(),
        product: product.map(Path::to_path_buf),
    })
    .unwrap_or_default()
}

/// The fork server's [`crate::forkserver::Body`]: [`run`] on its report pipe.
pub fn body(payload: &[u8], events: EventWriter) -> i32 {
    run(payload, Some(&events), "the fork server's request")
}

/// A worker forked by its supervisor: [`run`] on its report pipe.
pub(crate) fn forked(payload: &[u8], events: EventWriter) -> i32 {
    run(payload, Some(&events), "the hand-off")
}

/// Run the worker a payload describes (in the worker: single-threaded, its own session): set
/// its environment, go to the launch directory, run the plan; returns the exit status. `what`
/// names the payload in the error when it does not read.
pub fn run(payload: &[u8], events: Option<&EventWriter>, what: &str) -> i32 {
    let fatal = |message: String| super::worker::fatal(events, Failure::Internal, &message);
    let handoff: Handoff<Invocation> = match serde_json::from_slice(payload) {
        Ok(h) => h,
        Err(e) => return fatal(format!("[ERROR] nxcc worker: {what} does not read: {e}")),
    };
    if handoff.format != FORMAT {
        return fatal(format!(
            "[ERROR] nxcc worker: a hand-off of format {}, not {FORMAT}",
            handoff.format
        ));
    }
    let inv = handoff.invocation;
    // This process is single-threaded: setting its environment (inherited by the tools) races
    // with nothing.
    for (k, v) in &handoff.env {
        std::env::set_var(k, v);
    }
    if let Some(p) = &handoff.product {
        std::env::set_var(crate::jobs::kelper::PRODUCT_ENV, p);
    }
    if let Err(e) = std::env::set_current_dir(&inv.plan.launch_dir) {
        return fatal(format!(
            "[ERROR] nxcc worker: cannot enter {}: {e}",
            inv.plan.launch_dir.display()
        ));
    }
    if let Err(e) = simulator_settings(handoff.toolchain.as_ref()) {
        let setting = Failure::Environment(crate::result::Environment::Setting);
        let line = crate::error::NccError::environment_setting(e).to_string();
        return super::worker::fatal(events, setting, &line);
    }
    super::worker::run(&inv, handoff.toolchain.as_ref(), &handoff.work_dir, events)
}

/// A simulated toolchain's settings in the tools' environment (this process's, now) read: a tool
/// would refuse one that does not, and that is the environment's failure — said before any job
/// runs, never remembered as the model's (NCC_EDRV119).
fn simulator_settings(toolchain: Option<&crate::toolchain::Toolchain>) -> Result<(), String> {
    match (
        toolchain.filter(|t| t.simulated),
        crate::toolchain::simulator(),
    ) {
        (Some(_), Some(sim)) => sim.check_settings(&|name| std::env::var(name).ok()),
        _ => Ok(()),
    }
}

/// The `main` of this binary executed as a worker ([`super::worker::WORKER_ARG`]): the hand-off
/// its supervisor gave it; returns the exit status.
pub fn worker_main() -> i32 {
    let events = EventWriter::from_env();
    match crate::run::handoff::take() {
        Ok(Some(payload)) => run(&payload, events.as_ref(), "the hand-off"),
        Ok(None) => super::worker::fatal(
            events.as_ref(),
            Failure::Internal,
            "[ERROR] nxcc worker: started without a hand-off (it is run by nxcc compile)",
        ),
        Err(e) => super::worker::fatal(
            events.as_ref(),
            Failure::Internal,
            &format!("[ERROR] nxcc worker: cannot read the hand-off: {e}"),
        ),
    }
}

/// Start the daemon's fork server (the caller must still be single-threaded).
pub fn start_fork_server() -> std::io::Result<std::sync::Arc<crate::forkserver::ForkServer>> {
    crate::forkserver::ForkServer::start(body)
}

/// The `main` of a fork server started again by the daemon ([`crate::forkserver::HELPER_ARG`]).
pub fn fork_server_main() -> i32 {
    crate::forkserver::serve_inherited(body)
}
