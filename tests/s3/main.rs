//! nxcc's cache in S3 (`--cache_dir s3://BUCKET/PREFIX`) against a real S3-compatible server
//! the tests start on loopback (moto, provisioned on first use: `moto.rs`) or, for hosts in
//! network namespaces of their own (`common/netns.rs`), on a bridge between them: entries shared by
//! hosts through one bucket and kept in each host's local directory (a local hit never asks the
//! server), a NEFF changed in the bucket never served, one compile per key across simulated
//! hosts (UTS and PID namespaces) and a dead holder's lock taken over after its lease, a
//! publication cut mid-upload leaving no entry, server errors and slow answers through a
//! fault-injecting proxy (`proxy.rs`), a read-only credential, and a missing bucket, refused
//! credentials and an unreachable endpoint each failing clearly; a hit from the bucket reported
//! as the `shared` tier (a bucket secondary's as `shared-secondary`) in the trace and on the page.

#[path = "../common/mod.rs"]
mod common;
mod framework;
mod moto;
mod proxy;

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{text, Scratch};
use moto::{Keys, Server};

const PREFIX: &str = "team";

/// A host: a scratch launch directory with its own local cache and simulated toolchain state.
struct Host {
    s: Scratch,
    endpoint: String,
    keys: Keys,
    /// The keys in a shared credentials file's profile rather than the environment.
    in_profile: bool,
}

impl Host {
    fn new(server: &Server) -> Host {
        Host {
            s: Scratch::new(),
            endpoint: server.endpoint(),
            keys: server.admin.clone(),
            in_profile: false,
        }
    }

    fn via(mut self, endpoint: String) -> Host {
        self.endpoint = endpoint;
        self
    }

    fn with_keys(mut self, keys: Keys) -> Host {
        self.keys = keys;
        self
    }

    /// The keys in the profile `ci` of a credentials file of its own.
    fn keys_in_profile(mut self) -> Host {
        let text = format!(
            "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n[ci]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            self.keys.id, self.keys.secret
        );
        std::fs::write(self.s.join("aws-credentials"), text).unwrap();
        self.in_profile = true;
        self
    }

    fn env(&self, c: &mut Command) {
        if self.in_profile {
            c.env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY")
                .env(
                    "AWS_SHARED_CREDENTIALS_FILE",
                    self.s.join("aws-credentials"),
                )
                .env("AWS_PROFILE", "ci");
        } else {
            c.env("AWS_ACCESS_KEY_ID", &self.keys.id)
                .env("AWS_SECRET_ACCESS_KEY", &self.keys.secret)
                .env_remove("AWS_PROFILE");
        }
        c.env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_REGION", "us-east-1")
            .env("NXCC_S3_RETRY_TIMEOUT", "3")
            // Never the instance metadata service: these tests reach loopback only.
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_ENDPOINT_URL_S3");
    }

    /// `nxcc compile` of the example for `target` into `out.neff` through `url`.
    fn compile_cmd(&self, url: &str, target: &str, extra: &[&str]) -> Command {
        let mut args = vec![
            "--cache_dir",
            url,
            "--output",
            "out.neff",
            "--verbose",
            "info",
        ];
        args.extend(extra);
        let mut c = self.s.sim_cmd(target, &args);
        self.env(&mut c);
        c
    }

    fn compile(&self, url: &str, target: &str, extra: &[&str]) -> Output {
        self.compile_cmd(url, target, extra).output().unwrap()
    }

    /// The same compile as the first process of a simulated host named `name`.
    fn on_host(&self, name: &str, url: &str, target: &str) -> Command {
        let mut c = self.s.on_host(
            name,
            &format!(
                "compile mlp.hlo_module.pb --target {target} --toolchain sim --cache_dir {url} --output out.neff --verbose info"
            ),
        );
        c.env("NXCC_SIM_STATE", self.s.join(".state"))
            .env("NXCC_SIM_RECORD", self.s.record())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.env(&mut c);
        c
    }

    /// The same compile as the first process of a simulated host named `name` in the network
    /// namespace `ns`.
    fn in_netns(&self, ns: &str, name: &str, url: &str, target: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "unshare", "--uts", "--pid", "--fork"])
            .args(["--kill-child=SIGKILL", "sh", "-c"])
            .arg(format!(
                "hostname {name} && exec \"$0\" compile mlp.hlo_module.pb --target {target} --toolchain sim --cache_dir {url} --output out.neff --verbose info"
            ))
            .arg(common::NXCC)
            .current_dir(self.s.path())
            .env("XDG_CACHE_HOME", self.s.join(".cache"))
            .env("NXCC_SIM_STATE", self.s.join(".state"))
            .env("NXCC_SIM_RECORD", self.s.record())
            .env_remove("NXCC_TOOLCHAIN");
        self.env(&mut c);
        c
    }

    fn tool_runs(&self) -> usize {
        self.s.records().len()
    }

    fn neff(&self) -> Vec<u8> {
        std::fs::read(self.s.join("out.neff")).unwrap()
    }
}

fn ok(o: &Output) -> String {
    let all = format!("{}{}", text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{:?}: {all}", o.status);
    all
}

/// The bucket's entries' markers and lock objects under the prefix.
fn markers(server: &Server) -> Vec<String> {
    server
        .objects(PREFIX)
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.ends_with("/done"))
        .collect()
}

fn locks(server: &Server) -> Vec<String> {
    server
        .objects(&format!("{PREFIX}/nxcc-v1/locks/"))
        .into_iter()
        .map(|(k, _)| k)
        .collect()
}

#[test]
fn hosts_share_entries_through_the_bucket_and_a_local_hit_never_asks_it() {
    let mut server = Server::start();
    let url = server.url(PREFIX);
    let (a, b, c) = (Host::new(&server), Host::new(&server), Host::new(&server));
    let out = ok(&a.compile(&url, "trn2", &[]));
    assert!(a.tool_runs() > 0, "{out}");
    assert!(out.contains("Published the entry of key"), "{out}");
    let objects = server.objects(PREFIX);
    let names: Vec<&str> = objects
        .iter()
        .filter_map(|(k, _)| k.rsplit('/').next())
        .collect();
    for f in ["done", "model.neff", "meta.json", "log.txt"] {
        assert!(names.contains(&f), "{f} not in {objects:?}");
    }
    assert!(locks(&server).is_empty(), "a lock object was left behind");

    // Another host: a hit from the bucket, no tool run, the same NEFF, kept locally.
    let out = ok(&b.compile(&url, "trn2", &[]));
    assert_eq!(b.tool_runs(), 0, "{out}");
    assert!(out.contains("Fetched the entry of key"), "{out}");
    assert!(out.contains("Using a cached neff at"), "{out}");
    assert_eq!(a.neff(), b.neff());

    // A missing bucket fails the compile, saying so.
    let o = b.compile("s3://nxcc-no-such-bucket/x", "trn1", &[]);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("[NCC_EDRV117]") && err.contains("does not exist"),
        "{err}"
    );

    // The bucket as a read-only secondary of a local directory: a hit, nothing written there.
    let d = Host::new(&server);
    let before = server.objects(PREFIX);
    let out = ok(&d.compile("local", "trn2", &["--cache-secondary", &url]));
    assert_eq!(d.tool_runs(), 0, "{out}");
    assert_eq!(a.neff(), d.neff());
    assert_eq!(server.objects(PREFIX), before);

    // With the server gone, the local tier still answers; a host without the entry is told
    // the endpoint cannot be reached.
    server.kill();
    std::fs::remove_file(b.s.join("out.neff")).unwrap();
    let out = ok(&b.compile(&url, "trn2", &[]));
    assert!(!out.contains("Fetched"), "{out}");
    assert_eq!(a.neff(), b.neff());
    let o = c.compile(&url, "trn2", &[]);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(err.contains("cannot be reached"), "{err}");
    assert_eq!(c.tool_runs(), 0);
    assert!(!c.s.join("out.neff").exists());
}

#[test]
fn a_neff_changed_in_the_bucket_is_never_served_and_is_replaced() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let (a, b, c) = (Host::new(&server), Host::new(&server), Host::new(&server));
    ok(&a.compile(&url, "trn2", &[]));
    let (neff_key, _) = server
        .objects(PREFIX)
        .into_iter()
        .find(|(k, _)| k.ends_with("/model.neff"))
        .unwrap();
    let evil = a.s.join("evil.neff");
    let mut bytes = a.neff();
    bytes[100] ^= 0xff;
    std::fs::write(&evil, &bytes).unwrap();
    let bucket = server.bucket.clone();
    server
        .admin_cmd(&["put", &bucket, &neff_key, evil.to_str().unwrap()])
        .unwrap();
    let before = markers(&server);

    let out = ok(&b.compile(&url, "trn2", &[]));
    assert!(
        out.contains("cannot be used") && out.contains("is not the one meta.json records"),
        "{out}"
    );
    assert!(b.tool_runs() > 0, "the changed NEFF was served: {out}");
    assert_eq!(a.neff(), b.neff());
    // The bad entry was replaced by B's: a third host gets a good one.
    let out = ok(&b.compile(&url, "trn2", &[]));
    assert!(out.contains("Using a cached neff"), "{out}");
    let got = server.admin_cmd(&["list", &bucket]).unwrap();
    assert_eq!(markers(&server).len(), 1, "{got}");
    let _ = before;
    let out = ok(&c.compile(&url, "trn2", &[]));
    assert_eq!(c.tool_runs(), 0, "{out}");
    assert_eq!(a.neff(), c.neff());
}

/// Wait until the bucket holds a lock object (while `holder` runs).
fn wait_for_lock(server: &Server, holder: &mut std::process::Child) -> String {
    let t = Instant::now();
    loop {
        if let Some(l) = locks(server).into_iter().next() {
            return l;
        }
        if t.elapsed() > Duration::from_secs(60) || holder.try_wait().unwrap().is_some() {
            let _ = holder.kill();
            let mut err = String::new();
            std::io::Read::read_to_string(holder.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("no lock object appeared: {err}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn two_hosts_compiling_one_key_at_once_compile_it_once() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let (a, b) = (Host::new(&server), Host::new(&server));
    // (Its compile sleeps 5 s, so that the lock is still held when it is seen.)
    let mut first = a
        .on_host("host-a", &url, "trn2")
        .env("NXCC_SIM_WAIT_MS", "hlo2penguin:5000")
        .process_group(0)
        .spawn()
        .expect("unshare runs");
    // Host A holds the key's lock: stop it there until host B is seen waiting for it.
    wait_for_lock(&server, &mut first);
    let group = first.id() as i32;
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(-group, libc::SIGSTOP) };
    let mut second = b.on_host("host-b", &url, "trn2").spawn().unwrap();
    let lines = std::io::BufRead::lines(std::io::BufReader::new(second.stdout.take().unwrap()));
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = String::new();
        for line in lines.map_while(Result::ok) {
            if line.contains("Waiting for another compile") {
                let _ = tx.send(());
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    let waited = rx.recv_timeout(Duration::from_secs(120)).is_ok();
    // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
    unsafe { libc::kill(-group, libc::SIGCONT) };
    let (first, second) = (
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    );
    let out_b = reader.join().unwrap() + &text(&second.stderr);
    assert!(waited, "host B never waited for host A's lock: {out_b}");
    let out_a = ok(&first);
    assert!(second.status.success(), "{out_b}");
    assert!(a.tool_runs() > 0, "{out_a}");
    assert_eq!(b.tool_runs(), 0, "host B compiled too: {out_b}");
    assert!(out_b.contains("host host-a"), "{out_b}");
    assert!(out_b.contains("Fetched the entry"), "{out_b}");
    assert_eq!(a.neff(), b.neff());
    assert!(locks(&server).is_empty());
}

#[test]
fn a_host_that_dies_holding_the_lock_is_taken_over_after_its_lease() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let (a, b, c) = (Host::new(&server), Host::new(&server), Host::new(&server));
    let mut dying = a
        .on_host("host-a", &url, "trn2")
        .env("NXCC_SIM_WORK_MS", "hlo2penguin:60000")
        .env("NXCC_LOCK_LEASE_MS", "1500")
        .spawn()
        .expect("unshare runs");
    let lock = wait_for_lock(&server, &mut dying);
    // The host goes down: every process of its namespace at once.
    dying.kill().unwrap();
    dying.wait().unwrap();
    let out = ok(&b
        .on_host("host-b", &url, "trn2")
        .env("NXCC_LOCK_LEASE_MS", "1500")
        .output()
        .unwrap());
    assert!(out.contains("took over the lock"), "{out}");
    assert!(
        out.contains("host-a") && out.contains("lease ended"),
        "{out}"
    );
    assert!(b.tool_runs() > 0);
    assert!(!locks(&server).contains(&lock));
    let out = ok(&c.compile(&url, "trn2", &[]));
    assert_eq!(c.tool_runs(), 0, "{out}");
}

#[test]
fn a_publication_cut_mid_upload_leaves_no_entry() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let cutting = proxy::Proxy::start(
        server.port,
        proxy::Faults {
            cut_put: Some("model.neff".into()),
            ..Default::default()
        },
    );
    let a = Host::new(&server).via(cutting.endpoint());
    let out = ok(&a.compile(&url, "trn2", &[]));
    assert!(cutting.cut.load(std::sync::atomic::Ordering::SeqCst) > 0);
    assert!(out.contains("could not publish the entry"), "{out}");
    assert!(markers(&server).is_empty(), "{:?}", server.objects(PREFIX));
    assert!(locks(&server).is_empty());
    // Another host finds no entry and publishes its own.
    let b = Host::new(&server);
    let out = ok(&b.compile(&url, "trn2", &[]));
    assert!(
        b.tool_runs() > 0 && out.contains("Published the entry"),
        "{out}"
    );
    assert_eq!(markers(&server).len(), 1);
}

#[test]
fn server_errors_and_slow_answers_are_retried() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let flaky = proxy::Proxy::start(
        server.port,
        proxy::Faults {
            fail_first: 3,
            delay: Some(Duration::from_millis(150)),
            ..Default::default()
        },
    );
    let a = Host::new(&server).via(flaky.endpoint());
    let out = ok(&a.compile(&url, "trn2", &[]));
    assert_eq!(flaky.failed.load(std::sync::atomic::Ordering::SeqCst), 3);
    assert!(out.contains("Published the entry"), "{out}");
    let b = Host::new(&server).via(flaky.endpoint());
    let out = ok(&b.compile(&url, "trn2", &[]));
    assert_eq!(b.tool_runs(), 0, "{out}");
    assert_eq!(a.neff(), b.neff());
    assert!(flaky.seen().iter().any(|r| r.starts_with("GET ")));
}

#[test]
fn a_read_only_credential_reads_the_bucket_and_never_writes_it() {
    let server = Server::with_users();
    let url = server.url(PREFIX);
    let writer = Host::new(&server);
    ok(&writer.compile(&url, "trn2", &[]));
    let reader_keys = server.reader.clone().unwrap();
    // The reader's keys come from a shared credentials file's profile (the server checks them).
    let reader = Host::new(&server)
        .with_keys(reader_keys.clone())
        .keys_in_profile();
    let out = ok(&reader.compile(&url, "trn2", &[]));
    assert_eq!(reader.tool_runs(), 0, "{out}");
    assert_eq!(writer.neff(), reader.neff());

    // A miss: compiled, with a warning; nothing written to the bucket.
    let before = server.objects(PREFIX);
    let out = ok(&reader.compile(&url, "trn1", &[]));
    assert!(reader.tool_runs() > 0);
    assert!(
        out.contains("cannot lock the key") && out.contains("access denied"),
        "{out}"
    );
    assert_eq!(server.objects(PREFIX), before);

    // A read-only cache writes nothing even with a writer's keys; a hit-only one refuses.
    let w2 = Host::new(&server);
    ok(&w2.compile(&url, "inf2", &["--cache-mode", "read-only"]));
    assert_eq!(server.objects(PREFIX), before);
    let o = Host::new(&server).compile(&url, "inf2", &["--cache-mode", "hit-only"]);
    assert_eq!(o.status.code(), Some(69), "{}", text(&o.stderr));

    // Keys the server does not know: access denied, the compile fails.
    let bad = Host::new(&server).with_keys(Keys {
        id: "AKIAUNKNOWN".into(),
        secret: "nope".into(),
    });
    let o = bad.compile(&url, "trn2", &[]);
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("access denied"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(bad.tool_runs(), 0);
}

#[test]
fn parallel_compile_and_the_cache_commands_work_on_the_bucket() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let (a, b) = (Host::new(&server), Host::new(&server));
    let parallel = |h: &Host| {
        let mut c = h.s.parallel_cmd(
            &[
                "--cache_dir",
                &url,
                "--output-dir",
                "out",
                "mlp.hlo_module.pb",
                "mlp.hlo",
            ],
            &[],
        );
        h.env(&mut c);
        c.output().unwrap()
    };
    ok(&parallel(&a));
    assert!(a.tool_runs() > 0);
    ok(&parallel(&b));
    assert_eq!(b.tool_runs(), 0, "the second host compiled");
    let cache = |h: &Host, args: &[&str]| {
        let mut all = vec!["cache"];
        all.extend(args);
        all.extend(["--cache_dir", url.as_str()]);
        let mut c = h.s.nxcc(&all);
        h.env(&mut c);
        c.output().unwrap()
    };
    let stats: serde_json::Value =
        serde_json::from_str(&ok(&cache(&a, &["stats", "--json"]))).unwrap();
    assert_eq!(stats["entries"], 2, "{stats}");
    assert_eq!(stats["locks"], 0, "{stats}");
    let said = ok(&cache(&a, &["verify"]));
    assert!(said.contains("2 entries: 2 ok"), "{said}");
    let said = ok(&cache(&a, &["config", "max_size=1K"]));
    assert!(said.contains("max_size = 1024"), "{said}");
    let said = ok(&cache(&a, &["gc"]));
    assert!(said.starts_with("evicted 2 entries"), "{said}");
    assert!(markers(&server).is_empty());
    let o = cache(&a, &["stats"]);
    assert!(
        text(&o.stdout).contains("entries: 0"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn hosts_in_network_namespaces_of_their_own_share_one_bucket() {
    let net = common::netns::Net::must(&["server", "host-a", "host-b"]);
    let server = Server::in_netns(&net.ns("server"), &net.address("server"));
    let url = server.url(PREFIX);
    let (a, b) = (Host::new(&server), Host::new(&server));
    let out = ok(&a
        .in_netns(&net.ns("host-a"), "host-a", &url, "trn2")
        .output()
        .unwrap());
    assert!(
        a.tool_runs() > 0 && out.contains("Published the entry"),
        "{out}"
    );
    let out = ok(&b
        .in_netns(&net.ns("host-b"), "host-b", &url, "trn2")
        .output()
        .unwrap());
    assert_eq!(b.tool_runs(), 0, "{out}");
    assert!(out.contains("Fetched the entry"), "{out}");
    assert_eq!(a.neff(), b.neff());
    assert_eq!(markers(&server).len(), 1);
    assert!(locks(&server).is_empty());
}

/// The one compile event of a Chrome trace, and the timings page's "Hits by cache tier" table.
fn hit_tiers(h: &Host) -> (Vec<String>, String) {
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(h.s.join("t.json")).unwrap()).unwrap();
    let tiers = trace["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X" && e["args"]["outcome"].is_string())
        .map(|e| {
            let a = &e["args"];
            format!(
                "{}:{}",
                a["outcome"].as_str().unwrap(),
                a["tier"].as_str().unwrap_or("-")
            )
        })
        .collect();
    let page = std::fs::read_to_string(h.s.join("t.html")).unwrap();
    let from = page.find("Hits by cache tier").unwrap();
    let table = page[from..].split("</table>").next().unwrap().to_string();
    (tiers, table)
}

#[test]
fn a_hit_from_the_bucket_is_said_to_come_from_the_shared_tier() {
    let server = Server::start();
    let url = server.url(PREFIX);
    let reports = ["--profile", "t.json", "--timings=t.html"];
    let (a, b, c) = (Host::new(&server), Host::new(&server), Host::new(&server));
    ok(&a.compile(&url, "trn2", &reports));
    assert_eq!(hit_tiers(&a).0, ["compiled:-"]);
    // Fetched from the bucket: the shared tier, in the trace and on the page.
    ok(&b.compile(&url, "trn2", &reports));
    assert_eq!(b.tool_runs(), 0, "the second host compiled");
    let (tiers, table) = hit_tiers(&b);
    assert_eq!(tiers, ["hit:shared"]);
    assert!(table.contains("<td>shared</td>"), "{table}");
    assert!(!table.contains("<td>local</td>"), "{table}");
    // Then kept in its local directory: a local hit.
    ok(&b.compile(&url, "trn2", &reports));
    assert_eq!(hit_tiers(&b).0, ["hit:local"]);
    // The bucket as a read-only secondary behind a local directory of its own.
    let own = c.s.join("own-cache");
    let o = c.compile(
        own.to_str().unwrap(),
        "trn2",
        &[&reports[..], &["--cache-secondary", &url]].concat(),
    );
    ok(&o);
    assert_eq!(c.tool_runs(), 0, "the third host compiled");
    let (tiers, table) = hit_tiers(&c);
    assert_eq!(tiers, ["hit:shared-secondary"]);
    assert!(table.contains("<td>shared-secondary</td>"), "{table}");
    // parallel-compile's reports say the same.
    let d = Host::new(&server);
    let mut p = d.s.parallel_cmd(
        &[
            "--cache_dir",
            &url,
            "--output-dir",
            "out",
            "--profile",
            "t.json",
            "--timings=t.html",
            "mlp.hlo_module.pb",
        ],
        &[],
    );
    d.env(&mut p);
    ok(&p.output().unwrap());
    assert_eq!(d.tool_runs(), 0, "the fourth host compiled");
    let (tiers, table) = hit_tiers(&d);
    assert_eq!(tiers, ["hit:shared"]);
    assert!(table.contains("<td>shared</td>"), "{table}");
}
