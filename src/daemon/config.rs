//! `nxcc daemon`'s command line (one typed struct, `DaemonCommand`, parsed by clap) and where
//! the daemon lives by default: its socket, pid file and directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::engine::EngineConfig;
use crate::cli::argparse::py_repr;
use crate::cli::subcommand::{self, values, Stop};

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

/// Serve compiles over HTTP/1.1 on a Unix socket.
///
/// The original daemon's protocol (POST /compile?working_directory=DIR, body = the shell-quoted
/// compile arguments), POST /v1/compile (JSON, streamed events), GET /v1/status and POST /exit.
/// `nxcc daemon status` shows what the daemon of a socket is doing; `nxcc daemon stop` stops it
/// and waits until it is gone.
#[derive(Debug, clap::Parser)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct DaemonCommand {
    /// `status`, `stop`, or nothing: serve.
    #[command(subcommand)]
    pub(crate) action: Option<DaemonAction>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) serve: ServeArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: crate::cli::subcommand::DriverOptions,
}

/// `nxcc daemon`'s action besides serving.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum DaemonAction {
    /// Show what the nxcc daemon on a socket is doing (exit 3 when none runs there).
    ///
    /// Its pid, uptime, running and queued compiles, what it has compiled, its memory budget,
    /// connections, engine and cache, as GET /v1/status answers them.
    Status(super::status::StatusArgs),
    /// Stop the nxcc daemon on a socket and wait until it is gone.
    ///
    /// It finishes its running compiles (within its --shutdown-grace), removes its socket and
    /// pid file, and exits.
    Stop(super::stop::StopArgs),
}

/// How the daemon serves.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// The Unix socket to listen on (its directory is created 0700; the socket is made 0600).
    /// Default: $XDG_RUNTIME_DIR/nxcc/daemon.sock, else /tmp/nxcc-<uid>/daemon.sock (in a private
    /// /tmp/nxcc-<uid>-* of yours when another user made that first).
    #[arg(long, value_name = "PATH")]
    pub(crate) socket: Option<PathBuf>,
    /// Listen on the original daemon's abstract address \0com.amazon.neuronxcc.<pid> instead of
    /// a socket file (its client finds it through --pid-file).
    #[arg(long = "abstract", conflicts_with = "socket")]
    pub(crate) abstract_address: bool,
    /// The pid file, held under an exclusive lock while the daemon runs (default: the socket's
    /// path with .pid for its extension: daemon.pid for daemon.sock).
    #[arg(long = "pid-file", value_name = "PATH")]
    pub(crate) pid_file: Option<PathBuf>,
    /// Exit after this many seconds without a request, counted from the last request finished
    /// (0: never).
    #[arg(long = "inactivity-timeout", value_name = "SECONDS", value_parser = values::seconds, default_value_t = DEFAULT_INACTIVITY_S)]
    pub(crate) inactivity_timeout: f64,
    /// Run at most N compiles at once; more wait in arrival order. Default: the number of CPUs.
    #[arg(long = "max-concurrent", value_name = "N", value_parser = values::at_least_one)]
    pub(crate) max_concurrent: Option<usize>,
    /// Start a compile only while the estimated peak memory of the running ones plus its own fits
    /// in SIZE (512M, 8G, ...; auto: 80% of MemAvailable).
    #[arg(long = "memory-budget", value_name = "SIZE", value_parser = values::budget)]
    pub(crate) memory_budget: Option<u64>,
    /// Also serve this user id (repeatable). Only the daemon's own uid is served otherwise;
    /// compiles run as the daemon's user.
    #[arg(long = "allow-uid", value_name = "UID", value_parser = uid, action = clap::ArgAction::Append)]
    pub(crate) allow_uid: Vec<u32>,
    /// Permission bits of the socket file, octal. Another user allowed with --allow-uid must be
    /// able to reach the socket.
    #[arg(long = "socket-mode", value_name = "MODE", value_parser = mode, default_value = "0600")]
    pub(crate) socket_mode: u32,
    /// On exit (POST /exit, SIGTERM, SIGINT, inactivity), let running compiles finish for at most
    /// this many seconds, then cancel them.
    #[arg(long = "shutdown-grace", value_name = "SECONDS", value_parser = values::seconds, default_value_t = DEFAULT_SHUTDOWN_GRACE_S)]
    pub(crate) shutdown_grace: f64,
    /// Append the daemon's own log (start, stop, each request) to FILE instead of stderr.
    #[arg(long = "log-file", value_name = "FILE")]
    pub(crate) log_file: Option<PathBuf>,
    /// The compile cache the daemon's compiles go through (taken by the daemon's compile engine).
    #[arg(long = "cache_dir", visible_alias = "cache-dir", value_name = "DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Run each compile as one supervised job `PATH compile <args> --output <out>` (taken by the
    /// daemon's compile engine).
    #[arg(long, value_name = "PATH")]
    pub(crate) compiler: Option<PathBuf>,
    /// Let a request's env set the simulated toolchain's injection variables (NXCC_SIM_*): for
    /// tests only; never on a daemon other users reach.
    #[arg(long = "allow-test-env")]
    pub(crate) allow_test_env: bool,
    /// Serve at most N open connections at once, all users together; more are answered 429 and
    /// closed.
    #[arg(long = "max-connections", value_name = "N", value_parser = values::at_least_one, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub(crate) max_connections: usize,
    /// Serve at most N open connections of one user at once; more are answered 429 and closed.
    #[arg(long = "max-connections-per-uid", value_name = "N", value_parser = values::at_least_one, default_value_t = DEFAULT_MAX_CONNECTIONS_PER_UID)]
    pub(crate) max_connections_per_uid: usize,
    /// For tests: how long a request head or body may take to arrive, and an idle connection is
    /// kept, seconds.
    #[arg(long = "head-timeout", value_name = "SECONDS", hide = true, value_parser = head_timeout, default_value_t = DEFAULT_HEAD_TIMEOUT_S)]
    pub(crate) head_timeout: f64,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) remote: subcommand::RemoteOptions,
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Parse {
    /// Serve with this configuration.
    Run(Box<Config>),
    /// Print this text and exit 0.
    Help(String),
    /// Stop the daemon of a socket.
    Stop(super::stop::StopArgs),
    /// Show the status of the daemon of a socket.
    Status(super::status::StatusArgs),
}

/// A user id (`u32::MAX` is no one's).
fn uid(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(u) if u != u32::MAX => Ok(u),
        _ => Err(format!("invalid user id: {}", py_repr(text))),
    }
}

/// `--socket-mode`: an octal mode.
fn mode(text: &str) -> Result<u32, String> {
    parse_mode(text).ok_or_else(|| {
        format!(
            "invalid mode: {} (an octal mode such as 0600)",
            py_repr(text)
        )
    })
}

/// `--head-timeout`: seconds, more than 0.
fn head_timeout(text: &str) -> Result<f64, String> {
    match values::seconds(text)? {
        v if v > 0.0 => Ok(v),
        _ => Err("must be more than 0 seconds".to_string()),
    }
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

/// Parse `nxcc daemon`'s arguments (`Err`: a usage error's text, exit 2).
pub(crate) fn parse(prog: &str, args: &[String]) -> Result<Parse, String> {
    let cmd: DaemonCommand = match crate::cli::subcommand::parse(prog, "daemon", args) {
        Ok(c) => c,
        Err(Stop::Help(text)) => return Ok(Parse::Help(text)),
        Err(Stop::Refused(text)) => return Err(text),
    };
    match cmd.action {
        Some(DaemonAction::Stop(stop)) => return Ok(Parse::Stop(stop)),
        Some(DaemonAction::Status(status)) => return Ok(Parse::Status(status)),
        None => {}
    }
    config(cmd.serve)
        .map(|c| Parse::Run(Box::new(c)))
        .map_err(|m| usage_error(prog, m))
}

/// A usage error of `nxcc daemon` found after parsing, as clap words one (exit status 2).
pub fn usage_error(prog: &str, message: String) -> String {
    match subcommand::usage_error::<DaemonCommand>(prog, "daemon", None, message) {
        Stop::Refused(text) => text,
        other => format!("{other:?}"),
    }
}

/// The daemon's configuration from its typed arguments; `Err`: what does not go together.
fn config(a: ServeArgs) -> Result<Config, String> {
    let endpoint = match (a.abstract_address, a.socket) {
        (true, _) => Endpoint::Abstract,
        (false, Some(p)) => Endpoint::Path(std::path::absolute(&p).unwrap_or(p)),
        (false, None) => Endpoint::Path(default_socket()),
    };
    let pid_file = match a.pid_file {
        Some(p) => std::path::absolute(&p).unwrap_or(p),
        None => match &endpoint {
            Endpoint::Path(p) => pid_file_for(p),
            Endpoint::Abstract => default_dir().join("daemon.pid"),
        },
    };
    let remote = crate::remote::RemoteConfig::from_flags(
        a.remote.remote,
        a.remote.remote_cache,
        a.remote.remote_instance.as_deref().unwrap_or(""),
    )
    .map_err(|e| format!("argument --remote: {}", e.cause))?;
    let socket_path = match &endpoint {
        Endpoint::Path(p) => Some(p.as_path()),
        Endpoint::Abstract => None,
    };
    if let Some(e) = collision(socket_path, &pid_file, a.log_file.as_deref()) {
        return Err(e);
    }
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let seconds = |s: f64| (s > 0.0).then(|| Duration::from_secs_f64(s));
    Ok(Config {
        endpoint,
        pid_file,
        inactivity_timeout: seconds(a.inactivity_timeout),
        max_concurrent: a.max_concurrent.unwrap_or(cpus),
        memory_budget: a.memory_budget,
        allow_uids: a.allow_uid,
        log_file: a.log_file,
        socket_mode: a.socket_mode,
        shutdown_grace: Duration::from_secs_f64(a.shutdown_grace),
        max_connections: a.max_connections,
        max_connections_per_uid: a.max_connections_per_uid,
        head_timeout: Duration::from_secs_f64(a.head_timeout),
        allow_test_env: a.allow_test_env,
        engine: EngineConfig {
            cache_dir: a.cache_dir,
            compiler: a.compiler,
            remote,
        },
    })
}

/// `daemon`'s command line as clap defines it (nxcc's completions and manual page).
pub(crate) fn clap_command(prog: &str) -> clap::Command {
    crate::cli::subcommand::clap_command::<DaemonCommand>(prog, "daemon")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Config, String> {
        let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        match parse("nxcc", &a) {
            Ok(Parse::Run(c)) => Ok(*c),
            Ok(Parse::Help(_)) => Err("help".into()),
            Ok(Parse::Stop(_)) => Err("stop".into()),
            Ok(Parse::Status(_)) => Err("status".into()),
            Err(e) => Err(e),
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
    fn errors_name_the_option_and_what_is_wrong() {
        for (args, text) in [
            (
                &["--max-concurrent", "0"][..],
                "'--max-concurrent <N>': must be at least 1",
            ),
            (
                &["--max-concurrent", "x"][..],
                "'--max-concurrent <N>': invalid int value: 'x'",
            ),
            (
                &["--memory-budget", "12Q"][..],
                "'--memory-budget <SIZE>': invalid size unit",
            ),
            (
                &["--memory-budget", "100"][..],
                "'--memory-budget <SIZE>': \"100\" is 100 bytes, below the smallest budget (64M)",
            ),
            (
                &["--memory-budget", "0"][..],
                "'--memory-budget <SIZE>': \"0\" is 0 bytes, below the smallest budget (64M): give a unit (K, M, G or T",
            ),
            (
                &["--allow-uid", "-1"][..],
                "'--allow-uid <UID>': invalid user id: '-1'",
            ),
            (
                &["--socket-mode", "0999"][..],
                "'--socket-mode <MODE>': invalid mode",
            ),
            (
                &["--inactivity-timeout", "-1"][..],
                "'--inactivity-timeout <SECONDS>': must be",
            ),
            (
                &["--inactivity-timeout", "1e20"][..],
                "must be a number of seconds from 0 to 10000000, not 100000000000000000000",
            ),
            (
                &["--shutdown-grace", "nan"][..],
                "'--shutdown-grace <SECONDS>': must be a number of seconds from 0 to 10000000, not NaN",
            ),
            (
                &["--abstract", "--socket", "/x"][..],
                "'--abstract' cannot be used with '--socket <PATH>'",
            ),
            (&["--bogus"][..], "unexpected argument '--bogus'"),
            (
                &["--max-connections-per-uid", "0"][..],
                "'--max-connections-per-uid <N>': must be at least 1",
            ),
            (
                &["--head-timeout", "0"][..],
                "'--head-timeout <SECONDS>': must be more than 0",
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
            assert!(e.starts_with("error: "), "{e}");
            assert!(e.contains(text), "{args:?}: {e}");
        }
        assert_eq!(run(&["--help"]).unwrap_err(), "help");
        assert_eq!(run(&["stop", "--socket", "/s"]).unwrap_err(), "stop");
    }

    #[test]
    fn help_lists_every_option_once() {
        let Ok(Parse::Help(text)) = parse("nxcc", &["--help".to_string()]) else {
            panic!("no help")
        };
        assert!(text.contains("Usage: nxcc daemon [OPTIONS]"), "{text}");
        let cmd = crate::cli::subcommand::clap_command::<DaemonCommand>("nxcc", "daemon");
        for a in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
            let Some(long) = a.get_long() else { continue };
            let flag = format!("--{long}");
            let lines = text.lines().filter(|l| {
                let l = l.trim_start();
                l.strip_prefix(&flag)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', ',']))
            });
            assert_eq!(lines.count(), 1, "{flag}: {text}");
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
        // As the help and docs/daemon.md say.
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
