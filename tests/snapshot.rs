//! A compile compiles the bytes its key was made of. Another user (uid 65534, for real) who can
//! write the model's directory swaps the model right after the Nth time a reader closed it (N =
//! 1…6; in place, and by a rename), while nxcc compiles it through a cache — from the command
//! line, through the daemon, in `parallel-compile` and in the framework's cache. Whatever that
//! compile gave, the cache never keeps another model's NEFF, nor a failure of other bytes, under
//! the genuine model's key: a later compile of the genuine model through the same cache gets the
//! genuine NEFF, and one of the other model its own; a reproducer bundle holds the bytes that were
//! compiled. The attacker waits for inotify events, never for time; which read it swapped after
//! changes nothing the tests assert.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use common::bundles::member as bundle_member;
use common::swap::{can_play_another_user, Swap, Swapped, Swapper};
use common::{text, Scratch};

const MODELS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/models");
const ATTACKER: u32 = 65534;
const READS: std::ops::RangeInclusive<usize> = 1..=6;

fn need_root() {
    assert!(
        can_play_another_user(),
        "these tests play another user (uid {ATTACKER}) swapping the model: run them as root, as CI does"
    );
}

/// What the attacker swaps the model for: another module (another NEFF), or bytes that are no
/// module (a failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Evil {
    Module,
    Garbage,
}

/// A compile of the model at its path through a cache (and a tag naming its outputs): its NEFF,
/// or its stderr when it failed.
type Compile<'a> = dyn Fn(&Path, &str) -> Result<Vec<u8>, String> + 'a;

/// The scratch made reachable by the attacker, its shared directory (the attacker's) holding
/// the genuine model `m.pb` (the attacker's file), and the bytes of each model.
struct Attack {
    s: Scratch,
    model: PathBuf,
    genuine: Vec<u8>,
    module: Vec<u8>,
}

impl Attack {
    fn new() -> Attack {
        need_root();
        let s = Scratch::new();
        let mode = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(s.path(), 0o755);
        let shared = s.join("shared");
        std::fs::create_dir(&shared).unwrap();
        let model = shared.join("m.pb");
        let genuine = std::fs::read(Path::new(MODELS).join("mlp.hlo_module.pb")).unwrap();
        std::fs::write(&model, &genuine).unwrap();
        for p in [&shared, &model] {
            std::os::unix::fs::chown(p, Some(ATTACKER), Some(ATTACKER)).unwrap();
        }
        let module = std::fs::read(Path::new(MODELS).join("attention.hlo_module.pb")).unwrap();
        for (name, bytes) in [
            ("evil-module.pb", &module[..]),
            ("evil-garbage.pb", b"no module\n"),
        ] {
            std::fs::write(s.join(name), bytes).unwrap();
            mode(&s.join(name), 0o644);
        }
        Attack {
            s,
            model,
            genuine,
            module,
        }
    }

    fn evil(&self, e: Evil) -> PathBuf {
        self.s.join(match e {
            Evil::Module => "evil-module.pb",
            Evil::Garbage => "evil-garbage.pb",
        })
    }

    /// Put `bytes` back at the model's path (the attacker's file stays the attacker's).
    fn put(&self, bytes: &[u8]) {
        std::fs::write(&self.model, bytes).unwrap();
    }

    /// A plain compile of `bytes`, without a cache, to `<dir>/<output>`: what a compile of them
    /// must give.
    fn reference(&self, bytes: &[u8], output: &str, extra: &[&str]) -> Vec<u8> {
        let dir = self
            .s
            .join(&format!("ref-{}", blake3::hash(bytes).to_hex()));
        std::fs::create_dir_all(&dir).unwrap();
        let (m, out) = (dir.join("m.pb"), dir.join(output));
        std::fs::write(&m, bytes).unwrap();
        let (m, out) = (m.display().to_string(), out.display().to_string());
        let mut args = vec!["compile", &m, "--target", "trn2", "--toolchain", "sim"];
        args.extend(extra);
        args.extend(["--output", &out, "--no_cache"]);
        let o = self.s.run(&args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        std::fs::read(&out).unwrap()
    }

    /// No snapshot directory is left where compiles were launched.
    fn no_snapshot_left(&self) {
        let left: Vec<_> = std::fs::read_dir(self.s.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("nxcc-snapshot-")
            })
            .map(|e| e.path())
            .collect();
        assert!(left.is_empty(), "snapshots left behind: {left:?}");
    }

    /// Every attack on `flow`: the model swapped after the Nth read, each way, for each kind of
    /// evil, through a fresh cache each time (`compile(cache, tag)` compiles the model at its
    /// path through `cache`: its NEFF, or its stderr when it failed). Then the genuine model and
    /// the other module, through the same cache, must give their own NEFFs.
    fn run(&self, flow: &str, compile: &Compile) {
        let genuine = self.reference(&self.genuine, "m.neff", &[]);
        let module = self.reference(&self.module, "m.neff", &[]);
        assert_ne!(genuine, module, "two models, two NEFFs");
        let mut swapped = 0;
        for n in READS {
            for how in [Swap::InPlace, Swap::Rename] {
                for evil in [Evil::Module, Evil::Garbage] {
                    let tag = format!("{n}-{how:?}-{evil:?}");
                    let case = format!("{flow}, swapped {how:?} for {evil:?} after read {n}");
                    let cache = self.s.join(&format!("cache-{tag}"));
                    self.put(&self.genuine);
                    let attacker =
                        Swapper::start(&self.model, n, how, &self.evil(evil), ATTACKER, None, None);
                    let attacked = compile(&cache, &format!("{tag}-attacked"));
                    let did = attacker.finish();
                    if let Swapped::After { .. } = did {
                        swapped += 1;
                    }
                    if let Ok(neff) = &attacked {
                        assert!(
                            *neff == genuine || (*neff == module && evil == Evil::Module),
                            "{case} ({did:?}): the compile gave a NEFF of neither model"
                        );
                    }
                    self.put(&self.genuine);
                    let again = compile(&cache, &format!("{tag}-genuine"));
                    assert!(
                        again.as_ref() == Ok(&genuine),
                        "{case} ({did:?}): the genuine model, compiled again through the same cache, did not get its own NEFF: {:?}",
                        again.map(|n| n.len())
                    );
                    if evil == Evil::Module {
                        self.put(&self.module);
                        let other = compile(&cache, &format!("{tag}-other"));
                        assert!(
                            other.as_ref() == Ok(&module),
                            "{case} ({did:?}): the other model through the same cache did not get its own NEFF"
                        );
                    }
                    self.no_snapshot_left();
                }
            }
        }
        assert!(swapped > 0, "{flow}: the attacker never swapped the model");
    }
}

/// `compile FLAGS MODEL` (simulated, trn2) into `out-<tag>/m.neff` (its directory made) through
/// `cache`: the arguments, and the NEFF's path.
fn compile_args(
    a: &Attack,
    model: &str,
    cache: &Path,
    tag: &str,
    flags: &[&str],
) -> (Vec<String>, PathBuf) {
    let out = a.s.join(&format!("out-{tag}/m.neff"));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let mut args = vec!["compile".to_string()];
    args.extend(flags.iter().map(|f| f.to_string()));
    args.extend([model, "--target", "trn2", "--toolchain", "sim", "--output"].map(String::from));
    args.push(out.display().to_string());
    args.extend(["--cache_dir".to_string(), cache.display().to_string()]);
    (args, out)
}

/// A compile's NEFF at `out`, or its stderr.
fn neff_of(o: std::process::Output, out: &Path) -> Result<Vec<u8>, String> {
    match o.status.success() {
        true => std::fs::read(out).map_err(|e| format!("{}: {e}", out.display())),
        false => Err(text(&o.stderr)),
    }
}

#[test]
fn compile_from_the_command_line_compiles_what_it_keyed() {
    let a = Attack::new();
    let model = a.model.display().to_string();
    a.run("compile", &|cache, tag| {
        let (args, out) = compile_args(&a, &model, cache, tag, &[]);
        let o =
            a.s.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        neff_of(o, &out)
    });
}

#[test]
fn parallel_compile_compiles_what_it_keyed() {
    let a = Attack::new();
    let model = a.model.display().to_string();
    a.run("parallel-compile", &|cache, tag| {
        let dir = a.s.join(&format!("out-{tag}"));
        let (d, c) = (dir.display().to_string(), cache.display().to_string());
        let o =
            a.s.parallel_run(&[&model, "--output-dir", &d, "--cache_dir", &c], &[]);
        neff_of(o, &dir.join("m.neff"))
    });
}

/// A daemon of the scratch's own (its socket in the scratch), stopped when dropped.
struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Daemon {
    fn start(s: &Scratch) -> Daemon {
        let dir = s.join("daemon");
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("d.sock");
        let child = s
            .nxcc(&["daemon", "--allow-test-env", "--socket"])
            .arg(&socket)
            .arg("--log-file")
            .arg(dir.join("daemon.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut d = Daemon { child, socket };
        // Its socket accepting is the event waited for.
        while std::os::unix::net::UnixStream::connect(&d.socket).is_err() {
            let exited = d.child.try_wait().unwrap();
            assert!(exited.is_none(), "the daemon exited before listening");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        d
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_daemon_compiles_what_it_keyed() {
    let a = Attack::new();
    let daemon = Daemon::start(&a.s);
    let model = a.model.display().to_string();
    a.run("compile --daemon", &|cache, tag| {
        let (args, out) = compile_args(&a, &model, cache, tag, &["--daemon"]);
        let o =
            a.s.nxcc(&args.iter().map(String::as_str).collect::<Vec<_>>())
                .env("NXCC_DAEMON_SOCKET", &daemon.socket)
                .output()
                .unwrap();
        neff_of(o, &out)
    });
    drop(daemon);
}

/// The framework's cache: the entry's graph swapped by the framework itself (this user), as a
/// framework that rewrites its cache does — under the cache's lock — after the Nth read. The
/// NEFF an entry gets is always the NEFF of the graph it held when the NEFF was written (a graph
/// that changed while it was compiled leaves the entry to do), and the genuine graph compiled
/// later through the same nxcc cache gets its own NEFF.
#[test]
fn the_framework_cache_gets_the_neff_of_the_graph_it_holds() {
    let a = Attack::new();
    let s = &a.s;
    let version = s.join("fw/neuronxcc-2.24.5133.0+nxcc-sim");
    let entry = version.join("MODULE_1+d41d8cd9");
    std::fs::create_dir_all(&entry).unwrap();
    std::fs::write(entry.join("compile_flags.json"), b"[]").unwrap();
    std::fs::write(s.join("fw/lock"), b"").unwrap();
    let graph = entry.join("model.hlo_module.pb");
    let output = "model.MODULE_1+d41d8cd9.neff";
    let genuine = a.reference(&a.genuine, output, &["--framework=XLA"]);
    let module = a.reference(&a.module, output, &["--framework=XLA"]);
    let tmp = s.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let fw = format!("--neuron-cache={}", s.join("fw").display());
    let run = |cache: &Path| {
        let c = cache.display().to_string();
        let o = s
            .parallel_cmd(&[&fw, "--allow-simulated", "--cache_dir", &c], &[])
            .env("TMPDIR", &tmp)
            .output()
            .unwrap();
        assert!(o.status.code().is_some(), "{}", text(&o.stderr));
    };
    let reset = |bytes: &[u8]| {
        for f in ["model.neff", "model.done", "model.log"] {
            let _ = std::fs::remove_file(entry.join(f));
        }
        std::fs::write(&graph, bytes).unwrap();
    };
    let mut swapped_before = 0;
    for n in READS {
        for how in [Swap::InPlace, Swap::Rename] {
            for evil in [Evil::Module, Evil::Garbage] {
                let case = format!("swapped {how:?} for {evil:?} after read {n}");
                let cache = s.join(&format!("nc-cache-{n}-{how:?}-{evil:?}"));
                reset(&a.genuine);
                let lock = s.join("fw/lock");
                let done = entry.join("model.done");
                let framework =
                    Swapper::start(&graph, n, how, &a.evil(evil), 0, Some(&lock), Some(&done));
                run(&cache);
                let did = framework.finish();
                let neff = std::fs::read(entry.join("model.neff")).ok();
                let holds = std::fs::read(&graph).unwrap();
                let failed = entry.join("model.log").exists();
                match did {
                    Swapped::After {
                        done_before: false, ..
                    } => {
                        swapped_before += 1;
                        let own = (holds == a.module).then_some(&module);
                        assert!(
                            neff.is_none() || neff.as_ref() == own,
                            "{case} ({did:?}): the entry got a NEFF that is not its graph's"
                        );
                        assert!(
                            !failed || (holds != a.genuine && holds != a.module),
                            "{case} ({did:?}): a failure written for a graph that compiles"
                        );
                    }
                    _ => assert_eq!(
                        neff.as_ref(),
                        Some(&genuine),
                        "{case} ({did:?}): the genuine graph's entry"
                    ),
                }
                reset(&a.genuine);
                run(&cache);
                assert_eq!(
                    std::fs::read(entry.join("model.neff")).ok().as_ref(),
                    Some(&genuine),
                    "{case} ({did:?}): the genuine graph compiled again through the same nxcc cache"
                );
            }
        }
    }
    assert!(
        swapped_before > 0,
        "the framework never rewrote a graph being compiled"
    );
}

/// A reproducer bundle holds the bytes that were compiled: the model, bytes that are no module
/// (the compile fails), is swapped for the genuine model after the Nth read. A compile that
/// failed leaves a bundle whose model is what failed (the bytes that are no module, or what an
/// in-place rewrite had written when the model was read) — never the genuine model the path
/// holds by then, which compiles; one that read the genuine model succeeds with its NEFF.
#[test]
fn a_reproducer_holds_the_bytes_that_were_compiled() {
    let a = Attack::new();
    let garbage = std::fs::read(a.evil(Evil::Garbage)).unwrap();
    let genuine = a.reference(&a.genuine, "m.neff", &[]);
    let good = a.s.join("good.pb");
    std::fs::write(&good, &a.genuine).unwrap();
    std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o644)).unwrap();
    let model = a.model.display().to_string();
    let mut failed = 0;
    for n in READS {
        for how in [Swap::InPlace, Swap::Rename] {
            let case = format!("swapped {how:?} for the genuine model after read {n}");
            let tag = format!("{n}-{how:?}");
            let (out, bundles) = (
                a.s.join(&format!("out-{tag}/m.neff")),
                a.s.join(&format!("r-{tag}")),
            );
            std::fs::create_dir_all(out.parent().unwrap()).unwrap();
            a.put(&garbage);
            std::fs::create_dir(&bundles).unwrap();
            let attacker = Swapper::start(&a.model, n, how, &good, ATTACKER, None, None);
            let o = a.s.run(&[
                "compile",
                &model,
                "--target",
                "trn2",
                "--toolchain",
                "sim",
                "--no_cache",
                "--output",
                &out.display().to_string(),
                "--gen-reproducer",
                "--reproducer-dir",
                &bundles.display().to_string(),
            ]);
            let did = attacker.finish();
            let written: Vec<PathBuf> = std::fs::read_dir(&bundles)
                .map(|d| d.flatten().map(|e| e.path()).collect())
                .unwrap_or_default();
            if o.status.success() {
                let neff = std::fs::read(&out).unwrap();
                assert!(neff == genuine, "{case} ({did:?}): not the genuine NEFF");
                assert!(written.is_empty(), "{case} ({did:?}): {written:?}");
                continue;
            }
            failed += 1;
            assert_eq!(written.len(), 1, "{case} ({did:?}): {}", text(&o.stderr));
            let held = bundle_member(&written[0], "model/m.pb").expect("the bundle's model");
            assert!(
                held != a.genuine,
                "{case} ({did:?}): the bundle holds the genuine model, not what failed"
            );
            if how == Swap::Rename {
                assert!(
                    held == garbage,
                    "{case} ({did:?}): the bundle's model is not what failed"
                );
            }
            a.no_snapshot_left();
        }
    }
    assert!(failed > 0, "no compile read the bytes that fail");
}
