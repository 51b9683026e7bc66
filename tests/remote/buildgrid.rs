//! A real BuildGrid 0.1.9 for the remote tests, on loopback only: provisioned on first use into
//! a virtual environment under `target/` (Python 3.11, `pip install buildgrid==0.1.9` pinned by
//! `tests/data/buildgrid/constraints.txt`; a lock file keeps parallel test binaries from
//! installing twice), started on a free port with a fresh SQLite queue per start, ready when
//! `GetCapabilities` answers, stopped by pid (SIGTERM, then SIGKILL after a timeout). Workers are
//! `nxcc worker` processes, stopped the same way.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::common::venv::{free_port, Venv};
pub use crate::common::{processes_with_env, text, NXCC};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// BuildGrid, provisioned on first use.
const BUILDGRID: Venv<'static> = Venv {
    tool: "BuildGrid",
    tests: "remote tests",
    dir: "buildgrid-venv",
    pin: "buildgrid==0.1.9",
    packages: &["buildgrid==0.1.9"],
    data: "buildgrid",
    pythons: &["python3.11"],
    marker: "bin/bgd",
};

/// The virtual environment's `bgd`, provisioning it if needed (a failed test if it cannot be).
pub fn bgd() -> PathBuf {
    BUILDGRID.must().join("bin/bgd")
}

/// Stop a child by pid: SIGTERM to its process group, then SIGKILL after `grace`.
fn stop(child: &mut Child, grace: Duration) {
    let pid = child.id() as i32;
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let t = Instant::now();
    while t.elapsed() < grace {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}

/// How a BuildGrid is run: where it listens, with what, and how its readiness is seen.
#[derive(Clone, Default)]
pub struct Launch {
    /// The address it binds (default `127.0.0.1`).
    pub host: Option<String>,
    /// The port (default: a free one).
    pub port: Option<u16>,
    /// TLS (mutual, with the JWT bearer-token check) from these test credentials.
    pub tls: Option<std::sync::Arc<super::tls::Creds>>,
    /// The network namespace it runs in (`ip netns exec`), for the fleet test.
    pub netns: Option<String>,
}

/// A running BuildGrid.
pub struct Server {
    child: Child,
    pub port: u16,
    launch: Launch,
    /// Holds the config, the queue database and the log while the server runs.
    dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::launch(Launch::default())
    }

    /// A BuildGrid as `launch` says; a failed test if it does not come up.
    pub fn launch(launch: Launch) -> Server {
        let dir = tempfile::tempdir().unwrap();
        for _ in 0..3 {
            let port = launch.port.unwrap_or_else(free_port);
            if let Some(child) = spawn(&launch, dir.path(), port) {
                return Server {
                    child,
                    port,
                    launch,
                    dir,
                };
            }
            if launch.port.is_some() {
                break;
            }
        }
        panic!("BuildGrid did not start (its log is above)");
    }

    /// Kill the server and start it again on the same address, with a fresh queue (what it
    /// held in memory is lost, as in a crash).
    pub fn restart(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
        let t = Instant::now();
        loop {
            if let Some(child) = spawn(&self.launch, self.dir.path(), self.port) {
                self.child = child;
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "BuildGrid did not come back"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    pub fn url(&self) -> String {
        let host = self.launch.host.as_deref().unwrap_or("127.0.0.1");
        let scheme = if self.launch.tls.is_some() {
            "grpcs"
        } else {
            "grpc"
        };
        format!("{scheme}://{host}:{}", self.port)
    }

    pub fn remote(&self) -> nxcc::remote::Remote {
        nxcc::remote::Remote::connect(&nxcc::remote::Address::parse(&self.url(), "").unwrap())
            .unwrap()
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

/// Starts so far (each gets a fresh queue database).
static STARTS: AtomicU64 = AtomicU64::new(0);

/// Start BuildGrid on `port` with the tests' configuration (edited for `launch`); the child once
/// it answers, or `None` (its log printed) when it did not come up.
fn spawn(launch: &Launch, dir: &Path, port: u16) -> Option<Child> {
    let bgd = bgd();
    let host = launch.host.as_deref().unwrap_or("127.0.0.1");
    let mut config = std::fs::read_to_string(BUILDGRID.data_file("config.yml"))
        .unwrap()
        .replace("127.0.0.1:PORT", &format!("{host}:{port}"))
        .replace(
            "SCHEDULER_DB",
            &dir.join(format!(
                "queue-{port}-{}.db",
                STARTS.fetch_add(1, Ordering::SeqCst)
            ))
            .display()
            .to_string(),
        );
    if let Some(tls) = &launch.tls {
        config = tls.configure(&config);
    }
    let cfg = dir.join("config.yml");
    std::fs::write(&cfg, config).unwrap();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("server.log"))
        .unwrap();
    let mut c = match &launch.netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(&bgd);
            c
        }
        None => Command::new(&bgd),
    };
    let mut child = c
        .args(["server", "start"])
        .arg(&cfg)
        .current_dir(dir)
        // Whatever the server writes for itself stays in its directory.
        .env("HOME", dir)
        .env("TMPDIR", dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .unwrap();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(90) {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        let ready = match &launch.tls {
            Some(tls) => tls.answers(&format!("grpcs://{host}:{port}")),
            None => speaks_http2(launch.netns.as_deref(), host, port),
        };
        if ready {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    stop(&mut child, Duration::from_secs(5));
    eprintln!(
        "remote tests: BuildGrid did not come up on {host}:{port}:\n{}",
        std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
    );
    None
}

/// Whether a gRPC server answers at `host:port` (in network namespace `netns`): it answers the
/// HTTP/2 connection preface with its SETTINGS.
pub fn speaks_http2(netns: Option<&str>, host: &str, port: u16) -> bool {
    let addr = format!("{host}:{port}");
    let netns = netns.map(str::to_string);
    std::thread::spawn(move || {
        use std::io::Read;
        if let Some(ns) = netns {
            let Ok(f) = std::fs::File::open(format!("/run/netns/{ns}")) else {
                return false;
            };
            use std::os::fd::AsRawFd;
            // SAFETY: setns on the descriptor of a namespace file this thread opened; no pointers.
            if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return false;
            }
        }
        let Ok(sa) = addr.parse::<std::net::SocketAddr>() else {
            return false;
        };
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, Duration::from_secs(1)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        if s.write_all(&hello).is_err() {
            return false;
        }
        let mut frame = [0u8; 9];
        s.read_exact(&mut frame).is_ok() && frame[3] == 4
    })
    .join()
    .unwrap_or(false)
}

impl Drop for Server {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(5));
    }
}

/// A running `nxcc worker`, its stderr in a file, its tools' runs in its own record.
pub struct Worker {
    pub child: Child,
    pub dir: tempfile::TempDir,
}

impl Worker {
    /// `nxcc worker --remote URL --toolchain sim --allow-test-env EXTRA...` with `env`.
    pub fn start(server: &Server, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Worker {
        Worker::start_at(&server.url(), name, extra, env)
    }

    /// A worker of the server at `url`.
    pub fn start_at(url: &str, name: &str, extra: &[&str], env: &[(&str, &str)]) -> Worker {
        Worker::start_in(None, url, name, extra, env)
    }

    /// A worker of the server at `url`, in network namespace `netns`.
    pub fn start_in(
        netns: Option<&str>,
        url: &str,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Worker {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("state")).unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
        let mut c = in_netns(netns);
        c.args([
            "worker",
            "--remote",
            url,
            "--toolchain",
            "sim",
            "--allow-test-env",
            "--name",
            name,
        ])
        .args(extra);
        // The actions' directories in the test's own directory (a killed worker cannot remove
        // its work directory).
        if !extra.contains(&"--work-dir") {
            c.arg("--work-dir").arg(dir.path().join("work"));
        }
        c.current_dir(dir.path())
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .env("NXCC_SIM_STATE", dir.path().join("state"))
            .env("NXCC_SIM_RECORD", dir.path().join("record.jsonl"))
            .env_remove("NXCC_SIM_FAULT")
            .env_remove("NXCC_SIM_WORK_MS")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0);
        for (k, v) in env {
            c.env(k, v);
        }
        let child = c.spawn().unwrap();
        let w = Worker { child, dir };
        w.wait_for("serving ", Duration::from_secs(60));
        w
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("worker.log")).unwrap_or_default()
    }

    /// The tool invocations the worker's compiles recorded.
    pub fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.dir.path().join("record.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Wait until the worker's log holds `text` (a failure after `limit`, with the log).
    pub fn wait_for(&self, text: &str, limit: Duration) {
        let t = Instant::now();
        while t.elapsed() < limit {
            if self.log().contains(text) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the worker never said {text:?}; its log:\n{}", self.log());
    }

    pub fn kill(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
    }

    /// SIGTERM; the exit status once it has drained.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < limit {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(10));
    }
}

/// The example model, made distinct by `tag` (an unknown length-delimited field 1000 the
/// readers skip, as `bench/padded_models.py` pads it).
pub fn model_variant(tag: &str, pad: usize) -> Vec<u8> {
    let mut b = std::fs::read(Path::new(ROOT).join("examples/models/mlp.hlo_module.pb")).unwrap();
    let mut payload = tag.as_bytes().to_vec();
    payload.resize(payload.len() + pad, 0x5a);
    let varint = |mut n: u64, out: &mut Vec<u8>| loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            break;
        }
        out.push(low | 0x80);
    };
    varint((1000 << 3) | 2, &mut b);
    varint(payload.len() as u64, &mut b);
    b.write_all(&payload).unwrap();
    b
}

/// A client launch directory: `nxcc` without the per-directory simulator variables (they would
/// travel in the Command and make every directory's action differ).
pub struct Client {
    pub dir: tempfile::TempDir,
}

impl Client {
    pub fn new() -> Client {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        std::fs::copy(
            Path::new(ROOT).join("examples/models/mlp.hlo_module.pb"),
            dir.path().join("mlp.hlo_module.pb"),
        )
        .unwrap();
        std::fs::copy(
            Path::new(ROOT).join("examples/models/mlp.hlo"),
            dir.path().join("mlp.hlo"),
        )
        .unwrap();
        Client { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn nxcc(&self, args: &[&str]) -> Command {
        self.nxcc_in(None, args)
    }

    /// `nxcc ARGS` in network namespace `netns`.
    pub fn nxcc_in(&self, netns: Option<&str>, args: &[&str]) -> Command {
        let mut c = in_netns(netns);
        c.args(args)
            .current_dir(self.path())
            .env("XDG_CACHE_HOME", self.path().join("cache"))
            .stdin(Stdio::null());
        for k in [
            "NXCC_SIM_FAULT",
            "NXCC_SIM_WORK_MS",
            "NXCC_SIM_WORK_MS_PER_MB",
            "NXCC_SIM_RSS_MB",
            "NXCC_SIM_RECORD",
            "NXCC_SIM_STATE",
            "NXCC_SIM_SUBGRAPHS",
            "NXCC_TOOLCHAIN",
            "NEURON_PLATFORM_TARGET_OVERRIDE",
            "NEURON_CC_FLAGS",
            "NXCC_REMOTE_CONNECT_TIMEOUT",
            "NXCC_REMOTE_CALL_TIMEOUT",
            "NXCC_REMOTE_IDLE_TIMEOUT",
            "NXCC_REMOTE_RETRY_TIMEOUT",
            "NXCC_REMOTE_CA",
            "NXCC_REMOTE_CLIENT_CERT",
            "NXCC_REMOTE_CLIENT_KEY",
            "NXCC_REMOTE_TOKEN_FILE",
            "NXCC_REMOTE_INVOCATION_ID",
        ] {
            c.env_remove(k);
        }
        c
    }

    /// `nxcc ARGS` started, its output piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.nxcc(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// Run with a time limit (a test never hangs): the output, or a failure after `limit`.
    pub fn run(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        limit: Duration,
    ) -> std::process::Output {
        let mut c = self.nxcc(args);
        for (k, v) in env {
            c.env(k, v);
        }
        run_limited(c, limit)
    }
}

/// `nxcc`, run in network namespace `netns` (`ip netns exec`, which becomes it) when given.
fn in_netns(netns: Option<&str>) -> Command {
    match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, NXCC]);
            c
        }
        None => Command::new(NXCC),
    }
}

/// Run a command to completion within `limit` (killed and failed otherwise).
pub fn run_limited(mut c: Command, limit: Duration) -> std::process::Output {
    let child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_named(child, limit, &format!("{c:?}"))
}

/// What a run said: its stderr, then its stdout.
pub fn said(o: &std::process::Output) -> String {
    text(&o.stderr) + &text(&o.stdout)
}

/// Wait for a running child within `limit` (killed and failed otherwise).
pub fn wait_limited(child: Child, limit: Duration) -> std::process::Output {
    let what = format!("pid {}", child.id());
    wait_named(child, limit, &what)
}

/// Wait for `child` (named `what` in the failure) within `limit`; killed and failed otherwise.
fn wait_named(child: Child, limit: Duration, what: &str) -> std::process::Output {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("{what} did not finish within {} s", limit.as_secs());
        }
    }
}
