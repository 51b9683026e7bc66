//! The toolchain's identity: what the tools *are*, not where they are installed — the one rule
//! the cache key ([`super::key`]) and a remote action's platform (`nxcc_remote::action`)
//! both use, so the same compiler installed on two hosts, or in two virtual environments, gives
//! the same key and the same action.
//!
//! - `--toolchain sim`: nxcc's version (the simulated tools are nxcc itself);
//! - a toolchain directory or an installed package: for each tool asked about (the tools a plan
//!   uses, for a key; every known tool, for a remote worker that has no plan), resolved in the
//!   toolchain (private first), the blake3 of its bytes and its size, or that it is missing;
//!   a directory holding nxcc's simulated tools adds nxcc's version;
//! - an external compiler (`--compiler PATH`): the blake3 of its executable's bytes and its
//!   version line (`PATH --version`, first line), since an entry point script stays the same
//!   bytes when the package behind it changes.
//!
//! Digests and version lines are remembered per stat identity ([`super::digests`]): a tool is
//! hashed, and a compiler asked its version, once — not on every compile. Paths, inodes and
//! modification times are not part of the identity.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::digests::{Kind, Table};
use crate::engine::Engine;
use crate::plan::Plan;
use crate::toolchain::{self, Request, Toolchain};

/// How long an external compiler's `--version` may take.
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Which tools of a toolchain the identity covers.
#[derive(Debug, Clone)]
pub enum Tools<'a> {
    /// The tools a plan runs (and the library it loads).
    OfPlan(&'a Plan),
    /// Every tool nxcc knows ([`toolchain::TOOLS`]) and the walrus library.
    All,
}

/// The identity of what compiles, as the cache key records it (see the module documentation).
pub fn of(
    request: &Request,
    located: Option<&Toolchain>,
    engine: &Engine,
    tools: Tools,
    table: &Table,
) -> Value {
    if let Engine::External(ext) = engine {
        let program = crate::engine::resolve_program(&ext.program);
        return json!({
            "kind": "external",
            "compiler": file_digest(&program, table),
            "version": version_line(&program, table),
        });
    }
    let tc = match request {
        Request::Simulated => {
            return json!({ "kind": "simulated", "nxcc_version": crate::VERSION });
        }
        Request::Dir(_) => located.cloned(),
        Request::Auto => located.cloned().or_else(|| installed_package(table)),
    };
    let Some(tc) = tc else {
        return json!({ "kind": "none" });
    };
    let mut digests: BTreeMap<String, Value> = BTreeMap::new();
    // Tools are often links to one executable: each file is hashed once.
    let mut seen: Vec<(super::digests::StatId, Value)> = Vec::new();
    for (name, path) in tool_paths(&tc, &tools) {
        let id = match path {
            Some(p) => {
                let stat = std::fs::File::open(&p)
                    .and_then(|f| super::digests::StatId::of_file(&f))
                    .ok();
                match seen.iter().find(|(s, _)| Some(*s) == stat) {
                    Some((_, v)) => v.clone(),
                    None => {
                        let v = file_digest(&p, table);
                        if let Some(s) = stat {
                            seen.push((s, v.clone()));
                        }
                        v
                    }
                }
            }
            None => json!({ "missing": true }),
        };
        digests.insert(name, id);
    }
    json!({
        "kind": if tc.simulated { "simulated-dir" } else { "dir" },
        "nxcc_version": if tc.simulated { Value::from(crate::VERSION) } else { Value::Null },
        "tools": digests,
    })
}

/// An installed package's toolchain, as [`toolchain::locate`] finds it for [`Request::Auto`]
/// (`python3`, looked up on PATH, asked where the package is). With a trusted `table` the answer
/// is kept in this process's memory — a daemon asks once, not on every request — and used again
/// while the interpreter (its path and stat identity), the package's directory and its tools'
/// directory have the identities they had when it answered: another `python3` first on PATH, a
/// package installed, upgraded or removed ask again. As for digests, an answer is kept only
/// when those files had settled (git's racy rule, [`super::digests::RACY_MARGIN_NS`]); an
/// answer of no package is not kept (a compile without a toolchain fails anyway, and a package
/// installed since is found).
pub(crate) fn installed_package(table: &Table) -> Option<Toolchain> {
    let python = crate::engine::resolve_program(Path::new(PYTHON));
    let probe = &mut |p: &Path| toolchain::probe_python_package_with(p);
    let bin = if table.trusted() {
        installed_package_kept(&python, probe)
    } else {
        probe(&python)
    };
    bin.map(|bin| Toolchain {
        bin,
        simulated: false,
    })
}

/// The interpreter asked where an installed package is.
const PYTHON: &str = "python3";

/// The stat identities an answer of the package probe is kept by: of the interpreter, the
/// package's directory and its tools' directory.
type Witnesses = [Option<super::digests::StatId>; 3];

/// An answer of the package probe and what it was given by.
#[derive(Debug, Clone)]
struct KeptPackage {
    python: PathBuf,
    witnesses: Witnesses,
    bin: PathBuf,
}

fn package_witnesses(python: &Path, bin: &Path) -> Witnesses {
    let id = |p: &Path| {
        rustix::fs::stat(p)
            .ok()
            .map(|st| super::digests::StatId::of(&st))
    };
    let package = bin.parent().and_then(Path::parent).unwrap_or(bin);
    [id(python), id(package), id(bin)]
}

/// The kept answer of `python` when its witnesses still hold, else `probe`'s (kept when it
/// names a package and the witnesses had settled).
fn installed_package_kept(
    python: &Path,
    probe: &mut dyn FnMut(&Path) -> Option<PathBuf>,
) -> Option<PathBuf> {
    static KEPT: std::sync::Mutex<Option<KeptPackage>> = std::sync::Mutex::new(None);
    let kept = KEPT.lock().ok().and_then(|k| k.clone());
    if let Some(k) = kept.filter(|k| k.python == python) {
        if k.witnesses == package_witnesses(python, &k.bin) {
            return Some(k.bin);
        }
    }
    let start = super::digests::now_ns();
    let bin = probe(python)?;
    let witnesses = package_witnesses(python, &bin);
    let settled = witnesses
        .iter()
        .all(|w| w.is_some_and(|w| w.settled_before(start)));
    if let (true, Ok(mut k)) = (settled, KEPT.lock()) {
        *k = Some(KeptPackage {
            python: python.to_path_buf(),
            witnesses,
            bin: bin.clone(),
        });
    }
    Some(bin)
}

/// The identity as one word for a remote platform property: `nxcc-sim-<version>` for the
/// simulated toolchain, else the kind (`dir`, `simulated-dir`, `compiler`, `none`) and 32 hex
/// digits of the blake3 of the identity's canonical JSON.
pub fn word(identity: &Value) -> String {
    let kind = identity["kind"].as_str().unwrap_or("none");
    match kind {
        "simulated" => format!("nxcc-sim-{}", crate::VERSION),
        "none" => "none".to_string(),
        _ => {
            let text = serde_json::to_vec(identity).unwrap_or_default();
            let kind = if kind == "external" { "compiler" } else { kind };
            format!("{kind}-{}", &blake3::hash(&text).to_hex()[..32])
        }
    }
}

/// The tools to identify, by name, with the file each resolves to (`None`: not found).
fn tool_paths(tc: &Toolchain, tools: &Tools) -> Vec<(String, Option<PathBuf>)> {
    let mut out = Vec::new();
    match tools {
        Tools::All => {
            for t in toolchain::TOOLS {
                out.push((t.to_string(), tc.resolve(t)));
            }
            let lib = tc.libwalrus();
            out.push((
                toolchain::LIBWALRUS.to_string(),
                lib.is_file().then_some(lib),
            ));
        }
        Tools::OfPlan(plan) => {
            for step in plan.jobs.iter().flat_map(|j| &j.steps) {
                let (Some(tool), path) = (step.tool(), step.tool_path()) else {
                    continue;
                };
                match &step.action {
                    crate::jobs::Action::Library { library, .. } => {
                        out.push((toolchain::LIBWALRUS.to_string(), Some(library.clone())));
                    }
                    _ => {
                        let p = tc.resolve(tool).or_else(|| path.map(Path::to_path_buf));
                        out.push((tool.to_string(), p));
                    }
                }
            }
        }
    }
    out
}

/// `{"blake3", "size"}` of a file, remembered per stat identity; `{"missing": true}` if it
/// cannot be read.
pub(crate) fn file_digest(path: &Path, table: &Table) -> Value {
    let got = table.get(path, Kind::Blake3, &mut |f| {
        let mut h = blake3::Hasher::new();
        super::hashing::hash_open_into(f, path, &mut h)?;
        Ok(h.finalize().to_hex().to_string())
    });
    match got {
        Ok(g) => json!({ "blake3": g.value, "size": g.size }),
        Err(_) => json!({ "missing": true }),
    }
}

/// The first line an external compiler prints for `--version` (remembered per stat identity of
/// the executable when it answered with status 0); a description of what went wrong otherwise.
pub(crate) fn version_line(program: &Path, table: &Table) -> String {
    let mut failed: Option<String> = None;
    let got = table.get(
        program,
        Kind::Version,
        &mut |_| match ask_version(program) {
            Ok(line) => Ok(line),
            Err(why) => {
                failed = Some(why.clone());
                Err(std::io::Error::other(why))
            }
        },
    );
    match (got, failed) {
        (Ok(g), _) => g.value,
        (Err(_), Some(why)) => why,
        (Err(e), None) => format!("(no version: {e})"),
    }
}

/// Run `program --version` (no input, at most [`VERSION_TIMEOUT`]); its first line of output.
fn ask_version(program: &Path) -> Result<String, String> {
    let spawn = || {
        std::process::Command::new(program)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
    };
    // A compiler just written may still be open for writing in a child another thread forked
    // (ETXTBSY) until that child executes: try again a few times.
    let mut spawned = spawn();
    for _ in 0..20 {
        match &spawned {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(Duration::from_millis(10));
                spawned = spawn();
            }
            _ => break,
        }
    }
    let mut child = spawned.map_err(|e| format!("(no version: {e})"))?;
    let mut out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.take(64 << 10).read_to_end(&mut text);
        }
        text
    });
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "(no version: --version did not answer within {} s)",
                    VERSION_TIMEOUT.as_secs()
                ));
            }
        }
    };
    let text = reader.join().unwrap_or_default();
    let first = String::from_utf8_lossy(&text)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    if !status.success() {
        return Err(format!("(no version: --version exited with {status})"));
    }
    if first.is_empty() {
        return Err("(no version: --version printed nothing)".to_string());
    }
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tool_dir(root: &Path, name: &str, body: &str) -> PathBuf {
        let bin = root.join(name);
        std::fs::create_dir_all(&bin).unwrap();
        for t in toolchain::TOOLS {
            let p = bin.join(t);
            std::fs::write(&p, format!("#!/bin/sh\n# {t} {body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        bin
    }

    fn dir_identity(bin: &Path) -> Value {
        let tc = Toolchain {
            bin: bin.to_path_buf(),
            simulated: false,
        };
        of(
            &Request::Dir(bin.to_path_buf()),
            Some(&tc),
            &Engine::Pipeline,
            Tools::All,
            &Table::off(),
        )
    }

    #[test]
    fn the_same_tools_elsewhere_are_the_same_toolchain() {
        let d = tempfile::tempdir().unwrap();
        let a = tool_dir(d.path(), "a/bin", "v1");
        let b = tool_dir(d.path(), "venv2/lib/bin", "v1");
        // Other modification times too.
        for t in toolchain::TOOLS {
            std::fs::File::options()
                .write(true)
                .open(b.join(t))
                .unwrap()
                .set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000))
                .unwrap();
        }
        let (ia, ib) = (dir_identity(&a), dir_identity(&b));
        assert_eq!(ia, ib);
        assert_eq!(word(&ia), word(&ib));
        assert!(word(&ia).starts_with("dir-"));
        assert!(ia["tools"]["walrus_driver"]["blake3"].is_string());
        assert_eq!(ia["tools"][toolchain::LIBWALRUS]["missing"], true);
        // One tool's bytes differ: another identity, naming the tool.
        std::fs::write(b.join("walrus_driver"), "#!/bin/sh\n# walrus_driver v2\n").unwrap();
        let ic = dir_identity(&b);
        assert_ne!(word(&ia), word(&ic));
        let changed: Vec<&String> = ia["tools"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| ia["tools"][*k] != ic["tools"][*k])
            .collect();
        assert_eq!(changed, ["walrus_driver"]);
    }

    #[test]
    fn an_external_compiler_is_its_bytes_and_its_version() {
        let d = tempfile::tempdir().unwrap();
        let write = |name: &str, version: &str| {
            let p = d.path().join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(
                &p,
                format!("#!/bin/sh\n[ \"$1\" = --version ] && echo '{version}'\nexit 0\n"),
            )
            .unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let id = |p: &Path| {
            of(
                &Request::Auto,
                None,
                &Engine::external(p),
                Tools::All,
                &Table::memory_only(),
            )
        };
        let one = id(&write("one/neuronx-cc", "neuronx-cc 2.24.1"));
        assert_eq!(one["version"], "neuronx-cc 2.24.1");
        let two = id(&write("two/neuronx-cc", "neuronx-cc 2.24.1"));
        assert_eq!(one, two, "another path, the same compiler");
        assert!(word(&one).starts_with("compiler-"));
        let failing = d.path().join("failing");
        std::fs::write(&failing, "#!/bin/sh\nexit 3\n").unwrap();
        std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(version_line(&failing, &Table::memory_only()).contains("exited with"));
    }

    /// Wait until every file at `paths` has settled (its times older than the racy margin).
    fn settle(paths: &[&Path]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for p in paths {
            let id = || super::super::digests::StatId::of(&rustix::fs::stat(*p).unwrap());
            while !id().settled_before(super::super::digests::now_ns()) {
                assert!(Instant::now() < deadline, "{} never settled", p.display());
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }

    #[test]
    fn the_installed_package_is_asked_once_while_nothing_changes() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("site/neuronxcc/starfish/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let (python, asked) = (d.path().join("python3"), d.path().join("asked"));
        let script = |answer: &Path| {
            format!(
                "#!/bin/sh\necho >> '{}'\necho '{}'\n",
                asked.display(),
                answer.display()
            )
        };
        std::fs::write(&python, script(&bin)).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        let package = bin.parent().unwrap().parent().unwrap();
        let times_asked = || std::fs::read(&asked).map_or(0, |t| t.len());
        let ask =
            || installed_package_kept(&python, &mut |p| toolchain::probe_python_package_with(p));
        // Not settled yet: asked every time.
        assert_eq!(ask(), Some(bin.clone()));
        assert_eq!(ask(), Some(bin.clone()));
        assert_eq!(times_asked(), 2);
        settle(&[&python, package, &bin]);
        assert_eq!(ask(), Some(bin.clone()));
        assert_eq!(ask(), Some(bin.clone()));
        assert_eq!(times_asked(), 3, "kept once settled");
        // The package changed (a file added to it): asked again.
        std::fs::write(package.join("__init__.py"), "").unwrap();
        assert_eq!(ask(), Some(bin.clone()));
        assert_eq!(times_asked(), 4);
        // Another interpreter answering no package: asked every time, nothing kept — even
        // once it has settled, when an answer naming a package would be kept.
        std::fs::write(&python, script(&d.path().join("missing"))).unwrap();
        settle(&[&python]);
        assert_eq!(ask(), None);
        assert_eq!(ask(), None);
        assert_eq!(ask(), None);
        assert_eq!(times_asked(), 7);
    }

    #[test]
    fn the_simulated_toolchain_is_nxcc_s_version() {
        let v = of(
            &Request::Simulated,
            None,
            &Engine::Pipeline,
            Tools::All,
            &Table::off(),
        );
        assert_eq!(v["nxcc_version"], crate::VERSION);
        assert_eq!(word(&v), format!("nxcc-sim-{}", crate::VERSION));
    }
}
