//! The command line through the real binary: help surfaces, version, the `neuronx-cc` name, usage
//! error format and exit statuses.

use std::process::{Command, Output};

fn nxcc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(args)
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_surfaces_show_the_right_options() {
    let public = nxcc(&["compile", "--help"]);
    assert_eq!(public.status.code(), Some(0));
    let public = text(&public.stdout);
    assert!(public.starts_with("usage: nxcc compile "), "{public}");
    assert!(public.contains("--target {inf1,inf2,trn1,trn1n,trn2,trn2n,trn3,sunda}"));
    assert!(public.contains("--enable-dge, --disable-dge"));
    assert!(public.contains("-h, --help"));
    // Hidden, experimental and internal options are not on the public surface.
    assert!(!public.contains("--meta-module"));
    assert!(!public.contains("--enable-experimental-spmd"));
    assert!(!public.contains("--enable-internal-neff-wrapper"));

    let hidden = text(&nxcc(&["compile", "--help-hidden"]).stdout);
    assert!(hidden.contains("--meta-module"));
    assert!(hidden.contains("--enable-experimental-spmd"));
    assert!(hidden.contains("--target"));
    assert!(!hidden.contains("--enable-internal-neff-wrapper"));

    let list = nxcc(&["compile", "--help-hidden-list"]);
    assert_eq!(list.status.code(), Some(0));
    let list = text(&list.stdout);
    assert!(
        list.lines()
            .any(|l| l == "--enable-internal-neff-wrapper (default: False)"),
        "{list}"
    );
    assert!(list.lines().any(|l| l == "--model-type (default: generic)"));
    assert!(list.lines().any(|l| l == "--no-internal-hlo-remat"));
    assert!(!list.contains("--target"));

    let top = nxcc(&["--help"]);
    assert_eq!(top.status.code(), Some(0));
    let top = text(&top.stdout);
    let compile = top.find("compile").unwrap();
    assert!(top.find("list-operators").unwrap() > compile);
    assert!(top.find("neff-info").unwrap() > top.find("list-operators").unwrap());
    // Every action of `nxcc cache` is named, `clean` too.
    let words: Vec<&str> = top.split_whitespace().collect();
    assert!(
        words.join(" ").contains(
            "the compile cache (stats, verify, gc, clear; clean for the framework's cache)"
        ),
        "{top}"
    );
}

#[test]
fn version_names_both_versions_and_the_toolchain() {
    for flag in ["--version", "-V"] {
        let out = nxcc(&[flag]);
        assert_eq!(out.status.code(), Some(0));
        let t = text(&out.stdout);
        // `nxcc 0.1.0`, and the commit when built in a checkout (tests/console.rs).
        assert_eq!(
            t.lines().next(),
            Some(nxcc::driver::version_line("nxcc", nxcc::driver::commit()).as_str()),
            "{t}"
        );
        assert!(t.starts_with(&format!("nxcc {}", env!("CARGO_PKG_VERSION"))));
        assert!(t.contains("neuronx-cc 2.24.5133.0"), "{t}");
        assert!(t.contains("toolchain:"), "{t}");
    }
}

#[test]
fn answers_to_the_name_neuronx_cc() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("neuronx-cc");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_nxcc"), &link).unwrap();
    let out = Command::new(&link)
        .args(["compile", "--target", "trn1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.starts_with("usage: neuronx-cc compile "), "{err}");
    assert!(
        err.trim_end().ends_with(
            "neuronx-cc compile: error: the following arguments are required: <model_file>"
        ),
        "{err}"
    );
    let version = text(
        &Command::new(&link)
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    );
    assert_eq!(
        version.lines().next(),
        Some(nxcc::driver::version_line("neuronx-cc", nxcc::driver::commit()).as_str()),
        "{version}"
    );
    assert!(version.starts_with(&format!("neuronx-cc (nxcc) {}", env!("CARGO_PKG_VERSION"))));
}

#[test]
fn the_usage_line_lists_every_subcommand_the_originals_first() {
    let out = nxcc(&["--verbose", "info"]);
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "{compile,list-operators,neff-info,hlo-info,parallel-compile,reproduce,cache,daemon,toolchain,shim,worker,completions,man}"
        ),
        "{err}"
    );
}

#[test]
fn a_missing_neff_is_named_once() {
    let out = nxcc(&["neff-info", "nope.neff"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "nxcc neff-info: error: nope.neff: No such file or directory (os error 2)\n"
    );
}

#[test]
fn usage_errors_exit_2_in_argparse_form() {
    let out = nxcc(&["compile", "m.pb", "--target", "trn1", "--auto-cast", "fp8"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.starts_with("usage: nxcc compile"));
    assert!(err.trim_end().ends_with("nxcc compile: error: argument --auto-cast: invalid choice: 'fp8' (choose from 'none', 'matmult', 'all')"));
    assert!(out.stdout.is_empty());

    // Driver options without a subcommand: argparse's error.
    let out = nxcc(&["--verbose", "info"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("nxcc: error: the following arguments are required: subcommand")
    );

    let out = nxcc(&["compile", "m.pb", "--target", "trn1", "--foo", "--bar"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with(
        "[ERROR] [NCC_EARG002] Illegal argument(s) - the following argument(s) are unrecognized: --foo, --bar. - Check that only recognized arguments are used: usage: nxcc compile"
    ));
}

/// `nxcc` alone prints the help, as `nxcc --help` does — on stdout, exit 0, as `cargo` alone
/// does — under either name.
#[test]
fn nxcc_alone_prints_the_help() {
    let alone = nxcc(&[]);
    assert_eq!(alone.status.code(), Some(0), "{}", text(&alone.stderr));
    assert!(alone.stderr.is_empty(), "{}", text(&alone.stderr));
    let help = nxcc(&["--help"]);
    assert_eq!(text(&alone.stdout), text(&help.stdout));
    assert!(text(&alone.stdout).starts_with("usage: nxcc "));
}

/// A mistyped subcommand or option of `compile` is refused in the original's words, exactly,
/// followed by a line of its own saying what was probably meant; a word near nothing gets no
/// such line. nxcc's own subcommands give clap's tip.
#[test]
fn a_mistyped_name_gets_a_did_you_mean_line_after_the_originals_message() {
    let lines = |o: &Output| -> Vec<String> { text(&o.stderr).lines().map(String::from).collect() };
    // A word near no subcommand: argparse's message alone, last.
    let out = nxcc(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let far = lines(&out);
    let refusal = far.last().unwrap().clone();
    assert!(
        refusal.starts_with("nxcc: error: argument subcommand: invalid choice: 'frobnicate' (choose from 'compile', 'list-operators', "),
        "{far:?}"
    );
    // A near one: the same message, exactly, then the suggestion.
    for (word, meant) in [
        ("compil", "compile"),
        ("hlo-inf", "hlo-info"),
        ("deamon", "daemon"),
    ] {
        let out = nxcc(&[word, "x"]);
        assert_eq!(out.status.code(), Some(2));
        let l = lines(&out);
        assert_eq!(l.len(), far.len() + 1, "{l:?}");
        assert_eq!(l[..l.len() - 2], far[..far.len() - 1], "the usage");
        assert_eq!(
            l[l.len() - 2],
            refusal.replace("'frobnicate'", &format!("'{word}'"))
        );
        assert_eq!(l[l.len() - 1], format!("{word}: did you mean `{meant}`?"));
    }

    let out = nxcc(&[
        "compile",
        "m.pb",
        "--traget",
        "trn2",
        "--optlvel=2",
        "--frobnicate",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let l = lines(&out);
    assert_eq!(l.len(), 3, "{l:?}");
    assert!(l[0].starts_with(
        "[ERROR] [NCC_EARG002] Illegal argument(s) - the following argument(s) are unrecognized: --traget, trn2, --optlvel=2, --frobnicate. - Check that only recognized arguments are used: usage: nxcc compile"
    ), "{l:?}");
    assert_eq!(l[1], "--traget: did you mean `--target`?");
    assert_eq!(l[2], "--optlvel=2: did you mean `--optlevel=2`?");
    // Given before the subcommand, as clients write the original's options.
    let out = nxcc(&["--traget=trn2", "compile", "m.pb"]);
    assert_eq!(
        lines(&out).last().map(String::as_str),
        Some("--traget=trn2: did you mean `--target=trn2`?")
    );

    for (args, tip) in [
        (
            &["cache", "confg"][..],
            "tip: a similar subcommand exists: 'config'",
        ),
        (
            &["cache", "stats", "--jsn"][..],
            "tip: a similar argument exists: '--json'",
        ),
        (
            &["daemon", "stauts"][..],
            "tip: a similar subcommand exists: 'status'",
        ),
    ] {
        let out = nxcc(args);
        assert_eq!(out.status.code(), Some(2));
        assert!(
            text(&out.stderr).contains(tip),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn list_operators_points_at_the_real_compiler() {
    let out = nxcc(&["list-operators"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("the list comes from the real compiler"));
}

#[test]
fn non_utf8_arguments_are_a_usage_error() {
    use std::os::unix::ffi::OsStrExt;
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .arg("compile")
        .arg(std::ffi::OsStr::from_bytes(b"m\xff.pb"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("is not valid UTF-8"));
}

#[test]
fn neuron_cc_flags_is_not_read_by_the_driver() {
    // Frameworks prepend NEURON_CC_FLAGS to argv themselves; the driver ignores the variable.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("m.pb"), b"x").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(["compile", "m.pb", "--target", "trn1", "--dry-run=json"])
        .current_dir(dir.path())
        .env("NEURON_CC_FLAGS", "--target trn2 --lnc 2 --bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["target"], "trn1");
    assert_eq!(j["logical_nc_config"], 1);
}

#[test]
fn durations_out_of_range_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.pb");
    std::fs::write(&model, b"model").unwrap();
    let model = model.to_str().unwrap();
    for bad in ["1e20", "nan", "inf", "-1", "0", "0.5", "10000001", "soon"] {
        let out = nxcc(&[
            "compile",
            model,
            "--target",
            "trn1",
            "--job-timeout",
            bad,
            "--dry-run",
        ]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "nxcc compile: error: argument --job-timeout: invalid seconds value: '{bad}' (a number of seconds from 1 to 10000000)"
            )),
            "{bad}: {err}"
        );
        assert!(!err.contains("panicked"), "{bad}: {err}");
    }
    for good in ["1", "2.5", "10000000"] {
        let out = nxcc(&[
            "compile",
            model,
            "--target",
            "trn1",
            "--job-timeout",
            good,
            "--dry-run",
        ]);
        assert_eq!(out.status.code(), Some(0), "{good}: {}", text(&out.stderr));
    }
}

/// Every `--opt[=` an nxcc help surface shows: nxcc's own optional-value options.
fn gnu_optionals(help: &str) -> Vec<String> {
    let mut found: Vec<String> = help
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter_map(|w| w.trim_start_matches('[').split_once("[="))
        .map(|(opt, _)| opt.to_string())
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn nxcc_s_own_optional_values_show_gnu_notation_in_their_help() {
    // Every nxcc-own `nargs='?'` option of the flag table, and of every subcommand, says in its
    // help that the value is attached with `=`; argparse's `[VALUE]` is left to the original's.
    let own: Vec<&str> = nxcc::cli::flags::FLAGS
        .iter()
        .filter(|f| {
            f.is_nxcc_own() && matches!(f.action, nxcc::cli::flags::Action::StoreOptional { .. })
        })
        .map(|f| f.spelling)
        .collect();
    assert_eq!(own, ["--dry-run", "--gen-reproducer", "--timings"]);
    let compile = text(&nxcc(&["compile", "--help-hidden"]).stdout);
    assert_eq!(
        gnu_optionals(&compile),
        ["--dry-run", "--gen-reproducer", "--timings"]
    );
    assert!(
        compile.contains("[--gen-reproducer[={error,always}]]"),
        "{compile}"
    );
    assert!(compile.contains("[--dry-run[={text,json}]]"), "{compile}");
    assert!(compile.contains("[--timings[=FILE]]"), "{compile}");
    assert!(compile.contains("\n  --timings[=FILE]  "), "{compile}");
    assert!(!compile.contains("--timings [") && !compile.contains("--dry-run ["));
    let mut subcommand_optionals = Vec::new();
    for sub in [
        "neff-info",
        "hlo-info",
        "parallel-compile",
        "reproduce",
        "cache",
        "daemon",
        "toolchain",
        "shim",
        "worker",
    ] {
        let help = text(&nxcc(&[sub, "--help"]).stdout);
        assert!(
            help.contains(&format!("\nUsage: nxcc {sub}")),
            "{sub}: {help}"
        );
        // argparse's notation for an optional value (`--x [X]`) appears nowhere in nxcc's own.
        assert!(
            !help
                .split_whitespace()
                .collect::<Vec<_>>()
                .windows(2)
                .any(|w| {
                    w[0].trim_start_matches('[').starts_with("--")
                        && w[1].starts_with('[')
                        && w[1].ends_with(']')
                        && !w[1].contains("...")
                        && w[1][1..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_uppercase() || c == '{')
                }),
            "{sub}: {help}"
        );
        subcommand_optionals.extend(
            gnu_optionals(&help)
                .into_iter()
                .map(|o| format!("{sub} {o}")),
        );
    }
    assert_eq!(subcommand_optionals, ["parallel-compile --neuron-cache"]);
    assert!(text(&nxcc(&["parallel-compile", "--help"]).stdout).contains("--neuron-cache[=<DIR>]"));
}

#[test]
fn a_value_of_nxcc_s_own_optional_written_after_a_space_is_pointed_to_its_equals_form() {
    // A value written after a space is pointed to its `=` form, for each of them.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("m.hlo"),
        b"HloModule m\nENTRY e { ROOT p = f32[4] parameter(0) }\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_nxcc"))
            .args(args)
            .current_dir(dir.path())
            .env_remove("NXCC_TOOLCHAIN")
            .output()
            .unwrap()
    };
    let out = run(&[
        "compile",
        "m.hlo",
        "--target",
        "trn2",
        "--dry-run",
        "--timings",
        "t1.html",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("the following argument(s) are unrecognized: t1.html."),
        "{err}"
    );
    assert!(
        err.ends_with("\nt1.html: did you mean `--timings=t1.html`? (--timings takes its value only after `=`)\n"),
        "{err}"
    );
    // The word taken as a second model file: the original's error, then the same hint.
    let out = run(&[
        "compile",
        "--timings",
        "t1.html",
        "m.hlo",
        "--target",
        "trn2",
        "--dry-run",
    ]);
    assert_eq!(out.status.code(), Some(70));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("[ERROR] [NCC_DRV017] XLA flow only takes 1 model file"),
        "{err}"
    );
    assert!(err.ends_with("t1.html: did you mean `--timings=t1.html`? (--timings takes its value only after `=`)\n"), "{err}");
    let out = run(&["compile", "m.hlo", "--target", "trn2", "--dry-run", "xml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).ends_with(
            "\nxml: not a value of --dry-run, which takes only text or json (`--dry-run=json`)\n"
        ),
        "{}",
        text(&out.stderr)
    );
    let out = run(&[
        "parallel-compile",
        "--neuron-cache",
        "cachedir",
        "m.hlo",
        "--",
        "--target",
        "trn2",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("\ncachedir: did you mean `--neuron-cache=cachedir`? (--neuron-cache takes its value only after `=`)\n"),
        "{}",
        text(&out.stderr)
    );
    // The forms that work are unchanged: `=VALUE`, a bare option, `--dry-run json`.
    let out = run(&[
        "compile",
        "m.hlo",
        "--target",
        "trn2",
        "--dry-run",
        "json",
        "--timings=t1.html",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["args"]["timings"], "t1.html");
}

#[test]
fn the_originals_optional_values_keep_argparses_rule() {
    // An option of the original with `nargs='?'` takes the next word as its value, as argparse
    // does, whatever it looks like; no hint is given.
    let argv: Vec<String> = [
        "compile",
        "m.pb",
        "--target",
        "trn1",
        "--internal-compiler-debug-mode",
        "t1.html",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let nxcc::cli::Command::Compile(c) = nxcc::cli::parse("nxcc", &argv).unwrap() else {
        panic!("not a compile")
    };
    assert_eq!(
        c.inputs.internal_compiler_debug_mode.as_deref(),
        Some("t1.html")
    );
    assert_eq!(c.model_files, ["m.pb"]);
    assert!(c.hints.is_empty());
}

#[test]
fn a_plain_timings_says_on_the_console_where_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo");
    std::fs::copy(model, dir.path().join("mlp.hlo")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args([
            "compile",
            "mlp.hlo",
            "--target",
            "trn2",
            "--toolchain",
            "sim",
            "--output",
            "m.neff",
            "--timings",
        ])
        .current_dir(dir.path())
        .env("XDG_CACHE_HOME", dir.path().join("cache"))
        .env_remove("NXCC_TOOLCHAIN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let timeline = dir.path().join("nxcc-timings.html");
    assert!(timeline.is_file());
    let console = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        console.contains(&format!("Wrote the timings to {}\n", timeline.display())),
        "{console}"
    );
}

#[test]
fn a_malformed_remote_address_is_a_usage_error_that_says_the_form() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/mlp.hlo_module.pb"),
        dir.path().join("m.pb"),
    )
    .unwrap();
    let cases = [
        ("--remote", "http://127.0.0.1:1", "grpc://127.0.0.1:1"),
        (
            "--remote",
            "127.0.0.1:50051",
            "no scheme; grpc://127.0.0.1:50051",
        ),
        (
            "--remote-cache",
            "grpcs://cache.example",
            "a host and a port",
        ),
    ];
    for (flag, value, hint) in cases {
        for extra in [&[][..], &["--dry-run"][..]] {
            let o = Command::new(env!("CARGO_BIN_EXE_nxcc"))
                .args(["compile", "m.pb", "--target", "trn2", "--toolchain", "sim"])
                .args([flag, value])
                .args(extra)
                .current_dir(dir.path())
                .env("XDG_CACHE_HOME", dir.path().join("xdg"))
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{flag} {value} {extra:?}: {err}");
            assert!(err.starts_with("usage: nxcc compile "), "{err}");
            assert!(
                err.contains(&format!(
                    "nxcc compile: error: argument {flag}: invalid address: '{value}': expected grpc://HOST:PORT or grpcs://HOST:PORT ("
                )),
                "{err}"
            );
            assert!(err.contains(hint), "{flag} {value}: {err}");
            assert!(!err.contains("answers"), "not a server failure: {err}");
        }
    }
    // Nothing was run or written: no log, no work directory.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "m.pb" && n != "xdg")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
