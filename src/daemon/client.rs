//! `nxcc compile --daemon ARGS...`: the compile is sent to the daemon (over the default socket, or
//! [`SOCKET_ENV`]) and its console lines are printed as they come; the process exits with the
//! compile's exit status, so it can stand in for `nxcc compile` in a script — through the
//! daemon's compile cache, which is on by default where `nxcc compile` has none: a compile that
//! goes through it without asking says so first (`--no_cache` makes it exactly `nxcc compile`).
//!
//! When no daemon answers, one is started in the background (`nxcc daemon --socket S --log-file
//! L`, in its own session, stdio on `/dev/null`, its log next to the socket), and the socket is
//! tried again after 0.5, 1, 2, 4 and 8 s — the original client's back-off.
//!
//! A daemon that is stopping (it answers `503`) is waited for, and the compile is sent again.
//!
//! The exchange is hyper's HTTP/1.1 client over the Unix socket, on a runtime of this thread
//! alone (no thread is started): the request (`POST /v1/compile`, a JSON body), then the answer
//! read as it streams in, body frame by body frame, each event line acted on as soon as it is
//! complete (a line may be split across frames, or a frame hold many).
//!
//! The compile runs in the daemon's environment plus this process's variables that a request may
//! set ([`super::environ`]: the ones that change a compile, and the simulated toolchain's test
//! variables), sent with the request; relative paths are this directory's. A daemon this client
//! starts while test variables are set is started with `--allow-test-env`.

use std::ffi::OsString;
use std::io;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::Value;

use super::config;
use super::wire::{self, CompileRequest, Done, Said, Stream};
use crate::cache::{EngineIdentity, ToolchainIdentity};
use crate::cli::CompileArgs;
use crate::engine::events::Event;
use crate::engine::metrics::JobMetrics;
use crate::error::EXIT_COMPILE_FAILED;

/// The environment variable naming the daemon's socket (default: [`config::default_socket`]).
pub const SOCKET_ENV: &str = "NXCC_DAEMON_SOCKET";
/// The waits before each new try of the socket after starting a daemon, seconds (the original
/// client's `0.5 * 2**attempt`).
pub const BACKOFF_S: [f64; 5] = [0.5, 1.0, 2.0, 4.0, 8.0];

/// The socket the client uses.
pub fn socket_path() -> PathBuf {
    match std::env::var_os(SOCKET_ENV) {
        Some(s) if !s.is_empty() => {
            let p = PathBuf::from(s);
            std::path::absolute(&p).unwrap_or(p)
        }
        _ => config::default_socket(),
    }
}

/// Whether an environment variable travels with a compile request ([`super::environ::is_forwarded`]).
pub fn is_forwarded(name: &str) -> bool {
    super::environ::is_forwarded(name)
}

/// This process's variables that travel with a compile request.
pub fn forwarded_env() -> serde_json::Map<String, Value> {
    std::env::vars()
        .filter(|(k, _)| is_forwarded(k))
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

fn fail(text: &str) -> i32 {
    super::err(&format!("[ERROR] nxcc compile --daemon: {text}\n"));
    EXIT_COMPILE_FAILED
}

/// Where a client sends its compiles, and how it starts a daemon there when none answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The daemon's socket.
    pub socket: PathBuf,
    /// Arguments given to a daemon this client starts, besides `--socket` and `--log-file`.
    pub daemon_args: Vec<OsString>,
    /// Variables set in the environment of a daemon this client starts.
    pub daemon_env: Vec<(OsString, OsString)>,
}

impl Target {
    /// `nxcc compile --daemon`'s: [`socket_path`], a daemon with its defaults.
    pub fn from_env() -> Target {
        Target {
            socket: socket_path(),
            daemon_args: Vec::new(),
            daemon_env: Vec::new(),
        }
    }
}

/// How sending a compile ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// The daemon ran the compile (its console lines were printed); how it ended (its exit
    /// status, its typed status).
    Finished(Box<Done>),
    /// No daemon could be reached or started: the compile was not sent (why).
    Unreached(String),
    /// The daemon took the compile but the exchange failed (why).
    Failed(String),
    /// The daemon refused the compile before taking it (`403`: this user is not served; `429`:
    /// over a connection limit); its answer.
    Refused(String),
}

/// A compile goes only to a daemon the user can trust: its socket's directory passes nxcc's
/// trust rule ([`crate::fsx::trust`]) and the socket is the user's or root's — a daemon run by
/// another user could answer with anything. A socket not there yet is for a daemon this client
/// starts, which checks its directory itself.
pub fn check_socket(socket: &Path) -> Result<(), String> {
    let (Some(parent), Some(name)) = (socket.parent(), socket.file_name().and_then(|n| n.to_str()))
    else {
        return Ok(());
    };
    if !parent.exists() {
        return Ok(());
    }
    let refused = |e: io::Error| format!("not using the daemon on {}: {e}", socket.display());
    let dir =
        crate::fsx::Trusted::open(parent, super::pidfile::DAEMON_DIR, true).map_err(refused)?;
    dir.entry(name).map(|_| ()).map_err(refused)
}

/// Send a compile to the daemon; returns its exit status.
pub fn compile(args: &CompileArgs) -> i32 {
    let argv: Vec<String> = args
        .argv
        .iter()
        .filter(|a| *a != "--daemon")
        .cloned()
        .collect();
    if let Some(note) = cache_note(args) {
        super::err(&note);
    }
    // `--gen-reproducer`: this process writes the bundle, as its user, from its own snapshot.
    let bundle = crate::reproducer::sent::Pending::prepare(args);
    let mut heard = Heard::default();
    // Starting a daemon is said: it goes on running, in the background, after this compile.
    match send_saying(&Target::from_env(), &argv, true, &mut heard) {
        Sent::Finished(done) => {
            if let (Some(bundle), Some(result)) = (bundle, done.result(heard.jobs)) {
                bundle.finish(&result, heard.engine.as_ref(), heard.toolchain.as_ref());
            }
            done.exit_status
        }
        Sent::Unreached(e) | Sent::Failed(e) | Sent::Refused(e) => fail(&e),
    }
}

/// The first line of a `compile --daemon` that goes through the daemon's cache without asking
/// for it (no `--cache_dir`, no `--no_cache`): the daemon's cache is on by default, where a
/// plain `nxcc compile` uses none. Not said when the console is off (`--verbose off`).
fn cache_note(args: &CompileArgs) -> Option<String> {
    let cache = &args.settings.cache;
    let quiet = args.settings.log.verbose > crate::cli::level::USER;
    (cache.dir.is_none() && !cache.no_cache && !quiet).then(|| {
        "nxcc compile --daemon: the daemon compiles through its compile cache, on by default there (nxcc compile uses one only with --cache_dir): a hit runs no tool; --no_cache compiles without it\n".to_string()
    })
}

/// Send the compile `argv` (without a leading `compile`) to `target`'s daemon, starting one if
/// none answers, and print its console lines as they come.
pub fn send(target: &Target, argv: &[String]) -> Sent {
    send_saying(target, argv, false, &mut Heard::default())
}

/// What a client keeps of a compile's stream besides the lines it prints.
#[derive(Debug, Default)]
struct Heard {
    /// What runs the compile, as the daemon said (`None`: it did not — a daemon of an older
    /// nxcc).
    engine: Option<EngineIdentity>,
    /// The toolchain the compile ran with, as the daemon said (`None`: it did not — it ended
    /// before it was planned, or a daemon of an older nxcc).
    toolchain: Option<ToolchainIdentity>,
    /// The figures of each job the compile ran, as the daemon reported them.
    jobs: Vec<JobMetrics>,
}

/// [`send`]; `say_start`: say on stderr when a daemon is started; what the stream says of the
/// compile besides its lines goes into `heard`.
fn send_saying(target: &Target, argv: &[String], say_start: bool, heard: &mut Heard) -> Sent {
    let socket = &target.socket;
    // The default place may be in /tmp: talk only to a daemon in this user's private directory.
    let dir = config::default_dir();
    if socket.parent() == Some(dir.as_path()) && dir.exists() {
        if let Err(e) = super::listen::check_private_dir(&dir) {
            return Sent::Unreached(e.to_string());
        }
    }
    if let Err(e) = check_socket(socket) {
        return Sent::Unreached(e);
    }
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return Sent::Unreached(format!("cannot read the current directory: {e}")),
    };
    let body = CompileRequest {
        argv: argv.to_vec(),
        working_directory: cwd.display().to_string(),
        env: Some(forwarded_env()),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    // A daemon that is stopping answers 503 before the compile starts: wait for it to go, and
    // send the compile again (to a new daemon).
    let mut stopping_waits = BACKOFF_S.iter();
    loop {
        let stream = match connect_or_start(target, say_start) {
            Ok(s) => s,
            Err(e) => return Sent::Unreached(e),
        };
        *heard = Heard::default();
        match exchange(stream, &body, heard) {
            Ok(Answer::Finished(done)) => return Sent::Finished(done),
            Ok(Answer::Refused(text)) => {
                return Sent::Refused(format!("the daemon on {}: {text}", socket.display()))
            }
            Ok(Answer::Stopping(text)) => match stopping_waits.next() {
                Some(wait) => std::thread::sleep(Duration::from_secs_f64(*wait)),
                None => {
                    return Sent::Unreached(format!("the daemon on {}: {text}", socket.display()))
                }
            },
            Err(e) => return Sent::Failed(format!("the daemon on {}: {e}", socket.display())),
        }
    }
}

/// How an exchange with the daemon ended.
#[derive(Debug)]
enum Answer {
    /// The compile ran; how it ended.
    Finished(Box<Done>),
    /// The daemon is stopping and did not take the compile.
    Stopping(String),
    /// The daemon refused the compile (`403`, `429`).
    Refused(String),
}

/// Connect to the daemon, starting one if none answers (`say_start`: and say so on stderr).
pub fn connect_or_start(target: &Target, say_start: bool) -> Result<UnixStream, String> {
    let socket = &target.socket;
    match UnixStream::connect(socket) {
        Ok(s) => return Ok(s),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) => {}
        Err(e) => return Err(format!("cannot connect to {}: {e}", socket.display())),
    }
    if say_start {
        super::err(&format!(
            "nxcc compile --daemon: no daemon answers on {}; starting one in the background (nxcc daemon, its log in {}; it stops after {} s without a compile)\n",
            socket.display(),
            config::log_file_for(socket).display(),
            config::DEFAULT_INACTIVITY_S
        ));
    }
    let mut child = start_daemon(target)?;
    for wait in BACKOFF_S {
        std::thread::sleep(Duration::from_secs_f64(wait));
        if let Ok(s) = UnixStream::connect(socket) {
            return Ok(s);
        }
        // A daemon that exited at once (typically: another one was still stopping and held the
        // pid file) is started again.
        if let Ok(Some(_)) = child.try_wait() {
            child = start_daemon(target)?;
        }
    }
    Err(format!(
        "no nxcc daemon answered on {} after {} tries; see its log {}",
        socket.display(),
        BACKOFF_S.len(),
        config::log_file_for(socket).display()
    ))
}

/// Start `nxcc daemon` in the background for `target`.
pub fn start_daemon(target: &Target) -> Result<Child, String> {
    let socket = &target.socket;
    let log = config::log_file_for(socket);
    if let Some(e) = config::collision(Some(socket), &config::pid_file_for(socket), Some(&log)) {
        return Err(format!(
            "cannot start a daemon on {}: {e}",
            socket.display()
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find nxcc's own executable to start a daemon: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--log-file")
        .arg(&log)
        .args(&target.daemon_args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .current_dir("/");
    // Request variables belong to requests, not to the daemon every later compile runs in —
    // except where the compile cache lives, which configures the daemon itself.
    let mut test_vars = false;
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        test_vars |= super::environ::classify(k) == super::environ::Class::Test;
        if (is_forwarded(k) || k == SOCKET_ENV) && k != crate::cache::CACHE_URL_ENV {
            cmd.env_remove(k);
        }
    }
    // This user's requests will carry the test variables: let the daemon take them.
    if test_vars {
        cmd.arg("--allow-test-env");
    }
    for (k, v) in &target.daemon_env {
        cmd.env(k, v);
    }
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|e| format!("cannot start a daemon for {}: {e}", socket.display()))
}

/// What a stream line asks the client to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// A line for the client's stdout.
    Out(String),
    /// A line for the client's stderr.
    Err(String),
    /// The compile ended, so.
    Done(Box<Done>),
    /// A job of the compile ended, with its figures.
    Job(Box<JobMetrics>),
    /// What runs the compile, as the daemon says.
    Engine(Box<EngineIdentity>),
    /// The toolchain the compile runs with, as the daemon says once it planned it.
    Toolchain(Box<ToolchainIdentity>),
    /// Anything else (a worker event, a line this client does not know: passed over).
    Other,
}

/// Interpret one line of a `/v1/compile` stream.
pub fn interpret(line: &str) -> Line {
    match wire::Line::parse(line) {
        Some(wire::Line::Said(Said::Log {
            line,
            stream: Stream::Stderr,
        })) => Line::Err(line),
        Some(wire::Line::Said(Said::Log { line, .. })) => Line::Out(line),
        Some(wire::Line::Said(Said::Done(done))) => Line::Done(Box::new(done)),
        Some(wire::Line::Said(Said::Engine(named))) => Line::Engine(Box::new(named)),
        Some(wire::Line::Said(Said::Toolchain(named))) => Line::Toolchain(Box::new(named)),
        Some(wire::Line::Worker(Event::JobFinished(job))) => Line::Job(Box::new(job)),
        _ => Line::Other,
    }
}

/// `503 Service Unavailable`-style text for a status code (the code alone when it has no
/// standard reason).
pub fn status_text(status: u16) -> String {
    match hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

/// Run `exchange` on a runtime of this thread alone, with `stream` (a connected, blocking Unix
/// socket) handed over to it.
fn on_this_thread<T, F>(
    stream: UnixStream,
    exchange: impl FnOnce(tokio::net::UnixStream) -> F,
) -> Result<T, String>
where
    F: std::future::Future<Output = Result<T, String>>,
{
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| format!("cannot start the client's event loop: {e}"))?;
    runtime.block_on(async {
        stream
            .set_nonblocking(true)
            .map_err(|e| format!("cannot use the connection: {e}"))?;
        let stream = tokio::net::UnixStream::from_std(stream)
            .map_err(|e| format!("cannot use the connection: {e}"))?;
        exchange(stream).await
    })
}

/// Send `request` over `stream` (hyper's HTTP/1.1 client; the connection driven beside it) and
/// return the answer's head and body, the body not read yet.
async fn round_trip(
    stream: tokio::net::UnixStream,
    request: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, hyper::Error> {
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// A request to the daemon (`Host` and `Connection: close` set).
fn request_to(method: Method, path: &str, body: Vec<u8>) -> Result<Request<Full<Bytes>>, String> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, "nxcc-daemon")
        .header(CONNECTION, "close");
    if !body.is_empty() {
        builder = builder.header(CONTENT_TYPE, "application/json");
    }
    builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| format!("cannot make the request: {e}"))
}

/// The whole (rest of the) body of an answer.
async fn whole_body(answer: Response<Incoming>) -> Result<Vec<u8>, String> {
    let body = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("the connection broke inside the answer: {e}"))?;
    Ok(body.to_bytes().to_vec())
}

/// A request without a body to the daemon on `socket` (`GET /v1/status`, `POST /exit`), if one
/// answers: its status code and body.
pub fn request(socket: &Path, method: &str, path: &str) -> Result<(u16, String), String> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| format!("no daemon answers on {}: {e}", socket.display()))?;
    let method = Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?;
    let request = request_to(method, path, Vec::new())?;
    on_this_thread(stream, |stream| async move {
        let answer = round_trip(stream, request)
            .await
            .map_err(|e| format!("the daemon on {} did not answer: {e}", socket.display()))?;
        let status = answer.status().as_u16();
        let body = whole_body(answer).await?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    })
}

fn exchange(stream: UnixStream, body: &[u8], heard: &mut Heard) -> Result<Answer, String> {
    exchange_with(stream, body, |line| match line {
        Line::Out(t) => super::out(&format!("{t}\n")),
        Line::Err(t) => super::err(&format!("{t}\n")),
        Line::Job(job) => heard.jobs.push((**job).clone()),
        Line::Engine(named) => heard.engine = Some((**named).clone()),
        Line::Toolchain(named) => heard.toolchain = Some((**named).clone()),
        Line::Done(_) | Line::Other => {}
    })
}

/// `POST /v1/compile` with `body` over `stream`; each line of the streamed answer goes to
/// `each` as it is complete; the compile's exit status comes from its `done` line.
fn exchange_with(
    stream: UnixStream,
    body: &[u8],
    mut each: impl FnMut(&Line),
) -> Result<Answer, String> {
    let request = request_to(Method::POST, "/v1/compile", body.to_vec())?;
    on_this_thread(stream, |stream| async move {
        let answer = round_trip(stream, request)
            .await
            .map_err(|e| format!("the daemon closed the connection before answering ({e})"))?;
        let status = answer.status().as_u16();
        if status != 200 {
            let text = whole_body(answer)
                .await
                .map(|b| String::from_utf8_lossy(&b).trim_end().to_string())
                .unwrap_or_default();
            return refusal(status, text);
        }
        let mut lines = Lines::default();
        let mut body = answer.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|e| format!("the connection broke before the compile finished: {e}"))?;
            if let Ok(data) = frame.into_data() {
                lines.feed(&data, &mut each);
            }
        }
        lines
            .done
            .map(Answer::Finished)
            .ok_or_else(|| "the daemon ended the answer before the compile finished".to_string())
    })
}

/// What an answer other than `200` means: a daemon stopping (`503`), a refusal (`403`, `429`),
/// or an error.
fn refusal(status: u16, text: String) -> Result<Answer, String> {
    match status {
        503 => Ok(Answer::Stopping(text)),
        403 | 429 => Ok(Answer::Refused(format!(
            "refused the compile ({}): {text}",
            status_text(status)
        ))),
        _ => Err(format!(
            "the daemon refused the compile ({}): {text}",
            status_text(status)
        )),
    }
}

/// The lines of a streamed answer, put together from its frames.
#[derive(Default)]
struct Lines {
    pending: Vec<u8>,
    done: Option<Box<Done>>,
}

impl Lines {
    /// The bytes of one frame: every line they complete goes to `each`.
    fn feed(&mut self, data: &[u8], each: &mut impl FnMut(&Line)) {
        self.pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(pos) = self.pending[start..].iter().position(|b| *b == b'\n') {
            let line = interpret(&String::from_utf8_lossy(&self.pending[start..start + pos]));
            if let Line::Done(d) = &line {
                self.done = Some(d.clone());
            }
            each(&line);
            start += pos + 1;
        }
        self.pending.drain(..start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixListener;

    /// A stand-in daemon on a socket in a fresh directory: for each answer in `answers`, one
    /// connection is taken, its request read whole, and the answer written in two parts, split
    /// at the given byte (with a pause between, so that they arrive apart). Gives the socket and
    /// the thread, which returns the requests' heads.
    fn stand_in(
        answers: Vec<(Vec<u8>, usize)>,
    ) -> (
        tempfile::TempDir,
        PathBuf,
        std::thread::JoinHandle<Vec<String>>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("d.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let server = std::thread::spawn(move || {
            let mut heads = Vec::new();
            for (answer, split) in answers {
                let (s, _) = listener.accept().unwrap();
                let mut r = BufReader::new(&s);
                let mut head = String::new();
                let mut len = 0;
                loop {
                    let mut line = String::new();
                    r.read_line(&mut line).unwrap();
                    if line.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap();
                    }
                    head.push_str(&line);
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                heads.push(head);
                (&s).write_all(&answer[..split]).unwrap();
                (&s).flush().unwrap();
                std::thread::sleep(Duration::from_millis(1));
                // The client may have gone once it had all it needed.
                let _ = (&s).write_all(&answer[split..]);
            }
            heads
        });
        (dir, socket, server)
    }

    fn compile_on(socket: &Path) -> (Result<Answer, String>, Vec<Line>) {
        let mut lines = Vec::new();
        let stream = UnixStream::connect(socket).unwrap();
        let answer = exchange_with(stream, br#"{"argv":[]}"#, |l| lines.push(l.clone()));
        (answer, lines)
    }

    #[test]
    fn a_chunked_answer_split_at_every_byte_gives_the_same_lines_and_status() {
        let body_lines = [
            r#"{"event":"job_started","job":"Frontend"}"#,
            r#"{"event":"log","line":"a b","stream":"stdout"}"#,
            r#"{"event":"log","line":"[ERROR] x","stream":"stderr"}"#,
            r#"{"event":"done","exit_status":70,"output":"/o","cache":"off"}"#,
        ];
        let text = body_lines.join("\n") + "\n";
        // Chunks that split lines anywhere, with an extension and a trailer.
        let (a, rest) = text.split_at(30);
        let (b, c) = rest.split_at(60);
        // An interim answer first, then the stream.
        let mut answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for (k, part) in [a, b, c].iter().enumerate() {
            let ext = if k == 1 { ";x=y" } else { "" };
            answer.extend(format!("{:x}{ext}\r\n{part}\r\n", part.len()).into_bytes());
        }
        answer.extend(b"0\r\ntrailer: t\r\n\r\n");
        let want = vec![
            Line::Other,
            Line::Out("a b".into()),
            Line::Err("[ERROR] x".into()),
            Line::Done(Box::new(Done {
                exit_status: 70,
                output: Some("/o".into()),
                cache: wire::CacheUse::Off,
                error_lines: Vec::new(),
                failure: None,
                wall_s: 0.0,
                status: None,
            })),
        ];
        let splits: Vec<usize> = (1..answer.len()).collect();
        let (_dir, socket, server) =
            stand_in(splits.iter().map(|&k| (answer.clone(), k)).collect());
        for k in &splits {
            let (got, lines) = compile_on(&socket);
            assert!(
                matches!(&got, Ok(Answer::Finished(d)) if d.exit_status == 70),
                "split at {k}: {got:?}"
            );
            assert_eq!(lines, want, "split at {k}");
        }
        let heads = server.join().unwrap();
        assert!(
            heads
                .iter()
                .all(|h| h.starts_with("POST /v1/compile HTTP/1.1\r\n")),
            "{heads:?}"
        );
    }

    #[test]
    fn stopping_refusing_and_cut_answers_are_told_apart() {
        let plain = |status: &str, body: &str| {
            format!(
                "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        };
        let done = r#"{"event":"log","line":"half","stream":"stdout"}"#.to_string() + "\n";
        let cut = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{done}",
            done.len() + 40
        )
        .into_bytes();
        let answers = vec![
            plain("503 Service Unavailable", "stopping\n"),
            plain("403 Forbidden", "not served\n"),
            plain("500 Internal Server Error", "broken\n"),
            plain("200 OK", &done),
            cut.clone(),
            b"SSH-2.0-x\r\n\r\n".to_vec(),
        ];
        let n = answers.len();
        let (_dir, socket, server) = stand_in(answers.into_iter().map(|a| (a, 5)).collect());
        let got: Vec<_> = (0..n).map(|_| compile_on(&socket).0).collect();
        server.join().unwrap();
        assert!(
            matches!(&got[0], Ok(Answer::Stopping(t)) if t == "stopping"),
            "{:?}",
            got[0]
        );
        assert!(
            matches!(&got[1], Ok(Answer::Refused(t)) if t == "refused the compile (403 Forbidden): not served"),
            "{:?}",
            got[1]
        );
        assert_eq!(
            got[2].as_ref().err().map(String::as_str),
            Some("the daemon refused the compile (500 Internal Server Error): broken")
        );
        // An answer without its done line, one cut short, one that is not HTTP: errors.
        assert_eq!(
            got[3].as_ref().err().map(String::as_str),
            Some("the daemon ended the answer before the compile finished")
        );
        assert!(
            got[4]
                .as_ref()
                .is_err_and(|e| e.starts_with("the connection broke before the compile finished")),
            "{:?}",
            got[4]
        );
        assert!(
            got[5]
                .as_ref()
                .is_err_and(|e| e.starts_with("the daemon closed the connection before answering")),
            "{:?}",
            got[5]
        );
    }

    #[test]
    fn a_request_without_a_body_gives_the_status_and_the_body() {
        let answer = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n{\"a\r\n3\r\n\":1\r\n1\r\n}\r\n0\r\n\r\n".to_vec();
        let (_dir, socket, server) = stand_in(vec![(answer.clone(), 40), (answer, 2)]);
        assert_eq!(
            request(&socket, "GET", "/v1/status"),
            Ok((200, r#"{"a":1}"#.to_string()))
        );
        assert_eq!(
            request(&socket, "POST", "/exit"),
            Ok((200, r#"{"a":1}"#.to_string()))
        );
        let heads = server.join().unwrap();
        assert!(
            heads[0].starts_with("GET /v1/status HTTP/1.1\r\n"),
            "{heads:?}"
        );
        assert!(heads[1].starts_with("POST /exit HTTP/1.1\r\n"), "{heads:?}");
        assert_eq!(status_text(503), "503 Service Unavailable");
        assert_eq!(status_text(599), "599");
    }

    #[test]
    fn forwarded_variables() {
        assert!(is_forwarded("NXCC_SIM_FAULT"));
        assert!(is_forwarded("NEURON_CC_FLAGS"));
        assert!(is_forwarded("NXCC_TOOLCHAIN"));
        assert!(!is_forwarded(SOCKET_ENV));
        assert!(!is_forwarded("NXCC_WORKER_ARGV"));
        assert!(!is_forwarded("PATH"));
        assert!(!is_forwarded("XDG_CACHE_HOME"));
        assert!(!is_forwarded("LD_PRELOAD"));
    }

    #[test]
    fn stream_lines() {
        assert_eq!(
            interpret(r#"{"event":"log","line":"a b","stream":"stdout"}"#),
            Line::Out("a b".into())
        );
        assert_eq!(
            interpret(r#"{"event":"log","line":"[ERROR] x","stream":"stderr"}"#),
            Line::Err("[ERROR] x".into())
        );
        assert!(matches!(
            interpret(r#"{"event":"done","exit_status":70,"output":"/o","cache":"off"}"#),
            Line::Done(d) if d.exit_status == 70 && d.output.as_deref() == Some("/o")
        ));
        assert_eq!(
            interpret(r#"{"event":"job_started","job":"Frontend"}"#),
            Line::Other
        );
        assert_eq!(interpret("not json"), Line::Other);
        let engine = interpret(
            r#"{"event":"engine","engine":"external","compiler":"/opt/neuronx-cc","identity":{"kind":"external","compiler":{"blake3":"ab","size":3},"version":"v"}}"#,
        );
        assert!(
            matches!(&engine, Line::Engine(n) if n.name() == "external"
                && n.compiler.as_deref() == Some(Path::new("/opt/neuronx-cc"))
                && n.identity.as_ref().is_some_and(|i| i["version"] == "v")),
            "{engine:?}"
        );
        assert!(matches!(
            interpret(r#"{"event":"engine","engine":"pipeline"}"#),
            Line::Engine(n) if n.name() == "pipeline" && n.compiler.is_none()
        ));
        let toolchain = interpret(
            r#"{"event":"toolchain","bin":"/opt/tc/bin","simulated":true,"identity":{"kind":"dir"}}"#,
        );
        assert!(
            matches!(&toolchain, Line::Toolchain(t) if t.simulated
                && t.bin.as_deref() == Some(Path::new("/opt/tc/bin"))
                && t.identity.as_ref().is_some_and(|i| i["kind"] == "dir")),
            "{toolchain:?}"
        );
    }
}
