//! What compiles a compile, named: the engine — nxcc's pipeline or an external compiler — and, for
//! an external compiler, where it is and what it is: its identity as the cache key records it
//! ([`super::identity`]: the blake3 and size of its bytes, and its version line). A reproducer
//! bundle records it (`versions.json`); the daemon's compile stream opens with it, so that a
//! client writing the bundle of a compile the daemon ran names the compiler the daemon runs; a
//! replay checks the compiler it would run against it ([`EngineIdentity::compiler_differences`]).
//! For nxcc's pipeline, the toolchain a compile runs with is named alike ([`ToolchainIdentity`]):
//! where its tools are, whether it is the simulated one, and its identity as the key records it;
//! the daemon says it once it has planned a compile, so that such a bundle names the daemon's
//! toolchain, not the client's.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::digests::Table;
use super::identity::{self, Tools};
use super::meta::EngineKind;
use crate::engine::Engine;
use crate::plan::Plan;
use crate::toolchain::{Request, Toolchain};

/// An engine, named (the JSON of `versions.json` and of the daemon's `engine` event).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineIdentity {
    /// `pipeline` or `external`.
    pub engine: EngineKind,
    /// An external compiler's path, resolved as `execvp` would
    /// ([`crate::engine::resolve_program`]).
    #[serde(default)]
    pub compiler: Option<PathBuf>,
    /// An external compiler's identity as the cache key records it: `{"kind": "external",
    /// "compiler": {"blake3", "size"}, "version"}`.
    #[serde(default)]
    pub identity: Option<Value>,
}

impl EngineIdentity {
    /// nxcc's own pipeline (its toolchain is the compile's, identified with its key).
    pub fn pipeline() -> EngineIdentity {
        EngineIdentity {
            engine: EngineKind::Pipeline,
            compiler: None,
            identity: None,
        }
    }

    /// `engine`, named: an external compiler's path resolved and its identity computed (its
    /// digest and version line remembered in `table`).
    pub fn of(engine: &Engine, table: &Table) -> EngineIdentity {
        match engine {
            Engine::Pipeline => EngineIdentity::pipeline(),
            Engine::External(ext) => EngineIdentity {
                engine: EngineKind::External,
                compiler: Some(crate::engine::resolve_program(&ext.program)),
                identity: Some(identity::of(
                    &Request::Auto,
                    None,
                    engine,
                    Tools::All,
                    table,
                )),
            },
        }
    }

    /// `pipeline` or `external`.
    pub fn name(&self) -> &'static str {
        match self.engine {
            EngineKind::Pipeline => "pipeline",
            EngineKind::External => "external",
        }
    }

    /// The external compiler's identity in words: `blake3 3f9a0c1d2e4b5a69… (1234 bytes),
    /// version "neuronx-cc 2.24"` (`no identity recorded` when there is none).
    pub fn described(&self) -> String {
        match &self.identity {
            Some(id) => format!(
                "blake3 {}, version {}",
                describe_digest(&id["compiler"]),
                id["version"]
            ),
            None => "no identity recorded".into(),
        }
    }

    /// What differs between the external compiler this names and the one at `program`, in
    /// words (empty: the same compiler): its bytes (blake3 and size), else its version line —
    /// asked, so the compiler run, only when its bytes are the ones named. Values are
    /// remembered in `table`.
    pub fn compiler_differences(&self, program: &Path, table: &Table) -> Vec<String> {
        let Some(named) = &self.identity else {
            return vec!["no identity of the compiler was recorded".to_string()];
        };
        let here = identity::file_digest(program, table);
        if here.get("missing").is_some() {
            return vec![format!("{} cannot be read", program.display())];
        }
        if here != named["compiler"] {
            return vec![format!(
                "its bytes differ (blake3 {}, here {})",
                describe_digest(&named["compiler"]),
                describe_digest(&here)
            )];
        }
        let version = identity::version_line(program, table);
        if named["version"] != version.as_str() {
            return vec![format!(
                "its version differs ({}, here {version:?})",
                named["version"]
            )];
        }
        Vec::new()
    }
}

/// The toolchain a compile runs with, named (the JSON of `versions.json`'s `toolchain` and of
/// the daemon's `toolchain` event): what every client may see of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolchainIdentity {
    /// The directory its tools are in (`None`: none was located when the compile was planned —
    /// an installed package is looked for when a tool is needed).
    #[serde(default)]
    pub bin: Option<PathBuf>,
    /// It is nxcc's simulated toolchain.
    #[serde(default)]
    pub simulated: bool,
    /// Its identity as the compile's cache key records it ([`super::identity::of`]; for an
    /// external compiler, the compiler's).
    #[serde(default)]
    pub identity: Option<Value>,
}

impl ToolchainIdentity {
    /// The toolchain `located` (as a plan has it), of identity `identity`.
    pub fn of(located: Option<&Toolchain>, identity: Option<Value>) -> ToolchainIdentity {
        ToolchainIdentity {
            bin: located.map(|t| t.bin.clone()),
            simulated: located.is_some_and(|t| t.simulated),
            identity,
        }
    }

    /// The toolchain a compile planned as `plan` runs with on `engine`: its identity as `key`
    /// (the compile's cache key, when it has one) records it, else as the key would (digests
    /// remembered in `table`).
    pub fn planned(
        plan: &Plan,
        engine: &Engine,
        key: Option<&super::Key>,
        table: &Table,
    ) -> ToolchainIdentity {
        let identity = match key.and_then(|k| k.inputs.get("toolchain")) {
            Some(id) => id.clone(),
            None => identity::of(
                &plan.toolchain_request,
                plan.toolchain.as_ref(),
                engine,
                Tools::OfPlan(plan),
                table,
            ),
        };
        ToolchainIdentity::of(plan.toolchain.as_ref(), Some(identity))
    }
}

/// `3f9a0c1d2e4b5a69… (1234 bytes)`, from `{"blake3", "size"}`.
fn describe_digest(d: &Value) -> String {
    let hex = d["blake3"].as_str().unwrap_or("unknown");
    let short = hex.get(..16).map_or(hex.to_string(), |h| format!("{h}…"));
    match d["size"].as_u64() {
        Some(n) => format!("{short} ({n} bytes)"),
        None => short,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn compiler(path: &Path, version: &str, extra: &str) {
        std::fs::write(
            path,
            format!("#!/bin/sh\n[ \"$1\" = --version ] && echo '{version}'\n{extra}exit 0\n"),
        )
        .unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn an_external_compiler_is_named_as_the_key_identifies_it_and_compared_by_bytes_then_version() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("neuronx-cc");
        compiler(&p, "neuronx-cc 2.24.1", "");
        let table = Table::off();
        let named = EngineIdentity::of(&Engine::external(&p), &table);
        assert_eq!(named.name(), "external");
        assert_eq!(named.compiler.as_deref(), Some(p.as_path()));
        let id = named.identity.clone().unwrap();
        assert_eq!(
            id,
            identity::of(
                &Request::Auto,
                None,
                &Engine::external(&p),
                Tools::All,
                &table
            )
        );
        assert_eq!(id["version"], "neuronx-cc 2.24.1");
        // It reads back as itself (the daemon's event, the bundle's versions).
        let text = serde_json::to_string(&named).unwrap();
        assert_eq!(
            serde_json::from_str::<EngineIdentity>(&text).unwrap(),
            named
        );
        assert!(named.compiler_differences(&p, &table).is_empty());
        // Another copy of the same bytes elsewhere is the same compiler.
        let copy = d.path().join("copy");
        std::fs::copy(&p, &copy).unwrap();
        assert!(named.compiler_differences(&copy, &table).is_empty());
        // Other bytes, the same version: the bytes differ.
        compiler(&copy, "neuronx-cc 2.24.1", "true\n");
        let diff = named.compiler_differences(&copy, &table);
        assert_eq!(diff.len(), 1, "{diff:?}");
        assert!(diff[0].starts_with("its bytes differ (blake3 "), "{diff:?}");
        // The same bytes answering another version (an entry point in front of another package).
        let mut other = named.clone();
        other.identity.as_mut().unwrap()["version"] = "neuronx-cc 2.23.0".into();
        assert_eq!(
            other.compiler_differences(&p, &table),
            ["its version differs (\"neuronx-cc 2.23.0\", here \"neuronx-cc 2.24.1\")"]
        );
        let gone = d.path().join("gone");
        assert_eq!(
            named.compiler_differences(&gone, &table),
            [format!("{} cannot be read", gone.display())]
        );
        assert!(!EngineIdentity::pipeline()
            .compiler_differences(&p, &table)
            .is_empty());
        assert_eq!(
            EngineIdentity::of(&Engine::Pipeline, &table),
            EngineIdentity::pipeline()
        );
    }
}
