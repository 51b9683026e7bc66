//! Tool resolution against a toolchain directory (WIKI: private first), toolchain location, and a
//! missing tool: a warning in a dry run, NCC_EDRV082 in a compile.

mod common;

use common::{text, Scratch};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn tool(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// `nxcc toolchain sim DIR` for `name` under the scratch dir: the simulated toolchain laid out.
fn laid_out_sim(s: &Scratch, name: &str) -> std::path::PathBuf {
    let root = s.join(name);
    let out = s.run(&["toolchain", "sim", root.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    root
}

fn plan_json(s: &Scratch, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn1",
        "--dry-run=json",
    ];
    args.extend(extra);
    let out = s.run(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn tool_path(plan: &serde_json::Value, job: &str) -> serde_json::Value {
    plan["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == job)
        .unwrap()["tool_path"]
        .clone()
}

#[test]
fn private_tools_override_shipped_ones() {
    let s = Scratch::new();
    let tc = s.join("tc");
    for t in ["hlo2penguin", "xla_infergoldens", "walrus_driver"] {
        tool(&tc, t, "#!/bin/sh\nexit 0\n");
    }
    tool(&tc.join("private"), "walrus_driver", "#!/bin/sh\nexit 0\n");
    let plan = plan_json(&s, &["--toolchain", tc.to_str().unwrap()]);
    assert_eq!(
        tool_path(&plan, "WalrusDriver"),
        tc.join("private/walrus_driver").display().to_string()
    );
    assert_eq!(
        tool_path(&plan, "HLOToTensorizer"),
        tc.join("hlo2penguin").display().to_string()
    );
    assert!(
        plan["warnings"].as_array().unwrap().is_empty(),
        "{}",
        plan["warnings"]
    );
    // The environment variable names the toolchain too; the option wins over it.
    let out = s
        .nxcc(&[
            "compile",
            "mlp.hlo_module.pb",
            "--target",
            "trn1",
            "--dry-run=json",
        ])
        .env("NXCC_TOOLCHAIN", &tc)
        .output()
        .unwrap();
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        tool_path(&plan, "WalrusDriver"),
        tc.join("private/walrus_driver").display().to_string()
    );
}

#[test]
fn a_layout_root_is_used_through_its_bin_directory() {
    let s = Scratch::new();
    let root = laid_out_sim(&s, "layout");
    let plan = plan_json(&s, &["--toolchain", root.to_str().unwrap()]);
    assert_eq!(
        plan["toolchain"]["bin"],
        root.join("bin").display().to_string()
    );
    assert_eq!(plan["toolchain"]["simulated"], true);
    // And a compile with it works.
    let out = s.run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn1",
        "--toolchain",
        root.to_str().unwrap(),
        "--output",
        "m.neff",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_missing_tool_warns_in_a_dry_run_and_fails_a_compile() {
    let s = Scratch::new();
    let tc = s.join("tc");
    // hlo2penguin and xla_infergoldens are there and succeed, walrus_driver is not.
    tool(&tc, "hlo2penguin", "#!/bin/sh\ntouch penguin.py\n");
    tool(&tc, "xla_infergoldens", "#!/bin/sh\nexit 0\n");
    let plan = plan_json(&s, &["--toolchain", tc.to_str().unwrap()]);
    assert_eq!(tool_path(&plan, "WalrusDriver"), serde_json::Value::Null);
    assert!(plan["warnings"].as_array().unwrap().iter().any(|w| w
        .as_str()
        .unwrap()
        .contains("WalrusDriver: tool walrus_driver not found")));
    // A real (non-simulated) toolchain without the Python package: the Frontend bridge fails
    // first; with the frontend taken out of the pipeline the missing walrus_driver is reported.
    let out = s.run(&[
        "compile",
        "mlp.hlo_module.pb",
        "--target",
        "trn1",
        "--toolchain",
        tc.to_str().unwrap(),
        "--pipeline",
        "HLOToTensorizer",
        "WalrusDriver",
    ]);
    assert_eq!(out.status.code(), Some(70));
    assert!(
        text(&out.stderr).contains(&format!(
            "[ERROR] [NCC_EDRV082] Could not find walrus_driver: no executable walrus_driver in {}/private or {} - Point --toolchain (or NXCC_TOOLCHAIN) at a Neuron compiler toolchain, or use --toolchain sim.",
            tc.display(),
            tc.display()
        )),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn toolchain_show_json_says_what_the_text_says() {
    let s = Scratch::new();
    let dir = laid_out_sim(&s, "tc");
    let shown = s.run(&["toolchain", "show", "--toolchain", dir.to_str().unwrap()]);
    let o = s.run(&[
        "toolchain",
        "show",
        "--json",
        "--toolchain",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["source"], "--toolchain");
    let tc = &j["toolchain"];
    assert_eq!(tc["bin"], dir.join("bin").to_str().unwrap(), "{j}");
    assert_eq!(tc["simulated"], true);
    assert_eq!(tc["laid_out"], true);
    let tools = tc["tools"].as_object().unwrap();
    assert!(tools.contains_key("walrus_driver"), "{j}");
    for (tool, path) in tools {
        let path = path.as_str().unwrap_or("missing");
        assert!(
            text(&shown.stdout).contains(&format!("  {tool:<18} {path}\n")),
            "{tool}: {}",
            text(&shown.stdout)
        );
    }
    // A tool taken away: null, as the text's `missing`.
    std::fs::remove_file(dir.join("bin/walrus_driver")).unwrap();
    let o = s.run(&[
        "toolchain",
        "show",
        "--json",
        "--toolchain",
        dir.to_str().unwrap(),
    ]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["toolchain"]["tools"]["walrus_driver"].is_null(), "{j}");
    // None found (no --toolchain, no NXCC_TOOLCHAIN, no neuronxcc package): null, exit 1.
    let o = s.run(&["toolchain", "show", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(1), "{j}");
    assert_eq!(j["source"], "python3", "{j}");
    assert!(j["toolchain"].is_null(), "{j}");
}
