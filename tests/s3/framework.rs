//! The framework's compile cache in a bucket (`parallel-compile --neuron-cache=s3://BUCKET/PREFIX`,
//! `cache stats|verify|clean --neuron-cache=s3://...`) against the real server: entries the
//! tests upload as the framework's extraction phase leaves them, compiled into `model.neff` and
//! `model.done` (the marker last, created only if absent) and a second run compiling nothing; two
//! simulated hosts on one bucket compiling each entry once; lock objects the framework may leave
//! honoured, a dead nxcc run's taken over; a publication cut mid-upload leaving no `model.done`;
//! a failure's `model.log`; stats, verify and clean on the bucket; hostile entries (a graph the
//! server says is huge, a `..` name, a NEFF that does not verify) refused without harm.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{text, Scratch};
use crate::moto::Server;
use crate::{ok, proxy, Host};

const VERSION: &str = "2.24.5133.0+nxcc-sim";
/// The prefix of the framework's cache in the bucket.
const FW: &str = "fw";
const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/models");

fn zoo(model: &str) -> Vec<u8> {
    std::fs::read(Path::new(MODELS).join(model)).unwrap()
}

/// The version folder's key.
fn vdir() -> String {
    format!("{FW}/neuronxcc-{VERSION}")
}

/// The key of the entry `MODULE_<name>+d41d8cd9`.
fn entry_key(name: &str) -> String {
    format!("{}/MODULE_{name}+d41d8cd9", vdir())
}

/// A framework cache laid out in `h`'s scratch (`up/`), each entry a graph and its flags, as the
/// extraction phase leaves them; uploaded under the prefix in one call.
fn upload(server: &Server, h: &Host, entries: &[(&str, Vec<u8>, &[&str])]) {
    let root = h.s.join("up");
    for (name, graph, flags) in entries {
        let d = root.join(format!("neuronxcc-{VERSION}/MODULE_{name}+d41d8cd9"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("model.hlo_module.pb"), graph).unwrap();
        std::fs::write(
            d.join("compile_flags.json"),
            serde_json::to_vec(flags).unwrap(),
        )
        .unwrap();
    }
    put_dir(server, &root);
    std::fs::remove_dir_all(&root).unwrap();
}

fn put_dir(server: &Server, root: &Path) {
    let bucket = server.bucket.clone();
    server
        .admin_cmd(&["putdir", &bucket, FW, root.to_str().unwrap()])
        .unwrap();
}

/// Put `bytes` at `key`.
fn put(server: &Server, h: &Host, key: &str, bytes: &[u8]) {
    let f = h.s.join("put.tmp");
    std::fs::write(&f, bytes).unwrap();
    let bucket = server.bucket.clone();
    server
        .admin_cmd(&["put", &bucket, key, f.to_str().unwrap()])
        .unwrap();
}

/// Every object under the prefix, downloaded into `h`'s scratch (`down/`): the framework's view.
fn download(server: &Server, h: &Host) -> PathBuf {
    let root = h.s.join("down");
    let _ = std::fs::remove_dir_all(&root);
    let bucket = server.bucket.clone();
    server
        .admin_cmd(&["getdir", &bucket, FW, root.to_str().unwrap()])
        .unwrap();
    root.join(format!("neuronxcc-{VERSION}"))
}

/// The keys under the prefix.
fn keys(server: &Server) -> Vec<String> {
    server.objects(FW).into_iter().map(|(k, _)| k).collect()
}

fn lock_objects(server: &Server) -> Vec<String> {
    keys(server)
        .into_iter()
        .filter(|k| k.ends_with(".lock"))
        .collect()
}

/// `nxcc parallel-compile --neuron-cache=s3://BUCKET/fw --allow-simulated EXTRA` on host `h`
/// (reaching the server at its endpoint), its work directories in its scratch.
fn parallel(h: &Host, server: &Server, extra: &[&str]) -> Command {
    let url = format!("--neuron-cache={}", server.url(FW));
    let mut args = vec![url.as_str(), "--allow-simulated"];
    args.extend(extra);
    let mut c = h.s.parallel_cmd(&args, &[]);
    h.env(&mut c);
    c.env("TMPDIR", tmp(&h.s));
    c
}

fn tmp(s: &Scratch) -> PathBuf {
    let t = s.join("tmp");
    std::fs::create_dir_all(&t).unwrap();
    t
}

/// `nxcc cache ACTION --neuron-cache=s3://BUCKET/fw ARGS` on host `h`.
fn cache(h: &Host, server: &Server, action: &str, args: &[&str]) -> Output {
    let url = format!("--neuron-cache={}", server.url(FW));
    let mut all = vec!["cache", action, url.as_str()];
    all.extend(args);
    let mut c = h.s.nxcc(&all);
    h.env(&mut c);
    c.output().unwrap()
}

fn stats(h: &Host, server: &Server) -> serde_json::Value {
    serde_json::from_str(&ok(&cache(h, server, "stats", &["--json"]))).unwrap()
}

/// A plain `nxcc compile` of `graph` with `flags` to `model.<entry>.neff` (the name the
/// framework's wrapper gives the NEFF, which its header records).
fn plain_compile(h: &Host, entry: &str, graph: &[u8], flags: &[&str]) -> Vec<u8> {
    let dir = h.s.join(&format!("plain-{entry}"));
    std::fs::create_dir_all(&dir).unwrap();
    let g = dir.join("model.hlo_module.pb");
    std::fs::write(&g, graph).unwrap();
    let out = dir.join(format!("model.{entry}.neff"));
    let (g, o) = (g.display().to_string(), out.display().to_string());
    let mut args = vec!["compile", "--target", "trn2", "--toolchain", "sim"];
    args.extend(flags);
    args.extend([g.as_str(), "--output", o.as_str()]);
    ok(&h.s.run(&args));
    std::fs::read(out).unwrap()
}

fn compiles(h: &Host) -> usize {
    h.s.records()
        .into_iter()
        .filter(|r| r["tool"] == "hlo2penguin")
        .count()
}

#[test]
fn entries_in_a_bucket_are_compiled_published_last_by_model_done_and_a_second_run_compiles_nothing()
{
    let server = Server::start();
    let seen = proxy::Proxy::start(server.port, proxy::Faults::default());
    let h = Host::new(&server).via(seen.endpoint());
    let entries: Vec<(&str, Vec<u8>, &[&str])> = vec![
        ("one", zoo("mlp.hlo_module.pb"), &[]),
        ("two", zoo("mlp.hlo_module.pb"), &["-O1"]),
        (
            "attn",
            zoo("attention.hlo_module.pb"),
            &["--model-type=transformer"],
        ),
    ];
    upload(&server, &h, &entries);
    let out = ok(&parallel(&h, &server, &[]).output().unwrap());
    assert!(out.contains("3 entries to compile"), "{out}");
    assert_eq!(compiles(&h), 3, "{out}");
    // Each entry: the NEFF a plain compile of its graph and flags makes, and model.done.
    let got = download(&server, &h);
    for (name, graph, flags) in &entries {
        let entry = format!("MODULE_{name}+d41d8cd9");
        let neff = std::fs::read(got.join(&entry).join("model.neff")).unwrap();
        assert!(
            neff == plain_compile(&h, &entry, graph, flags),
            "{name}: the NEFF differs from a plain compile's"
        );
        assert!(got.join(&entry).join("model.done").is_file(), "{name}");
        assert!(!got.join(&entry).join("model.log").exists(), "{name}");
    }
    assert!(lock_objects(&server).is_empty(), "{:?}", keys(&server));
    // The NEFF before the marker, the marker created only if absent.
    let puts: Vec<String> = seen
        .seen()
        .into_iter()
        .filter(|r| r.starts_with("PUT ") && r.contains("MODULE_one"))
        .collect();
    let at = |file: &str| puts.iter().position(|r| r.contains(file)).unwrap();
    assert!(at("/model.neff") < at("/model.done"), "{puts:?}");
    assert!(
        puts[at("/model.done")].ends_with("If-None-Match: *"),
        "{puts:?}"
    );
    // Again: nothing to do, nothing compiled, nothing written.
    let before = server.objects(FW);
    let compiled = compiles(&h);
    let out = ok(&parallel(&h, &server, &[]).output().unwrap());
    assert!(out.contains("0 entries to compile, 3 done"), "{out}");
    assert_eq!(compiles(&h), compiled, "{out}");
    assert_eq!(server.objects(FW), before);
    // stats and verify read the bucket as a directory.
    let st = stats(&h, &server);
    assert_eq!(st["dir"], server.url(FW), "{st}");
    assert_eq!(st["versions"][0]["done"], 3, "{st}");
    assert_eq!(st["versions"][0]["to_do"], 0, "{st}");
    let said = ok(&cache(&h, &server, "verify", &[]));
    assert!(said.contains("checked 3 NEFFs: 3 ok, 0 bad"), "{said}");
}

#[test]
fn two_hosts_on_one_bucket_compile_each_entry_once() {
    let server = Server::start();
    let (a, b) = (Host::new(&server), Host::new(&server));
    let names = ["a", "b", "c", "d"];
    let entries: Vec<(&str, Vec<u8>, &[&str])> =
        names.iter().map(|n| (*n, variant(n), &[][..])).collect();
    upload(&server, &a, &entries);
    let run = |h: &Host, host: &str| {
        let url = server.url(FW);
        let mut c = h.s.on_host(
            host,
            &format!("parallel-compile --neuron-cache={url} --allow-simulated --jobs 1 --no_cache -- --target trn2 --toolchain sim"),
        );
        c.env("NXCC_SIM_STATE", h.s.join(".state"))
            .env("NXCC_SIM_RECORD", h.s.record())
            .env("NXCC_SIM_WORK_MS", "hlo2penguin:700")
            .env("TMPDIR", tmp(&h.s))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        h.env(&mut c);
        c.spawn().expect("unshare runs")
    };
    let (first, second) = (run(&a, "host-a"), run(&b, "host-b"));
    let (first, second) = (
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    );
    let (out_a, out_b) = (ok(&first), ok(&second));
    assert_eq!(
        compiles(&a) + compiles(&b),
        names.len(),
        "an entry was compiled twice:\n{out_a}\n{out_b}"
    );
    let st = stats(&a, &server);
    assert_eq!(st["versions"][0]["done"], names.len(), "{st}");
    assert!(lock_objects(&server).is_empty(), "{:?}", keys(&server));
}

/// The example model made distinct by an unknown field a reader skips.
fn variant(tag: &str) -> Vec<u8> {
    let mut b = zoo("mlp.hlo_module.pb");
    b.extend_from_slice(&[0xc2, 0x3e, tag.len() as u8]);
    b.extend_from_slice(tag.as_bytes());
    b
}

#[test]
fn lock_objects_the_framework_leaves_are_honoured_and_a_dead_runs_taken_over() {
    let server = Server::start();
    let h = Host::new(&server);
    let entries: Vec<(&str, Vec<u8>, &[&str])> = ["foreign", "other", "dead"]
        .into_iter()
        .map(|n| (n, variant(n), &[][..]))
        .collect();
    upload(&server, &h, &entries);
    // The framework's lock at the directory cache's name, another `*.lock`, and a lock object a
    // killed nxcc run of this host left.
    put(
        &server,
        &h,
        &format!("{}/model.hlo_module.pb.lock", entry_key("foreign")),
        b"",
    );
    put(
        &server,
        &h,
        &format!("{}/graph.lock", entry_key("other")),
        b"",
    );
    let host = crate::common::text(&Command::new("uname").arg("-n").output().unwrap().stdout);
    let dead = format!("nxcc pid=999999999 started=1 host={}\n", host.trim());
    let dead_key = format!("{}/model.hlo_module.pb.lock", entry_key("dead"));
    put(&server, &h, &dead_key, dead.as_bytes());
    let st = stats(&h, &server);
    assert_eq!(st["versions"][0]["locked"], 3, "{st}");

    let out = ok(&parallel(&h, &server, &[]).output().unwrap());
    assert_eq!(compiles(&h), 1, "{out}");
    for name in ["foreign", "other"] {
        assert!(
            out.contains(&format!(
                "MODULE_{name}+d41d8cd9 (locked): a lock object nxcc did not make, honoured until"
            )),
            "{out}"
        );
    }
    let k = keys(&server);
    assert!(
        k.contains(&format!("{}/model.done", entry_key("dead"))),
        "{k:?}"
    );
    assert!(
        !k.contains(&dead_key),
        "the dead run's lock is still there: {k:?}"
    );
    for name in ["foreign", "other"] {
        assert!(
            !k.contains(&format!("{}/model.neff", entry_key(name))),
            "{k:?}"
        );
    }

    // clean --locks removes a dead run's lock object and keeps the foreign ones (their lease runs).
    put(&server, &h, &dead_key, dead.as_bytes());
    let said = ok(&cache(&h, &server, "clean", &["--locks", "--min-age", "0"]));
    assert!(
        said.contains("removed s3://")
            && said.contains("its holder, a process of this host, is gone"),
        "{said}"
    );
    assert!(said.contains("1 removed, 2 kept"), "{said}");
    assert_eq!(lock_objects(&server).len(), 2, "{:?}", keys(&server));
    assert!(!keys(&server).contains(&dead_key));

    // --break-locks takes the foreign ones over.
    let out = ok(&parallel(&h, &server, &["--break-locks"]).output().unwrap());
    assert_eq!(compiles(&h), 3, "{out}");
    let st = stats(&h, &server);
    assert_eq!(st["versions"][0]["done"], 3, "{st}");
    // (The framework's `graph.lock` is another name than nxcc's: taken into account, left.)
    assert_eq!(
        lock_objects(&server),
        [format!("{}/graph.lock", entry_key("other"))]
    );
}

#[test]
fn a_publication_cut_mid_upload_leaves_no_model_done() {
    let server = Server::start();
    let cutting = proxy::Proxy::start(
        server.port,
        proxy::Faults {
            cut_put: Some("model.neff".into()),
            ..Default::default()
        },
    );
    let h = Host::new(&server).via(cutting.endpoint());
    upload(&server, &h, &[("cut", zoo("mlp.hlo_module.pb"), &[])]);
    let o = parallel(&h, &server, &[]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    assert!(cutting.cut.load(std::sync::atomic::Ordering::SeqCst) > 0);
    let k = keys(&server);
    assert!(
        !k.iter().any(|k| k.ends_with("/model.done")),
        "a model.done after a cut upload: {k:?}"
    );
    assert!(lock_objects(&server).is_empty(), "{k:?}");
    // Straight to the server: compiled and published.
    let h = Host::new(&server);
    ok(&parallel(&h, &server, &[]).output().unwrap());
    assert!(keys(&server).contains(&format!("{}/model.done", entry_key("cut"))));
}

#[test]
fn a_failure_leaves_model_log_and_clean_failed_removes_it() {
    let server = Server::start();
    let h = Host::new(&server);
    upload(
        &server,
        &h,
        &[
            ("bad", b"not a module at all".to_vec(), &[]),
            ("good", zoo("mlp.hlo_module.pb"), &[]),
        ],
    );
    let o = parallel(&h, &server, &[]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{err}");
    // The report names where the entry's log is kept: its object in the bucket.
    let url = format!(
        "{}/neuronxcc-{VERSION}/MODULE_bad+d41d8cd9/model.log",
        server.url(FW)
    );
    assert!(err.contains(&format!("(log: {url})")), "{url}\n{err}");
    let got = download(&server, &h);
    let bad = got.join("MODULE_bad+d41d8cd9");
    let log = std::fs::read_to_string(bad.join("model.log")).unwrap();
    assert!(
        log.contains("Child process job \"HLOToTensorizer\" exited abnormally"),
        "{log}"
    );
    assert!(log.contains("lines of the compile's log ---"), "{log}");
    assert!(!bad.join("model.neff").exists() && !bad.join("model.done").exists());
    assert!(got.join("MODULE_good+d41d8cd9/model.done").is_file());
    // Again: the failed entry is skipped.
    let o = parallel(&h, &server, &[]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("MODULE_bad+d41d8cd9 (failed): failed earlier"),
        "{err}"
    );
    let st = stats(&h, &server);
    assert_eq!(st["versions"][0]["failed"], 1, "{st}");
    assert_eq!(st["versions"][0]["done"], 1, "{st}");
    let said = ok(&cache(&h, &server, "clean", &["--failed"]));
    assert!(said.contains("MODULE_bad+d41d8cd9/model.log"), "{said}");
    assert!(!keys(&server).contains(&format!("{}/model.log", entry_key("bad"))));
    assert_eq!(stats(&h, &server)["versions"][0]["to_do"], 1);
}

#[test]
fn hostile_entries_are_refused_without_harm() {
    let server = Server::start();
    let lying = proxy::Proxy::start(
        server.port,
        proxy::Faults {
            claim_size: Some((
                vec!["MODULE_huge".into(), "/model.hlo_module.pb".into()],
                3 << 30,
            )),
            ..Default::default()
        },
    );
    let h = Host::new(&server).via(lying.endpoint());
    upload(
        &server,
        &h,
        &[
            ("good", zoo("mlp.hlo_module.pb"), &[]),
            ("huge", variant("huge"), &[]),
        ],
    );
    // A name that climbs out of its entry, one the framework never writes, and a done entry
    // whose NEFF is not a NEFF.
    let escape = format!("{}/../../../escape", entry_key("climb"));
    put(&server, &h, &escape, b"x");
    put(
        &server,
        &h,
        &format!("{}/model.hlo_module.pb", entry_key("climb")),
        &variant("climb"),
    );
    put(
        &server,
        &h,
        &format!("{}/compile_flags.json", entry_key("climb")),
        b"[]",
    );
    let odd = format!("{}/MODULE_odd%2F..+1", vdir());
    put(
        &server,
        &h,
        &format!("{odd}/model.hlo_module.pb"),
        &variant("odd"),
    );
    put(&server, &h, &format!("{odd}/compile_flags.json"), b"[]");
    let fake = entry_key("fake");
    put(
        &server,
        &h,
        &format!("{fake}/model.hlo_module.pb"),
        &variant("fake"),
    );
    put(&server, &h, &format!("{fake}/model.neff"), b"not a NEFF");
    put(&server, &h, &format!("{fake}/model.done"), b"");
    let before = keys(&server);

    let o = parallel(&h, &server, &[]).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(compiles(&h), 1, "{err}");
    assert!(
        err.contains("MODULE_huge+d41d8cd9 (refused): refused: its graph cannot be copied")
            && err.contains("more than 2147483648"),
        "{err}"
    );
    assert!(
        err.contains("MODULE_climb+d41d8cd9 (refused): refused: its objects cannot be listed")
            && err.contains("../../../escape"),
        "{err}"
    );
    assert!(
        err.contains(
            "MODULE_odd%2F..+1 (refused): refused: its name is not one the framework writes"
        ),
        "{err}"
    );
    // Only the good entry was written; nothing left the run's own directories.
    let mut written: Vec<String> = keys(&server)
        .into_iter()
        .filter(|k| !before.contains(k))
        .collect();
    written.sort();
    let good = entry_key("good");
    assert_eq!(
        written,
        [format!("{good}/model.done"), format!("{good}/model.neff")]
    );
    assert!(!h.s.path().join("escape").exists());
    let left: Vec<_> = std::fs::read_dir(tmp(&h.s)).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // verify names the NEFF that does not verify, and fails.
    let o = cache(&h, &server, "verify", &[]);
    let said = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{said}{}", text(&o.stderr));
    assert!(
        said.contains("bad: neuronxcc-2.24.5133.0+nxcc-sim/MODULE_fake+d41d8cd9"),
        "{said}"
    );
    assert!(said.contains("checked 2 NEFFs: 1 ok, 1 bad"), "{said}");
}

#[test]
fn a_missing_bucket_and_a_name_that_is_not_a_bucket_are_said_before_anything_runs() {
    let server = Server::start();
    let h = Host::new(&server);
    upload(&server, &h, &[("one", zoo("mlp.hlo_module.pb"), &[])]);
    let on = |url: &str, args: &[&str]| {
        let flag = format!("--neuron-cache={url}");
        let mut all: Vec<&str> = args.to_vec();
        all.push(flag.as_str());
        let mut c = match all[0] {
            "cache" => h.s.nxcc(&all),
            _ => h.s.parallel_cmd(&[flag.as_str(), "--allow-simulated"], &[]),
        };
        h.env(&mut c);
        c.env("TMPDIR", tmp(&h.s));
        c.output().unwrap()
    };
    for args in [&["parallel-compile"][..], &["cache", "stats"]] {
        let o = on("s3://nxcc-no-such-bucket/fw", args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(70), "{args:?}: {err}");
        assert!(
            err.contains("cannot read the neuron cache s3://nxcc-no-such-bucket/fw")
                && err.contains("does not exist"),
            "{args:?}: {err}"
        );
        let o = on("s3://Not_A_Bucket/fw", args);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("is not a bucket name"), "{args:?}: {err}");
    }
    assert_eq!(compiles(&h), 0);
    assert!(!keys(&server).iter().any(|k| k.ends_with("/model.neff")));
}
