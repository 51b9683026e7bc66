//! Laying out a simulated toolchain directory, and the `nxcc toolchain` subcommand.
//!
//! `nxcc toolchain sim DIR` creates, as in a real install's layout:
//! - `DIR/bin/<tool>` for each native tool: a symbolic link to the `nxcc-sim` executable, which
//!   acts as the tool it is invoked as;
//! - `DIR/bin/.nxcc-simulated-toolchain`: the marker that identifies a simulated toolchain;
//! - `DIR/lib/libwalrus.so`: a link to the crate's `cdylib` (`libnxcc.so`), whose
//!   `run_backend_driver` serves `--enable-internal-fork-walrus`.
//!
//! Both are looked for next to the current executable, in its `deps/` directory and in its
//! parent directory (where they are for test binaries in `target/<profile>/deps`); the most
//! recently built copy wins. Without `libnxcc.so` (an
//! install that ships only the binaries) the layout has no `lib/libwalrus.so` and says so.
//!
//! Laying out is idempotent and safe under concurrency: each entry is created under a unique
//! temporary name and renamed into place, the marker last; an existing entry that is not a link
//! (something the user owns) is never replaced. `--toolchain sim` lays out
//! [`crate::toolchain::simulated_home`] once ([`ensure_default`]).
//!
//! The simulated toolchain is a test instrument: its outputs cannot run on Neuron hardware.

use std::io;
use std::path::{Path, PathBuf};

use crate::cli::argparse::{Nargs, Positional};
use crate::cli::flags::{self, flag, Action, Choices, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{Stop, Subcommand, HELP};
use crate::recon::toolchain::{SIM_MARKER, TOOLCHAIN_ENV};
use crate::toolchain::{self, Request, Toolchain, LIBWALRUS, TOOLS};

/// The simulated tools' executable.
pub const SIM_EXE: &str = "nxcc-sim";
/// The crate's `cdylib`, laid out as `libwalrus.so`.
pub const LIB_FILE: &str = "libnxcc.so";

/// The files a layout links to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    pub sim: PathBuf,
    /// `None` when `libnxcc.so` is not beside the executables.
    pub lib: Option<PathBuf>,
}

fn search_dirs() -> io::Result<Vec<PathBuf>> {
    let exe = std::env::current_exe()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let dir = exe
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| io::Error::other("the current executable has no directory"))?;
    let mut dirs = vec![dir.clone(), dir.join("deps")];
    if let Some(parent) = dir.parent() {
        dirs.push(parent.to_path_buf());
    }
    Ok(dirs)
}

/// The most recently modified `name` among `dirs` (a cargo target directory keeps a copy of the
/// library in `deps/` that is newer than the one beside the binaries after `cargo test`).
fn newest(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter()
        .map(|d| d.join(name))
        .filter_map(|p| {
            let m = std::fs::metadata(&p).ok().filter(|m| m.is_file())?;
            Some((m.modified().ok(), p))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, p)| p.canonicalize().unwrap_or(p))
}

/// Find `nxcc-sim` and `libnxcc.so` next to the current executable (or in its `deps/` or parent
/// directory; the most recently built copy wins).
pub fn sources() -> io::Result<Sources> {
    let dirs = search_dirs()?;
    let sim = newest(&dirs, SIM_EXE).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{SIM_EXE} not found next to the current executable (looked in {})",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    Ok(Sources {
        sim,
        lib: newest(&dirs, LIB_FILE),
    })
}

/// Lay out a simulated toolchain in `dir` (see the module docs); returns it.
pub fn lay_out(dir: &Path) -> io::Result<Toolchain> {
    lay_out_from(dir, &sources()?)
}

/// Lay out `dir` linking to the given sources.
pub fn lay_out_from(dir: &Path, src: &Sources) -> io::Result<Toolchain> {
    let root = std::path::absolute(dir)?;
    let bin = root.join("bin");
    let lib = root.join("lib");
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&lib)?;
    for tool in TOOLS {
        place_link(&src.sim, &bin.join(tool))?;
    }
    if let Some(l) = &src.lib {
        place_link(l, &lib.join(LIBWALRUS))?;
    }
    crate::sim::files::atomic_write(&bin.join(SIM_MARKER), marker_text(src).as_bytes())?;
    Ok(Toolchain {
        bin,
        simulated: true,
    })
}

fn marker_text(src: &Sources) -> String {
    format!(
        "nxcc simulated toolchain {}\nsim: {}\nlib: {}\n{}\n",
        crate::VERSION,
        src.sim.display(),
        src.lib
            .as_ref()
            .map(|l| l.display().to_string())
            .unwrap_or_else(|| "(none)".into()),
        crate::sim::NOT_FOR_HARDWARE
    )
}

/// Make `link` a symbolic link to `target`, atomically (a uniquely named link renamed over it).
fn place_link(target: &Path, link: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(link) {
        Ok(m) if !m.file_type().is_symlink() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a link; refusing to replace it",
                    link.display()
                ),
            ))
        }
        Ok(_) if std::fs::read_link(link)? == target => return Ok(()),
        _ => {}
    }
    let name = link
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = link.with_file_name(crate::fsx::unique::name(&format!(".{name}.tmp.")));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Whether `dir` holds a complete layout pointing at `src`.
pub fn is_complete(dir: &Path, src: &Sources) -> bool {
    let bin = dir.join("bin");
    let points = |link: &Path, target: &Path| std::fs::read_link(link).is_ok_and(|t| t == target);
    bin.join(SIM_MARKER).is_file()
        && TOOLS.iter().all(|t| points(&bin.join(t), &src.sim))
        && src
            .lib
            .as_ref()
            .is_none_or(|l| points(&dir.join("lib").join(LIBWALRUS), l))
}

/// The toolchain `--toolchain sim` uses: [`toolchain::simulated_home`], laid out unless it is
/// already complete and points at the current executables.
pub fn ensure_default() -> io::Result<Toolchain> {
    ensure_at(&toolchain::simulated_home(), &sources()?)
}

/// Lay out `dir` linking to `src` unless it is already complete and points there.
pub fn ensure_at(dir: &Path, src: &Sources) -> io::Result<Toolchain> {
    if is_complete(dir, src) {
        return Ok(Toolchain {
            bin: std::path::absolute(dir)?.join("bin"),
            simulated: true,
        });
    }
    lay_out_from(dir, src)
}

// ---- `nxcc toolchain` ----

static TOOLCHAIN_FLAG: Flag = flag(
    "--toolchain",
    &[],
    "toolchain",
    Action::Store,
    Kind::Str,
    flags::Default::None,
    Choices::Any,
    Visibility::Public,
    Scope::Compile,
    "nxcc",
    "For show: the toolchain to describe (DIR or sim), as compile's --toolchain takes it.",
);

const POSITIONALS: [Positional; 2] = [
    Positional {
        metavar: "{sim,show}",
        nargs: Nargs::One,
        help: "sim DIR: lay out a simulated toolchain in DIR; show: say where the toolchain comes from.",
    },
    Positional {
        metavar: "DIR",
        nargs: Nargs::Optional,
        help: "The directory to lay the simulated toolchain out in (for sim).",
    },
];

static OWN_FLAGS: [&Flag; 2] = [&HELP, &TOOLCHAIN_FLAG];

static COMMAND: Subcommand = Subcommand {
    name: "toolchain",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Lay out or describe a toolchain directory.\n\n  sim DIR   lay out a simulated toolchain in DIR: bin/<tool> links to nxcc-sim,\n            bin/.nxcc-simulated-toolchain, lib/libwalrus.so (a test instrument: its outputs\n            cannot run on Neuron hardware)\n  show      say where a compile would take its toolchain from, and each tool's path",
};

/// `nxcc toolchain sim DIR` / `nxcc toolchain show`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let usage_error = |message: &str| Stop::Usage(COMMAND.usage_error(prog, message)).report();
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let action = parsed.positionals.first().and_then(|v| v.first());
    let dir = parsed.positionals.get(1).and_then(|v| v.first());
    match (action.map(String::as_str), dir) {
        (None, _) => usage_error("the following arguments are required: {sim,show}"),
        (Some("sim"), None) => {
            usage_error("toolchain sim: the following arguments are required: DIR")
        }
        (Some("sim"), Some(dir)) => {
            if parsed.str("toolchain").is_some() {
                return usage_error("--toolchain applies to show only");
            }
            sim(dir)
        }
        (Some("show"), Some(extra)) => usage_error(&format!("unrecognized arguments: {extra}")),
        (Some("show"), None) => show(parsed.str("toolchain")),
        (Some(other), _) => usage_error(&format!(
            "argument {{sim,show}}: invalid choice: {} (choose from 'sim', 'show')",
            crate::cli::argparse::py_repr(other)
        )),
    }
}

fn sim(dir: &str) -> i32 {
    let src = match sources() {
        Ok(s) => s,
        Err(e) => {
            crate::sim::err(&format!(
                "[ERROR] cannot lay out a simulated toolchain: {e}\n"
            ));
            return 1;
        }
    };
    match lay_out_from(Path::new(dir), &src) {
        Ok(tc) => {
            let root = tc.bin.parent().unwrap_or(&tc.bin).display().to_string();
            let mut text = format!(
                "Simulated toolchain laid out in {root}\n  tools: {} -> {}\n",
                tc.bin.display(),
                src.sim.display()
            );
            match &src.lib {
                Some(l) => text.push_str(&format!(
                    "  library: {} -> {}\n",
                    tc.libwalrus().display(),
                    l.display()
                )),
                None => text.push_str(&format!(
                    "  library: none ({LIB_FILE} is not beside {}); --enable-internal-fork-walrus will not work with this toolchain\n",
                    src.sim.display()
                )),
            }
            text.push_str(&format!(
                "Use it with --toolchain {root} (or {TOOLCHAIN_ENV}={root}). {}\n",
                crate::sim::TEST_INSTRUMENT
            ));
            crate::sim::out(&text);
            0
        }
        Err(e) => {
            crate::sim::err(&format!(
                "[ERROR] cannot lay out a simulated toolchain in {dir}: {e}\n"
            ));
            1
        }
    }
}

fn show(option: Option<&str>) -> i32 {
    let launch = std::env::current_dir().unwrap_or_default();
    let env = std::env::var(TOOLCHAIN_ENV).ok().filter(|s| !s.is_empty());
    let request = Request::from(option, env.as_deref(), &launch);
    let source = match (option, &env) {
        (Some(_), _) => "--toolchain".to_string(),
        (None, Some(_)) => TOOLCHAIN_ENV.to_string(),
        (None, None) => "an installed neuronxcc package (asked of python3)".to_string(),
    };
    let mut text = format!("source: {source}\n");
    let tc = toolchain::locate(&request);
    match &tc {
        None => {
            text.push_str(
                "toolchain: none found (use --toolchain DIR, NXCC_TOOLCHAIN, or --toolchain sim)\n",
            );
            crate::sim::out(&text);
            return 1;
        }
        Some(tc) => {
            text.push_str(&format!(
                "toolchain: {}{}\n",
                tc.bin.display(),
                if tc.simulated { " (simulated)" } else { "" }
            ));
            if request == Request::Simulated && !tc.bin.join(SIM_MARKER).exists() {
                text.push_str("  (laid out on first use)\n");
            }
            for tool in TOOLS {
                let path = tc
                    .resolve(tool)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "missing".into());
                text.push_str(&format!("  {tool:<18} {path}\n"));
            }
            let lib = tc.libwalrus();
            text.push_str(&format!(
                "  {LIBWALRUS:<18} {}{}\n",
                lib.display(),
                if lib.exists() { "" } else { " (missing)" }
            ));
            if tc.simulated {
                text.push_str(crate::sim::TEST_INSTRUMENT);
                text.push('\n');
            }
        }
    }
    crate::sim::out(&text);
    0
}
