//! `nxcc shim`: a `neuronx-cc` for a directory on PATH that sends every compile to a compile
//! daemon and everything else to the real compiler.
//!
//! `nxcc shim install DIR --compiler REAL` writes exactly two entries into `DIR` (and creates
//! `DIR` and its missing parents, recording which):
//! - `DIR/neuronx-cc`: a symbolic link to this nxcc executable;
//! - `DIR/neuronx-cc.nxcc-shim.json` ([`CONFIG_NAME`]): the shim's [`Config`] — the real compiler,
//!   the daemon's memory budget, and, for a daemon shared by several users, its socket and the
//!   uids it serves.
//!
//! nxcc invoked as `neuronx-cc` with that file beside the `neuronx-cc` it was run as is the shim
//! ([`serve`]): `neuronx-cc compile ...` goes to a daemon — by default each user's own, on a
//! socket in that user's daemon directory ([`default_socket`]), started on first use as `nxcc
//! daemon --compiler REAL --memory-budget BUDGET` with the cache on; with `--socket PATH
//! --allow-uid UID...`, one daemon shared by those users — so the compiles of a user's processes
//! share one queue, one memory budget and one compile per distinct graph; anything else
//! (`--version`, `list-operators`, a command line nxcc cannot parse) is REAL run with the same
//! arguments and environment, in place of the shim.
//!
//! Trust: `DIR` and the configuration pass nxcc's trust rule ([`crate::fsx::trust`]) at install
//! and at every start of the shim — a configuration another user could have written is refused,
//! never followed; a real compiler that resolves to nxcc itself (the shim configured as its own
//! compiler, or a real compiler re-pointed to the shim) is a loop, refused at install and at
//! every start.
//!
//! `nxcc shim status [DIR]` says what is installed (in `DIR`, else the first `neuronx-cc` on
//! PATH) and whether its daemon answers; `nxcc shim uninstall DIR` stops the user's daemon of
//! the shim and removes exactly what install created: the two entries and the directories it
//! made (when they are empty again).

pub mod serve;

use std::io::Write;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, OFlags};
use serde::{Deserialize, Serialize};

use crate::cli::subcommand::{err, out};
use crate::daemon::{client, config as daemon_config};
use crate::fsx::{Subject, Trusted};
use crate::toolchain::is_executable;

/// The shim's executable name in its directory.
pub const LINK_NAME: &str = "neuronx-cc";
/// The shim's configuration, beside [`LINK_NAME`].
pub const CONFIG_NAME: &str = "neuronx-cc.nxcc-shim.json";
/// The `format` of a [`Config`] this nxcc writes.
pub const FORMAT: &str = "nxcc-shim/2";
/// The formats it reads (`nxcc-shim/1`: the socket always given, one created directory).
pub const FORMATS_READ: [&str; 2] = ["nxcc-shim/1", FORMAT];
/// `--memory-budget`'s default.
pub const DEFAULT_MEMORY_BUDGET: &str = "auto";
/// Connections per uid the shim's daemon serves at once: one per framework process of a large
/// host (64 ranks on trn2), with room for status requests.
pub const DAEMON_MAX_CONNECTIONS_PER_UID: usize = 256;
/// The most bytes of a configuration read.
const CONFIG_LIMIT: u64 = 64 << 10;
/// The shim's directory and configuration, in the trust rule's messages.
pub const SHIM_DIR: Subject = Subject {
    noun: "the shim's directory",
    file: "the shim's configuration",
    instead: "install the shim in a directory of your own (nxcc shim install DIR)",
};
/// The variable counting how many shims a process chain has passed through: a real compiler
/// that is, in the end, a shim again (two shims configured as each other's compiler) is a
/// loop, refused at [`MAX_HOPS`].
pub const HOPS_ENV: &str = "NXCC_SHIM_HOPS";
/// Shims one chain of processes may pass through.
pub const MAX_HOPS: u32 = 4;

/// What `DIR/neuronx-cc.nxcc-shim.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The configuration's format tag ([`FORMAT`]); one not in [`FORMATS_READ`] is refused.
    pub format: String,
    /// The real compiler (absolute): the daemon's `--compiler`, and what every other use runs.
    pub compiler: PathBuf,
    /// The socket of a daemon shared by the users of [`Config::allow_uids`] (`--socket`);
    /// `None`: each user's own daemon, on [`default_socket`] in that user's daemon directory.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The uids a shared daemon serves besides its own (`--allow-uid`).
    #[serde(default)]
    pub allow_uids: Vec<u32>,
    /// The daemon's `--memory-budget` (`auto` or a size).
    pub memory_budget: String,
    /// What `DIR/neuronx-cc` links to (the nxcc that installed it).
    pub nxcc: PathBuf,
    /// The directories install created, outermost first: uninstall removes them, innermost
    /// first, when they are empty again.
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    /// `nxcc-shim/1`: whether install created `DIR` (read, never written).
    #[serde(default, skip_serializing)]
    pub created_dir: bool,
}

impl Config {
    /// The socket of the shim in `dir` for the user running this process.
    pub fn socket_for(&self, dir: &Path) -> PathBuf {
        self.socket.clone().unwrap_or_else(|| default_socket(dir))
    }

    /// The arguments the shim gives a daemon it starts (besides `--socket` and `--log-file`).
    pub fn daemon_args(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec![
            "--compiler".into(),
            self.compiler.clone().into(),
            "--memory-budget".into(),
            self.memory_budget.clone().into(),
            "--max-connections-per-uid".into(),
            DAEMON_MAX_CONNECTIONS_PER_UID.to_string().into(),
        ];
        for uid in &self.allow_uids {
            a.push("--allow-uid".into());
            a.push(uid.to_string().into());
        }
        if !self.allow_uids.is_empty() {
            // The uids served must reach the socket; the daemon's gate decides who is served.
            a.push("--socket-mode".into());
            a.push("0666".into());
        }
        a
    }

    /// Where the shim's compiles go, from the shim in `dir`. The daemon's PATH leaves `dir` out,
    /// so that nothing the real compiler starts by the name `neuronx-cc` comes back to the shim.
    pub fn target(&self, dir: &Path) -> client::Target {
        let path: Vec<PathBuf> = path_dirs()
            .into_iter()
            .filter(|d| !same_dir(d, dir))
            .collect();
        client::Target {
            socket: self.socket_for(dir),
            daemon_args: self.daemon_args(),
            daemon_env: std::env::join_paths(path)
                .map(|p| vec![("PATH".into(), p)])
                .unwrap_or_default(),
        }
    }

    /// The directories install created (a `nxcc-shim/1` configuration: `dir` when it says so).
    fn made_dirs(&self, dir: &Path) -> Vec<PathBuf> {
        if self.created_dirs.is_empty() && self.created_dir {
            return vec![dir.to_path_buf()];
        }
        self.created_dirs.clone()
    }
}

/// Read the configuration of the shim in `dir` (opened by [`Trusted::open`]): `Ok(None)` when
/// there is none. The file must pass the trust rule: a regular file, not a link, the user's or
/// root's, writable by nobody else.
fn read_config_in(dir: &Trusted) -> Result<Option<Config>, String> {
    let path = dir.path().join(CONFIG_NAME);
    let file = match dir.open_file(CONFIG_NAME, OFlags::RDONLY, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(refusal(&path, &e)),
    };
    let bytes = crate::fsx::regular::read_limited(&file, CONFIG_LIMIT)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: Config = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not an nxcc shim configuration: {e}", path.display()))?;
    if !FORMATS_READ.contains(&config.format.as_str()) {
        return Err(format!(
            "{} has format {:?}; this nxcc reads {}",
            path.display(),
            config.format,
            FORMATS_READ.join(", ")
        ));
    }
    Ok(Some(config))
}

/// The message of a shim directory or configuration that cannot be used.
fn refusal(path: &Path, e: &std::io::Error) -> String {
    match crate::fsx::trust::untrusted(e) {
        Some(u) => format!("refusing the shim configuration: {u}"),
        None => format!("cannot read {}: {e}", path.display()),
    }
}

/// Read `DIR/neuronx-cc.nxcc-shim.json`: `Ok(None)` when there is none; `Err` when there is
/// one that cannot be used — unreadable, or failing the trust rule (`DIR` or the file could
/// have been written by another user).
pub fn read_config(dir: &Path) -> Result<Option<Config>, String> {
    // No configuration at all: not a shim, whatever the directory is.
    if std::fs::symlink_metadata(dir.join(CONFIG_NAME)).is_err() {
        return Ok(None);
    }
    let trusted = Trusted::open(dir, SHIM_DIR, true).map_err(|e| refusal(dir, &e))?;
    read_config_in(&trusted)
}

/// The socket of the shim in `dir` for the user running this process: one per directory and
/// user, in the user's daemon directory (`shim-<12 hex digits of blake3(DIR)>.sock`).
pub fn default_socket(dir: &Path) -> PathBuf {
    let digest = blake3::hash(dir.as_os_str().as_encoded_bytes()).to_hex();
    daemon_config::default_dir().join(format!("shim-{}.sock", &digest[..12]))
}

/// The directories of `$PATH`, in order.
fn path_dirs() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default()
}

/// The first executable `name` on PATH (skipping `skip`).
fn which(name: &str, skip: Option<&Path>) -> Option<PathBuf> {
    path_dirs()
        .into_iter()
        .filter(|d| !d.as_os_str().is_empty())
        .filter(|d| skip.is_none_or(|s| !same_dir(d, s)))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Whether `path` is an installed shim's `neuronx-cc` (a link with a shim configuration beside).
fn is_shim(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
        && path
            .parent()
            .is_some_and(|d| matches!(read_config(d), Ok(Some(_))))
}

/// The file a path resolves to (links followed), as (device, inode).
fn identity(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// Why running `compiler` as the real compiler would be a loop — it resolves to this nxcc, or
/// to the nxcc the shim links to — or `None`.
pub fn loop_of(compiler: &Path, nxcc: Option<&Path>) -> Option<String> {
    let target = identity(compiler)?;
    let me = std::env::current_exe().ok();
    let same = [me.as_deref(), nxcc]
        .into_iter()
        .flatten()
        .any(|p| identity(p) == Some(target));
    same.then(|| {
        let resolved = compiler
            .canonicalize()
            .unwrap_or_else(|_| compiler.to_path_buf());
        format!(
            "the real compiler {} is nxcc itself (it resolves to {}): the shim would run itself; name the real neuronx-cc (nxcc shim install DIR --compiler REAL)",
            compiler.display(),
            resolved.display()
        )
    })
}

// ---- the command line ----

/// Put a compile daemon behind every `neuronx-cc compile` of the processes whose PATH starts with
/// DIR.
///
/// Each user's own daemon, or one shared with --socket and --allow-uid; every other use of
/// neuronx-cc runs the real compiler.
#[derive(Debug, clap::Parser)]
pub(crate) struct ShimCommand {
    /// What to do.
    #[command(subcommand)]
    pub(crate) action: ShimAction,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: crate::cli::subcommand::DriverOptions,
}

/// `nxcc shim`'s actions.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ShimAction {
    /// Write DIR/neuronx-cc (a link to nxcc) and DIR/neuronx-cc.nxcc-shim.json.
    Install(Install),
    /// What is installed, and whether its daemon answers.
    Status {
        /// The shim's directory (default: the first neuronx-cc on PATH).
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Print one JSON object (docs/shim.md lists its fields).
        #[arg(long)]
        json: bool,
    },
    /// Stop your daemon of the shim; remove exactly what install created.
    Uninstall {
        /// The shim's directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// What `install` is asked for.
#[derive(Debug, clap::Args)]
pub(crate) struct Install {
    /// The directory to put first on PATH.
    #[arg(value_name = "DIR")]
    pub(crate) dir: PathBuf,
    /// The real neuronx-cc (a path, or a name looked up on PATH outside DIR).
    #[arg(long, value_name = "REAL")]
    pub(crate) compiler: String,
    /// The daemon's memory budget, SIZE (16G) or auto (80% of MemAvailable).
    #[arg(long = "memory-budget", value_name = "SIZE", default_value = DEFAULT_MEMORY_BUDGET)]
    pub(crate) memory_budget: String,
    /// One daemon socket for every user of the shim (default: each user's own daemon,
    /// shim-<digest of DIR>.sock in that user's daemon directory). Other users are served only
    /// with --allow-uid.
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<String>,
    /// With --socket: the daemon on that socket also serves this user id (repeatable). Its
    /// compiles run as the daemon's user; a refused user's compile runs the real compiler
    /// directly.
    #[arg(long = "allow-uid", value_name = "UID", requires = "socket", value_parser = uid, action = clap::ArgAction::Append)]
    pub(crate) allow_uid: Vec<u32>,
}

/// A user id (`u32::MAX` is no one's).
fn uid(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(u) if u != u32::MAX => Ok(u),
        _ => Err(format!(
            "invalid user id: {}",
            crate::cli::argparse::py_repr(text)
        )),
    }
}

/// `nxcc shim install|status|uninstall`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let cmd: ShimCommand = match crate::cli::subcommand::parse(prog, "shim", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    match &cmd.action {
        ShimAction::Install(req) => install(prog, req),
        ShimAction::Status { dir, json } => status(dir.as_deref(), *json),
        ShimAction::Uninstall { dir } => uninstall(dir),
    }
}

fn failed(text: &str) -> i32 {
    err(&format!("[ERROR] nxcc shim: {text}\n"));
    1
}

/// The real compiler for install: a path as given, else looked up on PATH outside `dir`; an
/// executable that is not nxcc itself and not a shim.
fn real_compiler(real: &str, dir: &Path) -> Result<PathBuf, String> {
    let compiler = if real.contains('/') {
        std::path::absolute(real).unwrap_or_else(|_| PathBuf::from(real))
    } else {
        which(real, Some(dir)).ok_or_else(|| {
            format!(
                "--compiler {real}: no executable {real} on PATH (outside {})",
                dir.display()
            )
        })?
    };
    if !is_executable(&compiler) {
        return Err(format!(
            "--compiler {}: not an executable file",
            compiler.display()
        ));
    }
    if compiler.file_name().is_some_and(|n| n == LINK_NAME) && is_shim(&compiler) {
        return Err(format!(
            "--compiler {}: that is an nxcc shim itself; name the real compiler",
            compiler.display()
        ));
    }
    match loop_of(&compiler, None) {
        Some(why) => Err(format!("--compiler: {why}")),
        None => Ok(compiler),
    }
}

/// Create `dir` and its missing parents (mode 0755), returning those created, outermost first.
fn make_dirs(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    use std::os::unix::fs::DirBuilderExt;
    let mut missing: Vec<PathBuf> = dir
        .ancestors()
        .take_while(|d| std::fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect();
    missing.reverse();
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    Ok(missing)
}

/// Remove the directories of `made` (outermost first) that are empty, innermost first; the
/// ones removed.
fn remove_made_dirs(made: &[PathBuf]) -> Vec<PathBuf> {
    made.iter()
        .rev()
        .filter(|d| std::fs::remove_dir(d).is_ok())
        .cloned()
        .collect()
}

/// Write the configuration file in `dir` atomically and durably (mode 0644), reached through
/// the directory's descriptor.
fn write_config(dir: &Trusted, config: &Config) -> std::io::Result<()> {
    let mut text = serde_json::to_vec_pretty(config).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let mut f = crate::fsx::AtomicFile::create_in(dir.dir(), CONFIG_NAME)?.with_mode(0o644);
    f.write_all(&text)?;
    f.commit(crate::fsx::Durability::Durable)
}

/// Place the link to `target` in `dir` atomically (a uniquely named link renamed over it).
fn place_link(dir: &Trusted, target: &Path) -> std::io::Result<()> {
    let tmp = crate::fsx::unique::name(&format!(".{LINK_NAME}.tmp."));
    dir.dir().symlink(target, &tmp)?;
    dir.dir()
        .rename(&tmp, dir.dir(), LINK_NAME)
        .inspect_err(|_| {
            let _ = dir.dir().remove_file(&tmp);
        })
}

/// The daemon's own parser judges the budget, the socket and the uids, as it will when it starts.
fn check_daemon_settings(prog: &str, req: &Install, socket: &Path) -> Result<(), i32> {
    let mut probe: Vec<String> = [
        "--memory-budget",
        &req.memory_budget,
        "--socket",
        &socket.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    for uid in &req.allow_uid {
        probe.extend(["--allow-uid".to_string(), uid.to_string()]);
    }
    match daemon_config::parse(prog, &probe) {
        Ok(_) => Ok(()),
        Err(e) => {
            err(&e);
            Err(crate::cli::CliError::EXIT_STATUS)
        }
    }
}

fn install(prog: &str, req: &Install) -> i32 {
    let dir = match std::path::absolute(&req.dir) {
        Ok(d) => d,
        Err(e) => return failed(&format!("{}: {e}", req.dir.display())),
    };
    let compiler = match real_compiler(&req.compiler, &dir) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let socket = req
        .socket
        .as_ref()
        .map(|s| std::path::absolute(s).unwrap_or_else(|_| PathBuf::from(s)));
    if let Err(status) = check_daemon_settings(
        prog,
        req,
        &socket.clone().unwrap_or_else(|| default_socket(&dir)),
    ) {
        return status;
    }
    let nxcc = match std::env::current_exe().and_then(|e| e.canonicalize()) {
        Ok(e) => e,
        Err(e) => return failed(&format!("cannot find nxcc's own executable: {e}")),
    };
    let made = match make_dirs(&dir) {
        Ok(m) => m,
        Err(e) => return failed(&format!("cannot create {}: {e}", dir.display())),
    };
    let trusted = match Trusted::open(&dir, SHIM_DIR, true) {
        Ok(t) => t,
        Err(e) => {
            remove_made_dirs(&made);
            return failed(&refusal(&dir, &e));
        }
    };
    let written = write_shim(
        &trusted,
        &made,
        Config {
            format: FORMAT.to_string(),
            compiler,
            socket,
            allow_uids: req.allow_uid.clone(),
            memory_budget: req.memory_budget.clone(),
            nxcc,
            created_dirs: Vec::new(),
            created_dir: false,
        },
    );
    match written {
        Ok(config) => {
            out(&installed_text(&dir, &config));
            0
        }
        Err(e) => {
            remove_made_dirs(&made);
            failed(&e)
        }
    }
}

/// Write the configuration and the link into the checked `dir` (keeping what an earlier install
/// created); the configuration written.
fn write_shim(dir: &Trusted, made: &[PathBuf], mut config: Config) -> Result<Config, String> {
    let link = dir.path().join(LINK_NAME);
    let previous = read_config_in(dir).map_err(|e| format!("{e}; remove it first"))?;
    let link_is_ours = match dir.dir().stat(LINK_NAME) {
        Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Symlink && previous.is_some(),
        Err(_) => true,
    };
    if !link_is_ours {
        return Err(format!(
            "{} exists and is not an nxcc shim; refusing to replace it",
            link.display()
        ));
    }
    config.created_dirs = match &previous {
        Some(p) => p.made_dirs(dir.path()),
        None => made.to_vec(),
    };
    // The configuration first: a `neuronx-cc` link never exists without it.
    write_config(dir, &config).map_err(|e| {
        format!(
            "cannot write {}: {e}",
            dir.path().join(CONFIG_NAME).display()
        )
    })?;
    place_link(dir, &config.nxcc).map_err(|e| format!("cannot write {}: {e}", link.display()))?;
    Ok(config)
}

fn installed_text(dir: &Path, config: &Config) -> String {
    let daemon = match &config.socket {
        None => format!(
            "each user's own daemon (for you: {}), started on first use",
            default_socket(dir).display()
        ),
        Some(s) if config.allow_uids.is_empty() => format!(
            "the daemon on {} (started on first use; it serves only its own user, others compile with the real compiler)",
            s.display()
        ),
        Some(s) => format!(
            "the daemon on {} (started on first use; it serves its own user and uids {})",
            s.display(),
            config
                .allow_uids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    format!(
        "nxcc shim installed in {dir}\n  {link} -> {nxcc}\n  {cfg}\n  compiles: {daemon}: nxcc daemon --compiler {real} --memory-budget {budget}, cache on\n  everything else: {real}\nPut it first on PATH for the processes that compile: export PATH={dir}:$PATH\nRemove it with: nxcc shim uninstall {dir}\n",
        dir = dir.display(),
        link = dir.join(LINK_NAME).display(),
        nxcc = config.nxcc.display(),
        cfg = dir.join(CONFIG_NAME).display(),
        real = config.compiler.display(),
        budget = config.memory_budget,
    )
}

/// What `shim status` finds, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
struct Status {
    /// The shim's directory.
    dir: PathBuf,
    /// `DIR/neuronx-cc`.
    link: PathBuf,
    /// Where the link points (`null`: there is no link).
    link_target: Option<PathBuf>,
    /// Whether what it points to exists.
    link_target_exists: bool,
    /// The real compiler.
    compiler: PathBuf,
    /// `ok`, `missing`, or `loop` (it is nxcc itself).
    compiler_state: &'static str,
    /// The daemon's memory budget.
    memory_budget: String,
    /// The first `neuronx-cc` on PATH (`null`: none).
    first_on_path: Option<PathBuf>,
    /// Whether that is this shim's.
    is_first_on_path: bool,
    /// The shim's daemon.
    daemon: Daemon,
}

/// The shim's daemon, as `status` finds it.
#[derive(Debug, serde::Serialize)]
struct Daemon {
    /// Its socket.
    socket: PathBuf,
    /// Shared with other users (the shim's --socket), else each user's own.
    shared: bool,
    /// `answers`, `refused` (an HTTP status other than 200), `not_running`.
    state: &'static str,
    /// Its status (`GET /v1/status`) when it answers.
    status: Option<crate::daemon::wire::DaemonStatus>,
    /// The HTTP status and body of a refusal.
    refused: Option<(u16, String)>,
}

fn status(dir: Option<&Path>, json: bool) -> i32 {
    let found = match find_status(dir) {
        Ok(s) => s,
        Err(Ok(why)) if json => {
            out(&format!(
                "{}\n",
                serde_json::json!({"installed": false, "why": why})
            ));
            return 1;
        }
        Err(Ok(why)) => {
            out(&format!("{why}\n"));
            return 1;
        }
        Err(Err(e)) => return failed(&e),
    };
    if json {
        let mut value = serde_json::to_value(&found).unwrap_or_default();
        if let Some(o) = value.as_object_mut() {
            o.insert("installed".into(), true.into());
        }
        out(&format!("{value}\n"));
    } else {
        out(&status_text(&found));
    }
    0
}

/// The shim in `dir` (default: the first on PATH); `Err(Ok(why))` when there is none,
/// `Err(Err(e))` when its configuration cannot be read.
fn find_status(dir: Option<&Path>) -> Result<Status, Result<String, String>> {
    let first_on_path = which(LINK_NAME, None);
    let link = match (dir, &first_on_path) {
        (Some(d), _) => std::path::absolute(d)
            .unwrap_or_else(|_| d.to_path_buf())
            .join(LINK_NAME),
        (None, Some(p)) => p.clone(),
        (None, None) => return Err(Ok("neuronx-cc: none on PATH; no nxcc shim is in use".into())),
    };
    let dir = link.parent().unwrap_or(Path::new("/")).to_path_buf();
    let config = match read_config(&dir) {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(Ok(format!(
                "neuronx-cc: {} is not an nxcc shim (no {CONFIG_NAME} beside it)",
                link.display()
            )))
        }
        Err(e) => return Err(Err(e)),
    };
    let link_target = std::fs::read_link(&link).ok();
    let compiler_state = match loop_of(&config.compiler, Some(&config.nxcc)) {
        Some(_) => "loop",
        None if is_executable(&config.compiler) => "ok",
        None => "missing",
    };
    let is_first_on_path = first_on_path
        .as_ref()
        .is_some_and(|p| same_dir(p.parent().unwrap_or(p), &dir));
    Ok(Status {
        link_target_exists: link_target.as_ref().is_some_and(|t| t.exists()),
        link_target,
        compiler: config.compiler.clone(),
        compiler_state,
        memory_budget: config.memory_budget.clone(),
        first_on_path,
        is_first_on_path,
        daemon: daemon_status(&config, &dir),
        link,
        dir,
    })
}

fn status_text(s: &Status) -> String {
    let mut text = format!("nxcc shim in {}\n", s.dir.display());
    text.push_str(&format!(
        "  {}: {}\n",
        s.link.display(),
        match &s.link_target {
            Some(t) if s.link_target_exists => format!("-> {}", t.display()),
            Some(t) => format!("-> {} (missing: reinstall the shim)", t.display()),
            None => "missing (the configuration is there, the link is not)".to_string(),
        }
    ));
    let compiler_state = match s.compiler_state {
        "loop" => " (a loop: it is nxcc itself; reinstall with the real compiler)",
        "missing" => " (missing)",
        _ => "",
    };
    text.push_str(&format!(
        "  compiler: {}{compiler_state}\n  memory budget: {}\n",
        s.compiler.display(),
        s.memory_budget
    ));
    text.push_str(&format!(
        "  first on PATH: {}\n",
        match &s.first_on_path {
            Some(_) if s.is_first_on_path => "yes".to_string(),
            Some(p) => format!("no (the first neuronx-cc on PATH is {})", p.display()),
            None => format!("no (put {} first on PATH)", s.dir.display()),
        }
    ));
    text.push_str(&daemon_text(&s.daemon));
    text
}

/// The shim's daemon: asked for its status.
fn daemon_status(config: &Config, dir: &Path) -> Daemon {
    let socket = config.socket_for(dir);
    let mut d = Daemon {
        socket: socket.clone(),
        shared: config.socket.is_some(),
        state: "not_running",
        status: None,
        refused: None,
    };
    match client::request(&socket, "GET", "/v1/status") {
        Ok((200, body)) => {
            d.state = "answers";
            d.status = Some(serde_json::from_str(&body).unwrap_or_default());
        }
        Ok((code, body)) => {
            d.state = "refused";
            d.refused = Some((code, body.trim_end().to_string()));
        }
        Err(_) => {}
    }
    d
}

/// The `daemon:` line of `status`.
fn daemon_text(d: &Daemon) -> String {
    let whose = if d.shared {
        "shared"
    } else {
        "yours; each user has their own"
    };
    let socket = d.socket.display();
    match (&d.status, &d.refused) {
        (Some(s), _) => format!(
            "  daemon: answers on {socket} ({whose}; pid {}, {} running, {} queued, engine: {})\n",
            s.pid,
            s.running,
            s.queued,
            if s.engine.is_empty() { "?" } else { &s.engine },
        ),
        (None, Some((code, body))) => {
            format!("  daemon: {socket} ({whose}) answered {code}: {body}\n")
        }
        (None, None) => {
            format!("  daemon: not running on {socket} ({whose}; the first compile starts it)\n")
        }
    }
}

/// Stop this user's daemon of the shim (one it can stop); what to say about it.
fn stop_daemon(config: &Config, dir: &Path) -> String {
    use crate::daemon::stop::{self, Stopped};
    let socket = config.socket_for(dir);
    let others = if config.socket.is_none() {
        // Every user's socket of this shim has the same name, in that user's daemon directory:
        // named here, since the shim's directory (what `shim status` reads) is going.
        format!(
            "\nOther users' daemons of this shim stop after their inactivity timeout ({} s), or with: nxcc daemon stop --socket DIR/{} (run as them; DIR is their daemon directory: $XDG_RUNTIME_DIR/nxcc, else /tmp/nxcc-<uid>)",
            daemon_config::DEFAULT_INACTIVITY_S,
            socket
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        )
    } else {
        String::new()
    };
    let pid_file = daemon_config::pid_file_for(&socket);
    let said = match stop::stop(&socket, &pid_file, stop::STOP_WAIT) {
        Ok(Stopped::Stopped(pid)) => format!(
            "Stopped the daemon{} on {}.",
            pid.map_or(String::new(), |p| format!(" (pid {p})")),
            socket.display()
        ),
        Ok(Stopped::NotRunning) => format!("No daemon runs on {}.", socket.display()),
        Err(e) => format!(
            "Could not stop the daemon on {}: {e}; it stops by itself after its inactivity timeout ({} s), or with: nxcc daemon stop --socket {}",
            socket.display(),
            daemon_config::DEFAULT_INACTIVITY_S,
            socket.display()
        ),
    };
    said + &others
}

fn uninstall(dir: &Path) -> i32 {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let trusted = match Trusted::open(&dir, SHIM_DIR, true) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return failed(&format!(
                "no nxcc shim in {} (no {CONFIG_NAME})",
                dir.display()
            ))
        }
        Err(e) => return failed(&refusal(&dir, &e)),
    };
    let config = match read_config_in(&trusted) {
        Ok(Some(c)) => c,
        Ok(None) => {
            return failed(&format!(
                "no nxcc shim in {} (no {CONFIG_NAME})",
                dir.display()
            ))
        }
        Err(e) => return failed(&e),
    };
    let link = dir.join(LINK_NAME);
    let mut removed = Vec::new();
    match trusted.dir().stat(LINK_NAME) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
            if let Err(e) = trusted.dir().remove_file(LINK_NAME) {
                return failed(&format!("cannot remove {}: {e}", link.display()));
            }
            removed.push(link.display().to_string());
        }
        Ok(_) => {
            return failed(&format!(
                "{} is not the link install wrote; leaving it and {CONFIG_NAME}",
                link.display()
            ))
        }
        Err(_) => {}
    }
    let stopped = stop_daemon(&config, &dir);
    if let Err(e) = trusted.dir().remove_file(CONFIG_NAME) {
        return failed(&format!(
            "cannot remove {}: {e}",
            dir.join(CONFIG_NAME).display()
        ));
    }
    removed.push(dir.join(CONFIG_NAME).display().to_string());
    drop(trusted);
    for d in remove_made_dirs(&config.made_dirs(&dir)) {
        removed.push(format!("{} (install created it)", d.display()));
    }
    out(&format!(
        "nxcc shim removed: {}\n{stopped}\n",
        removed.join(", ")
    ));
    0
}

/// `shim`'s command line as clap defines it (nxcc's completions and manual page).
pub(crate) fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<ShimCommand>(prog, "shim")
}
