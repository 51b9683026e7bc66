//! What the console offers around the commands, through the real binary: shell completions, the
//! manual pages, colour (`--color`, `NO_COLOR`, a terminal), the commit in `--version` and
//! `--version --json`, the environment table in `--help`, nxcc's own compile options apart from
//! the original's.

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[path = "../build/commit.rs"]
mod commit;

const NXCC: &str = env!("CARGO_BIN_EXE_nxcc");

fn nxcc(args: &[&str]) -> Output {
    Command::new(NXCC)
        .args(args)
        .env_remove("NXCC_TOOLCHAIN")
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn stdout_of(args: &[&str]) -> String {
    let o = nxcc(args);
    assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// A program this test needs: its absence fails the test, saying so.
fn require(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(found, "this test needs `{program}` on PATH");
}

/// What bash completes for `words` (the last one being completed), with nxcc's script loaded.
fn bash_completes(script: &Path, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={cword}; _nxcc nxcc '{}' '{prev}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        quoted.join(" "),
        words[cword],
    );
    let o = Command::new("bash")
        .args(["-c", &program])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    text(&o.stdout).lines().map(str::to_string).collect()
}

#[test]
fn bash_completes_commands_options_and_their_values() {
    require("bash");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("nxcc.bash");
    std::fs::write(&script, stdout_of(&["completions", "bash"])).unwrap();
    let syntax = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(syntax.status.success(), "{}", text(&syntax.stderr));
    assert_eq!(
        bash_completes(&script, &["nxcc", "par"]),
        ["parallel-compile"]
    );
    assert_eq!(
        bash_completes(&script, &["nxcc", "compile", "--tar"]),
        ["--target"]
    );
    let targets = bash_completes(&script, &["nxcc", "compile", "--target", ""]);
    assert!(targets.contains(&"trn2".to_string()), "{targets:?}");
    let cache = bash_completes(&script, &["nxcc", "cache", ""]);
    for action in ["stats", "gc", "clear"] {
        assert!(cache.contains(&action.to_string()), "{cache:?}");
    }
    // nxcc's own options of a subcommand, from its own definition.
    let parallel = bash_completes(&script, &["nxcc", "parallel-compile", "--memory-"]);
    assert_eq!(parallel, ["--memory-budget"]);
}

#[test]
fn zsh_and_fish_scripts_name_nxcc_and_its_commands() {
    let zsh = stdout_of(&["completions", "zsh"]);
    assert!(zsh.starts_with("#compdef nxcc\n"), "{zsh}");
    assert!(zsh.contains("parallel-compile"));
    let fish = stdout_of(&["completions", "fish"]);
    assert!(fish.contains("complete -c nxcc"), "{fish}");
    assert!(fish.contains("parallel-compile"));
    // Under the original's name, the script completes that name.
    let o = Command::new("bash")
        .args(["-c", &format!("exec -a neuronx-cc {NXCC} completions bash")])
        .output()
        .unwrap();
    assert!(
        text(&o.stdout).contains("-o default neuronx-cc\n"),
        "{}",
        text(&o.stdout)
    );
    let o = nxcc(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("invalid value 'tcsh'"),
        "{}",
        text(&o.stderr)
    );
}

/// `roff` rendered by `man -l`, as text.
fn rendered(roff: &str) -> String {
    require("man");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.1");
    std::fs::write(&page, roff).unwrap();
    let o = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "200")
        .env("MAN_KEEP_FORMATTING", "0")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // Overstrikes (bold, underline) out.
    let mut out = String::new();
    for c in text(&o.stdout).chars() {
        if c == '\u{8}' {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn the_manual_pages_render() {
    let page = rendered(&stdout_of(&["man"]));
    for section in ["NAME", "SYNOPSIS", "OPTIONS", "SUBCOMMANDS", "ENVIRONMENT"] {
        assert!(page.lines().any(|l| l == section), "{section}: {page}");
    }
    assert!(page.contains("nxcc-parallel-compile(1)"), "{page}");
    assert!(page.contains("NEURON_PLATFORM_TARGET_OVERRIDE"), "{page}");
    assert!(page.contains("--color"), "{page}");
    let compile = rendered(&stdout_of(&["man", "compile"]));
    assert!(
        compile.contains("nxcc-compile - Compile a model"),
        "{compile}"
    );
    assert!(compile.contains("--target"), "{compile}");
    let parallel = rendered(&stdout_of(&["man", "parallel-compile"]));
    assert!(parallel.contains("--memory-budget"), "{parallel}");
    let o = nxcc(&["man", "frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("no command \"frobnicate\""),
        "{}",
        text(&o.stderr)
    );
}

/// `nxcc ARGS` with stdout and stderr on a terminal (`script` gives it a pty); what the
/// terminal showed.
fn on_a_terminal(args: &str, env: &[(&str, &str)]) -> String {
    require("script");
    let mut c = Command::new("script");
    c.args(["-qec", &format!("{NXCC} {args}"), "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    text(&c.output().unwrap().stdout)
}

const RED_ERROR: &str = "\x1b[1;31merror:\x1b[0m";

#[test]
fn errors_are_coloured_on_a_terminal_unless_no_color_or_never() {
    let shown = on_a_terminal("compile --target", &[]);
    assert!(
        shown.contains(&format!("nxcc compile: {RED_ERROR} ")),
        "{shown:?}"
    );
    assert!(
        !shown.contains("\x1b[1;31musage"),
        "only the mark: {shown:?}"
    );
    let shown = on_a_terminal("compile --target", &[("NO_COLOR", "1")]);
    assert!(!shown.contains('\x1b'), "NO_COLOR: {shown:?}");
    let shown = on_a_terminal("compile --target", &[("NO_COLOR", "")]);
    assert!(
        shown.contains(RED_ERROR),
        "an empty NO_COLOR is unset: {shown:?}"
    );
    let shown = on_a_terminal("--color never compile --target", &[]);
    assert!(!shown.contains('\x1b'), "--color never: {shown:?}");
    let shown = on_a_terminal("--color=always compile --target", &[("NO_COLOR", "1")]);
    assert!(
        shown.contains(RED_ERROR),
        "always wins over NO_COLOR: {shown:?}"
    );
}

#[test]
fn a_pipe_is_not_coloured_unless_always() {
    let o = nxcc(&["compile", "--target"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!text(&o.stderr).contains('\x1b'), "{}", text(&o.stderr));
    // The option is taken wherever it is, before the subcommand or after it.
    for args in [
        &["--color", "always", "compile", "--target"][..],
        &["compile", "--target", "--color=always"][..],
    ] {
        let o = nxcc(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(RED_ERROR),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    // A subcommand's own errors (clap's) are coloured the same way.
    let o = nxcc(&["--color=always", "cache", "stats", "--bogus"]);
    assert!(
        text(&o.stderr).starts_with(RED_ERROR),
        "{}",
        text(&o.stderr)
    );
    let o = nxcc(&["--color=sometimes", "--help"]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        text(&o.stderr),
        "nxcc: error: argument --color: invalid choice: 'sometimes' (choose from 'auto', 'always', 'never')\n"
    );
    // Help and version are never coloured, even when asked.
    assert!(!text(&nxcc(&["--color=always", "--help"]).stdout).contains('\x1b'));
}

#[test]
fn version_names_the_commit_when_built_from_a_checkout() {
    let first = stdout_of(&["--version"]);
    let first = first.lines().next().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&stdout_of(&["--version", "--json"])).unwrap();
    assert_eq!(json["name"], "nxcc");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["reproduces"], "neuronx-cc 2.24.5133.0");
    assert!(json["toolchain"].is_null(), "no toolchain here: {json}");
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"));
    match commit::head(checkout) {
        Some((hash, date)) => {
            assert_eq!(
                first,
                format!("nxcc {} ({hash} {date})", env!("CARGO_PKG_VERSION"))
            );
            assert_eq!(json["commit"], hash.as_str());
            assert_eq!(json["commit_date"], date.as_str());
        }
        None => {
            assert_eq!(first, format!("nxcc {}", env!("CARGO_PKG_VERSION")));
            assert!(json["commit"].is_null(), "{json}");
        }
    }
    let sim = Command::new(NXCC)
        .args(["--version", "--json"])
        .env("NXCC_TOOLCHAIN", "sim")
        .output()
        .unwrap();
    let sim: serde_json::Value = serde_json::from_slice(&sim.stdout).unwrap();
    assert_eq!(sim["toolchain"]["simulated"], true, "{sim}");
}

fn git(dir: &Path, args: &[&str]) {
    let o = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .env("GIT_COMMITTER_DATE", "2024-02-29T12:00:00Z")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", text(&o.stderr));
}

#[test]
fn the_commit_comes_from_the_package_s_own_checkout_only() {
    require("git");
    let root = tempfile::tempdir().unwrap();
    // A source archive: no git at all.
    let sdist = root.path().join("sdist");
    std::fs::create_dir(&sdist).unwrap();
    assert_eq!(commit::head(&sdist), None);
    assert!(commit::watched(&sdist).is_empty());
    // A checkout of its own.
    let repo = root.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("f"), "x").unwrap();
    git(&repo, &["add", "f"]);
    git(&repo, &["commit", "-qm", "one"]);
    let (hash, date) = commit::head(&repo).expect("a commit");
    assert_eq!(hash.len(), 12);
    assert!(hash.chars().all(|c| c.is_ascii_hexdigit()), "{hash}");
    assert_eq!(date, "2024-02-29");
    let watched = commit::watched(&repo);
    assert!(watched.contains(&repo.join(".git/HEAD")), "{watched:?}");
    assert!(
        watched.contains(&repo.join(".git/refs/heads/main")),
        "{watched:?}"
    );
    // An archive unpacked inside someone else's repository is not that repository's commit.
    let inside = repo.join("nxcc-0.1.0");
    std::fs::create_dir(&inside).unwrap();
    assert_eq!(commit::head(&inside), None);
}

#[test]
fn help_lists_every_environment_variable_of_the_table() {
    use nxcc::cli::environment::{for_users, is_listed, VARIABLES};
    let help = stdout_of(&["--help"]);
    let (_, env) = help
        .split_once("\nEnvironment:\n")
        .expect("an Environment section");
    for v in for_users() {
        assert!(
            env.lines().any(|l| l.trim_start().starts_with(v.name)),
            "{}: {env}",
            v.name
        );
    }
    assert!(
        !env.contains("NXCC_WORKER"),
        "internal variables are not listed"
    );
    // The table holds every variable the code reads by a constant.
    for name in [
        nxcc::recon::toolchain::TOOLCHAIN_ENV,
        nxcc::plan::TARGET_OVERRIDE_ENV,
        nxcc::cache::CACHE_URL_ENV,
        nxcc::neuron_cache::CC_FLAGS_ENV,
        nxcc::neuron_cache::CACHE_URL_ENV,
        nxcc::lockfile::LEASE_ENV,
        nxcc::lockfile::LEASE_MAX_ENV,
        nxcc::lockfile::CLOCK_SKEW_ENV,
        nxcc::toolchain::SIM_SUBGRAPHS_ENV,
        nxcc::daemon::client::SOCKET_ENV,
        nxcc::shim::HOPS_ENV,
        nxcc::cli::color::NO_COLOR_ENV,
        nxcc_s3_retry_timeout(),
    ]
    .into_iter()
    .chain(remote_variables())
    {
        assert!(is_listed(name), "{name} is read but not in the table");
    }
    assert!(VARIABLES.len() >= for_users().count());
}

fn nxcc_s3_retry_timeout() -> &'static str {
    nxcc_s3::config::RETRY_TIMEOUT_ENV
}

fn remote_variables() -> Vec<&'static str> {
    use nxcc::remote::settings::env;
    vec![
        env::CONNECT_TIMEOUT,
        env::CALL_TIMEOUT,
        env::IDLE_TIMEOUT,
        env::RETRY_TIMEOUT,
        env::MIN_RATE,
        env::MAX_BLOB,
        env::CA,
        env::CLIENT_CERT,
        env::CLIENT_KEY,
        env::TOKEN_FILE,
        env::INVOCATION_ID,
    ]
}

#[test]
fn compile_help_keeps_nxcc_s_own_options_apart() {
    let help = stdout_of(&["compile", "--help"]);
    let (original, own) = help
        .split_once("\nnxcc's own options (not the original neuronx-cc's):\n")
        .expect("a section of nxcc's own options");
    for flag in nxcc::cli::flags::FLAGS.iter().filter(|f| {
        f.visibility == nxcc::cli::flags::Visibility::Public
            && f.action != nxcc::cli::flags::Action::Help
    }) {
        let (in_own, in_original) = (lists(own, flag.spelling), lists(original, flag.spelling));
        assert_eq!(
            (in_own, in_original),
            (flag.is_nxcc_own(), !flag.is_nxcc_own()),
            "{} is listed in the wrong section",
            flag.spelling
        );
    }
    assert!(lists(original, "--target") && lists(own, "--dry-run"));
}

/// Whether a section of a help text has an entry for `option` (its first option string).
fn lists(section: &str, option: &str) -> bool {
    section
        .lines()
        .filter(|l| l.starts_with("  -"))
        .any(|l| l.trim_start().split([' ', ',', '[']).next() == Some(option))
}
