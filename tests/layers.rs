//! The layering rule inside a crate, which the crate boundaries cannot hold: no import circles
//! between a crate's modules, and every `crate::` path in a crate of several layers (`nxcc-core`,
//! the product) names a module of a lower layer than the module it is written in, as the Layout
//! table of CONTRIBUTING.md assigns them (a reconstructed rule, `recon::X`, may also serve the
//! modules of its own layer; in the product, a lower crate re-exported at its root is below every
//! layer). A module missing from the table, or an import that goes sideways or up, fails with the
//! file and the path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The source roots of the crates of several layers, with the crate's name in the Layout table.
const LAYERED: [(&str, &str); 2] = [("nxcc-core", "crates/core/src"), ("nxcc", "src")];

/// The source roots of every crate (their module circles are checked).
const ROOTS: [&str; 6] = [
    "crates/core/src",
    "crates/sim/src",
    "crates/walrus/src",
    "crates/remote/src",
    "crates/s3/src",
    "src",
];

/// The modules the product re-exports from the crates below it.
fn lower_crate_modules() -> Vec<String> {
    let lib = std::fs::read_to_string(Path::new(ROOT).join("crates/core/src/lib.rs")).unwrap();
    let mut out: Vec<String> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("pub mod "))
        .map(|m| m.trim_end_matches(';').to_string())
        .collect();
    out.push("remote".into());
    out
}

/// `src/run/` → `run`, `src/toolchain.rs` → `toolchain`, `src/recon/cli.rs` → `recon::cli`,
/// `src/bin/nxcc-sim.rs` → `bin` (a path inside one crate's root, written from `src/`).
fn module_of_path(path: &str) -> Option<String> {
    let rest = path.strip_prefix("src/")?;
    let rest = rest.trim_end_matches('/').trim_end_matches(".rs");
    let mut parts = rest.split('/');
    let top = parts.next()?.to_string();
    match (top.as_str(), parts.next()) {
        ("recon", Some(rule)) => Some(format!("recon::{rule}")),
        _ => Some(top),
    }
}

/// CONTRIBUTING.md's Layout table: module → layer, for the crate `krate` whose source root is
/// `root`.
fn layers(krate: &str, root: &str) -> BTreeMap<String, u32> {
    let contributing = std::fs::read_to_string(Path::new(ROOT).join("CONTRIBUTING.md")).unwrap();
    let table = contributing
        .split("\n## Layout\n")
        .nth(1)
        .expect("CONTRIBUTING.md has a Layout section");
    let mut out = BTreeMap::new();
    for line in table.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 5 || cells[1] != krate {
            continue;
        }
        let Ok(layer) = cells[2].parse::<u32>() else {
            continue;
        };
        for path in cells[3].split(',') {
            let path = path.trim().trim_matches('`');
            let Some(inside) = path.strip_prefix(root) else {
                continue;
            };
            if let Some(m) = module_of_path(&format!("src{inside}")) {
                out.insert(m, layer);
            }
        }
    }
    assert!(
        out.len() > 3,
        "the Layout table has no rows for {krate}: {out:?}"
    );
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (doc links may name any module).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::a` or `crate::recon::b` named in `code`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        let word = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let first = word(after);
        let before_ok = i == 0 || {
            let c = rest.as_bytes()[i - 1];
            !(c.is_ascii_alphanumeric() || c == b'_')
        };
        if before_ok && !first.is_empty() {
            if first == "recon" {
                let second = word(after.strip_prefix("recon::").unwrap_or(""));
                out.push(if second.is_empty() {
                    "recon".to_string()
                } else {
                    format!("recon::{second}")
                });
            } else if first.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                out.push(first);
            }
        }
        rest = after;
    }
    out
}

#[test]
fn every_import_goes_down_a_layer() {
    let mut problems = Vec::new();
    for (krate, root) in LAYERED {
        problems.extend(imports_going_up(krate, root));
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// The imports of `krate` (source root `root`) that do not go down a layer.
fn imports_going_up(krate: &str, root: &str) -> Vec<String> {
    let layers = layers(krate, root);
    let lower = if krate == "nxcc" {
        lower_crate_modules()
    } else {
        Vec::new()
    };
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join(root), &mut files);
    let mut problems = Vec::new();
    for file in files {
        let in_root = file
            .strip_prefix(Path::new(ROOT).join(root))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let rel = format!("{root}/{in_root}");
        if ["lib.rs", "main.rs", "recon/mod.rs", "bin/nxcc-sim.rs"].contains(&in_root.as_str()) {
            continue;
        }
        let module = module_of_path(&format!("src/{in_root}")).unwrap();
        let Some(&own) = layers.get(&module) else {
            problems.push(format!(
                "{rel}: module `{module}` is not in CONTRIBUTING.md's Layout table"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for used in crate_paths(&code(&text)) {
            if used == module {
                continue;
            }
            match layers.get(&used) {
                None if lower.iter().any(|l| used.split("::").next() == Some(l)) => {}
                None => problems.push(format!(
                    "{rel}: `crate::{used}` is not a module of the Layout table"
                )),
                // A reconstructed rule serves its own layer; it imports only from below.
                Some(&theirs)
                    if theirs == own
                        && used.starts_with("recon::")
                        && !module.starts_with("recon") => {}
                Some(&theirs) if theirs >= own => problems.push(format!(
                    "{rel}: `{module}` (layer {own}) uses `crate::{used}` (layer {theirs})"
                )),
                Some(_) => {}
            }
        }
    }
    problems
}

#[test]
fn the_checker_sees_upward_and_sideways_imports() {
    // The checker itself: paths are found in code, not in comments, and recon rules are told
    // apart by their subject.
    let found = crate_paths(&code(
        "use crate::plan::Plan; // crate::daemon\nlet x = crate::recon::cache::rule();\nmy_crate::x",
    ));
    assert_eq!(found, ["plan", "recon::cache"]);
    assert_eq!(module_of_path("src/run/process.rs").as_deref(), Some("run"));
    assert_eq!(
        module_of_path("src/recon/cli.rs").as_deref(),
        Some("recon::cli")
    );
    let core = layers("nxcc-core", "crates/core/src");
    assert!(core["run"] < core["engine"] && core["engine"] < core["cache"]);
    let product = layers("nxcc", "src");
    assert!(product["compile"] < product["daemon"] && product["shim"] < product["driver"]);
    assert!(!product.contains_key("engine") && lower_crate_modules().contains(&"engine".into()));
}

/// `a/b.rs` and `a/b/mod.rs` (inside a crate's source root) → `["a", "b"]`.
fn module_path(rel: &str) -> Vec<String> {
    let rest = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rest.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every `crate::...` and `super::...` path in `code`, as written.
fn module_references(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts = (rest.starts_with("crate::") || rest.starts_with("super::"))
            && (i == 0
                || !(bytes[i - 1].is_ascii_alphanumeric()
                    || bytes[i - 1] == b'_'
                    || bytes[i - 1] == b':'));
        if !starts {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(rest.len());
        out.push(
            rest[..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        );
        i += end.max(1);
    }
    out
}

#[test]
fn no_module_imports_itself_through_others() {
    let mut cycles = Vec::new();
    for root in ROOTS {
        cycles.extend(circles(root));
    }
    assert!(cycles.is_empty(), "import circles:\n{}", cycles.join("\n"));
}

/// The import circles between the modules of the crate whose source root is `root`.
fn circles(root: &str) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join(root), &mut files);
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for f in &files {
        let in_root = f
            .strip_prefix(Path::new(ROOT).join(root))
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let m = module_path(&in_root);
        if !(m == ["lib"] || m == ["main"]) {
            modules.insert(m, format!("{root}/{in_root}"));
        }
    }
    let mut edges: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    for (m, rel) in &modules {
        let text = std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap();
        // Test modules may reach anywhere.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for path in module_references(&code(text)) {
            let (mut base, rest): (Vec<String>, &[String]) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                _ => {
                    let ups = path.iter().take_while(|p| *p == "super").count();
                    (m[..m.len().saturating_sub(ups)].to_vec(), &path[ups..])
                }
            };
            // The longest prefix that names a module file.
            let mut target = None;
            for n in (1..=rest.len()).rev() {
                let mut cand = base.clone();
                cand.extend_from_slice(&rest[..n]);
                if modules.contains_key(&cand) {
                    target = Some(cand);
                    break;
                }
            }
            base.clear();
            if let Some(t) = target {
                // A module's own items and its parent's are not edges between siblings.
                if &t != m && !m.starts_with(&t) {
                    edges.entry(m.clone()).or_default().push(t);
                }
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, Vec<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
        cycles: &mut Vec<String>,
    ) {
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for t in edges.get(m).into_iter().flatten() {
            match state.get(t).copied().unwrap_or(0) {
                0 => visit(t, edges, state, stack, cycles),
                1 => {
                    let from = stack.iter().position(|s| s == t).unwrap();
                    let names: Vec<String> = stack[from..]
                        .iter()
                        .chain(std::iter::once(t))
                        .map(|p| p.join("::"))
                        .collect();
                    cycles.push(names.join(" → "));
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
    }
    let mut state = BTreeMap::new();
    let mut cycles = Vec::new();
    for m in modules.keys() {
        if !state.contains_key(m) {
            visit(m, &edges, &mut state, &mut Vec::new(), &mut cycles);
        }
    }
    cycles
}

/// Every identifier in the code (comments left out) of the files under `dirs`.
fn identifiers(dirs: &[&str]) -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    for d in dirs {
        rust_files(&Path::new(ROOT).join(d), &mut files);
    }
    let mut out = std::collections::BTreeSet::new();
    for f in files {
        let text = code(&std::fs::read_to_string(&f).unwrap());
        out.extend(
            text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .map(str::to_string),
        );
    }
    out
}

/// nxcc-core publishes what the crates above it use: a `pub fn` of it is named somewhere in
/// another crate, the product's tests or its benchmarks; anything else is `pub(crate)` (or
/// private). By name, so a name another crate uses for something else keeps it public: the
/// check catches what no other crate could be calling.
#[test]
fn nxcc_core_publishes_only_functions_other_crates_name() {
    let used = identifiers(&[
        "src",
        "crates/sim/src",
        "crates/walrus/src",
        "crates/remote/src",
        "crates/s3/src",
        "tests",
        "benches",
    ]);
    let mut files = Vec::new();
    rust_files(&Path::new(ROOT).join("crates/core/src"), &mut files);
    files.sort();
    let mut unused = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let mut rest = line.trim_start();
            let Some(after) = rest.strip_prefix("pub ") else {
                continue;
            };
            rest = after;
            for q in ["const ", "async ", "unsafe "] {
                rest = rest.strip_prefix(q).unwrap_or(rest);
            }
            let Some(sig) = rest.strip_prefix("fn ") else {
                continue;
            };
            let name: String = sig
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !used.contains(&name) {
                let rel = f.strip_prefix(ROOT).unwrap().display().to_string();
                unused.push(format!("{rel}:{}: pub fn {name}", i + 1));
            }
        }
    }
    assert!(
        unused.is_empty(),
        "public functions of nxcc-core no other crate names (make them pub(crate)):\n{}",
        unused.join("\n")
    );
}
