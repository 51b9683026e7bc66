//! A real S3-compatible server for the S3 tests, on loopback only: moto's server mode
//! (`moto[s3]==5.2.6` with Flask, pinned by `tests/data/moto/constraints.txt`), provisioned on
//! first use into a virtual environment under `target/` (Python 3.11, else python3; a lock file
//! keeps parallel test binaries from installing twice; `common/venv.rs`), started on a port it
//! picks itself, ready when it says it listens there, stopped by pid (its process group). moto answers conditional writes as S3 does
//! (`If-None-Match: *` on an existing key and a stale `If-Match` both 412 PreconditionFailed)
//! and, started with authentication, enforces IAM policies (a read-only credential).
//! `tests/data/moto/admin.py` is the server's own client (boto3) for what a test does behind
//! nxcc's back.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::venv::{run, Venv};

/// moto, provisioned on first use.
const MOTO: Venv<'static> = Venv {
    tool: "moto",
    tests: "s3 tests",
    dir: "moto-venv",
    pin: "moto==5.2.6",
    packages: &["moto[s3]==5.2.6", "flask", "flask-cors"],
    data: "moto",
    pythons: &["python3.11", "python3"],
    marker: "bin/moto_server",
};

/// The virtual environment's `bin/`, provisioning it if needed (a failed test if it cannot be).
fn bin() -> PathBuf {
    MOTO.must().join("bin")
}

/// The port the server `child` (logging to `log`) listens on at `host`: it says so once it is
/// listening (` * Running on http://HOST:PORT`).
fn bound_port(child: &mut Child, log: &tempfile::NamedTempFile, host: &str) -> u16 {
    let said = format!("Running on http://{host}:");
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        let port = text
            .lines()
            .find_map(|l| l.split_once(&said))
            .and_then(|(_, p)| p.trim().parse().ok());
        if let Some(port) = port {
            return port;
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("moto_server exited ({st}): {text}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "moto never listened: {text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The keys the server was set up with.
#[derive(Clone, Debug)]
pub struct Keys {
    pub id: String,
    pub secret: String,
}

/// A running moto server with one bucket.
pub struct Server {
    child: Child,
    /// The network namespace it runs in and its address there; else loopback.
    netns: Option<(String, String)>,
    pub port: u16,
    pub bucket: String,
    /// The keys that may do anything.
    pub admin: Keys,
    /// With authentication: keys that may only read.
    pub reader: Option<Keys>,
    _log: tempfile::NamedTempFile,
}

impl Server {
    /// A server without authentication (any keys are taken).
    pub fn start() -> Server {
        Server::launch(false)
    }

    /// A server that enforces IAM: a writer and a read-only reader.
    pub fn with_users() -> Server {
        Server::launch(true)
    }

    /// A server in the network namespace `ns`, at `addr` there.
    pub fn in_netns(ns: &str, addr: &str) -> Server {
        Server::launch_at(false, Some((ns.to_string(), addr.to_string())))
    }

    fn launch(auth: bool) -> Server {
        Server::launch_at(auth, None)
    }

    fn launch_at(auth: bool, netns: Option<(String, String)>) -> Server {
        let bin = bin();
        let log = tempfile::NamedTempFile::new().unwrap();
        let server = bin.join("moto_server");
        let (mut c, host) = match &netns {
            Some((ns, addr)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(server);
                (c, addr.as_str())
            }
            None => (Command::new(server), "127.0.0.1"),
        };
        // Port 0: the server binds a free port of its own and says which (a port picked here
        // and freed could be taken by another test's server before this one binds it).
        c.args(["-H", host, "-p", "0"])
            .stdin(Stdio::null())
            .stdout(log.reopen().unwrap())
            .stderr(log.reopen().unwrap())
            .process_group(0);
        if auth {
            // The first requests (making the users) go unauthenticated; every later one must
            // be signed by a user allowed to make it.
            c.env("INITIAL_NO_AUTH_ACTION_COUNT", "6");
        }
        let mut child = c.spawn().expect("moto_server starts");
        let port = bound_port(&mut child, &log, host);
        let mut s = Server {
            child,
            netns,
            port,
            bucket: "nxcc-fleet".to_string(),
            admin: Keys {
                id: "testing".into(),
                secret: "testing".into(),
            },
            reader: None,
            _log: log,
        };
        if auth {
            let keys: serde_json::Value =
                serde_json::from_str(&s.admin_cmd(&["users"]).unwrap()).unwrap();
            let k = |u: &str| Keys {
                id: keys[u][0].as_str().unwrap().to_string(),
                secret: keys[u][1].as_str().unwrap().to_string(),
            };
            s.admin = k("writer");
            s.reader = Some(k("reader"));
        }
        s.admin_cmd(&["mkbucket", &s.bucket.clone()]).unwrap();
        s
    }

    pub fn endpoint(&self) -> String {
        let host = self.netns.as_ref().map_or("127.0.0.1", |(_, a)| a.as_str());
        format!("http://{host}:{}", self.port)
    }

    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{}/{prefix}", self.bucket)
    }

    /// `admin.py` with the admin keys.
    pub fn admin_cmd(&self, args: &[&str]) -> Result<String, String> {
        let bin = bin();
        let mut c = match &self.netns {
            Some((ns, _)) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin.join("python"));
                c
            }
            None => Command::new(bin.join("python")),
        };
        run(
            c.arg(MOTO.data_file("admin.py"))
                .args([&self.endpoint(), &self.admin.id, &self.admin.secret])
                .args(args),
            "admin.py",
        )
    }

    /// The bucket's objects under `prefix`: key and size.
    pub fn objects(&self, prefix: &str) -> Vec<(String, u64)> {
        self.admin_cmd(&["list", &self.bucket])
            .unwrap()
            .lines()
            .filter_map(|l| l.rsplit_once(' '))
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, s)| (k.to_string(), s.parse().unwrap()))
            .collect()
    }

    /// Stop it (SIGKILL to its group).
    pub fn kill(&mut self) {
        let pid = self.child.id() as i32;
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}
