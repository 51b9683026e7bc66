//! What each input's outputs are called: `<name>.neff` and `<name>.log` in the output directory,
//! a name of its own for every input of a batch, so that no two compiles write one file.
//!
//! The rule, over the inputs in the order they were given (a directory's files sorted):
//!
//! 1. an input is named after its stem ([`stem_of`]: the file name without `.hlo_module.pb`,
//!    `.hlo.pb`, `.pb` or `.hlo`): `mlp.hlo_module.pb` → `mlp`;
//! 2. inputs whose stems are the same — a module in text and in binary form
//!    (`attention.hlo`, `attention.hlo_module.pb`), or one name in two directories — are each
//!    named after their whole file name instead: `attention.hlo`, `attention.hlo_module.pb`;
//! 3. a name still taken (one file name in two directories) gets `-2`, `-3`, ... after it, in
//!    input order, the first keeping it: `a/m.pb` → `m.pb`, `b/m.pb` → `m.pb-2`.
//!
//! One file given twice (by itself, or also through its directory) is one input.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The name a model's outputs are named after when nothing else is: its file name without the
/// frameworks' suffixes (`.hlo_module.pb`, `.hlo.pb`, `.pb`, `.hlo`; `copy1.hlo_module.pb` →
/// `copy1`).
pub fn stem_of(model: &Path) -> String {
    let name = file_name(model);
    [".hlo_module.pb", ".hlo.pb", ".pb", ".hlo"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix).filter(|s| !s.is_empty()))
        .unwrap_or(&name)
        .to_string()
}

fn file_name(model: &Path) -> String {
    model
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "model".to_string())
}

/// The models without a file given a second time (the first mention stays), in order.
pub fn distinct(models: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    models
        .into_iter()
        .filter(|m| seen.insert(std::fs::canonicalize(m).unwrap_or_else(|_| m.clone())))
        .collect()
}

/// The name of each model's outputs, by the rule above: one per model, all distinct.
pub fn names(models: &[PathBuf]) -> Vec<String> {
    let stems: Vec<String> = models.iter().map(|m| stem_of(m)).collect();
    let mut count = std::collections::HashMap::<&str, usize>::new();
    for s in &stems {
        *count.entry(s.as_str()).or_default() += 1;
    }
    let mut names: Vec<String> = models
        .iter()
        .zip(&stems)
        .map(|(m, s)| match count[s.as_str()] {
            1 => s.clone(),
            _ => file_name(m),
        })
        .collect();
    let initial: HashSet<String> = names.iter().cloned().collect();
    let mut taken = HashSet::new();
    for name in &mut names {
        if taken.insert(name.clone()) {
            continue;
        }
        let free = (2..)
            .map(|n| format!("{name}-{n}"))
            .find(|c| !initial.contains(c) && !taken.contains(c))
            .unwrap_or_default();
        taken.insert(free.clone());
        *name = free;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stems_drop_the_frameworks_suffixes() {
        for (name, stem) in [
            ("copy1.hlo_module.pb", "copy1"),
            ("model.hlo.pb", "model"),
            ("graph.pb", "graph"),
            ("graph.hlo", "graph"),
            ("a.b.pb", "a.b"),
            (".pb", ".pb"),
            ("noext", "noext"),
        ] {
            assert_eq!(stem_of(Path::new(name)), stem, "{name}");
        }
    }

    fn named(paths: &[&str]) -> Vec<String> {
        names(&paths.iter().map(PathBuf::from).collect::<Vec<_>>())
    }

    #[test]
    fn colliding_stems_take_the_file_name_then_a_number() {
        assert_eq!(named(&["d/a.pb", "d/b.hlo"]), ["a", "b"]);
        // Text and binary twins.
        assert_eq!(
            named(&["d/attention.hlo", "d/attention.hlo_module.pb", "d/mlp.hlo"]),
            ["attention.hlo", "attention.hlo_module.pb", "mlp"]
        );
        // One file name in two directories: the first keeps it.
        assert_eq!(
            named(&["a/m.pb", "b/m.pb", "c/m.pb"]),
            ["m.pb", "m.pb-2", "m.pb-3"]
        );
        // A number never takes another input's name.
        assert_eq!(
            named(&["a/m.pb", "b/m.pb", "c/m.pb-2.hlo"]),
            ["m.pb", "m.pb-3", "m.pb-2"]
        );
        // A whole file name that is another input's stem.
        let n = named(&["x.hlo", "x.pb", "x.hlo.hlo"]);
        assert_eq!(n, ["x.hlo", "x.pb", "x.hlo-2"]);
        let all: HashSet<&String> = n.iter().collect();
        assert_eq!(all.len(), 3);
    }

    #[test]
    fn a_file_given_twice_is_one_input() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join("m.pb");
        std::fs::write(&m, b"x").unwrap();
        let again = dir.path().join(".").join("m.pb");
        let other = dir.path().join("gone.pb");
        assert_eq!(
            distinct(vec![m.clone(), again, other.clone(), other.clone()]),
            [m, other]
        );
    }
}
