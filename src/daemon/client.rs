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
//! The client does the least it can: no runtime and no HTTP library — a blocking socket, the
//! request (`POST /v1/compile`, a JSON body) written with one `write`, and the answer read as it
//! streams in ([`http1`]: an HTTP/1.1 response, `Content-Length` or chunked), each event line
//! acted on as soon as it is complete.
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
    // Starting a daemon is said: it goes on running, in the background, after this compile.
    match send_saying(&Target::from_env(), &argv, true) {
        Sent::Finished(status) => status,
        Sent::Unreached(e) | Sent::Failed(e) | Sent::Refused(e) => fail(&e),
    }
}

/// Send the compile `argv` (without a leading `compile`) to `target`'s daemon, starting one if
/// none answers, and print its console lines as they come.
pub fn send(target: &Target, argv: &[String]) -> Sent {
    send_saying(target, argv, false)
}

/// [`send`]; `say_start`: say on stderr when a daemon is started.
fn send_saying(target: &Target, argv: &[String], say_start: bool) -> Sent {
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
    let body = json!({
        "argv": argv,
        "working_directory": cwd.display().to_string(),
        "env": forwarded_env(),
    });
    let body = serde_json::to_vec(&body).unwrap_or_default();
    // A daemon that is stopping answers 503 before the compile starts: wait for it to go, and
    // send the compile again (to a new daemon).
    let mut stopping_waits = BACKOFF_S.iter();
    loop {
        let stream = match connect_or_start(target, say_start) {
            Ok(s) => s,
            Err(e) => return Sent::Unreached(e),
        };
        match exchange(stream, &body) {
            Ok(Answer::Finished(status)) => return Sent::Finished(status),
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
enum Answer {
    /// The compile ran; its exit status.
    Finished(i32),
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
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: nxcc-daemon\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let mut answer = http1::Response::send(stream, head.as_bytes())
        .map_err(|e| format!("the daemon on {} did not answer: {e}", socket.display()))?;
    let body = answer.read_to_end().map_err(|e| e.to_string())?;
    Ok((answer.status, String::from_utf8_lossy(&body).into_owned()))
}

fn exchange(stream: UnixStream, body: &[u8]) -> Result<Answer, String> {
    let mut request = format!(
        "POST /v1/compile HTTP/1.1\r\nHost: nxcc-daemon\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let mut answer = http1::Response::send(stream, &request)
        .map_err(|e| format!("the daemon closed the connection before answering ({e})"))?;
    if answer.status != 200 {
        let text = answer
            .read_to_end()
            .map(|b| String::from_utf8_lossy(&b).trim_end().to_string())
            .unwrap_or_default();
        if answer.status == 503 {
            return Ok(Answer::Stopping(text));
        }
        if matches!(answer.status, 403 | 429) {
            return Ok(Answer::Refused(format!(
                "refused the compile ({}): {text}",
                http1::status_text(answer.status)
            )));
        }
        return Err(format!(
            "the daemon refused the compile ({}): {text}",
            http1::status_text(answer.status)
        ));
    }
    let mut pending: Vec<u8> = Vec::new();
    let mut exit = None;
    let mut chunk = Vec::new();
    loop {
        chunk.clear();
        let more = answer
            .read_some(&mut chunk)
            .map_err(|e| format!("the connection broke before the compile finished: {e}"))?;
        if !more {
            break;
        }
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(pos) = pending[start..].iter().position(|b| *b == b'\n') {
            let line = &pending[start..start + pos];
            match interpret(String::from_utf8_lossy(line).as_ref()) {
                Line::Out(t) => super::out(&format!("{t}\n")),
                Line::Err(t) => super::err(&format!("{t}\n")),
                Line::Done(s) => exit = Some(s),
                Line::Other => {}
            }
            start += pos + 1;
        }
        pending.drain(..start);
    }
    exit.map(Answer::Finished)
        .ok_or_else(|| "the daemon ended the answer before the compile finished".to_string())
}

/// The client's side of HTTP/1.1, as little as it needs: one request written at once, one
/// response read as it comes (a status line, headers, then a body framed by `Content-Length`,
/// chunks, or the end of the connection).
pub mod http1 {
    use std::io::{self, BufRead, BufReader, Read, Write};
    use std::os::unix::net::UnixStream;

    /// The longest status or header line taken, bytes.
    const MAX_LINE: usize = 16 << 10;
    /// The most header lines taken.
    const MAX_HEADERS: usize = 100;

    enum Framing {
        Length(u64),
        Chunked { left: u64, done: bool },
        UntilClose,
    }

    /// A response being read.
    pub struct Response<R> {
        /// The status code.
        pub status: u16,
        reader: R,
        framing: Framing,
    }

    fn bad(what: &str) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, what.to_string())
    }

    fn line<R: BufRead>(r: &mut R) -> io::Result<String> {
        let mut buf = Vec::new();
        let n = r
            .by_ref()
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed",
            ));
        }
        if buf.last() != Some(&b'\n') {
            return Err(bad("a line of the answer is too long or cut"));
        }
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        String::from_utf8(buf).map_err(|_| bad("a line of the answer is not UTF-8"))
    }

    /// `200 OK`-style text for a status code.
    pub fn status_text(status: u16) -> String {
        let reason = match status {
            400 => " Bad Request",
            403 => " Forbidden",
            404 => " Not Found",
            405 => " Method Not Allowed",
            413 => " Payload Too Large",
            429 => " Too Many Requests",
            500 => " Internal Server Error",
            503 => " Service Unavailable",
            _ => "",
        };
        format!("{status}{reason}")
    }

    impl Response<BufReader<UnixStream>> {
        /// Write `request` (whole: head and body) with one `write`, and read the response's head.
        pub fn send(
            mut stream: UnixStream,
            request: &[u8],
        ) -> io::Result<Response<BufReader<UnixStream>>> {
            stream.write_all(request)?;
            Response::read_head(BufReader::with_capacity(64 << 10, stream))
        }
    }

    impl<R: BufRead> Response<R> {
        /// Read a response's status line and headers from `reader` (interim `1xx` answers are
        /// skipped).
        pub fn read_head(mut reader: R) -> io::Result<Response<R>> {
            loop {
                let status_line = line(&mut reader)?;
                let mut parts = status_line.split(' ');
                let (Some(version), Some(code)) = (parts.next(), parts.next()) else {
                    return Err(bad("the answer is not HTTP"));
                };
                if !version.starts_with("HTTP/1.") {
                    return Err(bad("the answer is not HTTP/1.x"));
                }
                let status: u16 = code.parse().map_err(|_| bad("a bad status code"))?;
                let mut length = None;
                let mut chunked = false;
                for n in 0.. {
                    let header = line(&mut reader)?;
                    if header.is_empty() {
                        break;
                    }
                    if n >= MAX_HEADERS {
                        return Err(bad("too many header lines"));
                    }
                    let Some((name, value)) = header.split_once(':') else {
                        return Err(bad("a bad header line"));
                    };
                    let value = value.trim();
                    if name.eq_ignore_ascii_case("content-length") {
                        length = Some(
                            value
                                .parse::<u64>()
                                .map_err(|_| bad("a bad Content-Length"))?,
                        );
                    } else if name.eq_ignore_ascii_case("transfer-encoding") {
                        chunked = value
                            .rsplit(',')
                            .next()
                            .is_some_and(|v| v.trim().eq_ignore_ascii_case("chunked"));
                    }
                }
                if (100..200).contains(&status) {
                    continue;
                }
                let framing = match (chunked, length) {
                    (true, _) => Framing::Chunked {
                        left: 0,
                        done: false,
                    },
                    (false, Some(n)) => Framing::Length(n),
                    (false, None) if status == 204 || status == 304 => Framing::Length(0),
                    (false, None) => Framing::UntilClose,
                };
                return Ok(Response {
                    status,
                    reader,
                    framing,
                });
            }
        }

        /// Append the body bytes that are at hand (waiting for at least one) to `out`; false
        /// once the body has ended.
        pub fn read_some(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
            loop {
                match &mut self.framing {
                    Framing::Length(0) => return Ok(false),
                    Framing::Length(left) => {
                        let want = *left;
                        let n = self.take(out, want)?;
                        if n == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the connection closed inside the answer",
                            ));
                        }
                        self.framing = Framing::Length(want - n as u64);
                        return Ok(true);
                    }
                    Framing::UntilClose => return Ok(self.take(out, u64::MAX)? > 0),
                    Framing::Chunked { done: true, .. } => return Ok(false),
                    Framing::Chunked { left: 0, .. } => {
                        let size_line = line(&mut self.reader)?;
                        let size = size_line.split(';').next().unwrap_or("").trim();
                        let size =
                            u64::from_str_radix(size, 16).map_err(|_| bad("a bad chunk size"))?;
                        if size == 0 {
                            // Trailers, up to the empty line.
                            while !line(&mut self.reader)?.is_empty() {}
                            self.framing = Framing::Chunked {
                                left: 0,
                                done: true,
                            };
                            return Ok(false);
                        }
                        self.framing = Framing::Chunked {
                            left: size,
                            done: false,
                        };
                    }
                    Framing::Chunked { left, .. } => {
                        let want = *left;
                        let n = self.take(out, want)?;
                        if n == 0 {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the connection closed inside a chunk",
                            ));
                        }
                        if let Framing::Chunked { left, .. } = &mut self.framing {
                            *left -= n as u64;
                            if *left == 0 && !line(&mut self.reader)?.is_empty() {
                                return Err(bad("a chunk does not end with CRLF"));
                            }
                        }
                        return Ok(true);
                    }
                }
            }
        }

        /// What is buffered (reading once if nothing is), at most `max` bytes, appended to `out`.
        fn take(&mut self, out: &mut Vec<u8>, max: u64) -> io::Result<usize> {
            let buf = self.reader.fill_buf()?;
            let n = buf.len().min(usize::try_from(max).unwrap_or(usize::MAX));
            out.extend_from_slice(&buf[..n]);
            self.reader.consume(n);
            Ok(n)
        }

        /// The whole (rest of the) body.
        pub fn read_to_end(&mut self) -> io::Result<Vec<u8>> {
            let mut out = Vec::new();
            while self.read_some(&mut out)? {}
            Ok(out)
        }
    }
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

    fn response(raw: &[u8]) -> http1::Response<&[u8]> {
        http1::Response::read_head(raw).unwrap()
    }

    #[test]
    fn answers_are_read_by_their_framing() {
        let mut r = response(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloEXTRA");
        assert_eq!(r.status, 200);
        assert_eq!(r.read_to_end().unwrap(), b"hello");
        let mut r = response(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nab\nc\r\n3\r\nd\ne\r\n0\r\nTrailer: t\r\n\r\nNEXT",
        );
        assert_eq!(r.status, 200);
        assert_eq!(r.read_to_end().unwrap(), b"ab\ncd\ne");
        let mut r = response(b"HTTP/1.0 503 Service Unavailable\r\n\r\nstopping");
        assert_eq!(r.status, 503);
        assert_eq!(r.read_to_end().unwrap(), b"stopping");
        // Cut answers and bad framing are errors, not short bodies.
        let mut r = response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort");
        assert!(r.read_to_end().is_err());
        let mut r = response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
        assert!(r.read_to_end().is_err());
        let mut r = response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab");
        assert!(r.read_to_end().is_err());
        assert!(http1::Response::read_head(&b"SSH-2.0\r\n\r\n"[..]).is_err());
        assert!(http1::Response::read_head(&b""[..]).is_err());
        assert!(
            http1::Response::read_head(&b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n"[..])
                .is_err()
        );
        assert_eq!(http1::status_text(503), "503 Service Unavailable");
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
