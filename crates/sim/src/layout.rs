//! Laying out a simulated toolchain directory (`--toolchain sim`, `nxcc toolchain sim DIR`).
//!
//! One executable acts as every simulated tool, by the name it is invoked under: `nxcc` itself
//! (and `nxcc-sim`, the same code under another name). A layout is, as in a real install:
//! - `DIR/bin/<tool>` for each native tool: a symbolic link to that executable;
//! - `DIR/bin/.nxcc-simulated-toolchain`: the marker that identifies a simulated toolchain;
//! - `DIR/lib/libwalrus.so`: the `nxcc-walrus` crate's `cdylib` (`libnxcc_walrus.so`), whose
//!   `run_backend_driver` serves `--enable-internal-fork-walrus` — when there is one beside the
//!   executable (a cargo target directory has it) or in `lib/nxcc/` above the executable's
//!   directory (where the wheel installs it); without one the layout has no `lib/libwalrus.so`,
//!   says so, and a compile with `--enable-internal-fork-walrus` on it fails naming the missing
//!   library.
//!
//! Two kinds ([`Kind`]):
//! - `nxcc toolchain sim DIR` lays out a *standalone* toolchain: `DIR/bin/nxcc-sim` is the
//!   executable itself (a hard link where `DIR` is on its file system, else a copy), the tools
//!   link to it by a relative name, and the library is placed the same way, so `DIR` keeps
//!   working after `cargo clean`, a rebuild, or the removal of the install it came from;
//! - `--toolchain sim` uses [`crate::toolchain::simulated_home`], whose name carries the running
//!   executable's identity, laid out *linked* to that executable once ([`ensure_default`]): every
//!   build has its own, so two checkouts never run each other's tools. Laying out a new one
//!   removes the ones whose executable is gone.
//!
//! The executable is the running program when it is nxcc (its entry point says so:
//! [`serve_tools_from_self`]); a program that is not (a test harness) takes `nxcc` (else
//! `nxcc-sim`) from its own directory, its `deps/` directory or its parent directory, the most
//! recently built copy.
//!
//! Laying out is idempotent and safe under concurrency: each entry is created under a unique
//! temporary name and renamed into place, the marker last; an existing entry that nxcc did not
//! write (a file that is not a link, where no marker says the directory is a layout) is never
//! replaced.
//!
//! The simulated toolchain is a test instrument: its outputs cannot run on Neuron hardware.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::recon::toolchain::{SIM_MARKER, TOOLCHAIN_ENV};
use crate::toolchain::{self, Toolchain, LIBWALRUS, TOOLS};

/// The simulated tools' executable in a standalone layout's `bin/` (and the name of the
/// alternative binary acting as the tools).
pub const SIM_EXE: &str = "nxcc-sim";
/// The driver's executable, which acts as every tool too.
pub const NXCC_EXE: &str = "nxcc";
/// The `nxcc-walrus` crate's `cdylib`, laid out as `libwalrus.so`.
pub const LIB_FILE: &str = "libnxcc_walrus.so";
/// Where an installed wheel keeps [`LIB_FILE`], relative to the environment (the directory above
/// the executable's `bin/`).
pub const INSTALLED_LIB_DIR: &str = "lib/nxcc";

/// The files a layout takes its entries from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// The executable acting as every tool.
    pub sim: PathBuf,
    /// `None` when [`LIB_FILE`] is neither beside the executable nor where a wheel installs it.
    pub lib: Option<PathBuf>,
}

/// How a layout holds its entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The tools and library are links to the sources where they are.
    Linked,
    /// The executable and library are placed in the layout (hard link or copy); the tools link
    /// to the executable by a relative name.
    Standalone,
}

static SELF_SERVES_TOOLS: AtomicBool = AtomicBool::new(false);

/// Say that the running program acts as every simulated tool through its `argv[0]` (nxcc's and
/// `nxcc-sim`'s entry points call this): layouts then point at it.
pub fn serve_tools_from_self() {
    SELF_SERVES_TOOLS.store(true, Ordering::Relaxed);
}

fn search_dirs(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent().map(Path::to_path_buf) else {
        return Vec::new();
    };
    let mut dirs = vec![dir.clone(), dir.join("deps")];
    if let Some(parent) = dir.parent() {
        dirs.push(parent.to_path_buf());
    }
    dirs
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

/// The executable acting as the tools (see the module docs) and [`LIB_FILE`] beside it (or in
/// the environment's `lib/nxcc/`, where the wheel installs it).
pub fn sources() -> io::Result<Sources> {
    let exe = std::env::current_exe()?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let dirs = search_dirs(&exe);
    let sim = if SELF_SERVES_TOOLS.load(Ordering::Relaxed) {
        exe.clone()
    } else {
        newest(&dirs, NXCC_EXE)
            .or_else(|| newest(&dirs, SIM_EXE))
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "neither {NXCC_EXE} nor {SIM_EXE} found next to {} (looked in {})",
                        exe.display(),
                        dirs.iter()
                            .map(|d| d.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })?
    };
    let mut lib_dirs = search_dirs(&sim);
    // An installed wheel: `<environment>/bin/nxcc` and `<environment>/lib/nxcc/`.
    if let Some(env) = sim.parent().and_then(Path::parent) {
        lib_dirs.push(env.join(INSTALLED_LIB_DIR));
    }
    Ok(Sources {
        lib: newest(&lib_dirs, LIB_FILE),
        sim,
    })
}

/// Lay out `dir` linking to the given sources.
pub fn lay_out_from(dir: &Path, src: &Sources) -> io::Result<Toolchain> {
    lay_out_kind(dir, src, Kind::Linked)
}

/// Lay out `dir` from `src`, of the given kind.
pub fn lay_out_kind(dir: &Path, src: &Sources, kind: Kind) -> io::Result<Toolchain> {
    let root = std::path::absolute(dir)?;
    let bin = root.join("bin");
    let lib = root.join("lib");
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&lib)?;
    let ours = bin.join(SIM_MARKER).is_file();
    let tool_target = match kind {
        Kind::Linked => src.sim.clone(),
        Kind::Standalone => {
            place_file(&src.sim, &bin.join(SIM_EXE), ours)?;
            PathBuf::from(SIM_EXE)
        }
    };
    for tool in TOOLS {
        place_link(&tool_target, &bin.join(tool))?;
    }
    if let Some(l) = &src.lib {
        match kind {
            Kind::Linked => place_link(l, &lib.join(LIBWALRUS))?,
            Kind::Standalone => place_file(l, &lib.join(LIBWALRUS), ours)?,
        }
    }
    crate::files::atomic_write(&bin.join(SIM_MARKER), marker_text(src, kind).as_bytes())?;
    Ok(Toolchain {
        bin,
        simulated: true,
    })
}

fn marker_text(src: &Sources, kind: Kind) -> String {
    format!(
        "nxcc simulated toolchain {}\n{}: {}\nlib: {}\n{}\n",
        crate::VERSION,
        match kind {
            Kind::Linked => "linked to",
            Kind::Standalone => "copied from",
        },
        src.sim.display(),
        src.lib
            .as_ref()
            .map(|l| l.display().to_string())
            .unwrap_or_else(|| "(none)".into()),
        crate::NOT_FOR_HARDWARE
    )
}

/// A name beside `path` no other writer uses (`.<name>.tmp.<unique>`).
fn temporary_beside(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(crate::fsx::unique::name(&format!(".{name}.tmp.")))
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
    let tmp = temporary_beside(link);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Whether two files hold the same bytes (the same inode, or equal contents).
fn same_contents(a: &Path, b: &Path) -> io::Result<bool> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;
    let (ma, mb) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
    if (ma.dev(), ma.ino()) == (mb.dev(), mb.ino()) {
        return Ok(true);
    }
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Make `dest` a file with `src`'s bytes and mode: a hard link where both are on one file
/// system, else a copy; atomically. An existing `dest` is replaced only when it is a link, holds
/// the same bytes already, or the directory is a layout already (`ours`).
fn place_file(src: &Path, dest: &Path, ours: bool) -> io::Result<()> {
    match std::fs::symlink_metadata(dest) {
        Ok(m) if !m.file_type().is_symlink() => {
            if same_contents(src, dest)? {
                return Ok(());
            }
            if !ours {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} exists and was not laid out by nxcc; refusing to replace it",
                        dest.display()
                    ),
                ));
            }
        }
        _ => {}
    }
    let tmp = temporary_beside(dest);
    let _ = std::fs::remove_file(&tmp);
    if std::fs::hard_link(src, &tmp).is_err() {
        std::fs::copy(src, &tmp).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })?;
    }
    std::fs::rename(&tmp, dest).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })?;
    // When another writer already linked `dest` to the same file, rename(2) of one hard link
    // onto another does nothing and succeeds: the temporary name (ours alone) is still there.
    let _ = std::fs::remove_file(&tmp);
    Ok(())
}

/// Whether `dir` holds a complete linked layout pointing at `src`.
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
/// already complete and points at the current executable. Laying out a new one removes the
/// default layouts of executables that are gone ([`remove_stale_homes`]).
pub fn ensure_default() -> io::Result<Toolchain> {
    let home = toolchain::simulated_home();
    let src = sources()?;
    if !is_complete(&home, &src) {
        remove_stale_homes(&toolchain::user_cache_dir(), &home);
    }
    ensure_at(&home, &src)
}

/// Remove the default layouts in `base` (other than `keep`) whose tools point at an executable
/// that no longer exists; returns how many were removed. Each is renamed away first, so a
/// concurrent user sees a whole layout or none.
pub fn remove_stale_homes(base: &Path, keep: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if path == keep || !name.starts_with(toolchain::SIM_HOME_PREFIX) || name.contains(".gone") {
            continue;
        }
        let bin = path.join("bin");
        let dangling = std::fs::read_link(bin.join(TOOLS[0])).is_ok_and(|t| !t.exists());
        if !(bin.join(SIM_MARKER).is_file() && dangling) {
            continue;
        }
        let gone = temporary_beside(&path.with_file_name(format!("{name}.gone")));
        if std::fs::rename(&path, &gone).is_ok() && std::fs::remove_dir_all(&gone).is_ok() {
            removed += 1;
        }
    }
    removed
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

/// `nxcc toolchain sim DIR`: lay out a standalone simulated toolchain in `dir` from this
/// executable and say what was laid out (and whether it has `libwalrus.so`); the exit status.
pub fn lay_out_command(dir: &str) -> i32 {
    let src = match sources() {
        Ok(s) => s,
        Err(e) => {
            crate::err(&format!(
                "[ERROR] cannot lay out a simulated toolchain: {e}\n"
            ));
            return 1;
        }
    };
    match lay_out_kind(Path::new(dir), &src, Kind::Standalone) {
        Ok(tc) => {
            let root = tc.bin.parent().unwrap_or(&tc.bin).display().to_string();
            let mut text = format!(
                "Simulated toolchain laid out in {root}\n  tools: {} -> {SIM_EXE} (from {})\n",
                tc.bin.display(),
                src.sim.display()
            );
            match &src.lib {
                Some(l) => text.push_str(&format!(
                    "  library: {} (from {})\n",
                    tc.libwalrus().display(),
                    l.display()
                )),
                None => text.push_str(&format!(
                    "  library: none ({LIB_FILE} is neither beside {} nor in ../{INSTALLED_LIB_DIR}); --enable-internal-fork-walrus will not work with this toolchain\n",
                    src.sim.display()
                )),
            }
            text.push_str(&format!(
                "Use it with --toolchain {root} (or {TOOLCHAIN_ENV}={root}). {}\n",
                crate::TEST_INSTRUMENT
            ));
            crate::out(&text);
            0
        }
        Err(e) => {
            crate::err(&format!(
                "[ERROR] cannot lay out a simulated toolchain in {dir}: {e}\n"
            ));
            1
        }
    }
}
