//! A compile as a Remote Execution API action: its Command (`neuronx-cc compile <model>
//! <the normalised arguments> --output model.neff`, the allowed environment, the platform), its
//! input root (the model: a file or a directory), its one output `model.neff`; the digests and
//! blobs that go to the CAS. Also the toolchain identity a worker advertises and an action asks
//! for, so a NEFF is never reused across toolchains.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::cas::Blob;
use super::digest;
use super::re;
use crate::cli::namespace::Value;
use crate::engine::Engine;
use crate::plan::Invocation;
use crate::toolchain::{Request, Toolchain};

/// The program a Command runs (the worker refuses any other).
pub const PROGRAM: &str = "neuronx-cc";

/// The one output of a compile action.
pub const OUTPUT: &str = "model.neff";

/// The platform property that carries the toolchain identity (a BuildGrid must list it in its
/// scheduler's `property-keys`).
pub const TOOLCHAIN_PROPERTY: &str = "nxcc-toolchain";

/// The compile flags that never travel to the worker: the driver's settings
/// ([`crate::cli::settings::Settings`]: where things go on this machine, the console, reports,
/// caches, and the remote flags themselves), which the cache key leaves out too.
pub fn is_local_only(dest: &str) -> bool {
    crate::cli::lower::settings_dests()
        .iter()
        .any(|d| d == dest)
}

/// A built action and what the CAS needs for it.
#[derive(Debug, Clone)]
pub struct Built {
    /// The action.
    pub action: re::Action,
    /// Its digest: the action cache key.
    pub digest: re::Digest,
    /// The command.
    pub command: re::Command,
    /// Every blob the action refers to (command, directories, the model's files, the action).
    pub blobs: Vec<(re::Digest, Blob)>,
    /// The model's bytes (a directory: its files' sum).
    pub model_bytes: u64,
}

/// The platform of this machine and toolchain: `OSFamily`, `ISA`, [`TOOLCHAIN_PROPERTY`],
/// sorted by name as the API asks.
pub fn platform(toolchain_id: &str) -> re::Platform {
    let mut props = vec![
        re::platform::Property {
            name: "ISA".into(),
            value: isa().into(),
        },
        re::platform::Property {
            name: "OSFamily".into(),
            value: std::env::consts::OS.into(),
        },
        re::platform::Property {
            name: TOOLCHAIN_PROPERTY.into(),
            value: toolchain_id.into(),
        },
    ];
    props.sort_by(|a, b| a.name.cmp(&b.name));
    re::Platform { properties: props }
}

/// The instruction set as REAPI platforms usually spell it (`x86-64`, `aarch64`).
pub fn isa() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "x86-64",
        a => a,
    }
}

/// The identity of what compiles, as one word for the platform: the toolchain's identity by
/// the rule the local cache key uses ([`crate::cache::identity`]: what the tools are — their
/// bytes' digests, an external compiler's version line, nxcc's version for the simulated
/// toolchain — never where they are installed), over every tool nxcc knows, since a worker
/// advertises it without a plan. `nxcc-sim-<version>`, `dir-<32 hex>`, `compiler-<32 hex>`,
/// or `none` when nothing is found. Digests are remembered per stat identity in this process.
pub fn toolchain_id(request: &Request, located: Option<&Toolchain>, engine: &Engine) -> String {
    let table = crate::cache::digests::Table::memory_only();
    let id = crate::cache::identity::of(
        request,
        located,
        engine,
        crate::cache::identity::Tools::All,
        &table,
    );
    crate::cache::identity::word(&id)
}

/// The compile's arguments for the worker: the command line re-parsed and written out again in
/// one spelling (abbreviations expanded, `--flag=value`), without what is local to this machine
/// ([`is_local_only`]) and without the model.
pub fn remote_arguments(inv: &Invocation) -> Result<Vec<String>, String> {
    let parser = crate::cli::compile_parser(PROGRAM);
    let argv: Vec<String> = match inv.argv.first().map(String::as_str) {
        Some("compile") => inv.argv[1..].to_vec(),
        _ => inv.argv.clone(),
    };
    let parsed = parser
        .parse(&argv)
        .map_err(|e| format!("cannot re-read the command line: {e:?}"))?;
    let mut out = Vec::new();
    for o in &parsed.occurrences {
        let f = o.flag;
        if f.dest.is_empty() || is_local_only(f.dest) {
            continue;
        }
        // The flag's own spelling (a negative form, `--no-X` / `--disable-X`, as given).
        let name = if o.negated {
            o.option_string.clone()
        } else {
            f.spelling.to_string()
        };
        let long = name.starts_with("--");
        let mut one = |v: String| {
            if long {
                out.push(format!("{name}={v}"));
            } else {
                out.push(name.clone());
                out.push(v);
            }
        };
        match &o.value {
            Value::Bool(_) | Value::None if !f.takes_value() => out.push(name.clone()),
            Value::Bool(b) => one(b.to_string()),
            Value::None => out.push(name.clone()),
            Value::Int(i) => one(i.to_string()),
            Value::Float(x) => one(format!("{x}")),
            Value::Str(s) => one(s.clone()),
            Value::List(l) => {
                if matches!(f.action, crate::cli::flags::Action::OneOrMore) {
                    out.push(name.clone());
                    out.extend(l.iter().cloned());
                } else {
                    for v in l {
                        one(v.clone());
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The name the model has in the input root (its own file name; never one that reads as a flag).
pub fn model_name(model: &Path) -> String {
    let n = model
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .filter(|n| !n.is_empty() && !n.starts_with('-') && !n.starts_with('.'))
        .unwrap_or_else(|| "model".to_string());
    n.replace('/', "_")
}

/// Build the action of a compile of `inv` (reads the model once, streaming); `env` is the
/// environment the Command carries (sorted by name).
pub fn build(
    inv: &Invocation,
    toolchain_id: &str,
    env: &BTreeMap<String, String>,
) -> Result<Built, String> {
    let plan = &inv.plan;
    let mut blobs: Vec<(re::Digest, Blob)> = Vec::new();
    let name = model_name(&plan.model);
    let meta = std::fs::symlink_metadata(&plan.model)
        .map_err(|e| format!("cannot read the model {}: {e}", plan.model.display()))?;
    let mut model_bytes = 0u64;
    let root = if meta.is_dir() {
        let d = directory(&plan.model, &mut blobs, &mut model_bytes)?;
        re::Directory {
            directories: vec![re::DirectoryNode {
                name: name.clone(),
                digest: Some(d),
            }],
            ..Default::default()
        }
    } else {
        let meta = std::fs::metadata(&plan.model)
            .map_err(|e| format!("cannot read the model {}: {e}", plan.model.display()))?;
        if !meta.is_file() {
            return Err(format!("the model {} is not a file", plan.model.display()));
        }
        let d = digest::of_file(&plan.model)
            .map_err(|e| format!("cannot read the model {}: {e}", plan.model.display()))?;
        model_bytes = d.size_bytes as u64;
        blobs.push((d.clone(), Blob::File(plan.model.clone())));
        re::Directory {
            files: vec![re::FileNode {
                name: name.clone(),
                digest: Some(d),
                is_executable: false,
                node_properties: None,
            }],
            ..Default::default()
        }
    };
    let (root_bytes, root_digest) = digest::of_message(&root);
    blobs.push((root_digest.clone(), Blob::Bytes(root_bytes)));
    let mut arguments = vec![PROGRAM.to_string(), "compile".to_string(), name];
    arguments.extend(remote_arguments(inv)?);
    arguments.push("--output".into());
    arguments.push(OUTPUT.into());
    let platform = platform(toolchain_id);
    #[allow(deprecated)]
    let command = re::Command {
        arguments,
        environment_variables: env
            .iter()
            .map(|(k, v)| re::command::EnvironmentVariable {
                name: k.clone(),
                value: v.clone(),
            })
            .collect(),
        output_files: vec![OUTPUT.into()],
        output_paths: vec![OUTPUT.into()],
        platform: Some(platform.clone()),
        ..Default::default()
    };
    let (cmd_bytes, cmd_digest) = digest::of_message(&command);
    blobs.push((cmd_digest.clone(), Blob::Bytes(cmd_bytes)));
    let action = re::Action {
        command_digest: Some(cmd_digest),
        input_root_digest: Some(root_digest),
        do_not_cache: false,
        platform: Some(platform),
        ..Default::default()
    };
    let (action_bytes, action_digest) = digest::of_message(&action);
    blobs.push((action_digest.clone(), Blob::Bytes(action_bytes)));
    Ok(Built {
        action,
        digest: action_digest,
        command,
        blobs,
        model_bytes,
    })
}

/// A model directory as a Directory tree (names sorted; links and special files refused).
fn directory(
    dir: &Path,
    blobs: &mut Vec<(re::Digest, Blob)>,
    total: &mut u64,
) -> Result<re::Digest, String> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read the model directory {}: {e}", dir.display()))?
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let mut d = re::Directory::default();
    for e in entries {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let m = std::fs::symlink_metadata(&path)
            .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
        if m.is_dir() {
            let sub = directory(&path, blobs, total)?;
            d.directories.push(re::DirectoryNode {
                name,
                digest: Some(sub),
            });
        } else if m.is_file() {
            let fd = digest::of_file(&path)
                .map_err(|err| format!("cannot read {}: {err}", path.display()))?;
            *total += fd.size_bytes as u64;
            blobs.push((fd.clone(), Blob::File(path.clone())));
            d.files.push(re::FileNode {
                name,
                digest: Some(fd),
                is_executable: m.mode() & 0o111 != 0,
                node_properties: None,
            });
        } else {
            return Err(format!(
                "the model directory holds {}, which is not a plain file or directory (a link?); remote compiles send only files and directories",
                path.display()
            ));
        }
    }
    let (bytes, digest) = digest::of_message(&d);
    blobs.push((digest.clone(), Blob::Bytes(bytes)));
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::StaticProbe;

    fn plan(extra: &[&str]) -> Invocation {
        let mut argv: Vec<String> = ["compile", "m.pb", "--target", "trn2"]
            .map(String::from)
            .to_vec();
        argv.extend(extra.iter().map(|s| s.to_string()));
        Invocation::from_argv("nxcc", &argv, &StaticProbe::new("/launch")).unwrap()
    }

    #[test]
    fn the_arguments_are_written_in_one_spelling_without_local_flags() {
        let a = remote_arguments(&plan(&[
            "-O1",
            "--output",
            "/x/y.neff",
            "--logfile",
            "/x/log.txt",
            "--toolchain",
            "sim",
            "--remote",
            "grpc://h:1",
        ]))
        .unwrap();
        assert_eq!(a, ["--target=trn2", "--optlevel=1"], "{a:?}");
        // The same compile spelled otherwise gives the same arguments.
        let b = remote_arguments(&plan(&["--optlevel", "1", "--job-timeout", "9"])).unwrap();
        assert_eq!(a, b);
        let c = remote_arguments(&plan(&["-O2"])).unwrap();
        assert_ne!(a, c);
    }

    #[test]
    fn the_platform_is_sorted_and_names_the_toolchain() {
        let p = platform("nxcc-sim-0");
        let names: Vec<&str> = p.properties.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["ISA", "OSFamily", TOOLCHAIN_PROPERTY]);
        assert_eq!(
            toolchain_id(&Request::Simulated, None, &Engine::Pipeline),
            format!("nxcc-sim-{}", crate::VERSION)
        );
    }
}
