//! The bundle of a compile sent to the daemon (`nxcc compile --daemon --gen-reproducer`). The
//! client writes it, as its own user, into its own `--reproducer-dir` (default: its current
//! directory) — the daemon, which may run as another user, never writes a bundle for a client.
//! Before the compile is sent, the client plans it as `nxcc compile` would and takes a private
//! snapshot of the model ([`crate::snapshot`], where a local compile takes its own); once the
//! daemon says how the compile ended (its typed status and error lines, and the jobs' figures
//! its events carried), [`super::write::as_asked`] writes the bundle from that snapshot, as it
//! does for a local compile, naming the engine the daemon said its stream opened with — nxcc's
//! pipeline, or the external compiler it runs (`--compiler`), its path and identity — and the
//! toolchain the daemon said the compile runs with once it planned it (the daemon's own, when the
//! client names none); from a daemon that says neither (an older nxcc), that the pipeline and the
//! client's own toolchain are assumed. A client stopped by a
//! signal (SIGINT, SIGTERM, SIGHUP: the daemon then cancels the compile, which wants no bundle)
//! removes its snapshot before it exits.

use super::write::Ran;
use crate::cache::{EngineIdentity, ToolchainIdentity};
use crate::cli::CompileArgs;
use crate::engine::result::CompileResult;
use crate::engine::session::{snapshot_root, Options};
use crate::plan::{Invocation, SystemProbe};
use crate::snapshot::Snapshot;

/// A compile about to be sent whose bundle may be written when it ends.
pub struct Pending {
    invocation: Invocation,
    /// The model as it was sent (`None`: it could not be taken; the bundle then reads the
    /// model's own path, as a local compile's does when its snapshot failed).
    snapshot: Option<Snapshot>,
    log_start: u64,
}

impl Pending {
    /// Ready a bundle for the compile `args` asks for; `None` when it asks for none, or cannot
    /// be planned here (the daemon then says why the compile is refused, and no compile runs).
    pub fn prepare(args: &CompileArgs) -> Option<Pending> {
        args.settings.reproducer.when?;
        let probe = SystemProbe::new().ok()?;
        let invocation = Invocation::from_args(args, &probe).ok()?;
        let root = snapshot_root(&invocation, &Options::terminal());
        let snapshot = std::fs::create_dir_all(&root)
            .and_then(|()| Snapshot::take(&invocation.plan.model, &root))
            .ok();
        if let Some(s) = &snapshot {
            remove_on_signal(s.dir().to_path_buf());
        }
        let log_start = std::fs::metadata(&invocation.plan.logfile).map_or(0, |m| m.len());
        Some(Pending {
            invocation,
            snapshot,
            log_start,
        })
    }

    /// The compile ended as `result`: write its bundle if it is wanted (said on stderr), naming
    /// `engine`, what the daemon said runs it, and `toolchain`, what it said the compile runs
    /// with (`None`: it did not say).
    pub fn finish(
        self,
        result: &CompileResult,
        engine: Option<&EngineIdentity>,
        toolchain: Option<&ToolchainIdentity>,
    ) {
        super::write::as_asked(
            &self.invocation,
            Ran::InDaemon { engine, toolchain },
            result,
            None,
            self.snapshot.as_ref(),
            self.log_start,
        );
    }
}

/// Remove the snapshot directory `dir` and exit as the signal says (130, 143) when this process
/// is sent SIGINT, SIGTERM or SIGHUP: an interrupted compile wants no bundle, and the snapshot
/// is nobody's to remove afterwards.
fn remove_on_signal(dir: std::path::PathBuf) {
    if let Ok(signals) = crate::run::signals::install() {
        signals.on_signal(move |sig| {
            let _ = std::fs::remove_dir_all(&dir);
            std::process::exit(crate::run::signals::exit_status_for(sig));
        });
    }
}
