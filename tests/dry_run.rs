//! `--dry-run` builds the plan and stops: exit 0, no directory created, no file written, no
//! process (or thread) spawned — checked for real: the binary runs under a seccomp filter that
//! kills it on any clone/fork/vfork, in a directory (and HOME/TMPDIR/cache dirs) that must stay
//! unchanged.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Kill the process (SIGSYS) on clone, clone3, fork or vfork. Installed after fork, before exec,
/// so exec of the binary itself is allowed.
fn forbid_process_creation(cmd: &mut Command) {
    // SAFETY: the hook runs in the forked child before exec: it builds the filter (its own
    // memory, alive across both prctl calls, which read it through valid pointers) and installs
    // it. It allocates: this test's process forks while no other thread holds the allocator.
    unsafe {
        cmd.pre_exec(|| {
            const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
            const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
            const BPF_LD_W_ABS: u16 = 0x20;
            const BPF_JEQ_K: u16 = 0x15;
            const BPF_RET_K: u16 = 0x06;
            #[cfg(target_arch = "x86_64")]
            const AUDIT_ARCH: u32 = 0xc000_003e;
            #[cfg(target_arch = "aarch64")]
            const AUDIT_ARCH: u32 = 0xc000_00b7;
            let stmt = |code: u16, k: u32| libc::sock_filter {
                code,
                jt: 0,
                jf: 0,
                k,
            };
            let jeq = |k: u32, jt: u8, jf: u8| libc::sock_filter {
                code: BPF_JEQ_K,
                jt,
                jf,
                k,
            };
            #[allow(unused_mut)]
            let mut syscalls: Vec<u32> = vec![libc::SYS_clone as u32, libc::SYS_clone3 as u32];
            #[cfg(target_arch = "x86_64")]
            syscalls.extend([libc::SYS_fork as u32, libc::SYS_vfork as u32]);
            let mut prog = vec![
                stmt(BPF_LD_W_ABS, 4),
                jeq(AUDIT_ARCH, 1, 0),
                stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
                stmt(BPF_LD_W_ABS, 0),
            ];
            let n = syscalls.len();
            for (i, nr) in syscalls.iter().enumerate() {
                // Jump to the kill instruction (after the remaining checks and the allow).
                prog.push(jeq(*nr, (n - i) as u8, 0));
            }
            prog.push(stmt(BPF_RET_K, SECCOMP_RET_ALLOW));
            prog.push(stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS));
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_mut_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &fprog as *const _ as libc::c_ulong,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    for e in walk(dir) {
        v.push(e.strip_prefix(dir).unwrap().display().to_string());
    }
    v.sort();
    v
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            out.push(p.clone());
            if p.is_dir() {
                out.extend(walk(&p));
            }
        }
    }
    out
}

fn dry_run(extra: &[&str], forbid: bool) -> (std::process::Output, Vec<String>, Vec<String>) {
    let root = tempfile::tempdir().unwrap();
    let launch = root.path().join("launch");
    let home = root.path().join("home");
    std::fs::create_dir_all(&launch).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(launch.join("m.pb"), b"\x0a\x01m").unwrap();
    let before = listing(root.path());
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nxcc"));
    cmd.arg("compile")
        .arg("m.pb")
        .args(extra)
        .current_dir(&launch);
    cmd.env("HOME", &home)
        .env("TMPDIR", &home)
        .env("XDG_CACHE_HOME", home.join("cache"))
        .env("XDG_RUNTIME_DIR", &home);
    cmd.env_remove("NXCC_TOOLCHAIN");
    if forbid {
        forbid_process_creation(&mut cmd);
    }
    let out = cmd.output().unwrap();
    let after = listing(root.path());
    (out, before, after)
}

#[test]
fn the_filter_really_kills_a_process_that_spawns() {
    // The check must be able to fail: a real compile spawns tools (and `sh` forks at once).
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg("/bin/true; echo after");
    forbid_process_creation(&mut cmd);
    let out = cmd.output().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGSYS), "{out:?}");
}

#[test]
fn dry_run_text_spawns_nothing_and_writes_nothing() {
    for extra in [
        &["--target", "trn2", "--dry-run"][..],
        &["--target", "trn1", "--dry-run=json"],
        &["--target", "trn1", "--dry-run", "json"],
        &[
            "--target",
            "trn1",
            "--toolchain",
            "sim",
            "--dry-run=json",
            "--keep-work-dir",
            "--timings",
            "--trace",
            "t.json",
        ],
        &[
            "--target",
            "trn1",
            "--temp-dir",
            "work",
            "--logfile",
            "logs/l.txt",
            "--dry-run",
        ],
        &[
            "--target",
            "trn1",
            "--pipeline",
            "compile",
            "SaveTemps",
            "--submit-metrics",
            "--dry-run",
        ],
    ] {
        let (out, before, after) = dry_run(extra, true);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            before, after,
            "{extra:?}: the dry run changed the file system"
        );
        assert!(!out.stdout.is_empty());
    }
}

#[test]
fn dry_run_json_is_one_object_with_the_plan() {
    let (out, _, _) = dry_run(&["--target", "trn2", "--dry-run=json"], true);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["nxcc_plan_version"], 1);
    assert_eq!(
        j["pipeline"],
        serde_json::json!([
            "HLOToTensorizer",
            "XLAInferGoldens",
            "Frontend",
            "StaticIOTranspose",
            "WalrusDriver",
            "Kelper"
        ])
    );
    assert_eq!(j["logical_nc_config"], 2);
    assert_eq!(j["optlevel"], "2");
    assert_eq!(j["target"], "trn2");
    assert_eq!(j["layer_unroll_factor"], 1);
    assert_eq!(
        j["dge_on_levels"],
        serde_json::json!(["io", "scalar_dynamic_offset"])
    );
    assert!(j["output"].as_str().unwrap().ends_with("/launch/file.neff"));
    // Every dest of the flag table is in args.
    let args = j["args"].as_object().unwrap();
    for dest in nxcc::cli::flags::dests() {
        assert!(args.contains_key(dest), "args lacks {dest}");
    }
    let jobs = j["jobs"].as_array().unwrap();
    assert_eq!(jobs[0]["name"], "HLOToTensorizer");
    assert_eq!(jobs[0]["runs_as"], "subprocess");
    assert_eq!(jobs[0]["tool"], "hlo2penguin");
    assert_eq!(jobs[0]["tool_path"], serde_json::Value::Null);
    assert_eq!(jobs[0]["writes"], serde_json::json!(["penguin.py"]));
    assert_eq!(jobs[2]["argv"], serde_json::Value::Null);
    assert_eq!(jobs[4]["cwd"], "sg00");
    let sources: Vec<&str> = j["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["source"].as_str().unwrap())
        .collect();
    assert!(sources.contains(&"SEED") && sources.contains(&"RECON") && sources.contains(&"WIKI"));
    // Missing tools are warnings in a dry run.
    assert!(j["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("hlo2penguin not found")));
}

#[test]
fn dry_run_fails_like_a_compile() {
    let (out, before, after) = dry_run(&["--target", "trn1", "--lnc", "2", "--dry-run"], true);
    assert_eq!(out.status.code(), Some(70));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[NCC_EARG001]"));
    assert_eq!(before, after);
    let (out, _, _) = dry_run(&["--dry-run"], true);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn dry_run_model_stays_positional() {
    // `--dry-run` takes only text/json as a following value: the model after it stays the model.
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("m.pb"), b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "--target", "trn1", "--dry-run", "m.pb"])
        .current_dir(root.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_dry_run_says_how_each_job_really_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
        d.join("m.pb"),
    )
    .unwrap();
    // A real (not simulated) toolchain: tools that exist, no simulation marker.
    let tc = d.join("tc");
    std::fs::create_dir(&tc).unwrap();
    for t in ["hlo2penguin", "xla_infergoldens", "walrus_driver"] {
        std::fs::write(tc.join(t), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            tc.join(t),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }
    let dry = |args: &[&str], format: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
            .args(["compile", "m.pb", "--target", "trn1", "--output", "o.neff"])
            .args(args)
            .arg(format!("--dry-run={format}"))
            .current_dir(d)
            .env("XDG_CACHE_HOME", d.join(".cache"))
            .env_remove("NXCC_TOOLCHAIN")
            .env_remove("NXCC_SIM_SUBGRAPHS")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let job = |j: &serde_json::Value, name: &str| {
        j["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name)
            .unwrap()
            .clone()
    };
    let tc_arg = tc.to_str().unwrap();

    // The Frontend of a real toolchain is a subprocess of the installed driver, and the subgraph
    // count is the Frontend's to decide.
    let j: serde_json::Value =
        serde_json::from_str(&dry(&["--toolchain", tc_arg], "json")).unwrap();
    assert_eq!(job(&j, "Frontend")["runs_as"], "subprocess");
    assert!(job(&j, "Frontend")["note"]
        .as_str()
        .unwrap()
        .contains("installed neuronxcc package"));
    assert_eq!(j["subgraphs_known"], false);
    let text = dry(&["--toolchain", tc_arg], "text");
    assert!(
        text.contains("(predicted: the Frontend decides when it runs)"),
        "{text}"
    );
    assert!(text.contains("per subgraph: one call for each sgNN directory the Frontend writes"));

    // The simulated toolchain: an in-process Frontend, a known subgraph count.
    let j: serde_json::Value = serde_json::from_str(&dry(&["--toolchain", "sim"], "json")).unwrap();
    assert_eq!(job(&j, "Frontend")["runs_as"], "in-process");
    assert_eq!(j["subgraphs_known"], true);
    assert!(!dry(&["--toolchain", "sim"], "text").contains("per subgraph:"));

    // The fork-walrus backend is a call inside the worker, in the launch directory.
    let fork = ["--toolchain", "sim", "--enable-internal-fork-walrus"];
    let j: serde_json::Value = serde_json::from_str(&dry(&fork, "json")).unwrap();
    let walrus = job(&j, "WalrusDriver");
    assert_eq!(walrus["runs_as"], "in-process");
    assert_eq!(walrus["argv"][1], "<work dir>/sg00/bir.json");
    let text = dry(&fork, "text");
    assert!(
        text.contains("WalrusDriver  [in-process, walrus_driver]"),
        "{text}"
    );
    assert!(
        text.contains("cwd     <launch dir> (inside the worker)"),
        "{text}"
    );
}

#[test]
fn an_unreadable_model_is_said_to_be_unreadable_not_a_proto() {
    use std::os::unix::fs::PermissionsExt;
    // Run as another user (nobody), for whom the model cannot be read (root reads any file).
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Writable by that user: where the NEFF would go (a dry run checks it as the compile does).
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo");
    std::fs::copy(&model, d.join("m.hlo")).unwrap();
    std::fs::set_permissions(d.join("m.hlo"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "m.hlo", "--target", "trn1", "--dry-run"])
        .current_dir(d)
        .uid(65534)
        .gid(65534)
        .env("XDG_CACHE_HOME", d.join(".cache"))
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .expect("running nxcc as uid 65534 (this test needs root)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!(
            "model      {} (cannot be read)\n",
            d.join("m.hlo").display()
        )),
        "{text}"
    );
    assert!(!text.contains("(HLO proto)"), "{text}");
    assert!(text.contains("cannot read: Permission denied"), "{text}");
    // Readable, it is what its bytes say.
    std::fs::set_permissions(d.join("m.hlo"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "m.hlo", "--target", "trn1", "--dry-run"])
        .current_dir(d)
        .uid(65534)
        .gid(65534)
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("(HLO text)\n"));
}

#[test]
fn one_job_is_one_job() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.pb"), b"model").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args([
            "compile",
            "m.pb",
            "--target",
            "trn2",
            "--pipeline",
            "HLOToTensorizer",
            "--dry-run",
        ])
        .current_dir(dir.path())
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("\npipeline (1 job): HLOToTensorizer\n"),
        "{text}"
    );
}

/// `nxcc compile mlp.pb --target trn2 --toolchain sim EXTRA` in `launch`, with a home of its own
/// under `root`; `forbid`: under the filter that kills a process that spawns.
fn compile_in(root: &Path, extra: &[&str], forbid: bool) -> std::process::Output {
    let launch = root.join("launch");
    let home = root.join("home");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nxcc"));
    cmd.args([
        "compile",
        "mlp.pb",
        "--target",
        "trn2",
        "--toolchain",
        "sim",
    ])
    .args(extra)
    .current_dir(&launch)
    .env("HOME", &home)
    .env("TMPDIR", &home)
    .env("XDG_CACHE_HOME", home.join("cache"))
    .env("XDG_RUNTIME_DIR", &home)
    .env_remove("NXCC_TOOLCHAIN")
    .env_remove("NXCC_SIM_FAULT");
    if forbid {
        forbid_process_creation(&mut cmd);
    }
    cmd.output().unwrap()
}

#[test]
fn the_dry_run_refuses_what_the_compile_refuses_before_running_in_the_same_words() {
    let root = tempfile::tempdir().unwrap();
    let launch = root.path().join("launch");
    std::fs::create_dir_all(launch.join("out.neff")).unwrap();
    std::fs::create_dir_all(root.path().join("home")).unwrap();
    std::fs::write(launch.join("a-file"), b"x").unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
        launch.join("mlp.pb"),
    )
    .unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--output", "out.neff"], "[NCC_EDRV111]"),
        (&["--output", "a-file/m.neff"], "a-file is not a directory"),
        (&["--cache_dir", "ftp://cache.example/c"], "[NCC_EDRV110]"),
        (
            &["--remote", "grpc://h:1", "--remote-cache", "grpc://h:2"],
            "exclude each other",
        ),
    ];
    for (extra, says) in cases {
        let compiled = compile_in(root.path(), extra, false);
        let c_err = String::from_utf8_lossy(&compiled.stderr).into_owned();
        assert_eq!(compiled.status.code(), Some(70), "{extra:?}: {c_err}");
        assert!(c_err.contains(says), "{extra:?}: {c_err}");
        let before = listing(root.path());
        for form in ["--dry-run", "--dry-run=json"] {
            let dry = compile_in(root.path(), &[extra, &[form][..]].concat(), true);
            assert_eq!(
                dry.status.code(),
                compiled.status.code(),
                "{extra:?} {form}"
            );
            assert_eq!(
                String::from_utf8_lossy(&dry.stderr),
                c_err,
                "{extra:?} {form}: the same message"
            );
            assert!(dry.stdout.is_empty(), "{extra:?} {form}: no plan");
        }
        assert_eq!(
            before,
            listing(root.path()),
            "{extra:?}: the dry run wrote nothing"
        );
    }
    // Where the output can be written, the dry run passes.
    let ok = compile_in(root.path(), &["--output", "fine.neff", "--dry-run"], true);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
