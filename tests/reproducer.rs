//! Reproducer bundles (`compile --gen-reproducer`, `parallel-compile --gen-reproducer`) and their
//! replay (`nxcc reproduce`): a failing simulated compile replayed from another directory after
//! its model is gone; a compile that succeeds when replayed is "not reproduced"; constants
//! stripped keep the module valid; what a bundle leaves out (secrets); a bundle treated as
//! untrusted (tampered, traversing, unlisted, not a file); a link planted in the reproducer
//! directory is replaced, never written through.

mod common;

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use common::bundles::bundles_in as bundles;
use common::{text, Scratch, NXCC};
use serde_json::Value;

const MODEL: &str = "mlp.hlo_module.pb";

/// A bundle's members: name → bytes.
fn members(bundle: &Path) -> Vec<(String, Vec<u8>)> {
    let f = std::fs::File::open(bundle).unwrap();
    let mut a = tar::Archive::new(flate2::read::GzDecoder::new(f));
    a.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().display().to_string();
            let mut b = Vec::new();
            e.read_to_end(&mut b).unwrap();
            (name, b)
        })
        .collect()
}

fn member_json(bundle: &Path, name: &str) -> Value {
    let m = members(bundle);
    let (_, b) = m.iter().find(|(n, _)| n == name).unwrap();
    serde_json::from_slice(b).unwrap()
}

/// A bundle made of `members` as given (tests of what `nxcc reproduce` refuses).
fn pack(path: &Path, members: &[(String, Vec<u8>)]) {
    let f = std::fs::File::create(path).unwrap();
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(
        f,
        flate2::Compression::fast(),
    ));
    for (n, bytes) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        // Names as given, `..` included: set the raw bytes.
        h.as_old_mut().name[..n.len()].copy_from_slice(n.as_bytes());
        h.set_cksum();
        b.append(&h, &bytes[..]).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap();
}

/// `nxcc reproduce BUNDLE` from `cwd` ([`reproduce`]), which must exit `code`; what it printed.
fn replay(s: &Scratch, cwd: &Path, bundle: &Path, code: i32) -> String {
    let o = reproduce(s, cwd, &[bundle.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// `nxcc reproduce ARGS` run from `cwd`, with the private cache home of `s` and no fault of
/// its own (what the bundle holds is what it replays).
fn reproduce(s: &Scratch, cwd: &Path, args: &[&str]) -> Output {
    let mut c = s.nxcc(&[&["reproduce"][..], args].concat());
    c.current_dir(cwd).env("TMPDIR", s.join(".tmp"));
    std::fs::create_dir_all(s.join(".tmp")).unwrap();
    c.output().unwrap()
}

/// A simulated compile of `model` to `out` that always writes a reproducer, its constants
/// stripped, into `dir`.
fn compile_stripped(s: &Scratch, model: &str, out: &str, dir: &str) -> Output {
    s.nxcc(&common::sim_compile_args(
        model,
        "trn2",
        out,
        &[
            "--gen-reproducer=always",
            "--reproducer-strip-constants",
            "--reproducer-dir",
            dir,
        ],
    ))
    .output()
    .unwrap()
}

/// A failing simulated compile (`walrus_driver` exits 3, `fault` with `@first` or not) with
/// `--gen-reproducer` into `bundles/`; the bundle.
fn failing_compile(s: &Scratch, fault: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec![
        "--output",
        "m.neff",
        "--gen-reproducer",
        "--reproducer-dir",
        "bundles",
    ];
    args.extend(extra);
    std::fs::create_dir_all(s.join("bundles")).unwrap();
    let o = s
        .sim_cmd("trn2", &args)
        .env("NXCC_SIM_FAULT", fault)
        .env("NEURON_API_TOKEN", "hunter2-secret-value")
        .env("NEURON_CC_FLAGS", "--retry_failed_compilation")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let found = bundles(&s.join("bundles"));
    assert_eq!(found.len(), 1, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains(&format!("Wrote a reproducer to {}", found[0].display())),
        "{}",
        text(&o.stderr)
    );
    found[0].clone()
}

#[test]
fn a_failing_compile_is_replayed_from_another_directory_after_its_model_is_gone() {
    let s = Scratch::new();
    let bundle = failing_compile(&s, "walrus_driver:exit=3", &[]);
    // Named by its key, readable by its owner only.
    let name = bundle.file_name().unwrap().to_string_lossy().into_owned();
    let key = &name["nxcc-reproducer-".len()..name.len() - ".tar.gz".len()];
    assert_eq!(key.len(), 64, "{name}");
    let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // What it holds, each file in the manifest with its blake3.
    let m = members(&bundle);
    let names: Vec<&str> = m.iter().map(|(n, _)| n.as_str()).collect();
    for want in [
        "model/mlp.hlo_module.pb",
        "argv.json",
        "versions.json",
        "env.json",
        "log.txt",
        "failure.json",
        "cache_key.json",
        "repro.sh",
        "manifest.json",
    ] {
        assert!(names.contains(&want), "{want} not in {names:?}");
    }
    let manifest = member_json(&bundle, "manifest.json");
    for (n, b) in m.iter().filter(|(n, _)| n != "manifest.json") {
        let e = manifest["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == *n)
            .unwrap();
        assert_eq!(e["blake3"], blake3::hash(b).to_hex().to_string());
    }
    assert_eq!(
        m[0].1,
        std::fs::read(s.join(MODEL)).unwrap(),
        "the model as compiled"
    );
    let failure = member_json(&bundle, "failure.json");
    assert_eq!(failure["signature"]["job"], "WalrusDriver");
    assert_eq!(failure["signature"]["status"], "exit status 3");
    assert!(failure["peak_rss_kb"].as_u64().unwrap() > 0);
    let env = member_json(&bundle, "env.json");
    assert_eq!(env["variables"]["NXCC_SIM_FAULT"], "walrus_driver:exit=3");
    assert_eq!(
        env["variables"]["NEURON_CC_FLAGS"],
        "--retry_failed_compilation"
    );
    assert_eq!(env["left_out"], serde_json::json!(["NEURON_API_TOKEN"]));
    assert!(
        !m.iter()
            .any(|(_, b)| b.windows(13).any(|w| w == b"hunter2-secre")),
        "the secret's value is in the bundle"
    );
    assert_eq!(member_json(&bundle, "cache_key.json")["key"], key);
    let log = String::from_utf8(m.iter().find(|(n, _)| n == "log.txt").unwrap().1.clone()).unwrap();
    assert!(
        log.contains("Child process job \"WalrusDriver\" exited abnormally"),
        "{log}"
    );
    assert!(member_json(&bundle, "versions.json")["toolchain"]["simulated"] == true);
    // The model is gone; the replay runs elsewhere, from the bundle alone.
    std::fs::remove_file(s.join(MODEL)).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let said = replay(&s, elsewhere.path(), &bundle, 0);
    assert!(
        said.contains("the replay:           failed at WalrusDriver: exit status 3"),
        "{said}"
    );
    assert!(
        said.contains("reproduced: the same failure recurred"),
        "{said}"
    );
    // Its scratch directory is gone, and nothing was left where it ran.
    assert_eq!(std::fs::read_dir(s.join(".tmp")).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    // repro.sh runs the same compile.
    let unpacked = tempfile::tempdir().unwrap();
    for (n, b) in &m {
        let p = unpacked.path().join(n);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b).unwrap();
    }
    let o = s
        .nxcc(&[])
        .current_dir(elsewhere.path())
        .env("NXCC", NXCC)
        .env_remove("NXCC_SIM_FAULT")
        .arg0_sh(unpacked.path().join("repro.sh"));
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(text(&o.stderr)
        .contains("Child process job \"WalrusDriver\" exited abnormally! Exit status 3."));
}

/// Running a script with `sh` in a command's environment.
trait ShScript {
    fn arg0_sh(&mut self, script: PathBuf) -> Output;
}

impl ShScript for std::process::Command {
    fn arg0_sh(&mut self, script: PathBuf) -> Output {
        let mut c = std::process::Command::new("sh");
        c.arg(script);
        for (k, v) in self.get_envs() {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        if let Some(d) = self.get_current_dir() {
            c.current_dir(d);
        }
        c.output().unwrap()
    }
}

#[test]
fn a_compile_that_succeeds_when_replayed_is_not_reproduced() {
    let s = Scratch::new();
    // The fault plays on the first run only: the replay (a second run) succeeds.
    let bundle = failing_compile(&s, "walrus_driver:exit=3@first", &[]);
    let said = replay(&s, s.path(), &bundle, 1);
    assert!(said.contains("the replay:           succeeded\n"), "{said}");
    assert!(said.contains("not reproduced:\n  outcome: failed → succeeded\n  job: WalrusDriver → none\n  status: exit status 3 → none\n"), "{said}");
}

#[test]
fn stripped_constants_keep_the_module_valid() {
    let s = Scratch::new();
    let big = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/big.hlo_module.pb");
    std::fs::copy(&big, s.join("big.pb")).unwrap();
    std::fs::create_dir_all(s.join("bundles")).unwrap();
    let o = compile_stripped(&s, "big.pb", "big.neff", "bundles");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let bundle = &bundles(&s.join("bundles"))[0];
    let m = members(bundle);
    let stripped = &m.iter().find(|(n, _)| n == "model/big.pb").unwrap().1;
    let original = std::fs::read(&big).unwrap();
    assert_ne!(stripped, &original, "the constants were not zeroed");
    assert_eq!(stripped.len(), original.len());
    // The weights are gone: the bundle is a fraction of the model.
    assert!(std::fs::metadata(bundle).unwrap().len() < original.len() as u64 / 10);
    let unpacked = tempfile::tempdir().unwrap();
    let model = unpacked.path().join("big.pb");
    std::fs::write(&model, stripped).unwrap();
    let info = |p: &Path| -> Value {
        let o = s.run(&["hlo-info", "--json", p.to_str().unwrap()]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    assert_eq!(
        info(&model),
        info(&big),
        "hlo-info reads the same module, same shapes"
    );
    // Replayed: it compiles as it did.
    let said = replay(&s, s.path(), bundle, 0);
    assert!(said.contains("reproduced: the compile ended as it did"));
    // HLO text cannot be stripped: no bundle rather than one with the weights.
    let o = compile_stripped(&s, "mlp.hlo", "t.neff", "text-bundles");
    assert!(o.status.success());
    assert!(text(&o.stderr).contains("WARNING: no reproducer was written: --reproducer-strip-constants: model/mlp.hlo is HLO text"), "{}", text(&o.stderr));
    assert!(bundles(&s.join("text-bundles")).is_empty());
}

#[test]
fn a_bundle_is_untrusted_input() {
    let s = Scratch::new();
    let bundle = failing_compile(&s, "walrus_driver:exit=3", &[]);
    let good = members(&bundle);
    let refused = |name: &str, members: &[(String, Vec<u8>)], why: &str| {
        let p = s.join(name);
        pack(&p, members);
        let o = reproduce(&s, s.path(), &[p.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{name}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        assert!(text(&o.stderr).contains(why), "{name}: {}", text(&o.stderr));
    };
    // Repacked as it was: accepted.
    let p = s.join("same.tar.gz");
    pack(&p, &good);
    assert_eq!(
        reproduce(&s, s.path(), &[p.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    // A member changed after the manifest was made.
    let mut tampered = good.clone();
    for (n, b) in &mut tampered {
        if n == "env.json" {
            *b = br#"{"variables": {"NEURON_CC_FLAGS": "x"}, "left_out": []}"#.to_vec();
        }
    }
    refused(
        "tampered.tar.gz",
        &tampered,
        "env.json is not what its manifest says",
    );
    // A file the manifest does not list.
    let mut extra = good.clone();
    extra.push(("model/extra.pb".into(), b"x".to_vec()));
    refused(
        "extra.tar.gz",
        &extra,
        "model/extra.pb is not in its manifest",
    );
    // A name that climbs out of the scratch directory: nothing is written outside.
    let mut climbing = good.clone();
    climbing.push(("../../escaped".into(), b"x".to_vec()));
    refused("climbing.tar.gz", &climbing, "not a bundle nxcc unpacks");
    assert!(!s.join(".tmp/escaped").exists() && !s.join("escaped").exists());
    // Arguments that reach into the machine.
    let mut local = good.clone();
    let mut manifest = Vec::new();
    for (n, b) in &mut local {
        if n == "argv.json" {
            let mut v: Value = serde_json::from_slice(b).unwrap();
            v["replay_args"] = serde_json::json!(["--target=trn2", "--logfile=/etc/owned"]);
            *b = serde_json::to_vec(&v).unwrap();
        }
    }
    for (n, b) in local.iter().filter(|(n, _)| n != "manifest.json") {
        manifest.push(serde_json::json!({"name": n, "size": b.len(), "blake3": blake3::hash(b).to_hex().to_string()}));
    }
    let mfst =
        serde_json::to_vec(&serde_json::json!({"format": "nxcc-reproducer-1", "files": manifest}))
            .unwrap();
    local.retain(|(n, _)| n != "manifest.json");
    local.push(("manifest.json".into(), mfst));
    refused("local.tar.gz", &local, "its arguments cannot be replayed");
    // Not a file: a FIFO is refused at once, not waited on.
    let fifo = s.join("fifo.tar.gz");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let o = reproduce(&s, s.path(), &[fifo.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    // Not an archive.
    std::fs::write(s.join("junk.tar.gz"), b"junk").unwrap();
    let o = reproduce(&s, s.path(), &[s.join("junk.tar.gz").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_dir(s.join(".tmp")).unwrap().count(),
        0,
        "scratch left behind"
    );
}

#[test]
fn a_link_planted_in_the_reproducer_directory_is_replaced_not_followed() {
    let s = Scratch::new();
    let bundle = failing_compile(&s, "walrus_driver:exit=3", &[]);
    // Another user's link where the next bundle goes, aimed at a file of the victim's.
    let victim = s.join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    std::fs::remove_file(&bundle).unwrap();
    std::os::unix::fs::symlink(&victim, &bundle).unwrap();
    let again = failing_compile(&s, "walrus_driver:exit=3", &[]);
    assert_eq!(again, bundle);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let meta = std::fs::symlink_metadata(&bundle).unwrap();
    assert!(meta.file_type().is_file(), "the link was written through");
    assert_eq!(members(&bundle).len(), 9);
}

#[test]
fn parallel_compile_writes_one_bundle_per_failed_graph_and_links_them() {
    let s = Scratch::new();
    std::fs::create_dir_all(s.join("g")).unwrap();
    std::fs::copy(s.join(MODEL), s.join("g/good.pb")).unwrap();
    std::fs::write(s.join("g/bad.pb"), b"not a module").unwrap();
    std::fs::write(s.join("g/worse.pb"), b"not a module either").unwrap();
    let o = s.parallel_run(
        &[
            "g",
            "--output-dir",
            "out",
            "--no_cache",
            "--gen-reproducer",
            "--reproducer-dir",
            "bundles",
            "--report",
            "report.json",
            "--timings",
            "timings.html",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let found = bundles(&s.join("bundles"));
    assert_eq!(found.len(), 2, "{found:?}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(s.join("report.json")).unwrap()).unwrap();
    let html = std::fs::read_to_string(s.join("timings.html")).unwrap();
    for c in report["compiles"].as_array().unwrap() {
        match c["stem"].as_str().unwrap() {
            "good" => assert!(c.get("reproducer").is_none(), "{c}"),
            _ => {
                let r = c["reproducer"].as_str().unwrap();
                assert!(found.contains(&PathBuf::from(r)), "{r}");
                assert!(
                    html.contains(&format!("<a href=\"{r}\">")),
                    "no link to {r}"
                );
                let f = member_json(Path::new(r), "failure.json");
                assert_eq!(f["signature"]["job"], "HLOToTensorizer");
            }
        }
    }
    // --reproducer-dir alone is a usage error.
    let o = s.parallel_run(&["g", "--reproducer-dir", "x"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("argument --reproducer-dir: only with --gen-reproducer"));
}

#[test]
fn a_bundle_of_a_framework_cache_entry_holds_its_flags() {
    let s = Scratch::new();
    let entry = s.join("nc/neuronxcc-2.24.5133.0+nxcc-sim/MODULE_bad+d41d8cd9");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(entry.join("model.hlo_module.pb"), b"not a module at all").unwrap();
    let flags = br#"["--model-type=transformer"]"#;
    std::fs::write(entry.join("compile_flags.json"), flags).unwrap();
    std::fs::create_dir_all(s.join("tmp")).unwrap();
    let o = s
        .parallel_cmd(
            &[
                "--neuron-cache",
                "nc",
                "--allow-simulated",
                "--gen-reproducer",
                "--reproducer-dir",
                "bundles",
            ],
            &[],
        )
        .env("TMPDIR", s.join("tmp"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    let found = bundles(&s.join("bundles"));
    assert_eq!(found.len(), 1, "{}", text(&o.stderr));
    let m = members(&found[0]);
    let (_, got) = m.iter().find(|(n, _)| n == "compile_flags.json").unwrap();
    assert_eq!(got, flags);
    let argv = member_json(&found[0], "argv.json");
    assert!(
        argv["replay_args"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "--model-type=transformer"),
        "{argv}"
    );
    // The graph as the framework's wrapper compiled it (its private copy), replayed.
    assert!(m
        .iter()
        .any(|(n, b)| n.starts_with("model/") && b == b"not a module at all"));
    let said = replay(&s, s.path(), &found[0], 0);
    assert!(said.contains("failed at HLOToTensorizer: exit status 1"));
}
