//! Shared fixtures of the daemon tests: a temporary world (cache, runtime dir, simulated-tool
//! state and record), a daemon started from the built binary on a socket in it, a small HTTP/1.1
//! client that writes requests by hand and reads answers with their framing (`Content-Length`
//! or chunked), `/proc` scans, the stand-in compiler, and the reproducer bundles a client wrote.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const SIM_VARS: [&str; 6] = [
    "NXCC_SIM_FAULT",
    "NXCC_SIM_WORK_MS",
    "NXCC_SIM_RSS_MB",
    "NXCC_SIM_RECORD",
    "NXCC_SIM_STATE",
    "NXCC_SIM_SUBGRAPHS",
];

/// How long a test waits for an answer before it fails as hung: generous, since the machine may
/// be busy (`NXCC_TEST_HANG_GUARD_S` seconds, default 90). Never a latency assertion.
pub fn hang_guard() -> Duration {
    std::env::var("NXCC_TEST_HANG_GUARD_S")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(Duration::from_secs(90), Duration::from_secs_f64)
}

pub fn nxcc_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_nxcc"))
}

/// The stand-in compiler (`tests/data/fake-compiler.sh`) copied into `dir`, a directory of the
/// test's own: where only its owner can change it, as a compiler a reproducer's replay runs
/// must be, wherever the repository was checked out.
pub fn fake_compiler_in(dir: &Path) -> PathBuf {
    let copy = dir.join("neuronx-cc");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fake-compiler.sh"),
        &copy,
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    copy
}

/// The example model shipped with the project (a binary HloModuleProto; its first parameter, so
/// the NEFF's first input, is `x.1`).
pub fn example_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb")
}

/// The example model as HLO text, with its first parameter renamed `x<tag>.1` (so each copy is a
/// different model, and its NEFF says which one it came from).
pub fn distinct_model(tag: usize) -> String {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo"),
    )
    .unwrap();
    assert!(text.contains("x.1"));
    text.replace("x.1", &format!("x{tag}.1"))
}

/// The first input's name in a NEFF's tensor map (and the NEFF verifies).
pub fn neff_first_input(path: &Path) -> String {
    let neff =
        nxcc::neff::read::Neff::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v = nxcc::neff::verify::verify(&neff);
    assert!(v.is_ok(), "{}: {:?}", path.display(), v.problems);
    let map: Value =
        serde_json::from_slice(&neff.read_member("sg00/tensor_map.json").unwrap()).unwrap();
    map["inputs"][0]["name"].as_str().unwrap().to_string()
}

/// A temporary world for one test.
pub struct World {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
    pub runtime: PathBuf,
    pub state: PathBuf,
    pub record: PathBuf,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let runtime = dir.path().join("runtime");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::create_dir_all(&runtime).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let record = dir.path().join("record.jsonl");
        World {
            cache,
            runtime,
            state,
            record,
            dir,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A directory under the world (created).
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path().join(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// The nxcc binary with this world's environment and nothing of the caller's injection.
    pub fn nxcc(&self) -> Command {
        let mut c = Command::new(nxcc_exe());
        for v in SIM_VARS {
            c.env_remove(v);
        }
        c.env_remove("NXCC_DAEMON_SOCKET")
            .env_remove("NXCC_TOOLCHAIN")
            .env("XDG_CACHE_HOME", &self.cache)
            .env(
                "NEURON_COMPILE_CACHE_URL",
                self.path().join("default-compile-cache"),
            )
            .env("XDG_RUNTIME_DIR", &self.runtime)
            .env("NXCC_SIM_STATE", &self.state)
            .env("NXCC_SIM_RECORD", &self.record);
        c
    }

    /// `nxcc compile --daemon m.hlo --target trn2 --toolchain sim --output OUTPUT`: a compile
    /// through the daemon client, with this world's environment.
    pub fn daemon_client(&self, output: &str) -> Command {
        let mut c = self.nxcc();
        c.args(["compile", "--daemon"])
            .args(sim_argv("m.hlo", output, &[]));
        c
    }

    /// The simulated tools' invocations so far.
    pub fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Wait until `f` holds, or panic with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A running daemon (killed when dropped, if still running).
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
    pub pid_file: PathBuf,
    pub log: PathBuf,
}

impl Daemon {
    /// `nxcc daemon --socket <world>/<name>/d.sock --log-file ... ARGS`, with `env` added, once
    /// its socket accepts connections.
    pub fn start(world: &World, name: &str, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let dir = world.path().join(name);
        let socket = dir.join("d.sock");
        let log = dir.join("daemon.log");
        let mut cmd = world.nxcc();
        cmd.arg("daemon")
            .arg("--socket")
            .arg(&socket)
            .arg("--log-file")
            .arg(&log);
        // Each daemon gets its own compile cache (the default one is shared by the machine).
        if !args.iter().any(|a| a.starts_with("--cache_dir")) {
            cmd.arg("--cache_dir").arg(dir.join("compile-cache"));
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap();
        let mut d = Daemon {
            child,
            pid_file: dir.join("d.pid"),
            socket,
            log,
        };
        d.wait_ready();
        d
    }

    pub fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut e = String::new();
                if let Some(mut s) = self.child.stderr.take() {
                    let _ = s.read_to_string(&mut e);
                }
                panic!("the daemon exited ({status}) before listening: {e}");
            }
            assert!(Instant::now() < deadline, "the daemon did not listen");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn connect(&self) -> UnixStream {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(hang_guard())).unwrap();
        s
    }

    /// Send raw bytes, read one answer.
    pub fn raw(&self, request: &[u8]) -> Response {
        let mut s = self.connect();
        s.write_all(request).unwrap();
        read_response(&mut BufReader::new(s))
    }

    /// `POST /compile?working_directory=<wd>` with the shell-quoted body, as the original client.
    pub fn compile(&self, wd: &Path, body: &str) -> Response {
        self.raw(&original_request(wd, body, self.pid()))
    }

    /// `POST /v1/compile`; the answer and its events.
    pub fn v1(&self, request: &Value) -> (Response, Vec<Value>) {
        let r = self.raw(&v1_request(request));
        let events = r.events();
        (r, events)
    }

    pub fn status(&self) -> Value {
        let r = self.raw(b"GET /v1/status HTTP/1.1\r\nHost: nxcc\r\nConnection: close\r\n\r\n");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).unwrap()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Wait for the daemon to exit (panics after `limit`).
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit; its log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own child, not yet reaped.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, sig) }, 0);
    }

    /// `POST /exit` and wait for the exit.
    pub fn exit(&mut self) -> ExitStatus {
        let r = self.raw(
            b"POST /exit HTTP/1.1\r\nHost: nxcc\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200);
        self.wait_exit(Duration::from_secs(40))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The original client's request, byte for byte in its form (`requests` over
/// `requests_unixsocket`): keep-alive, the abstract address as the host, the working directory
/// URL-encoded.
pub fn original_request(wd: &Path, body: &str, pid: u32) -> Vec<u8> {
    let wd: String = wd
        .display()
        .to_string()
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let mut r = format!(
        "POST /compile?working_directory={wd} HTTP/1.1\r\nHost: %00com.amazon.neuronxcc.{pid}\r\nUser-Agent: python-requests/2.31.0\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body.as_bytes());
    r
}

pub fn v1_request(request: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(request).unwrap();
    let mut r = format!(
        "POST /v1/compile HTTP/1.1\r\nHost: nxcc\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(&body);
    r
}

/// Send a `/v1/compile` and read events until `until` holds for one; the stream, still open.
pub fn stream_until(
    daemon: &Daemon,
    request: &Value,
    until: impl Fn(&Value) -> bool,
) -> (UnixStream, Vec<Value>) {
    let s = daemon.connect();
    (&s).write_all(&v1_request(request)).unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let (status, _) = read_head(&mut reader);
    assert_eq!(status, 200);
    let mut seen = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = read_chunk(&mut reader) {
        pending.extend(chunk);
        while let Some(n) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=n).collect();
            let e: Value = serde_json::from_slice(&line).unwrap();
            let stop = until(&e);
            seen.push(e);
            if stop {
                return (s, seen);
            }
        }
    }
    panic!("the stream ended before the awaited event: {seen:?}");
}

/// Read the rest of a `/v1/compile` stream into `events`.
pub fn read_rest(s: UnixStream, events: &mut Vec<Value>) {
    let mut reader = BufReader::new(s);
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = read_chunk(&mut reader) {
        pending.extend(chunk);
        while let Some(n) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=n).collect();
            events.push(serde_json::from_slice(&line).unwrap());
        }
    }
}

/// Shell-quote and join words, as `shlex.quote` does.
pub fn shell_join(words: &[&str]) -> String {
    nxcc::shell::join(words)
}

/// The words of a simulated compile of `model` for trn2, without the leading `compile`:
/// A simulated toolchain laid out in the world's `rel` by `nxcc toolchain sim DIR`; its
/// directory.
pub fn sim_toolchain(world: &World, rel: &str) -> PathBuf {
    let tc = world.path().join(rel);
    let o = world
        .nxcc()
        .args(["toolchain", "sim"])
        .arg(&tc)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    tc
}

/// `MODEL --target trn2 --toolchain sim --output OUTPUT EXTRA...`.
pub fn sim_argv<'a>(model: &'a str, output: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        model,
        "--target",
        "trn2",
        "--toolchain",
        "sim",
        "--output",
        output,
    ];
    v.extend(extra);
    v
}

/// The body of the original client's compile request for the example model into `output`:
/// `compile MODEL --target trn2 --toolchain sim --output OUTPUT`, shell-joined.
pub fn compile_body(output: &str) -> String {
    let model = example_model();
    let mut words = vec!["compile"];
    words.extend(sim_argv(model.to_str().unwrap(), output, &[]));
    shell_join(&words)
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    /// The body as newline-delimited JSON.
    pub fn events(&self) -> Vec<Value> {
        self.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }
}

/// Read a response head.
pub fn read_head<R: BufRead>(r: &mut R) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(
        line.starts_with("HTTP/1.1 "),
        "not an HTTP/1.1 answer: {line:?}"
    );
    let status: u16 = line[9..12].parse().unwrap();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap();
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    (status, headers)
}

/// Read one chunk of a chunked body (`None` at the last chunk).
pub fn read_chunk<R: BufRead>(r: &mut R) -> Option<Vec<u8>> {
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    let n = usize::from_str_radix(size.trim(), 16)
        .unwrap_or_else(|_| panic!("bad chunk size {size:?}"));
    if n == 0 {
        let mut end = String::new();
        r.read_line(&mut end).unwrap();
        return None;
    }
    let mut data = vec![0; n];
    r.read_exact(&mut data).unwrap();
    let mut crlf = [0; 2];
    r.read_exact(&mut crlf).unwrap();
    Some(data)
}

/// Read one whole response, honouring its framing.
pub fn read_response<R: BufRead>(r: &mut R) -> Response {
    let (status, headers) = read_head(r);
    let get = |n: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(n))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        while let Some(c) = read_chunk(r) {
            body.extend(c);
        }
    } else if let Some(n) = get("content-length") {
        body = vec![0; n.parse().unwrap()];
        r.read_exact(&mut body).unwrap();
    } else {
        r.read_to_end(&mut body).unwrap();
    }
    Response {
        status,
        headers,
        body,
    }
}

/// The live processes (not `except`) whose environment holds `marker` (`NAME=value`).
pub fn processes_with(marker: &str, except: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == except || is_fork_server_of(pid, except) {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            out.push((pid, comm.trim().to_string()));
        }
    }
    out
}

/// Whether `pid` is the fork server of the daemon `daemon` (its child named `nxcc-forkserver`),
/// which lives as long as the daemon, with the daemon's environment.
pub fn is_fork_server_of(pid: u32, daemon: u32) -> bool {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let ppid = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
    comm.trim() == "nxcc-forkserver" && ppid == Some(daemon)
}

/// A process's peak resident set (`VmHWM`), KiB.
pub fn vm_hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A unique marker for processes started by one test.
pub fn marker(test: &str) -> (String, String) {
    (
        "NXCC_TEST_MARKER".to_string(),
        format!(
            "{test}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ),
    )
}

/// Read one request (head and `Content-Length` body) from a connection.
pub fn read_request(s: &std::os::unix::net::UnixStream) -> (String, Vec<u8>) {
    let mut r = BufReader::new(s);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let mut len = 0;
    loop {
        let mut h = String::new();
        r.read_line(&mut h).unwrap();
        if h.trim().is_empty() {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    std::io::Read::read_exact(&mut r, &mut body).unwrap();
    (line.trim().to_string(), body)
}

pub use crate::bundles::bundles_in;

/// A bundle member's bytes (it must be there).
pub fn bundle_member(bundle: &Path, name: &str) -> Vec<u8> {
    crate::bundles::member(bundle, name)
        .unwrap_or_else(|| panic!("{name} is not in {}", bundle.display()))
}

/// Bytes as text (lossily).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
