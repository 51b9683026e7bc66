//! `nxcc compile --daemon ARGS...`: the compile is sent to the daemon (over the default socket, or
//! [`SOCKET_ENV`]) and its console lines are printed as they come; the process exits with the
//! compile's exit status, so it can stand in for `nxcc compile` in any script.
//!
//! When no daemon answers, one is started in the background (`nxcc daemon --socket S --log-file
//! L`, in its own session, stdio on `/dev/null`, its log next to the socket), and the socket is
//! tried again after 0.5, 1, 2, 4 and 8 s — the original client's back-off.
//!
//! A daemon that is stopping (it answers `503`) is waited for, and the compile is sent again.
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
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HOST};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use super::config;
use crate::cli::CompileArgs;
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// The daemon ran the compile (its console lines were printed); its exit status.
    Finished(i32),
    /// No daemon could be reached or started: the compile was not sent (why).
    Unreached(String),
    /// The daemon took the compile but the exchange failed (why).
    Failed(String),
}

/// Send a compile to the daemon; returns its exit status.
pub fn compile(args: &CompileArgs) -> i32 {
    let argv: Vec<String> = args
        .argv
        .iter()
        .filter(|a| *a != "--daemon")
        .cloned()
        .collect();
    match send(&Target::from_env(), &argv) {
        Sent::Finished(status) => status,
        Sent::Unreached(e) | Sent::Failed(e) => fail(&e),
    }
}

/// Send the compile `argv` (without a leading `compile`) to `target`'s daemon, starting one if
/// none answers, and print its console lines as they come.
pub fn send(target: &Target, argv: &[String]) -> Sent {
    let socket = &target.socket;
    // The default place may be in /tmp: talk only to a daemon in this user's private directory.
    let dir = config::default_dir();
    if socket.parent() == Some(dir.as_path()) && dir.exists() {
        if let Err(e) = super::listen::check_private_dir(&dir) {
            return Sent::Unreached(e.to_string());
        }
    }
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => return Sent::Unreached(format!("cannot read the current directory: {e}")),
    };
    let body = json!({
        "argv": argv,
        "working_directory": cwd.display().to_string(),
        "env": forwarded_env(),
    });
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Sent::Unreached(format!("cannot start the runtime: {e}")),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    // A daemon that is stopping answers 503 before the compile starts: wait for it to go, and
    // send the compile again (to a new daemon).
    let mut stopping_waits = BACKOFF_S.iter();
    loop {
        let stream = match connect_or_start(target) {
            Ok(s) => s,
            Err(e) => return Sent::Unreached(e),
        };
        match runtime.block_on(exchange(stream, body.clone())) {
            Ok(Answer::Finished(status)) => return Sent::Finished(status),
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
enum Answer {
    /// The compile ran; its exit status.
    Finished(i32),
    /// The daemon is stopping and did not take the compile.
    Stopping(String),
}

/// Connect to the daemon, starting one if none answers.
pub fn connect_or_start(target: &Target) -> Result<UnixStream, String> {
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A line for the client's stdout.
    Out(String),
    /// A line for the client's stderr.
    Err(String),
    /// The compile ended with this exit status.
    Done(i32),
    /// Anything else (ignored).
    Other,
}

/// Interpret one line of a `/v1/compile` stream.
pub fn interpret(line: &str) -> Line {
    let Ok(v) = serde_json::from_str::<Value>(line) else {
        return Line::Other;
    };
    match v["event"].as_str() {
        Some("log") => {
            let text = v["line"].as_str().unwrap_or_default().to_string();
            if v["stream"] == "stderr" {
                Line::Err(text)
            } else {
                Line::Out(text)
            }
        }
        Some("done") => Line::Done(
            v["exit_status"]
                .as_i64()
                .and_then(|s| i32::try_from(s).ok())
                .unwrap_or(EXIT_COMPILE_FAILED),
        ),
        _ => Line::Other,
    }
}

/// A request without a body to the daemon on `socket` (`GET /v1/status`, `POST /exit`), if one
/// answers: its status code and body.
pub fn request(socket: &Path, method: &str, path: &str) -> Result<(u16, String), String> {
    let stream = UnixStream::connect(socket)
        .map_err(|e| format!("no daemon answers on {}: {e}", socket.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async move {
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let stream = tokio::net::UnixStream::from_std(stream).map_err(|e| e.to_string())?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, "nxcc-daemon")
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| format!("the daemon on {} did not answer: {e}", socket.display()))?;
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    })
}

async fn exchange(stream: UnixStream, body: Vec<u8>) -> Result<Answer, String> {
    stream.set_nonblocking(true).map_err(|e| e.to_string())?;
    let stream = tokio::net::UnixStream::from_std(stream).map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = Request::post("/v1/compile")
        .header(HOST, "nxcc-daemon")
        .header(CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| {
        format!(
            "the daemon closed the connection before answering ({e}); a daemon closes at once the connections of users it does not serve (see its --allow-uid) and of users over its connection limits"
        )
    })?;
    let status = resp.status();
    let mut body = resp.into_body();
    if status != StatusCode::OK {
        let text = body
            .collect()
            .await
            .map(|c| {
                String::from_utf8_lossy(&c.to_bytes())
                    .trim_end()
                    .to_string()
            })
            .unwrap_or_default();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            return Ok(Answer::Stopping(text));
        }
        return Err(format!("the daemon refused the compile ({status}): {text}"));
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut exit = None;
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| format!("the connection broke before the compile finished: {e}"))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(pos) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=pos).collect();
            match interpret(String::from_utf8_lossy(&line[..line.len() - 1]).as_ref()) {
                Line::Out(t) => super::out(&format!("{t}\n")),
                Line::Err(t) => super::err(&format!("{t}\n")),
                Line::Done(s) => exit = Some(s),
                Line::Other => {}
            }
        }
    }
    exit.map(Answer::Finished)
        .ok_or_else(|| "the daemon ended the answer before the compile finished".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            interpret(r#"{"event":"done","exit_status":70,"output":"/o","cache":"off"}"#),
            Line::Done(70)
        );
        assert_eq!(
            interpret(r#"{"event":"job_started","job":"Frontend"}"#),
            Line::Other
        );
        assert_eq!(interpret("not json"), Line::Other);
    }
}
