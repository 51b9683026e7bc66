//! The simulated `watchpoint_insert` (the Watchpoint debug job), run in the work dir:
//!
//! ```text
//! watchpoint_insert --bir sgNN/bir.json --mode <internal_compiler_debug_mode>
//! ```
//!
//! Rewrites the BIR (temporary name plus rename) with a `"watchpoint"` field: the mode and the id
//! of the first instruction on each engine the BIR uses. Running it again replaces the field, so
//! the result depends only on the BIR's other content and the mode.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{Prepared, ToolError};
use crate::argv::{opt, Args, Form, Opt, Spec};
use crate::bir::{self, Bir};
use crate::files::{atomic_write, resolve};

fn mode(v: &str) -> Result<(), String> {
    if !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        Ok(())
    } else {
        Err(format!("invalid mode {v:?}"))
    }
}

static OPTS: &[Opt] = &[
    opt("--bir", Form::Sep, crate::argv::checks::nonempty).required(),
    opt("--mode", Form::Sep, mode).required(),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: None,
    opts: OPTS,
    extra: None,
};

struct Job {
    bir: Bir,
    digest: blake3::Hash,
    path: PathBuf,
    mode: String,
}

/// The [`PrepareFn`](super::PrepareFn) of `watchpoint_insert`: check the argv, read the BIR.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    let path = resolve(cwd, args.value("--bir"));
    let bytes = std::fs::read(&path).map_err(|e| ToolError::reading("BIR", &path, e))?;
    let bir = Bir::check(&bytes)
        .map_err(|e| ToolError::Failed(format!("{}: invalid BIR: {e}", path.display())))?;
    Ok(Box::new(Job {
        bir,
        digest: blake3::hash(&bytes),
        path,
        mode: args.value("--mode").to_string(),
    }))
}

impl Prepared for Job {
    fn key(&self) -> blake3::Hash {
        self.digest
    }

    fn execute(&self) -> Result<(), ToolError> {
        let mut first: Vec<Value> = Vec::new();
        let mut seen: Vec<&str> = Vec::new();
        if let Some(list) = self.bir.doc.get("instructions").and_then(Value::as_array) {
            for ins in list {
                let engine = ins.get("engine").and_then(Value::as_str).unwrap_or("");
                if !seen.contains(&engine) {
                    seen.push(engine);
                    first.push(ins.get("id").cloned().unwrap_or(Value::Null));
                }
            }
        }
        let mut doc = self.bir.doc.clone();
        doc.insert(
            "watchpoint".into(),
            json!({"mode": self.mode, "instructions": first}),
        );
        let bytes = bir::to_bytes(&Value::Object(doc));
        atomic_write(&self.path, &bytes).map_err(|e| ToolError::writing(&self.path, e))
    }
}
