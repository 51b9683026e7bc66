//! `nxcc shim`: a `neuronx-cc` for a directory on PATH that sends every compile to the host's
//! compile daemon and everything else to the real compiler.
//!
//! `nxcc shim install DIR --compiler REAL` writes exactly two entries into `DIR`:
//! - `DIR/neuronx-cc`: a symbolic link to this nxcc executable;
//! - `DIR/neuronx-cc.nxcc-shim.json` ([`CONFIG_NAME`]): the shim's [`Config`] — the real compiler,
//!   the daemon's socket and memory budget.
//!
//! nxcc invoked as `neuronx-cc` with that file beside the `neuronx-cc` it was run as is the shim
//! ([`serve`]): `neuronx-cc compile ...` goes to the daemon on the configured socket (started on
//! first use as `nxcc daemon --compiler REAL --memory-budget BUDGET`, the cache on), so the
//! compiles of every process on the host share one queue, one memory budget and one compile per
//! distinct graph; anything else (`--version`, `list-operators`, a command line nxcc cannot
//! parse) is REAL run with the same arguments and environment, in place of the shim.
//!
//! `nxcc shim status [DIR]` says what is installed (in `DIR`, else the first `neuronx-cc` on
//! PATH) and whether its daemon answers; `nxcc shim uninstall DIR` removes exactly the two entries
//! (and `DIR` itself when install created it and it is empty again).

pub mod serve;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::cli::argparse::{Nargs, Positional};
use crate::cli::flags::{self, flag, Action, Choices, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{err, out, Stop, Subcommand, HELP};
use crate::daemon::{client, config as daemon_config};

/// The shim's executable name in its directory.
pub const LINK_NAME: &str = "neuronx-cc";
/// The shim's configuration, beside [`LINK_NAME`].
pub const CONFIG_NAME: &str = "neuronx-cc.nxcc-shim.json";
/// The `format` of a [`Config`].
pub const FORMAT: &str = "nxcc-shim/1";
/// `--memory-budget`'s default.
pub const DEFAULT_MEMORY_BUDGET: &str = "auto";
/// Connections per uid the shim's daemon serves at once: one per framework process of a large
/// host (64 ranks on trn2), with room for status requests.
pub const DAEMON_MAX_CONNECTIONS_PER_UID: usize = 256;

/// What `DIR/neuronx-cc.nxcc-shim.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// The configuration's format tag ([`FORMAT`]); another one is refused when it is read.
    pub format: String,
    /// The real compiler (absolute): the daemon's `--compiler`, and what every other use runs.
    pub compiler: PathBuf,
    /// The daemon's socket (absolute).
    pub socket: PathBuf,
    /// The daemon's `--memory-budget` (`auto` or a size).
    pub memory_budget: String,
    /// What `DIR/neuronx-cc` links to (the nxcc that installed it).
    pub nxcc: PathBuf,
    /// Whether install created `DIR` (uninstall then removes it when it is empty).
    pub created_dir: bool,
}

impl Config {
    /// The arguments the shim gives a daemon it starts (besides `--socket` and `--log-file`).
    pub fn daemon_args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--compiler".into(),
            self.compiler.clone().into(),
            "--memory-budget".into(),
            self.memory_budget.clone().into(),
            "--max-connections-per-uid".into(),
            DAEMON_MAX_CONNECTIONS_PER_UID.to_string().into(),
        ]
    }

    /// Where the shim's compiles go, from the shim in `dir`. The daemon's PATH leaves `dir` out,
    /// so that nothing the real compiler starts by the name `neuronx-cc` comes back to the shim.
    pub fn target(&self, dir: &Path) -> client::Target {
        let path: Vec<PathBuf> = path_dirs()
            .into_iter()
            .filter(|d| !same_dir(d, dir))
            .collect();
        client::Target {
            socket: self.socket.clone(),
            daemon_args: self.daemon_args(),
            daemon_env: std::env::join_paths(path)
                .map(|p| vec![("PATH".into(), p)])
                .unwrap_or_default(),
        }
    }
}

/// Read `DIR/neuronx-cc.nxcc-shim.json`: `Ok(None)` when there is none.
pub fn read_config(dir: &Path) -> Result<Option<Config>, String> {
    let path = dir.join(CONFIG_NAME);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let config: Config = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not an nxcc shim configuration: {e}", path.display()))?;
    if config.format != FORMAT {
        return Err(format!(
            "{} has format {:?}; this nxcc reads {FORMAT:?}",
            path.display(),
            config.format
        ));
    }
    Ok(Some(config))
}

/// The socket of the shim in `dir` unless `--socket` says otherwise: one per directory, in the
/// daemon's default directory (`shim-<12 hex digits of blake3(DIR)>.sock`).
pub fn default_socket(dir: &Path) -> PathBuf {
    let digest = blake3::hash(dir.as_os_str().as_encoded_bytes()).to_hex();
    daemon_config::default_dir().join(format!("shim-{}.sock", &digest[..12]))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
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

// ---- the command line ----

static COMPILER: Flag = flag(
    "--compiler",
    &[],
    "compiler",
    Action::Store,
    Kind::Str,
    flags::Default::None,
    Choices::Any,
    Visibility::Public,
    Scope::Compile,
    "nxcc",
    "For install: the real neuronx-cc (a path, or a name looked up on PATH outside DIR).",
);

static MEMORY_BUDGET: Flag = flag(
    "--memory-budget",
    &[],
    "memory_budget",
    Action::Store,
    Kind::Str,
    flags::Default::None,
    Choices::Any,
    Visibility::Public,
    Scope::Compile,
    "nxcc",
    "For install: the daemon's memory budget, SIZE (16G) or auto (80% of MemAvailable; the default).",
);

static SOCKET: Flag = flag(
    "--socket",
    &[],
    "socket",
    Action::Store,
    Kind::Str,
    flags::Default::None,
    Choices::Any,
    Visibility::Public,
    Scope::Compile,
    "nxcc",
    "For install: the daemon's socket (default: shim-<digest of DIR>.sock in the daemon's directory).",
);

const POSITIONALS: [Positional; 2] = [
    Positional {
        metavar: "{install,status,uninstall}",
        nargs: Nargs::One,
        help: "install DIR: write DIR/neuronx-cc; status [DIR]: what is installed and whether its daemon answers; uninstall DIR: remove what install wrote.",
    },
    Positional {
        metavar: "DIR",
        nargs: Nargs::Optional,
        help: "The directory to put first on PATH (for status: default, the first neuronx-cc on PATH).",
    },
];

static OWN_FLAGS: [&Flag; 4] = [&HELP, &COMPILER, &MEMORY_BUDGET, &SOCKET];

static COMMAND: Subcommand = Subcommand {
    name: "shim",
    flags: &OWN_FLAGS,
    positionals: &POSITIONALS,
    about: "Put the host's compile daemon behind every `neuronx-cc compile` of the processes whose PATH\nstarts with DIR; every other use of neuronx-cc runs the real compiler.\n\n  install DIR --compiler REAL   write DIR/neuronx-cc (a link to nxcc) and\n                                DIR/neuronx-cc.nxcc-shim.json\n  status [DIR]                  what is installed, and whether its daemon answers\n  uninstall DIR                 remove exactly what install wrote",
};

/// `nxcc shim install|status|uninstall`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let usage_error = |message: &str| Stop::Usage(COMMAND.usage_error(prog, message)).report();
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let action = parsed.positionals.first().and_then(|v| v.first());
    let dir = parsed.positionals.get(1).and_then(|v| v.first());
    let install_only = ["compiler", "memory_budget", "socket"]
        .into_iter()
        .find(|d| parsed.str(d).is_some());
    match (action.map(String::as_str), dir) {
        (None, _) => usage_error("the following arguments are required: {install,status,uninstall}"),
        (Some("install"), None) => usage_error("shim install: the following arguments are required: DIR"),
        (Some("install"), Some(dir)) => match parsed.str("compiler") {
            None => usage_error("shim install: the following arguments are required: --compiler"),
            Some(real) => install(
                prog,
                Path::new(dir),
                real,
                parsed.str("memory_budget").unwrap_or(DEFAULT_MEMORY_BUDGET),
                parsed.str("socket"),
            ),
        },
        (Some(a @ ("status" | "uninstall")), _) if install_only.is_some() => usage_error(&format!(
            "--{} applies to install only, not {a}",
            install_only.unwrap_or_default().replace('_', "-")
        )),
        (Some("status"), dir) => status(dir.map(Path::new)),
        (Some("uninstall"), None) => usage_error("shim uninstall: the following arguments are required: DIR"),
        (Some("uninstall"), Some(dir)) => uninstall(Path::new(dir)),
        (Some(other), _) => usage_error(&format!(
            "argument {{install,status,uninstall}}: invalid choice: {} (choose from 'install', 'status', 'uninstall')",
            crate::cli::argparse::py_repr(other)
        )),
    }
}

fn failed(text: &str) -> i32 {
    err(&format!("[ERROR] nxcc shim: {text}\n"));
    1
}

/// Write the configuration file atomically and durably (mode 0644).
fn write_config(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = crate::fsx::AtomicFile::create(path)?.with_mode(0o644);
    f.write_all(bytes)?;
    f.commit(crate::fsx::Durability::Durable)
}

/// Place a symbolic link atomically (a uniquely named link renamed over `link`).
fn place_link(target: &Path, link: &Path) -> std::io::Result<()> {
    let tmp = link.with_file_name(crate::fsx::unique::name(&format!(".{LINK_NAME}.tmp.")));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn install(prog: &str, dir: &Path, real: &str, budget: &str, socket: Option<&str>) -> i32 {
    let dir = match std::path::absolute(dir) {
        Ok(d) => d,
        Err(e) => return failed(&format!("{}: {e}", dir.display())),
    };
    // The real compiler: a path as given, else looked up on PATH outside DIR.
    let compiler = if real.contains('/') {
        std::path::absolute(real).unwrap_or_else(|_| PathBuf::from(real))
    } else {
        match which(real, Some(&dir)) {
            Some(p) => p,
            None => {
                return failed(&format!(
                    "--compiler {real}: no executable {real} on PATH (outside {})",
                    dir.display()
                ))
            }
        }
    };
    if !is_executable(&compiler) {
        return failed(&format!(
            "--compiler {}: not an executable file",
            compiler.display()
        ));
    }
    if compiler.file_name().is_some_and(|n| n == LINK_NAME) && is_shim(&compiler) {
        return failed(&format!(
            "--compiler {}: that is an nxcc shim itself; name the real compiler",
            compiler.display()
        ));
    }
    let socket = match socket {
        Some(s) => std::path::absolute(s).unwrap_or_else(|_| PathBuf::from(s)),
        None => default_socket(&dir),
    };
    // The daemon's own parser judges the budget and the socket, as it will when it starts.
    let probe: Vec<String> = [
        "--memory-budget",
        budget,
        "--socket",
        &socket.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    if let Err(e) = daemon_config::parse(&format!("{prog} daemon"), &probe) {
        err(&e.render());
        return crate::cli::CliError::EXIT_STATUS;
    }
    let nxcc = match std::env::current_exe().and_then(|e| e.canonicalize()) {
        Ok(e) => e,
        Err(e) => return failed(&format!("cannot find nxcc's own executable: {e}")),
    };
    let link = dir.join(LINK_NAME);
    let previous = match read_config(&dir) {
        Ok(p) => p,
        Err(e) => return failed(&format!("{e}; remove it first")),
    };
    match std::fs::symlink_metadata(&link) {
        Ok(m) if !(m.file_type().is_symlink() && previous.is_some()) => {
            return failed(&format!(
                "{} exists and is not an nxcc shim; refusing to replace it",
                link.display()
            ))
        }
        _ => {}
    }
    let created_dir = match &previous {
        Some(p) => p.created_dir,
        None => !dir.exists(),
    };
    if let Err(e) = std::fs::create_dir_all(&dir) {
        return failed(&format!("cannot create {}: {e}", dir.display()));
    }
    let config = Config {
        format: FORMAT.to_string(),
        compiler,
        socket,
        memory_budget: budget.to_string(),
        nxcc: nxcc.clone(),
        created_dir,
    };
    let mut text = serde_json::to_string_pretty(&config).unwrap_or_default();
    text.push('\n');
    // The configuration first: a `neuronx-cc` link never exists without it.
    if let Err(e) = write_config(&dir.join(CONFIG_NAME), text.as_bytes()) {
        return failed(&format!(
            "cannot write {}: {e}",
            dir.join(CONFIG_NAME).display()
        ));
    }
    if let Err(e) = place_link(&nxcc, &link) {
        return failed(&format!("cannot write {}: {e}", link.display()));
    }
    out(&format!(
        "nxcc shim installed in {dir}\n  {link} -> {nxcc}\n  {cfg}\n  compiles: the daemon on {socket} (started on first use: nxcc daemon --compiler {real} --memory-budget {budget}, cache on)\n  everything else: {real}\nPut it first on PATH for the processes that compile: export PATH={dir}:$PATH\nRemove it with: nxcc shim uninstall {dir}\n",
        dir = dir.display(),
        link = link.display(),
        nxcc = nxcc.display(),
        cfg = dir.join(CONFIG_NAME).display(),
        socket = config.socket.display(),
        real = config.compiler.display(),
    ));
    0
}

fn status(dir: Option<&Path>) -> i32 {
    let first_on_path = which(LINK_NAME, None);
    let link = match dir {
        Some(d) => std::path::absolute(d)
            .unwrap_or_else(|_| d.to_path_buf())
            .join(LINK_NAME),
        None => match &first_on_path {
            Some(p) => p.clone(),
            None => {
                out("neuronx-cc: none on PATH; no nxcc shim is in use\n");
                return 1;
            }
        },
    };
    let dir = link.parent().unwrap_or(Path::new("/")).to_path_buf();
    let config = match read_config(&dir) {
        Ok(Some(c)) => c,
        Ok(None) => {
            out(&format!(
                "neuronx-cc: {} is not an nxcc shim (no {CONFIG_NAME} beside it)\n",
                link.display()
            ));
            return 1;
        }
        Err(e) => return failed(&e),
    };
    let mut text = format!("nxcc shim in {}\n", dir.display());
    let target = std::fs::read_link(&link).ok();
    text.push_str(&format!(
        "  {}: {}\n",
        link.display(),
        match &target {
            Some(t) if t.exists() => format!("-> {}", t.display()),
            Some(t) => format!("-> {} (missing: reinstall the shim)", t.display()),
            None => "missing (the configuration is there, the link is not)".to_string(),
        }
    ));
    text.push_str(&format!(
        "  compiler: {}{}\n  memory budget: {}\n",
        config.compiler.display(),
        if is_executable(&config.compiler) {
            ""
        } else {
            " (missing)"
        },
        config.memory_budget
    ));
    text.push_str(&format!(
        "  first on PATH: {}\n",
        match &first_on_path {
            Some(p) if same_dir(p.parent().unwrap_or(p), &dir) => "yes".to_string(),
            Some(p) => format!("no (the first neuronx-cc on PATH is {})", p.display()),
            None => format!("no (put {} first on PATH)", dir.display()),
        }
    ));
    match client::request(&config.socket, "GET", "/v1/status") {
        Ok((200, body)) => {
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            text.push_str(&format!(
                "  daemon: answers on {} (pid {}, {} running, {} queued, engine: {})\n",
                config.socket.display(),
                v["pid"],
                v["running"],
                v["queued"],
                v["engine"].as_str().unwrap_or("?"),
            ));
        }
        Ok((code, body)) => text.push_str(&format!(
            "  daemon: {} answered {code}: {}\n",
            config.socket.display(),
            body.trim_end()
        )),
        Err(_) => text.push_str(&format!(
            "  daemon: not running on {} (the first compile starts it)\n",
            config.socket.display()
        )),
    }
    out(&text);
    0
}

fn uninstall(dir: &Path) -> i32 {
    let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let config = match read_config(&dir) {
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
    match std::fs::symlink_metadata(&link) {
        Ok(m) if m.file_type().is_symlink() => {
            if let Err(e) = std::fs::remove_file(&link) {
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
    let cfg = dir.join(CONFIG_NAME);
    if let Err(e) = std::fs::remove_file(&cfg) {
        return failed(&format!("cannot remove {}: {e}", cfg.display()));
    }
    removed.push(cfg.display().to_string());
    if config.created_dir && std::fs::remove_dir(&dir).is_ok() {
        removed.push(format!("{} (install created it)", dir.display()));
    }
    out(&format!(
        "nxcc shim removed: {}\nA daemon running on {} stops by itself after its inactivity timeout.\n",
        removed.join(", "),
        config.socket.display()
    ));
    0
}
