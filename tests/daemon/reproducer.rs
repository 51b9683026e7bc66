//! The reproducer bundle of a compile a daemon ran (`nxcc compile --daemon --gen-reproducer`),
//! written by the client: a daemon that runs an external compiler (`--compiler`) says which,
//! first on its stream, and the bundle names that compiler — its path, the digest of its bytes,
//! its version — so that `nxcc reproduce --compiler PATH` replays with it and says whether it is
//! that compiler (a bundle never has nxcc run a program it names: without `--compiler` the replay
//! is refused, naming the compiler); for nxcc's pipeline, the bundle names the toolchain the
//! daemon says the compile ran with — its own, when the client names none —; a daemon that says
//! nothing of its engine or toolchain (an older nxcc) leaves a bundle that says they are assumed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::*;

/// A model the stand-in compiler fails on (exit status 70, two error lines).
const FAILING: &str = "graph 1\nfake-compiler: fail\n";

/// A daemon that runs the stand-in compiler, copied into the world's `compilers/`; the copy.
fn external_daemon(world: &World) -> (Daemon, PathBuf) {
    let fake = fake_compiler_in(&world.mkdir("compilers"));
    let daemon = Daemon::start(world, "d", &["--compiler", fake.to_str().unwrap()], &[]);
    (daemon, fake)
}

/// `nxcc compile --daemon m.pb ... --gen-reproducer --reproducer-dir bundles` in `wd`, whose
/// `m.pb` the stand-in compiler fails on; the bundle the client wrote.
fn failing_compile(world: &World, daemon: &Daemon, wd: &Path) -> PathBuf {
    std::fs::write(wd.join("m.pb"), FAILING).unwrap();
    std::fs::create_dir_all(wd.join("bundles")).unwrap();
    let out = world
        .nxcc()
        .args(["compile", "--daemon", "m.pb", "--framework", "XLA"])
        .args(["--target", "trn2", "--output", "m.neff"])
        .args(["--gen-reproducer", "--reproducer-dir", "bundles"])
        // No variable of the simulated toolchain: this daemon runs another compiler.
        .env_remove("NXCC_SIM_STATE")
        .env_remove("NXCC_SIM_RECORD")
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .current_dir(wd)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(
        stderr.contains("fake-compiler: error: compilation failed"),
        "{stderr}"
    );
    let found = bundles_in(&wd.join("bundles"));
    assert_eq!(found.len(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("Wrote a reproducer to {}", found[0].display())),
        "{stderr}"
    );
    found[0].clone()
}

fn member_json(bundle: &Path, name: &str) -> Value {
    serde_json::from_slice(&bundle_member(bundle, name)).unwrap()
}

/// `nxcc reproduce BUNDLE ARGS...` from `cwd`, its scratch directory made under `tmp`, the
/// stand-in compiler recording its runs in `record`.
fn reproduce(world: &World, bundle: &Path, args: &[&str], cwd: &Path, record: &Path) -> Output {
    let tmp = world.mkdir("tmp");
    world
        .nxcc()
        .arg("reproduce")
        .arg(bundle)
        .args(args)
        .current_dir(cwd)
        .env("TMPDIR", &tmp)
        .env("FAKE_COMPILER_RECORD", record)
        .output()
        .unwrap()
}

/// The bundle's key holds `toolchain` as its toolchain input, and the daemon `d`'s cache has an
/// entry under it: the bundle is keyed as the daemon's cache keyed the compile.
fn keyed_as_the_daemon(world: &World, bundle: &Path, toolchain: &Value) {
    let key = member_json(bundle, "cache_key.json");
    assert_eq!(key["inputs"]["toolchain"], *toolchain);
    let hex = key["key"].as_str().unwrap();
    let entry = world
        .path()
        .join("d/compile-cache/nxcc-v1")
        .join(&hex[..2])
        .join(hex);
    assert!(
        entry.is_dir(),
        "the daemon's cache has no entry under the bundle's key {hex}"
    );
}

/// `nxcc reproduce BUNDLE --compiler COMPILER` from `cwd`: the same failure recurred (exit 0);
/// what it said.
fn reproduced_with(
    world: &World,
    bundle: &Path,
    compiler: &Path,
    cwd: &Path,
    record: &Path,
) -> String {
    let o = reproduce(
        world,
        bundle,
        &["--compiler", compiler.to_str().unwrap()],
        cwd,
        record,
    );
    let said = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{said}{}", text(&o.stderr));
    assert!(
        said.contains("reproduced: the same failure recurred"),
        "{said}"
    );
    said
}

/// The runs of the stand-in compiler `record` holds.
fn runs(record: &Path) -> usize {
    std::fs::read_to_string(record).map_or(0, |t| t.lines().count())
}

/// The bundle's files unpacked into `dir`.
fn unpack(bundle: &Path, dir: &Path) {
    let f = std::fs::File::open(bundle).unwrap();
    tar::Archive::new(flate2::read::GzDecoder::new(f))
        .unpack(dir)
        .unwrap();
}

/// The `versions.json` of the bundle `parallel-compile --compiler COMPILER --gen-reproducer`
/// writes for a graph `compiler` fails on.
fn local_bundle_versions(world: &World, compiler: &Path) -> Value {
    let local = world.mkdir("local/graphs");
    std::fs::write(local.join("m.pb"), FAILING).unwrap();
    let o = world
        .nxcc()
        .args(["parallel-compile", "graphs", "--compiler"])
        .arg(compiler)
        .args(["--gen-reproducer", "--output-dir", "out", "--"])
        .args(["--framework", "XLA", "--target", "trn2"])
        .current_dir(local.parent().unwrap())
        .output()
        .unwrap();
    let found = bundles_in(&world.path().join("local/out"));
    assert_eq!(found.len(), 1, "{}{}", text(&o.stdout), text(&o.stderr));
    member_json(&found[0], "versions.json")
}

#[test]
fn a_bundle_of_an_external_compiler_daemons_compile_names_that_compiler_and_replays_with_it() {
    let world = World::new();
    let (daemon, fake) = external_daemon(&world);
    let wd = world.mkdir("w");
    let bundle = failing_compile(&world, &daemon, &wd);

    // The bundle names the daemon's compiler as the daemon said: its path, its bytes, its version.
    let versions = member_json(&bundle, "versions.json");
    assert_eq!(versions["engine"], "external", "{versions}");
    assert_eq!(versions["engine_from"], "daemon", "{versions}");
    assert!(versions.get("engine_note").is_none(), "{versions}");
    assert_eq!(versions["compiler"], fake.display().to_string());
    let bytes = std::fs::read(&fake).unwrap();
    let identity = &versions["identity"];
    assert_eq!(identity["kind"], "external");
    assert_eq!(
        identity["compiler"]["blake3"],
        blake3::hash(&bytes).to_hex().to_string()
    );
    assert_eq!(identity["compiler"]["size"], bytes.len());
    let asked = Command::new(&fake).arg("--version").output().unwrap();
    let version = text(&asked.stdout).lines().next().unwrap().to_string();
    assert!(version.starts_with("fake-compiler 2.24"), "{version}");
    assert_eq!(identity["version"], version);
    // ... and keys the compile with it, as the daemon's cache did.
    assert_eq!(versions["toolchain"]["identity"], *identity);
    keyed_as_the_daemon(&world, &bundle, identity);
    let failure = member_json(&bundle, "failure.json");
    assert_eq!(failure["signature"]["job"], "ExternalCompiler", "{failure}");
    assert_eq!(failure["signature"]["status"], "exit status 70");
    // A local compile by the same compiler (`parallel-compile --compiler`) names it alike.
    let local = local_bundle_versions(&world, &fake);
    assert_eq!(local["engine_from"], "local");
    for field in ["engine", "compiler", "identity"] {
        assert_eq!(local[field], versions[field], "{field}");
    }

    // repro.sh runs that compiler on the bundle's model.
    let unpacked = world.mkdir("unpacked");
    unpack(&bundle, &unpacked);
    let script = std::fs::read_to_string(unpacked.join("repro.sh")).unwrap();
    assert!(script.contains(&fake.display().to_string()), "{script}");
    let script_record = world.path().join("script.record");
    let o = Command::new("sh")
        .arg(unpacked.join("repro.sh"))
        .env("FAKE_COMPILER_RECORD", &script_record)
        .env_remove("NEURONX_CC")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(70), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("model/m.pb cannot be compiled"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(runs(&script_record), 1);

    // The model gone, `nxcc reproduce` from another directory replays it with that compiler,
    // once the user names it.
    std::fs::remove_file(wd.join("m.pb")).unwrap();
    let elsewhere = world.mkdir("elsewhere");
    let record = world.path().join("replay.record");
    let said = reproduced_with(&world, &bundle, &fake, &elsewhere, &record);
    assert!(
        said.contains(&format!(
            "with the external compiler {} (the one the bundle names: the same bytes and version)",
            fake.display()
        )),
        "{said}"
    );
    assert!(
        said.contains("the replay:           failed at ExternalCompiler: exit status 70"),
        "{said}"
    );
    assert_eq!(runs(&record), 1, "the replay ran the daemon's compiler");
    assert_eq!(
        std::fs::read_dir(world.path().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn a_bundle_never_runs_the_compiler_it_names_unless_asked_and_says_when_it_is_another() {
    let world = World::new();
    let (daemon, fake) = external_daemon(&world);
    let wd = world.mkdir("w");
    let bundle = failing_compile(&world, &daemon, &wd);
    let original = std::fs::read(&fake).unwrap();
    let record = world.path().join("replay.record");
    // Without --compiler, whatever is at the path it names: refused, naming it and the command
    // that replays with it, and nothing run.
    let refused = || {
        let o = reproduce(&world, &bundle, &[], &wd, &record);
        let stderr = text(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}{stderr}", text(&o.stdout));
        assert!(
            stderr.contains(&format!(
                "it was compiled by the external compiler {} (blake3 {}",
                fake.display(),
                &blake3::hash(&original).to_hex()[..16]
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&format!(
                "a bundle never has nxcc run a program it names: replay it with --compiler {} (or another compiler)",
                fake.display()
            )),
            "{stderr}"
        );
        assert_eq!(runs(&record), 0, "the compiler was run: {stderr}");
    };
    refused();
    // Another build at the same path, or none.
    let mut changed = original.clone();
    changed.extend_from_slice(b"# another build\n");
    std::fs::write(&fake, &changed).unwrap();
    refused();
    // Asked for by name, it is used, and said not to be the bundle's.
    let said = reproduced_with(&world, &bundle, &fake, &wd, &record);
    assert!(
        said.contains(&format!(
            "note: {} is not the compiler the bundle names: its bytes differ (blake3 {}",
            fake.display(),
            &blake3::hash(&original).to_hex()[..16]
        )),
        "{said}"
    );
    assert_eq!(runs(&record), 1);
    std::fs::remove_file(&record).unwrap();
    std::fs::remove_file(&fake).unwrap();
    refused();
}

/// A daemon of an older nxcc on `listener`: `daemon` behind a relay that takes one compile,
/// sends it on, and answers with the daemon's stream without its engine line.
fn older_daemon(daemon: &Daemon, listener: std::os::unix::net::UnixListener) {
    use std::io::Write;
    let (s, _) = listener.accept().unwrap();
    let (_, body) = read_request(&s);
    let (r, events) = daemon.v1(&serde_json::from_slice(&body).unwrap());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(events[0]["event"], "engine", "{events:?}");
    assert_eq!(events[1]["event"], "toolchain", "{events:?}");
    let older: String = events
        .iter()
        .filter(|e| e["event"] != "engine" && e["event"] != "toolchain")
        .map(|e| format!("{e}\n"))
        .collect();
    let answer = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{older}",
        older.len()
    );
    (&s).write_all(answer.as_bytes()).unwrap();
}

#[test]
fn a_daemon_that_does_not_say_its_engine_leaves_a_bundle_that_says_the_engine_is_assumed() {
    let world = World::new();
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(3)).unwrap();
    let daemon = Daemon::start(&world, "d", &["--allow-test-env"], &[]);
    let socket = world.path().join("older.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let out = std::thread::scope(|scope| {
        scope.spawn(|| older_daemon(&daemon, listener));
        world
            .nxcc()
            .args(["compile", "--daemon"])
            .args(sim_argv("m.hlo", "f.neff", &["--gen-reproducer"]))
            .env("NXCC_DAEMON_SOCKET", &socket)
            .env("NXCC_SIM_FAULT", "walrus_driver:exit=3")
            .current_dir(&wd)
            .output()
            .unwrap()
    });
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    let found = bundles_in(&wd);
    assert_eq!(found.len(), 1, "{stderr}");
    let versions = member_json(&found[0], "versions.json");
    assert_eq!(versions["engine"], "pipeline", "{versions}");
    assert_eq!(versions["engine_from"], "assumed", "{versions}");
    let note = versions["engine_note"].as_str().unwrap();
    assert!(
        note.contains("did not say what runs its compiles") && note.contains("assumed"),
        "{note}"
    );
    // ... nor its toolchain: the client's own is assumed (here the one it names).
    assert_eq!(versions["toolchain_from"], "assumed", "{versions}");
    let toolchain_note = versions["toolchain_note"].as_str().unwrap();
    assert!(
        toolchain_note.contains("did not say which toolchain")
            && toolchain_note.contains("the toolchain the client resolves is assumed"),
        "{toolchain_note}"
    );
    assert_eq!(versions["toolchain"]["simulated"], true, "{versions}");
    assert_eq!(versions["toolchain"]["identity"]["kind"], "simulated");
    // The replay runs nxcc's pipeline, as before, and says the engine was assumed.
    std::fs::remove_file(wd.join("m.hlo")).unwrap();
    let o = reproduce(
        &world,
        &found[0],
        &[],
        &world.mkdir("elsewhere"),
        &world.path().join("record"),
    );
    let said = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{said}{}", text(&o.stderr));
    assert!(said.contains(&format!("note: {note}")), "{said}");
    assert!(
        said.contains("the replay:           failed at WalrusDriver: exit status 3"),
        "{said}"
    );
}

#[test]
fn a_bundle_names_the_daemons_own_toolchain_when_the_client_names_none() {
    let world = World::new();
    let tc = sim_toolchain(&world, "tc");
    let daemon = Daemon::start(
        &world,
        "d",
        &["--allow-test-env"],
        &[("NXCC_TOOLCHAIN", tc.to_str().unwrap())],
    );
    let wd = world.mkdir("w");
    std::fs::write(wd.join("m.hlo"), distinct_model(4)).unwrap();
    // The client names no toolchain (its world has no NXCC_TOOLCHAIN).
    let out = world
        .nxcc()
        .args(["compile", "--daemon", "m.hlo", "--target", "trn2"])
        .args(["--output", "f.neff", "--gen-reproducer"])
        .env("NXCC_DAEMON_SOCKET", &daemon.socket)
        .env("NXCC_SIM_FAULT", "walrus_driver:exit=3")
        .current_dir(&wd)
        .output()
        .unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    let found = bundles_in(&wd);
    assert_eq!(found.len(), 1, "{stderr}");
    let bundle = &found[0];

    // The toolchain is the daemon's, as the daemon said: its directory, simulated, its identity.
    let versions = member_json(bundle, "versions.json");
    assert_eq!(versions["engine"], "pipeline", "{versions}");
    assert_eq!(versions["engine_from"], "daemon", "{versions}");
    assert_eq!(versions["toolchain_from"], "daemon", "{versions}");
    assert!(versions.get("toolchain_note").is_none(), "{versions}");
    let toolchain = &versions["toolchain"];
    assert_eq!(toolchain["bin"], tc.join("bin").display().to_string());
    assert_eq!(toolchain["simulated"], true, "{toolchain}");
    assert_eq!(toolchain["request"], "Auto", "what the client asked for");
    let identity = &toolchain["identity"];
    assert_eq!(identity["kind"], "simulated-dir", "{identity}");
    let walrus = std::fs::read(tc.join("bin/walrus_driver")).unwrap();
    assert_eq!(
        identity["tools"]["walrus_driver"]["blake3"],
        blake3::hash(&walrus).to_hex().to_string()
    );
    // ... and the compile is keyed with it, as the daemon's cache keyed it.
    keyed_as_the_daemon(&world, bundle, identity);

    // The model gone, the replay runs the simulated toolchain and the failure recurs.
    std::fs::remove_file(wd.join("m.hlo")).unwrap();
    let o = reproduce(
        &world,
        bundle,
        &[],
        &world.mkdir("elsewhere"),
        &world.path().join("record"),
    );
    let said = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{said}{}", text(&o.stderr));
    assert!(
        said.contains("the replay:           failed at WalrusDriver: exit status 3"),
        "{said}"
    );
}
