//! `nxcc daemon`'s command line (a static flag table parsed by the argparse-compatible parser) and
//! where the daemon lives by default: its socket, pid file and directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::engine::EngineConfig;
use crate::cli::argparse::{py_repr, Parsed};
use crate::cli::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility};
use crate::cli::subcommand::{Stop, Subcommand, HELP};
use crate::cli::CliError;

/// The socket file name in the daemon's directory.
pub const SOCKET_NAME: &str = "daemon.sock";
/// The prefix of the original's abstract socket name (`\0com.amazon.neuronxcc.<pid>`).
pub const ABSTRACT_PREFIX: &str = "com.amazon.neuronxcc.";
/// `--inactivity-timeout`'s default, seconds (WIKI: the original's default).
pub const DEFAULT_INACTIVITY_S: f64 = 300.0;
/// `--shutdown-grace`'s default, seconds: how long running compiles may finish on exit.
pub const DEFAULT_SHUTDOWN_GRACE_S: f64 = 30.0;
/// `--socket-mode`'s default.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;
/// `--max-connections`'s default: open connections served at once, all uids together.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;
/// `--max-connections-per-uid`'s default.
pub const DEFAULT_MAX_CONNECTIONS_PER_UID: usize = 64;
/// `--head-timeout`'s default, seconds: how long a request head (and a request body) may take to
/// arrive, and how long an idle connection is kept.
pub const DEFAULT_HEAD_TIMEOUT_S: f64 = 10.0;

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A socket file.
    Path(PathBuf),
    /// The original's abstract address, `\0com.amazon.neuronxcc.<pid>` (named at bind time).
    Abstract,
}

/// A parsed `nxcc daemon` command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where to listen: a socket file or the abstract address.
    pub endpoint: Endpoint,
    /// The pid file, held locked while the daemon runs (`--pid-file`, else next to the socket).
    pub pid_file: PathBuf,
    /// `None`: never exit for inactivity.
    pub inactivity_timeout: Option<Duration>,
    /// Compiles run at once; more wait in arrival order (default: the number of CPUs).
    pub max_concurrent: usize,
    /// Bytes of estimated peak memory the running compiles may hold.
    pub memory_budget: Option<u64>,
    /// Uids served besides the daemon's own.
    pub allow_uids: Vec<u32>,
    /// The daemon's own log (default: stderr).
    pub log_file: Option<PathBuf>,
    /// Permission bits of the socket file.
    pub socket_mode: u32,
    /// How long running compiles may finish when the daemon is asked to exit.
    pub shutdown_grace: Duration,
    /// Open connections served at once (all uids), and per uid; more are answered `429`.
    pub max_connections: usize,
    /// Open connections of one uid served at once; more are answered `429`.
    pub max_connections_per_uid: usize,
    /// How long a request head or body may take to arrive (also the idle-connection timeout).
    pub head_timeout: Duration,
    /// Whether a request's `env` may set the simulated toolchain's injection variables.
    pub allow_test_env: bool,
    /// The engine flags (`--cache_dir`, `--compiler`, ...) the daemon's compiles use.
    pub engine: EngineConfig,
}

/// The daemon's default directory: `$XDG_RUNTIME_DIR/nxcc`, else this user's directory in
/// `/tmp` ([`private_tmp_dir`]).
pub fn default_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("nxcc"),
        _ => private_tmp_dir(Path::new("/tmp")),
    }
}

/// `<tmp>/nxcc-<uid>` when it is absent or this user's private directory. When another user
/// made that name first (or it is anything else), this user's own `<tmp>/nxcc-<uid>-<random>`
/// — a directory of theirs, mode 0700, the first by name when several are there — or one made
/// now: a name squatted by another user stops nobody's daemon. (If none can be made, the usual
/// name, which the trust check then refuses saying why.)
pub fn private_tmp_dir(tmp: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::getuid().as_raw();
    let usual = tmp.join(format!("nxcc-{uid}"));
    let ours = |p: &Path| {
        std::fs::symlink_metadata(p)
            .is_ok_and(|m| m.is_dir() && m.uid() == uid && m.mode() & 0o077 == 0)
    };
    match std::fs::symlink_metadata(&usual) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return usual,
        Ok(_) if ours(&usual) => return usual,
        _ => {}
    }
    let prefix = format!("nxcc-{uid}-");
    let mut found: Vec<PathBuf> = std::fs::read_dir(tmp)
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with(&prefix))
                })
                .map(|e| e.path())
                .filter(|p| ours(p))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    if let Some(p) = found.into_iter().next() {
        return p;
    }
    for _ in 0..8 {
        use std::os::unix::fs::DirBuilderExt;
        let fresh = tmp.join(crate::fsx::unique::name(&prefix));
        match std::fs::DirBuilder::new().mode(0o700).create(&fresh) {
            Ok(()) => return fresh,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => break,
        }
    }
    usual
}

/// The default socket: [`default_dir`]`/daemon.sock`.
pub fn default_socket() -> PathBuf {
    default_dir().join(SOCKET_NAME)
}

/// The pid file next to a socket: the socket's path with the extension `.pid` (`daemon.pid` for
/// the default `daemon.sock`; `d.pid` for `d.sock`).
pub fn pid_file_for(socket: &Path) -> PathBuf {
    socket.with_extension("pid")
}

/// The log file the client gives a daemon it starts: the socket's path with the extension `.log`.
pub fn log_file_for(socket: &Path) -> PathBuf {
    socket.with_extension("log")
}

/// Why a daemon's socket, pid file and log file cannot be where they were asked to be: two of
/// them are the same file (`--socket x.pid` puts the socket where its own pid file goes).
pub fn collision(
    socket: Option<&Path>,
    pid_file: &Path,
    log_file: Option<&Path>,
) -> Option<String> {
    let named = [
        ("--socket", socket),
        ("--pid-file", Some(pid_file)),
        ("--log-file", log_file),
    ];
    for (i, (a, pa)) in named.iter().enumerate() {
        for (b, pb) in &named[i + 1..] {
            if let (Some(pa), Some(pb)) = (pa, pb) {
                if std::path::absolute(pa).ok() == std::path::absolute(pb).ok() {
                    return Some(format!(
                        "argument {a}: {} is also the {} (the pid file defaults to the socket's path with .pid, the client's log to .log); choose another name",
                        pa.display(),
                        b.trim_start_matches("--"),
                    ));
                }
            }
        }
    }
    None
}

#[rustfmt::skip]
static SOCKET: Flag = flag("--socket", &[], "socket", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The Unix socket to listen on (its directory is created 0700; the socket is made 0600). Default: $XDG_RUNTIME_DIR/nxcc/daemon.sock, else /tmp/nxcc-<uid>/daemon.sock (in a private /tmp/nxcc-<uid>-* of yours when another user made that first).");
#[rustfmt::skip]
static ABSTRACT: Flag = flag("--abstract", &[], "abstract", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Listen on the original daemon's abstract address \\0com.amazon.neuronxcc.<pid> instead of a socket file (its client finds it through --pid-file).");
#[rustfmt::skip]
static PID_FILE: Flag = flag("--pid-file", &[], "pid_file", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The pid file, held under an exclusive lock while the daemon runs (default: the socket's path with .pid for its extension: daemon.pid for daemon.sock).");
#[rustfmt::skip]
static INACTIVITY: Flag = flag("--inactivity-timeout", &[], "inactivity_timeout", Action::Store, Kind::Float, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Exit after this many seconds without a request, counted from the last request finished (0: never). Default 300.");
#[rustfmt::skip]
static MAX_CONCURRENT: Flag = flag("--max-concurrent", &[], "max_concurrent", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Run at most N compiles at once; more wait in arrival order. Default: the number of CPUs.");
#[rustfmt::skip]
static MEMORY_BUDGET: Flag = flag("--memory-budget", &[], "memory_budget", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Start a compile only while the estimated peak memory of the running ones plus its own fits in SIZE (512M, 8G, ...; auto: 80% of MemAvailable).");
#[rustfmt::skip]
static ALLOW_UID: Flag = flag("--allow-uid", &[], "allow_uid", Action::Append, Kind::Int, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Also serve this user id (repeatable). Only the daemon's own uid is served otherwise; compiles run as the daemon's user.");
#[rustfmt::skip]
static SOCKET_MODE: Flag = flag("--socket-mode", &[], "socket_mode", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Permission bits of the socket file, octal (default 0600). Another user allowed with --allow-uid must be able to reach the socket.");
#[rustfmt::skip]
static SHUTDOWN_GRACE: Flag = flag("--shutdown-grace", &[], "shutdown_grace", Action::Store, Kind::Float, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "On exit (POST /exit, SIGTERM, SIGINT, inactivity), let running compiles finish for at most this many seconds, then cancel them. Default 30.");
#[rustfmt::skip]
static LOG_FILE: Flag = flag("--log-file", &[], "log_file", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Append the daemon's own log (start, stop, each request) to FILE instead of stderr.");
#[rustfmt::skip]
static CACHE_DIR: Flag = flag("--cache_dir", &["--cache-dir"], "cache_dir", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The compile cache the daemon's compiles go through (taken by the daemon's compile engine).");
#[rustfmt::skip]
static ALLOW_TEST_ENV: Flag = flag("--allow-test-env", &[], "allow_test_env", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Let a request's env set the simulated toolchain's injection variables (NXCC_SIM_*): for tests only; never on a daemon other users reach.");
#[rustfmt::skip]
static MAX_CONNECTIONS: Flag = flag("--max-connections", &[], "max_connections", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Serve at most N open connections at once, all users together; more are answered 429 and closed. Default 256.");
#[rustfmt::skip]
static MAX_CONNECTIONS_PER_UID: Flag = flag("--max-connections-per-uid", &[], "max_connections_per_uid", Action::Store, Kind::Int, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Serve at most N open connections of one user at once; more are answered 429 and closed. Default 64.");
#[rustfmt::skip]
static HEAD_TIMEOUT: Flag = flag("--head-timeout", &[], "head_timeout", Action::Store, Kind::Float, Default::None, Choices::Any, Visibility::Internal, Scope::Driver, "nxcc",
    "For tests: how long a request head or body may take to arrive, and an idle connection is kept, seconds (default 10).");
#[rustfmt::skip]
static COMPILER: Flag = flag("--compiler", &[], "compiler", Action::Store, Kind::Path, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Run each compile as one supervised job `PATH compile <args> --output <out>` (taken by the daemon's compile engine).");

#[rustfmt::skip]
static REMOTE: Flag = flag("--remote", &[], "remote", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Send every compile the cache does not serve to a Remote Execution API server (grpc://HOST:PORT).");
#[rustfmt::skip]
static REMOTE_CACHE: Flag = flag("--remote-cache", &[], "remote_cache", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Share the compiles through a Remote Execution API action cache (grpc://HOST:PORT); compile here on a miss.");
#[rustfmt::skip]
static REMOTE_INSTANCE: Flag = flag("--remote-instance", &[], "remote_instance", Action::Store, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The instance name on the remote server.");

static OWN_FLAGS: [&Flag; 20] = [
    &HELP,
    &SOCKET,
    &ABSTRACT,
    &PID_FILE,
    &INACTIVITY,
    &MAX_CONCURRENT,
    &MEMORY_BUDGET,
    &ALLOW_UID,
    &SOCKET_MODE,
    &SHUTDOWN_GRACE,
    &LOG_FILE,
    &CACHE_DIR,
    &COMPILER,
    &ALLOW_TEST_ENV,
    &MAX_CONNECTIONS,
    &MAX_CONNECTIONS_PER_UID,
    &HEAD_TIMEOUT,
    &REMOTE,
    &REMOTE_CACHE,
    &REMOTE_INSTANCE,
];

static COMMAND: Subcommand = Subcommand {
    name: "daemon",
    flags: &OWN_FLAGS,
    positionals: &[],
    about: "Serve compiles over HTTP/1.1 on a Unix socket: the original daemon's protocol\n(POST /compile?working_directory=DIR, body = the shell-quoted compile arguments),\nPOST /v1/compile (JSON, streamed events), GET /v1/status and POST /exit.\n`nxcc daemon stop [--socket PATH]` stops the daemon of a socket and waits until it is gone.",
};

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Parse {
    /// Serve with this configuration.
    Run(Box<Config>),
    /// Print this text and exit 0.
    Help(String),
}

/// A usage error, rendered as argparse renders it (exit status 2).
pub fn usage_error(prog: &str, message: String) -> CliError {
    COMMAND.usage_error(prog, message)
}

fn float_arg(p: &Parsed, dest: &str, name: &str, default: f64) -> Result<f64, String> {
    let v = p
        .last(dest)
        .and_then(|o| o.value.as_float())
        .unwrap_or(default);
    let max = crate::cli::flags::SECONDS_RANGE.1;
    if !(0.0..=max).contains(&v) {
        return Err(format!(
            "argument {name}: must be a number of seconds from 0 to {max}, not {v}"
        ));
    }
    Ok(v)
}

/// Parse an octal permission mode: `0600`, `600`, `0o600`.
pub fn parse_mode(text: &str) -> Option<u32> {
    let t = text.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    if digits.is_empty() || !digits.chars().all(|c| ('0'..='7').contains(&c)) {
        return None;
    }
    u32::from_str_radix(digits, 8).ok().filter(|m| *m <= 0o777)
}

/// Parse `nxcc daemon`'s arguments.
pub fn parse(prog: &str, args: &[String]) -> Result<Parse, CliError> {
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(Stop::Help(text)) => return Ok(Parse::Help(text)),
        Err(Stop::Usage(e)) => return Err(e),
    };
    let fail = |m: String| usage_error(prog, m);
    let (endpoint, pid_file) = endpoint_of(&parsed).map_err(fail)?;
    let (inactivity, grace, head_timeout) = timeouts(&parsed).map_err(fail)?;
    let (max_concurrent, max_connections, max_connections_per_uid) =
        counts(&parsed).map_err(fail)?;
    let memory_budget = match parsed.str("memory_budget") {
        None => None,
        Some(s) => Some(
            crate::admission::parse_budget(s)
                .map_err(|e| fail(format!("argument --memory-budget: {e}")))?,
        ),
    };
    let remote = crate::remote::RemoteConfig::from_flags(
        parsed.str("remote").map(str::to_string),
        parsed.str("remote_cache").map(str::to_string),
        parsed.str("remote_instance").unwrap_or(""),
    )
    .map_err(|e| fail(format!("argument --remote: {}", e.cause)))?;
    let (allow_uids, socket_mode) = access(&parsed).map_err(fail)?;
    let log_file = parsed.str("log_file").map(PathBuf::from);
    let socket_path = match &endpoint {
        Endpoint::Path(p) => Some(p.as_path()),
        Endpoint::Abstract => None,
    };
    if let Some(e) = collision(socket_path, &pid_file, log_file.as_deref()) {
        return Err(fail(e));
    }
    Ok(Parse::Run(Box::new(Config {
        endpoint,
        pid_file,
        inactivity_timeout: (inactivity > 0.0).then(|| Duration::from_secs_f64(inactivity)),
        max_concurrent,
        memory_budget,
        allow_uids,
        log_file,
        socket_mode,
        shutdown_grace: Duration::from_secs_f64(grace),
        max_connections,
        max_connections_per_uid,
        head_timeout: Duration::from_secs_f64(head_timeout),
        allow_test_env: parsed.flag("allow_test_env"),
        engine: EngineConfig {
            cache_dir: parsed.str("cache_dir").map(PathBuf::from),
            compiler: parsed.str("compiler").map(PathBuf::from),
            remote,
        },
    })))
}

/// Where the daemon listens (`--socket`, `--abstract`) and its pid file.
fn endpoint_of(parsed: &Parsed) -> Result<(Endpoint, PathBuf), String> {
    let socket = parsed.str("socket").map(PathBuf::from);
    let endpoint = match (parsed.flag("abstract"), socket) {
        (true, Some(_)) => {
            return Err("argument --abstract: not allowed with argument --socket".to_string())
        }
        (true, None) => Endpoint::Abstract,
        (false, Some(p)) => Endpoint::Path(std::path::absolute(&p).unwrap_or(p)),
        (false, None) => Endpoint::Path(default_socket()),
    };
    let pid_file = match parsed.str("pid_file") {
        Some(p) => std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p)),
        None => match &endpoint {
            Endpoint::Path(p) => pid_file_for(p),
            Endpoint::Abstract => default_dir().join("daemon.pid"),
        },
    };
    Ok((endpoint, pid_file))
}

/// `--inactivity-timeout`, `--shutdown-grace` and `--head-timeout` (more than 0), seconds.
fn timeouts(parsed: &Parsed) -> Result<(f64, f64, f64), String> {
    let inactivity = float_arg(
        parsed,
        "inactivity_timeout",
        "--inactivity-timeout",
        DEFAULT_INACTIVITY_S,
    )?;
    let grace = float_arg(
        parsed,
        "shutdown_grace",
        "--shutdown-grace",
        DEFAULT_SHUTDOWN_GRACE_S,
    )?;
    let head_timeout = float_arg(
        parsed,
        "head_timeout",
        "--head-timeout",
        DEFAULT_HEAD_TIMEOUT_S,
    )?;
    if head_timeout == 0.0 {
        return Err("argument --head-timeout: must be more than 0 seconds".to_string());
    }
    Ok((inactivity, grace, head_timeout))
}

/// `--max-concurrent` (default: the CPUs), `--max-connections`, `--max-connections-per-uid`:
/// each at least 1.
fn counts(parsed: &Parsed) -> Result<(usize, usize, usize), String> {
    let count = |dest: &str, name: &str, default: usize| match parsed
        .last(dest)
        .and_then(|o| o.value.as_int())
    {
        Some(n) if n >= 1 => Ok(n as usize),
        Some(n) => Err(format!("argument {name}: must be at least 1, not {n}")),
        None => Ok(default),
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    Ok((
        count("max_concurrent", "--max-concurrent", cpus)?,
        count(
            "max_connections",
            "--max-connections",
            DEFAULT_MAX_CONNECTIONS,
        )?,
        count(
            "max_connections_per_uid",
            "--max-connections-per-uid",
            DEFAULT_MAX_CONNECTIONS_PER_UID,
        )?,
    ))
}

/// Who may connect: `--allow-uid`s and `--socket-mode`.
fn access(parsed: &Parsed) -> Result<(Vec<u32>, u32), String> {
    let mut allow_uids = Vec::new();
    for raw in parsed.all("allow_uid") {
        match raw.parse::<u32>() {
            Ok(u) if u != u32::MAX => allow_uids.push(u),
            _ => {
                return Err(format!(
                    "argument --allow-uid: invalid user id: {}",
                    py_repr(&raw)
                ))
            }
        }
    }
    let socket_mode = match parsed.str("socket_mode") {
        None => DEFAULT_SOCKET_MODE,
        Some(s) => parse_mode(s).ok_or_else(|| {
            format!(
                "argument --socket-mode: invalid mode: {} (an octal mode such as 0600)",
                py_repr(s)
            )
        })?,
    };
    Ok((allow_uids, socket_mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, String> {
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse("nxcc", &a) {
            Ok(Parse::Run(c)) => Ok(*c),
            Ok(Parse::Help(_)) => Err("help".into()),
            Err(e) => Err(e.render()),
        }
    }

    #[test]
    fn defaults() {
        let c = run(&[]).unwrap();
        assert_eq!(c.endpoint, Endpoint::Path(default_socket()));
        assert_eq!(c.pid_file, default_dir().join("daemon.pid"));
        assert_eq!(c.inactivity_timeout, Some(Duration::from_secs(300)));
        assert!(c.max_concurrent >= 1);
        assert_eq!(c.memory_budget, None);
        assert!(c.allow_uids.is_empty());
        assert_eq!(c.socket_mode, 0o600);
        assert_eq!(c.shutdown_grace, Duration::from_secs(30));
        assert_eq!(c.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(c.max_connections_per_uid, DEFAULT_MAX_CONNECTIONS_PER_UID);
        assert_eq!(c.head_timeout, Duration::from_secs(10));
        assert!(!c.allow_test_env);
        assert_eq!(c.engine, EngineConfig::default());
    }

    #[test]
    fn every_option() {
        let c = run(&[
            "--socket",
            "/s/d.sock",
            "--inactivity-timeout",
            "0",
            "--max-concurrent",
            "4",
            "--memory-budget",
            "1G",
            "--allow-uid",
            "65534",
            "--allow-uid=1000",
            "--log-file",
            "/l/x.log",
            "--cache_dir",
            "/c",
            "--compiler",
            "/bin/cc",
            "--socket-mode",
            "0666",
            "--shutdown-grace",
            "1.5",
            "--allow-test-env",
            "--max-connections",
            "9",
            "--max-connections-per-uid",
            "3",
            "--head-timeout",
            "0.25",
        ])
        .unwrap();
        assert!(c.allow_test_env);
        assert_eq!((c.max_connections, c.max_connections_per_uid), (9, 3));
        assert_eq!(c.head_timeout, Duration::from_millis(250));
        assert_eq!(c.endpoint, Endpoint::Path("/s/d.sock".into()));
        assert_eq!(c.pid_file, PathBuf::from("/s/d.pid"));
        assert_eq!(c.inactivity_timeout, None);
        assert_eq!(c.max_concurrent, 4);
        assert_eq!(c.memory_budget, Some(1 << 30));
        assert_eq!(c.allow_uids, [65534, 1000]);
        assert_eq!(c.log_file, Some("/l/x.log".into()));
        assert_eq!(c.engine.cache_dir, Some("/c".into()));
        assert_eq!(c.engine.compiler, Some("/bin/cc".into()));
        assert_eq!(c.socket_mode, 0o666);
        assert_eq!(c.shutdown_grace, Duration::from_millis(1500));
        let c = run(&["--abstract", "--pid-file", "/p/neuron.pid"]).unwrap();
        assert_eq!(c.endpoint, Endpoint::Abstract);
        assert_eq!(c.pid_file, PathBuf::from("/p/neuron.pid"));
        let c = run(&["--cache-dir", "/c2"]).unwrap();
        assert_eq!(c.engine.cache_dir, Some("/c2".into()));
    }

    #[test]
    fn errors_are_argparse_style() {
        for (args, text) in [
            (
                &["--max-concurrent", "0"][..],
                "argument --max-concurrent: must be at least 1",
            ),
            (
                &["--max-concurrent", "x"][..],
                "argument --max-concurrent: invalid int value: 'x'",
            ),
            (
                &["--memory-budget", "12Q"][..],
                "argument --memory-budget: invalid size unit",
            ),
            (
                &["--memory-budget", "100"][..],
                "argument --memory-budget: \"100\" is 100 bytes, below the smallest budget (64M)",
            ),
            (
                &["--memory-budget", "0"][..],
                "argument --memory-budget: \"0\" is 0 bytes, below the smallest budget (64M): give a unit (K, M, G or T",
            ),
            (
                &["--allow-uid", "-1"][..],
                "argument --allow-uid: invalid user id: '-1'",
            ),
            (
                &["--socket-mode", "0999"][..],
                "argument --socket-mode: invalid mode",
            ),
            (
                &["--inactivity-timeout", "-1"][..],
                "argument --inactivity-timeout: must be",
            ),
            (
                &["--inactivity-timeout", "1e20"][..],
                "argument --inactivity-timeout: must be a number of seconds from 0 to 10000000, not 100000000000000000000",
            ),
            (
                &["--shutdown-grace", "nan"][..],
                "argument --shutdown-grace: must be a number of seconds from 0 to 10000000, not NaN",
            ),
            (
                &["--abstract", "--socket", "/x"][..],
                "argument --abstract: not allowed with argument --socket",
            ),
            (&["--bogus"][..], "unrecognized arguments: --bogus"),
            (
                &["--max-connections-per-uid", "0"][..],
                "argument --max-connections-per-uid: must be at least 1",
            ),
            (
                &["--head-timeout", "0"][..],
                "argument --head-timeout: must be more than 0",
            ),
            (
                &["--socket", "/e/x.pid"][..],
                "argument --socket: /e/x.pid is also the pid-file",
            ),
            (
                &["--socket", "/e/d.sock", "--log-file", "/e/d.pid"][..],
                "argument --pid-file: /e/d.pid is also the log-file",
            ),
            (
                &["--pid-file", "/e/p", "--log-file", "/e/p"][..],
                "argument --pid-file: /e/p is also the log-file",
            ),
        ] {
            let e = run(args).unwrap_err();
            assert!(e.starts_with("usage: nxcc daemon"), "{e}");
            assert!(
                e.contains(&format!("nxcc daemon: error: {text}")),
                "{args:?}: {e}"
            );
        }
        assert_eq!(run(&["--help"]).unwrap_err(), "help");
    }

    #[test]
    fn help_lists_every_option_once() {
        let Ok(Parse::Help(text)) = parse("nxcc", &["-h".to_string()]) else {
            panic!("no help")
        };
        assert!(text.starts_with("usage: nxcc daemon [-h] [--socket SOCKET] [--abstract]"));
        assert!(!text.contains("positional arguments"));
        assert!(text.contains("  -h, --help "));
        for f in OWN_FLAGS
            .iter()
            .filter(|f| f.action != Action::Help && f.visibility == Visibility::Public)
        {
            assert_eq!(
                text.matches(&format!("\n  {} ", f.spelling)).count(),
                1,
                "{}",
                f.spelling
            );
        }
    }

    #[test]
    fn modes() {
        assert_eq!(parse_mode("0600"), Some(0o600));
        assert_eq!(parse_mode("666"), Some(0o666));
        assert_eq!(parse_mode("0o700"), Some(0o700));
        assert_eq!(parse_mode("1777"), None);
        assert_eq!(parse_mode("rw"), None);
        assert_eq!(parse_mode(""), None);
    }

    #[test]
    fn the_pid_file_is_the_sockets_path_with_pid() {
        // As the help and the README say.
        let c = run(&["--socket", "/s/dsock2/d.sock"]).unwrap();
        assert_eq!(c.pid_file, PathBuf::from("/s/dsock2/d.pid"));
        let Ok(Parse::Help(text)) = parse("nxcc", &["--help".to_string()]) else {
            panic!("no help")
        };
        assert!(text.contains("the socket's path with .pid"), "{text}");
        assert!(!text.contains("--head-timeout"), "an option for tests only");
    }

    #[test]
    fn companion_paths() {
        assert_eq!(
            pid_file_for(Path::new("/r/nxcc/daemon.sock")),
            PathBuf::from("/r/nxcc/daemon.pid")
        );
        assert_eq!(
            log_file_for(Path::new("/r/nxcc/daemon.sock")),
            PathBuf::from("/r/nxcc/daemon.log")
        );
    }
}
