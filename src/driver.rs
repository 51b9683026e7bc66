//! The thin entry point: parse the command line, dispatch the subcommand, map every outcome to
//! the original's messages and exit statuses (0, 2 usage, 70 compile failure, 130/143 signals).

use std::ffi::OsString;

use crate::cli::{self, CliError, Command};
use crate::plan::{Invocation, SystemProbe};

pub use crate::cli::subcommand::{err, out};

/// The commit this executable was built from, and its date, when it was built in a git checkout
/// (the build script's `NXCC_COMMIT`); `None` from a source archive.
pub fn commit() -> Option<(&'static str, &'static str)> {
    option_env!("NXCC_COMMIT").map(|c| (c, option_env!("NXCC_COMMIT_DATE").unwrap_or("")))
}

/// The first line of `--version`: `nxcc 0.1.0 (1a2b3c4d5e6f 2026-01-31)`, or `nxcc 0.1.0`
/// without a commit; `neuronx-cc (nxcc) ...` under the original's name.
pub fn version_line(prog: &str, commit: Option<(&str, &str)>) -> String {
    let name = if prog == "nxcc" {
        prog.to_string()
    } else {
        format!("{prog} (nxcc)")
    };
    match commit {
        Some((hash, date)) => format!(
            "{name} {} ({})",
            crate::VERSION,
            format!("{hash} {date}").trim()
        ),
        None => format!("{name} {}", crate::VERSION),
    }
}

/// The toolchain `--version` names: the one this command line would use.
fn version_toolchain() -> Option<crate::toolchain::Toolchain> {
    let launch = std::env::current_dir().unwrap_or_default();
    let request = crate::toolchain::Request::from(
        None,
        std::env::var(crate::recon::toolchain::TOOLCHAIN_ENV)
            .ok()
            .as_deref(),
        &launch,
    );
    crate::toolchain::locate(&request)
}

/// The `--version` text: nxcc's version (and commit), the driver version it reproduces, and the
/// toolchain it would use.
pub fn version_text(prog: &str) -> String {
    let toolchain = match version_toolchain() {
        Some(t) => format!(
            "{}{}",
            t.bin.display(),
            if t.simulated { " (simulated)" } else { "" }
        ),
        None => "none found (use --toolchain DIR, NXCC_TOOLCHAIN, or --toolchain sim)".to_string(),
    };
    format!(
        "{}\nreproduces the {} compile driver\ntoolchain: {toolchain}\n",
        version_line(prog, commit()),
        crate::ORIGINAL_VERSION
    )
}

/// `--version --json`: one object — `name`, `version`, `commit` and `commit_date` (`null`
/// without a commit), `reproduces`, `toolchain` (`{"bin", "simulated"}` or `null`).
pub fn version_json() -> String {
    let toolchain = version_toolchain()
        .map(|t| serde_json::json!({"bin": t.bin.to_string_lossy(), "simulated": t.simulated}));
    let value = serde_json::json!({
        "name": "nxcc",
        "version": crate::VERSION,
        "commit": commit().map(|c| c.0),
        "commit_date": commit().map(|c| c.1),
        "reproduces": crate::ORIGINAL_VERSION,
        "toolchain": toolchain,
    });
    format!("{value}\n")
}

/// Run nxcc with a full argv (`argv[0]` first); returns the exit status.
pub fn main(argv: Vec<OsString>) -> i32 {
    // One executable is every simulated tool (by its argv[0], when the program registered the
    // simulated toolchain) and the shim (see `crate::shim`).
    if let Some(status) = crate::toolchain::simulator().and_then(|s| s.serve_as_tool(&argv)) {
        return status;
    }
    if let Some(status) = crate::shim::serve::main(&argv) {
        return status;
    }
    if argv
        .get(1)
        .is_some_and(|a| a == crate::engine::worker::WORKER_ARG)
    {
        return crate::engine::handoff::worker_main();
    }
    if argv
        .get(1)
        .is_some_and(|a| a == crate::forkserver::HELPER_ARG)
    {
        return crate::engine::handoff::fork_server_main();
    }
    let prog = cli::prog_name(
        &argv
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default(),
    );
    let mut args = Vec::with_capacity(argv.len());
    for a in argv.iter().skip(1) {
        match a.to_str() {
            Some(s) => args.push(s.to_string()),
            None => {
                err(&format!(
                    "{prog}: error: argument {:?} is not valid UTF-8\n",
                    a
                ));
                return CliError::EXIT_STATUS;
            }
        }
    }
    match cli::color::take(&mut args) {
        Ok(when) => cli::color::choose(when),
        Err(message) => {
            err(&format!("{prog}: error: {message}\n"));
            return CliError::EXIT_STATUS;
        }
    }
    let command = match cli::parse(&prog, &args) {
        Ok(c) => c,
        Err(e) => {
            err(&e.render());
            return CliError::EXIT_STATUS;
        }
    };
    match command {
        Command::Help(text) => {
            out(&text);
            0
        }
        Command::Version { json } => {
            out(&if json {
                version_json()
            } else {
                version_text(&prog)
            });
            0
        }
        Command::Compile(args) => compile(&args),
        Command::Other { name, args } => other(&prog, &name, &args),
    }
}

fn compile(args: &cli::CompileArgs) -> i32 {
    if args.settings.daemon && args.settings.dry_run.is_none() {
        return crate::daemon::client::compile(args);
    }
    let probe = match SystemProbe::new() {
        Ok(p) => p,
        Err(e) => {
            err(&format!("[ERROR] cannot read the current directory: {e}\n"));
            return crate::error::EXIT_COMPILE_FAILED;
        }
    };
    let inv = match Invocation::from_args(args, &probe) {
        Ok(inv) => inv,
        Err(r) => {
            err(&r.render());
            return r.exit_status();
        }
    };
    if inv.settings.dry_run.is_some() {
        // What the compile refuses before running anything, the dry run refuses too.
        if let Err(status) = checks(&inv) {
            return status;
        }
    }
    match crate::compile::dry_run(&inv) {
        Some(Ok(text)) => {
            out(&text);
            0
        }
        Some(Err(e)) => {
            err(&format!("{e}\n"));
            crate::error::EXIT_COMPILE_FAILED
        }
        None => run_compile(&inv),
    }
}

/// A real compile from the command line, through the cache when `--cache_dir` is given and the
/// remote server when `--remote` or `--remote-cache` is: signals cancel it (exit 130/143).
fn run_compile(invocation: &Invocation) -> i32 {
    let mut options = crate::engine::session::Options::terminal();
    // This process runs one compile: as a subreaper it inherits whatever the compile leaves; it
    // handles signals (exit 130/143) once the worker runs — a worker forked from this process
    // must not inherit the signal thread.
    options.sole_compile = crate::run::supervisor::become_subreaper().is_ok();
    options.install_signals = true;
    let (cache, remote) = match checks(invocation) {
        Ok(c) => c,
        Err(status) => return status,
    };
    let log_start = std::fs::metadata(&invocation.plan.logfile).map_or(0, |m| m.len());
    let engine = crate::engine::Engine::Pipeline;
    let request = crate::compile::Request {
        invocation,
        options,
        engine: &engine,
        cache,
        key: None,
        remote,
    };
    let done = crate::compile::compile(request);
    crate::reproducer::write::as_asked(
        invocation,
        crate::reproducer::write::Ran::Here(&engine),
        &done.result,
        done.key.as_ref(),
        done.snapshot.as_deref(),
        log_start,
    );
    done.result.exit_status()
}

/// The compile's cache and remote service, from its settings: what a compile checks before
/// anything runs (a dry run too); `Err`: the exit status, the error said.
fn checks(
    invocation: &Invocation,
) -> Result<
    (
        crate::cache::CacheConfig,
        Option<crate::remote::RemoteConfig>,
    ),
    i32,
> {
    let said = |e: crate::error::NccError| {
        err(&format!("{e}\n"));
        crate::error::EXIT_COMPILE_FAILED
    };
    let cache = crate::cache::CacheConfig::of(invocation, None).map_err(said)?;
    let remote = crate::remote::RemoteConfig::of(invocation).map_err(said)?;
    Ok((cache, remote))
}

fn other(prog: &str, name: &str, args: &[String]) -> i32 {
    match name {
        "neff-info" => crate::neff::info::main(prog, args),
        "hlo-info" => crate::hlo::command::main(prog, args),
        "toolchain" => crate::toolchain::command::main(prog, args),
        "shim" => crate::shim::main(prog, args),
        "cache" => crate::cache::command::main(prog, args),
        "parallel-compile" => crate::parallel::command::main(prog, args),
        // The replay compiles through the one entry point, handed down to it (no cache).
        "reproduce" => crate::reproducer::replay::main(prog, args, crate::compile::here),
        "daemon" => crate::daemon::main(prog, args),
        // The bot compiles each action through the one entry point, handed down to it.
        "worker" => crate::remote::worker::main(prog, args, crate::compile::here),
        "completions" => crate::manual::completions(prog, args),
        "man" => crate::manual::man(prog, args),
        "list-operators" => {
            err(&format!(
                "{prog} list-operators: error: nxcc has no operator table of its own; the list comes from the real compiler (neuronx-cc list-operators --framework XLA)\n"
            ));
            CliError::EXIT_STATUS
        }
        _ => {
            err(&format!(
                "{prog} {name}: error: not available in this build\n"
            ));
            CliError::EXIT_STATUS
        }
    }
}
