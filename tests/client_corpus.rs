//! The client corpus: every command line in `tests/data/client-command-lines.txt` — the shapes
//! real clients send — run through the `nxcc` binary as a dry run, with its exit status and its
//! job list (or error text) checked.

use std::path::Path;
use std::process::Command;

struct Case {
    line_no: usize,
    status: i32,
    argv: Vec<String>,
    expect: String,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/client-command-lines.txt"),
    )
    .unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|(i, l)| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 3, "line {}: three tab-separated columns", i + 1);
            Case {
                line_no: i + 1,
                status: cols[0].parse().unwrap(),
                argv: shell_words::split(cols[1]).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)),
                expect: cols[2].to_string(),
            }
        })
        .collect()
}

fn is_model(token: &str) -> bool {
    !token.starts_with('-')
        && token != "missing.pb"
        && (token.ends_with(".pb") || token.ends_with(".hlo") || token == "penguin.py")
}

#[test]
fn corpus_has_at_least_forty_command_lines() {
    assert!(cases().len() >= 40, "{}", cases().len());
}

#[test]
fn every_corpus_line_parses_and_plans_as_expected() {
    let mut failures = Vec::new();
    for case in cases() {
        let dir = tempfile::tempdir().unwrap();
        for t in case.argv.iter().filter(|t| is_model(t)) {
            let body: &[u8] = if t.ends_with(".hlo") {
                b"HloModule m\n"
            } else {
                b"\x0a\x01m"
            };
            std::fs::write(dir.path().join(t), body).unwrap();
        }
        let mut argv = case.argv.clone();
        argv.push("--dry-run=json".into());
        let out = Command::new(env!("CARGO_BIN_EXE_nxcc"))
            .args(&argv)
            .current_dir(dir.path())
            .env_remove("NEURON_PLATFORM_TARGET_OVERRIDE")
            .env_remove("NXCC_TOOLCHAIN")
            .output()
            .unwrap();
        let status = out.status.code().unwrap_or(-1);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let mut problem = None;
        if status != case.status {
            problem = Some(format!(
                "status {status}, expected {}; stderr: {stderr}",
                case.status
            ));
        } else if case.status == 0 {
            let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            let pipeline: Vec<&str> = json["pipeline"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            let expected: Vec<&str> = case.expect.split_whitespace().collect();
            if pipeline != expected {
                problem = Some(format!("pipeline {pipeline:?}, expected {expected:?}"));
            }
        } else if !stderr.contains(&case.expect) {
            problem = Some(format!(
                "stderr does not contain {:?}: {stderr}",
                case.expect
            ));
        }
        if !stderr.is_empty() && (stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE"))
        {
            problem = Some(format!("a panic: {stderr}"));
        }
        if let Some(p) = problem {
            failures.push(format!(
                "line {}: {}\n    {p}",
                case.line_no,
                case.argv.join(" ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} corpus lines failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
