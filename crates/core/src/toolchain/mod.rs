//! The toolchain: the directory holding the native tools (`hlo2penguin`, `walrus_driver`, ...),
//! either a real Neuron compiler install (`<neuronxcc package>/starfish/bin`) or the simulated
//! toolchain nxcc ships for tests and demos.
//!
//! Location order and the search rules are in [`crate::recon::toolchain`]; tool resolution is
//! WIKI (HIGH): an absolute path is used as is, otherwise `<toolchain>/private` then
//! `<toolchain>` — private first, so a tool placed there overrides the shipped one.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::recon::toolchain as rules;

pub mod command;

/// The native tools a plan may run.
pub const TOOLS: &[&str] = &[
    "hlo2penguin",
    "xla_infergoldens",
    "walrus_driver",
    "hlo-neff-wrapper",
    "nn_executor",
    "watchpoint_insert",
];

/// The simulated frontend's subgraph count override (read by the plan's prediction and by the
/// simulated Frontend).
pub const SIM_SUBGRAPHS_ENV: &str = "NXCC_SIM_SUBGRAPHS";

/// The file name of the backend library the fork-walrus path loads (`<bin>/../lib/`).
pub const LIBWALRUS: &str = "libwalrus.so";

/// What the documentation and messages of the simulated toolchain say about it.
pub const TEST_INSTRUMENT: &str =
    "The simulated toolchain is a test instrument: its outputs cannot run on Neuron hardware.";

/// What the command line (or environment) asks for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Request {
    /// Nothing given: look for an installed `neuronxcc` package when a tool is needed.
    Auto,
    /// `--toolchain sim`.
    Simulated,
    /// `--toolchain DIR` or `NXCC_TOOLCHAIN=DIR` (absolute, resolved against the launch dir).
    Dir(PathBuf),
}

impl Request {
    /// From `--toolchain` (wins) and the environment variable.
    pub fn from(option: Option<&str>, env: Option<&str>, launch_dir: &Path) -> Request {
        match option.or(env).filter(|s| !s.is_empty()) {
            None => Request::Auto,
            Some("sim") => Request::Simulated,
            Some(dir) => Request::Dir(launch_dir.join(dir)),
        }
    }
}

/// A located toolchain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Toolchain {
    /// The directory the tools are in (`.../starfish/bin`, or a simulated layout's `bin/`).
    pub bin: PathBuf,
    /// The toolchain is nxcc's simulated one (its `bin/` holds the simulated-toolchain marker).
    pub simulated: bool,
}

impl Toolchain {
    /// Resolve a tool: absolute as is; else `<bin>/private/<tool>` then `<bin>/<tool>`.
    pub fn resolve(&self, tool: &str) -> Option<PathBuf> {
        let p = Path::new(tool);
        if p.is_absolute() {
            return is_executable(p).then(|| p.to_path_buf());
        }
        [self.bin.join("private").join(tool), self.bin.join(tool)]
            .into_iter()
            .find(|c| is_executable(c))
    }

    /// Why `tool` does not resolve here, for a message: the toolchain directory does not exist
    /// (or is not a directory), or neither place a tool is looked for holds it.
    pub(crate) fn why_missing(&self, tool: &str) -> String {
        match std::fs::metadata(&self.bin) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
                "the toolchain directory {} does not exist",
                self.bin.display()
            ),
            Err(e) => format!(
                "the toolchain directory {} cannot be read: {e}",
                self.bin.display()
            ),
            Ok(m) if !m.is_dir() => {
                format!("the toolchain {} is not a directory", self.bin.display())
            }
            Ok(_) => format!(
                "no executable {tool} in {} or {}",
                self.bin.join("private").display(),
                self.bin.display()
            ),
        }
    }

    /// Where a tool would be, without checking it exists (for a simulated toolchain laid out at
    /// run time).
    pub fn expected(&self, tool: &str) -> PathBuf {
        self.bin.join(tool)
    }

    /// The backend library of the fork-walrus path: `<bin>/../lib/libwalrus.so`.
    pub fn libwalrus(&self) -> PathBuf {
        self.bin
            .parent()
            .unwrap_or(&self.bin)
            .join("lib")
            .join(LIBWALRUS)
    }
}

/// `p` is (or links to) a regular file with an execute bit: what `execvp` would try to run.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn has_tools(dir: &Path) -> bool {
    TOOLS
        .iter()
        .any(|t| is_executable(&dir.join(t)) || is_executable(&dir.join("private").join(t)))
}

/// A toolchain from a directory: the directory itself, or its `bin/` (a layout root).
pub fn from_dir(dir: &Path) -> Toolchain {
    let bin = dir.join("bin");
    let use_bin = rules::prefer_bin_subdir(has_tools(dir), has_tools(&bin));
    let bin = if use_bin { bin } else { dir.to_path_buf() };
    let simulated = bin.join(rules::SIM_MARKER).exists();
    Toolchain { bin, simulated }
}

/// The directory `--toolchain sim` lays the simulated toolchain out in (once): the user cache
/// directory, per nxcc version and per running executable
/// (`sim-toolchain-<version>-<``program_identity``>`), so that two builds at one version —
/// two checkouts, a rebuild, an installed copy — never run each other's tools.
pub fn simulated_home() -> PathBuf {
    user_cache_dir().join(format!(
        "{SIM_HOME_PREFIX}{}-{}",
        crate::VERSION,
        program_identity()
    ))
}

/// The start of the name of every [`simulated_home`] directory.
pub const SIM_HOME_PREFIX: &str = "sim-toolchain-";

/// nxcc's per-user cache directory, where the compile cache and the [`simulated_home`]
/// directories live: `$XDG_CACHE_HOME/nxcc` (when absolute), else `$HOME/.cache/nxcc` (when
/// absolute), else `.cache/nxcc` under the user's home directory in the password database, else
/// `<temp>/nxcc-<uid>` — a name of the user's own, so that without a home two users of a shared
/// temporary directory never meet in one cache (and what another user planted there is refused by
/// the trust rule, not used).
pub fn user_cache_dir() -> PathBuf {
    let absolute = |p: PathBuf| p.is_absolute().then_some(p);
    let env = |name: &str| std::env::var_os(name).map(PathBuf::from).and_then(absolute);
    if let Some(xdg) = env("XDG_CACHE_HOME") {
        return xdg.join("nxcc");
    }
    match env("HOME").or_else(|| password_home().and_then(absolute)) {
        Some(home) => home.join(".cache").join("nxcc"),
        None => std::env::temp_dir().join(format!("nxcc-{}", rustix::process::getuid().as_raw())),
    }
}

/// The running user's home directory as the password database gives it, when it has one.
fn password_home() -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: `getpwuid_r` writes only into `pwd` and `buf` (of the length passed) and sets
    // `result` to `&pwd` or null; `pw_dir` points into `buf`, read before `buf` is dropped.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let uid = libc::getuid();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc != 0 || result.is_null() || pwd.pw_dir.is_null() {
            return None;
        }
        let dir = std::ffi::CStr::from_ptr(pwd.pw_dir).to_bytes();
        (!dir.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(dir)))
    }
}

/// 16 hex digits naming the running executable: blake3 over its canonical path, device, inode,
/// size and modification time (one `stat`, computed once). A rebuild or a copy is another
/// executable; the same file is the same one.
pub(crate) fn program_identity() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        let exe = std::env::current_exe().unwrap_or_default();
        let exe = exe.canonicalize().unwrap_or(exe);
        let mut h = blake3::Hasher::new();
        h.update(exe.as_os_str().as_encoded_bytes());
        if let Ok(m) = std::fs::metadata(&exe) {
            for n in [
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime() as u64,
                m.mtime_nsec() as u64,
            ] {
                h.update(&n.to_le_bytes());
            }
        }
        h.finalize().to_hex()[..16].to_string()
    })
}

/// The simulated toolchain as `--toolchain sim` uses it (not laid out by this call).
pub fn simulated() -> Toolchain {
    Toolchain {
        bin: simulated_home().join("bin"),
        simulated: true,
    }
}

/// Ask `python3` (once, bounded) where an installed `neuronxcc` package keeps its tools.
pub(crate) fn probe_python_package() -> Option<PathBuf> {
    probe_python_package_with(Path::new("python3"))
}

/// [`probe_python_package`] with the Python interpreter `python` (a name looked up on PATH, or
/// a path).
pub(crate) fn probe_python_package_with(python: &Path) -> Option<PathBuf> {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(rules::PYTHON_PROBE)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_millis(rules::PYTHON_PROBE_TIMEOUT_MS);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) => return None,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    }
    let mut out = String::new();
    use std::io::Read;
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    let dir = PathBuf::from(out.trim());
    dir.is_dir().then_some(dir)
}

/// Locate the toolchain for a run (may spawn the `python3` probe for [`Request::Auto`]).
pub fn locate(request: &Request) -> Option<Toolchain> {
    match request {
        Request::Simulated => Some(simulated()),
        Request::Dir(d) => Some(from_dir(d)),
        Request::Auto => probe_python_package().map(|bin| Toolchain {
            bin,
            simulated: false,
        }),
    }
}

/// What a simulated toolchain provides besides its tool executables: the layout behind
/// `--toolchain sim`, and the Frontend, which it runs inside the worker (as the original runs its
/// Python frontend in process). Everything above the toolchain layer reaches the simulated
/// toolchain only through this trait; the program registers its implementation once at start-up
/// ([`register_simulator`]: `nxcc`'s entry point does).
pub trait Simulator: Sync {
    /// The toolchain `--toolchain sim` uses, laid out first if it is not complete.
    fn ensure_default(&self) -> std::io::Result<Toolchain>;
    /// Run the simulated Frontend on `model` in `work_dir`; `subgraphs` overrides the subgraph
    /// count. Returns the subgraph directories it wrote, in order, or the error it reports
    /// (NCC_EDRV092, with the operating system's error behind it, if any).
    fn frontend(
        &self,
        model: &Path,
        work_dir: &Path,
        subgraphs: Option<usize>,
    ) -> Result<Vec<String>, crate::error::NccError>;
    /// Act as the simulated tool `argv[0]` names, when it names one (or the simulated tools'
    /// own executable); returns the exit status, or `None` when `argv[0]` names no tool.
    fn serve_as_tool(&self, argv: &[OsString]) -> Option<i32>;
    /// `nxcc toolchain sim DIR`: lay out a standalone simulated toolchain in `dir` and say what
    /// was laid out; returns the exit status.
    fn lay_out_command(&self, dir: &str) -> i32;
    /// Whether the simulated tools' settings in an environment (`get` looks a variable up) read:
    /// `Err` says which does not. A tool refuses a setting that does not read, so a compile
    /// checks them before it runs one: the fault is the environment's, not the model's.
    fn check_settings(&self, get: &dyn Fn(&str) -> Option<String>) -> Result<(), String>;
}

static SIMULATOR: OnceLock<&'static dyn Simulator> = OnceLock::new();

/// Register the simulated toolchain (the first registration wins; later ones are ignored).
pub fn register_simulator(simulator: &'static dyn Simulator) {
    let _ = SIMULATOR.set(simulator);
}

/// The registered simulated toolchain, if this program has one.
pub fn simulator() -> Option<&'static dyn Simulator> {
    SIMULATOR.get().copied()
}

/// The error for a simulated toolchain asked of a program that registered none.
pub(crate) fn no_simulator() -> std::io::Error {
    std::io::Error::other("this program was built without the simulated toolchain")
}
