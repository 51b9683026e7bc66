//! `nxcc worker` against hostile actions (through a real BuildGrid) and a hostile CAS (the
//! scripted server): the action's time limit, the server's cancellation, a bounded drain, an
//! input-tree bomb, an input named as the output, malformed names, a blob that never ends.

use std::time::{Duration, Instant};

use nxcc::remote::cas::Blob;
use nxcc::remote::{digest, re, Remote};

use super::buildgrid::{model_variant, processes_with_env, text, Client, Server, Worker};
use super::hostile::{Hostile, ReadMode};

const LIMIT: Duration = Duration::from_secs(120);

/// A compile action to submit: its arguments after the model, environment, input root.
struct Submit {
    args: Vec<String>,
    env: Vec<(String, String)>,
    root: re::Directory,
    blobs: Vec<(re::Digest, Blob)>,
    timeout: Option<Duration>,
}

impl Submit {
    /// `neuronx-cc compile m.pb --target=trn2 EXTRA --output model.neff` with `m.pb` the
    /// example (made distinct by `tag`).
    fn compile(tag: &str, extra: &[&str]) -> Submit {
        let model = model_variant(tag, 8);
        let d = digest::of_bytes(&model);
        let mut args = vec!["m.pb".to_string(), "--target=trn2".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Submit {
            args,
            env: Vec::new(),
            root: re::Directory {
                files: vec![re::FileNode {
                    name: "m.pb".into(),
                    digest: Some(d.clone()),
                    ..Default::default()
                }],
                ..Default::default()
            },
            blobs: vec![(d, Blob::Bytes(model))],
            timeout: None,
        }
    }

    fn env(mut self, k: &str, v: &str) -> Submit {
        self.env.push((k.into(), v.into()));
        self.env.sort();
        self
    }

    /// Upload everything; the action's digest.
    fn upload(mut self, remote: &Remote) -> re::Digest {
        let platform =
            nxcc::remote::action::platform(&format!("nxcc-sim-{}", env!("CARGO_PKG_VERSION")));
        let mut arguments = vec!["neuronx-cc".to_string(), "compile".to_string()];
        arguments.extend(self.args.iter().cloned());
        arguments.extend(["--output".to_string(), "model.neff".to_string()]);
        #[allow(deprecated)]
        let command = re::Command {
            arguments,
            environment_variables: self
                .env
                .iter()
                .map(|(k, v)| re::command::EnvironmentVariable {
                    name: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            output_paths: vec!["model.neff".into()],
            platform: Some(platform.clone()),
            ..Default::default()
        };
        let (cb, cd) = digest::of_message(&command);
        let (rb, rd) = digest::of_message(&self.root);
        let action = re::Action {
            command_digest: Some(cd.clone()),
            input_root_digest: Some(rd.clone()),
            platform: Some(platform),
            timeout: self
                .timeout
                .map(|t| bazel_remote_apis::google::protobuf::Duration {
                    seconds: t.as_secs() as i64,
                    nanos: t.subsec_nanos() as i32,
                }),
            do_not_cache: true,
            ..Default::default()
        };
        let (ab, ad) = digest::of_message(&action);
        self.blobs.push((cd, Blob::Bytes(cb)));
        self.blobs.push((rd, Blob::Bytes(rb)));
        self.blobs.push((ad.clone(), Blob::Bytes(ab)));
        remote.upload_missing(&self.blobs).unwrap();
        ad
    }
}

/// Execute `action` (past the cache) in a thread; the answer, or a failure after [`LIMIT`].
fn execute(remote: &Remote, action: &re::Digest) -> re::ExecuteResponse {
    let (tx, rx) = std::sync::mpsc::channel();
    let (r, a) = (remote.clone(), action.clone());
    std::thread::spawn(move || {
        let _ = tx.send(r.execute(&a, true));
    });
    match rx.recv_timeout(LIMIT) {
        Ok(r) => r.unwrap(),
        Err(_) => panic!("the action did not end within {} s", LIMIT.as_secs()),
    }
}

fn status_of(r: &re::ExecuteResponse) -> (i32, String) {
    let s = r.status.clone().unwrap_or_default();
    (s.code, s.message)
}

/// Wait until no process carries the marker (a failure, naming them, after [`LIMIT`]).
fn until_gone(mark: &str) {
    let t = Instant::now();
    loop {
        let left = processes_with_env("NXCC_SIM_MARK", mark);
        if left.is_empty() {
            return;
        }
        if t.elapsed() > LIMIT {
            for p in &left {
                // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
                unsafe { libc::kill(*p as i32, libc::SIGKILL) };
            }
            panic!("the compile still runs: pids {left:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn mark(tag: &str) -> String {
    format!("{tag}-{}", std::process::id())
}

#[test]
fn a_worker_ends_a_compile_at_its_time_limit_and_when_the_server_cancels_it() {
    let server = Server::start();
    let w = Worker::start(&server, "obey", &["--max-concurrent", "2"], &[]);
    let remote = server.remote();

    // The action's timeout: a tool that hangs is ended, the lease answered DEADLINE_EXCEEDED.
    let m = mark("timeout");
    let mut s = Submit::compile("timeout", &[])
        .env("NXCC_SIM_FAULT", "hlo2penguin:hang")
        .env("NXCC_SIM_MARK", &m);
    s.timeout = Some(Duration::from_secs(2));
    let a = s.upload(&remote);
    let r = execute(&remote, &a);
    let (code, message) = status_of(&r);
    assert_eq!(code, 4, "{message}\n{}", w.log());
    assert!(message.contains("time limit"), "{message}");
    until_gone(&m);

    // A client interrupted: it cancels the operation; the server cancels the lease; the worker
    // ends the compile.
    let m = mark("cancel");
    let c = Client::new();
    let url = server.url();
    let mut cmd = c.nxcc(&super::compile_args(
        "mlp.hlo_module.pb",
        "model.neff",
        &["--remote", &url],
    ));
    cmd.env("NXCC_SIM_FAULT", "hlo2penguin:hang")
        .env("NXCC_SIM_MARK", &m)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let t = Instant::now();
    while processes_with_env("NXCC_SIM_MARK", &m).len() < 2 {
        assert!(
            t.elapsed() < LIMIT,
            "the compile never started:\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let o = super::buildgrid::wait_limited(child, LIMIT);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o.stderr));
    until_gone(&m);
    w.wait_for("was cancelled by the server; ending its compile", LIMIT);
}

#[test]
fn sigterm_drains_a_worker_within_its_bound_then_ends_what_runs() {
    let server = Server::start();
    let mut w = Worker::start(&server, "bound", &["--drain-timeout", "1"], &[]);
    let remote = server.remote();
    let m = mark("drain");
    let a = Submit::compile("drain", &[])
        .env("NXCC_SIM_FAULT", "hlo2penguin:hang")
        .env("NXCC_SIM_MARK", &m)
        .upload(&remote);
    let r = remote.clone();
    std::thread::spawn(move || {
        let _ = r.execute(&a, true);
    });
    w.wait_for("started (running: 1)", LIMIT);
    let status = w.terminate(LIMIT);
    assert_eq!(status, Some(0), "{}", w.log());
    assert!(w.log().contains("drained"), "{}", w.log());
    until_gone(&m);
}

/// A tree of `levels` directories, each naming the one below `fanout` times.
fn bomb(levels: usize, fanout: usize) -> (re::Directory, Vec<(re::Digest, Blob)>) {
    let mut blobs = Vec::new();
    let mut below = re::Directory::default();
    for _ in 0..levels {
        let (b, d) = digest::of_message(&below);
        blobs.push((d.clone(), Blob::Bytes(b)));
        below = re::Directory {
            directories: (0..fanout)
                .map(|i| re::DirectoryNode {
                    name: format!("d{i:02}"),
                    digest: Some(d.clone()),
                })
                .collect(),
            ..Default::default()
        };
    }
    (below, blobs)
}

#[test]
fn a_worker_refuses_hostile_actions_before_creating_anything() {
    let server = Server::start();
    let work = tempfile::tempdir().unwrap();
    let w = Worker::start(
        &server,
        "refuse",
        &["--work-dir", work.path().to_str().unwrap()],
        &[],
    );
    let remote = server.remote();
    let refused = |s: Submit, code: i32, says: &str| {
        let a = s.upload(&remote);
        let r = execute(&remote, &a);
        let (c, message) = status_of(&r);
        assert_eq!(c, code, "{message}\n{}", w.log());
        assert!(message.contains(says), "{message}");
        let left: Vec<_> = std::fs::read_dir(work.path()).unwrap().flatten().collect();
        assert!(left.is_empty(), "the worker created {left:?}");
    };

    // A digest reused 64 times at each of 6 levels: ~7e10 directories in 6 small messages.
    let (tree, blobs) = bomb(6, 64);
    let mut s = Submit::compile("bomb", &[]);
    let model = s.root.files[0].clone();
    s.root = tree;
    s.root.files.push(model);
    s.blobs.extend(blobs);
    refused(s, 3, "expands to more than");

    // A file declaring a terabyte.
    let mut s = Submit::compile("huge", &[]);
    s.root.files.push(re::FileNode {
        name: "weights.bin".into(),
        digest: Some(re::Digest {
            hash: "ee".repeat(32),
            size_bytes: 1 << 40,
        }),
        ..Default::default()
    });
    refused(s, 3, "holds more than");

    // An input named as the output: never returned as the compile's NEFF.
    let mut s = Submit::compile("named-neff", &["--pipeline=HLOToTensorizer"]);
    let fake = b"attacker's twenty-six byte".to_vec();
    let fd = digest::of_bytes(&fake);
    s.root.files.push(re::FileNode {
        name: "model.neff".into(),
        digest: Some(fd.clone()),
        ..Default::default()
    });
    s.blobs.push((fd, Blob::Bytes(fake)));
    refused(s, 3, "holds model.neff");

    // A name twice, a name of 5,000 characters: refusals, not internal errors.
    let mut s = Submit::compile("twice", &[]);
    let again = s.root.files[0].clone();
    s.root.files.push(again);
    refused(s, 3, "appears twice");
    let mut s = Submit::compile("long", &[]);
    s.root.files[0].name = "n".repeat(5000);
    s.args[0] = "n".repeat(5000);
    refused(s, 3, "bad name");

    // An input the CAS does not hold: a precondition, not an internal error.
    let mut s = Submit::compile("missing", &[]);
    s.blobs.clear();
    refused(s, 9, "could not be read");

    // A compile that writes no NEFF (it stops before one is made) returns none.
    let a = Submit::compile("no-neff", &["--pipeline=HLOToTensorizer"]).upload(&remote);
    let r = execute(&remote, &a);
    let (code, message) = status_of(&r);
    assert_eq!(code, 0, "{message}\n{}", w.log());
    let result = r.result.unwrap_or_default();
    assert_eq!(result.exit_code, 0);
    assert!(result.output_files.is_empty(), "{:?}", result.output_files);
}

#[test]
fn a_worker_s_downloads_stop_at_their_declared_size() {
    let h = Hostile::start();
    // The lease's action names a command of 1,000 bytes; the CAS streams it forever.
    let command = re::Digest {
        hash: "ab".repeat(32),
        size_bytes: 1000,
    };
    let action = re::Action {
        command_digest: Some(command),
        input_root_digest: Some(digest::of_bytes(b"")),
        ..Default::default()
    };
    let ad = h.state.put(&prost::Message::encode_to_vec(&action));
    h.state.script().read = ReadMode::Endless;
    h.state.script().leases.push(nxcc::remote::bots::Lease {
        id: "lease-\x1b[31m1".into(),
        state: 1,
        payload: Some(bazel_remote_apis::google::protobuf::Any {
            type_url: "type.googleapis.com/build.bazel.remote.execution.v2.Digest".into(),
            value: prost::Message::encode_to_vec(&ad),
        }),
        ..Default::default()
    });
    let w = super::buildgrid::Worker::start_at(&h.url(), "bounded", &[], &[]);
    let t = Instant::now();
    let reported = loop {
        if let Some(l) = h.state.seen().reported.first().cloned() {
            break l;
        }
        assert!(
            t.elapsed() < LIMIT,
            "the lease was never reported:\n{}",
            w.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let st = reported.status.unwrap_or_default();
    assert_eq!(st.code, 14, "{}", st.message);
    assert!(
        st.message.contains("byte 1001 is one too many"),
        "{}",
        st.message
    );
    let sent = h.state.read_bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        sent < 64 << 20,
        "the worker read {sent} bytes of a 1000-byte blob"
    );
    // The server's lease id is printed escaped.
    let log = w.log();
    assert!(
        !log.contains('\x1b') && log.contains("lease-\\u{1b}[31m1"),
        "{log}"
    );
}
