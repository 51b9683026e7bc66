//! The worker's hand-off through the daemon's fork server ([`crate::forkserver`]): what the
//! supervisor sends ([`payload`]: the plan it built, as data, with the toolchain, the work dir and
//! the worker's environment) and what the forked worker runs with it ([`body`]: the same
//! [`super::worker::run`] a re-executed worker reaches after planning — here without planning).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::plan::wire::PlanData;
use crate::plan::Plan;
use crate::run::events::EventWriter;
use crate::toolchain::Toolchain;

/// Everything a forked worker needs.
#[derive(Debug, Serialize, Deserialize)]
struct Handoff {
    plan: PlanData,
    toolchain: Option<Toolchain>,
    work_dir: PathBuf,
    env: Vec<(String, String)>,
}

/// The request the fork server's worker takes for `plan` (JSON).
pub fn payload(
    plan: &Plan,
    toolchain: Option<&Toolchain>,
    work_dir: &std::path::Path,
    env: &[(String, String)],
) -> Vec<u8> {
    serde_json::to_vec(&Handoff {
        plan: PlanData::of(plan),
        toolchain: toolchain.cloned(),
        work_dir: work_dir.to_path_buf(),
        env: env.to_vec(),
    })
    .unwrap_or_default()
}

/// The fork server's [`crate::forkserver::Body`]: in the forked worker (single-threaded, its own
/// session), set the worker's environment, go to the launch directory as a re-executed worker
/// starts in it, and run the plan; returns the exit status.
pub fn body(payload: &[u8], events: EventWriter) -> i32 {
    let handoff: Handoff = match serde_json::from_slice(payload) {
        Ok(h) => h,
        Err(e) => {
            return super::worker::fatal(
                Some(&events),
                crate::result::Failure::Internal,
                &format!("[ERROR] nxcc worker: the fork server's request does not read: {e}"),
            )
        }
    };
    let plan = match handoff.plan.into_plan() {
        Ok(p) => p,
        Err(e) => {
            return super::worker::fatal(
                Some(&events),
                crate::result::Failure::Internal,
                &format!("[ERROR] nxcc worker: {e}"),
            )
        }
    };
    for (k, v) in &handoff.env {
        // This process is single-threaded: setting its environment (inherited by the tools)
        // races with nothing.
        std::env::set_var(k, v);
    }
    if let Err(e) = std::env::set_current_dir(&plan.launch_dir) {
        return super::worker::fatal(
            Some(&events),
            crate::result::Failure::Internal,
            &format!(
                "[ERROR] nxcc worker: cannot enter {}: {e}",
                plan.launch_dir.display()
            ),
        );
    }
    super::worker::run(
        &plan,
        handoff.toolchain.as_ref(),
        &handoff.work_dir,
        Some(&events),
    )
}

/// Start the daemon's fork server (the caller must still be single-threaded).
pub fn start_fork_server() -> std::io::Result<std::sync::Arc<crate::forkserver::ForkServer>> {
    crate::forkserver::ForkServer::start(body)
}

/// The `main` of a fork server started again by the daemon ([`crate::forkserver::HELPER_ARG`]).
pub fn fork_server_main() -> i32 {
    crate::forkserver::serve_inherited(body)
}
