//! How the framework's compile wrapper (libneuronxla's `neuron_cc_wrapper`, which
//! torch-neuronx's `neuron_parallel_compile` and optimum-neuron drive) runs the compiler on a
//! cache entry, and how it locks its cache — as far as its public traces show it; where they
//! are silent, the simplest rule consistent with them.
//!
//! **The argv and the work directory** (CLIENTS: the wrapper's own log lines `Call compiler with
//! cmd: ...` in public reports, e.g. aws-neuron-sdk issues 872 and 1299, optimum-neuron issue
//! 698, aws-neuron-samples issue 94, and torch-neuronx's `neuron_parallel_compile.py`, which names
//! the output `model.{cache_entry.key}.neff` in its work directory):
//! `neuronx-cc compile --framework=XLA <workdir>/model.MODULE_<key>.hlo_module.pb --output
//! <workdir>/model.MODULE_<key>.neff <the entry's flags>`, in a private work directory
//! (`/tmp/<user>/neuroncc_compile_workdir/<uuid>/`) that is also the compiler's working
//! directory. The graph keeps its file's suffix (`.hlo.pb` for entries of older releases).
//! The NEFF's header records its file name, so the NEFF a compile leaves in the cache is the one
//! a compile to `model.MODULE_<key>.neff` writes ([`work_names`]).
//!
//! **The wrapper's own flags** ([`WRAPPER_FLAGS`]): the caching documentation
//! (aws-neuron-sdk `general/arch/neuron-features/neuron-caching.rst`: `--no_cache`,
//! `--cache_dir=<url>`, `--log_level=...`, `--retry_failed_compilation`; "all flags demonstrated
//! above will be parsed by a tool called neuron_cc_wrapper ... will not be passed into Neuron
//! Compiler CLI") and `neuron_parallel_compile.py` (the wrapper's parse of `NEURON_CC_FLAGS`
//! yields `no_cache`, `cache_dir`, `dump`, `compile_workdir`; public `NEURON_CC_FLAGS` give
//! `--dump=DIR`, `--dump DIR`, `--compile_workdir=DIR`). Found in an entry's flags they are
//! dropped, as the wrapper drops them, with their value (`--x=v` or `--x v`).
//!
//! **Legacy entries** (releases up to 2.14, public Hub caches): the flags are in
//! `compile_flags.txt` (0 bytes for no flags, the `+d41d8cd9` entries: the flags hash is the MD5
//! of the text), and a NEFF without `model.done` is a finished compile. The text is read as
//! white-space separated words (`legacy_flags`, RECON: the simplest reading consistent with
//! the empty files seen).
//!
//! **The cache-wide lock** ([`CACHE_LOCK`]): libneuronxla's `neuron_cc_cache.py` wraps its cache
//! operations in `with self.lock_dir:`, whose `__enter__` opens `<cache>/lock` with
//! `open(self.lock_path, 'w')` (public tracebacks: vLLM issue reports on `PermissionError ...
//! neuron-cache/lock`, frames `neuron_cc_cache.py`, lines 118 and 137). The call that locks the
//! opened file is not in any public trace: whether it is `flock` or a POSIX `fcntl` lock is not
//! established. nxcc therefore takes both on `<cache>/lock` — an exclusive `flock` and an
//! exclusive open-file-description `fcntl` lock over the whole file — so that it excludes the
//! wrapper whichever it uses (RECON), and holds them around its scans and publications.
//!
//! **The framework's cache in a bucket** (`NEURON_COMPILE_CACHE_URL=s3://BUCKET/PREFIX`):
//! libneuronxla's `CompileCacheS3` keeps the same `neuronxcc-<version>/MODULE_<hash>+<flags>/`
//! layout under the prefix (djl-serving's logs: `Using a cached neff at
//! s3://<bucket>/neuronxcc-2.13.72.0+78a426937/MODULE_<hash>+<flags>/model.neff`), and has the
//! interface of `CompileCacheFs`, per-graph `hlo_acquire_lock`/`hlo_release_lock` included
//! (optimum-neuron's `hub_neuronx_cache.py` delegates its locks to the default cache, S3 or
//! not). Its source is not public: whether it writes a lock object, under which name and with
//! what text, is not established. nxcc honours every `*.lock` object in an entry as a lock; one
//! it did not make says nothing of its holder and is not known to be refreshed, so it is given a
//! lease from its last write ([`FOREIGN_LOCK_LEASE`], RECON: long enough for most compiles, short
//! enough that a crashed run does not hold an entry for a day; `--break-locks` takes it at once),
//! and nxcc's own lock object is at the name the directory cache's lock file has
//! (`<graph>.lock`), so that a framework locking by that name and nxcc exclude each other.

/// The cache-wide lock file, in the cache directory.
pub const CACHE_LOCK: &str = "lock";

/// How long a lock object nxcc did not make, in a framework cache in a bucket, is honoured
/// after its last write: two hours (see the module documentation).
pub const FOREIGN_LOCK_LEASE: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// The flags the wrapper consumes itself, and whether each takes a value.
pub const WRAPPER_FLAGS: &[(&str, bool)] = &[
    ("--cache_dir", true),
    ("--no_cache", false),
    ("--retry_failed_compilation", false),
    ("--log_level", true),
    ("--dump", true),
    ("--compile_workdir", true),
];

/// The entry's flags without the wrapper's own ([`WRAPPER_FLAGS`]): `(kept, dropped)`, each in
/// order; a dropped flag keeps its value with it (`--dump DIR` is one dropped item).
pub(crate) fn drop_wrapper_flags(flags: &[String]) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    let mut i = 0;
    while i < flags.len() {
        let f = &flags[i];
        let matched = WRAPPER_FLAGS.iter().find_map(|(name, takes)| {
            if f == name {
                Some(if *takes { 2 } else { 1 })
            } else if *takes && f.starts_with(&format!("{name}=")) {
                Some(1)
            } else {
                None
            }
        });
        match matched {
            Some(n) => {
                let end = (i + n).min(flags.len());
                dropped.push(flags[i..end].join(" "));
                i = end;
            }
            None => {
                kept.push(f.clone());
                i += 1;
            }
        }
    }
    (kept, dropped)
}

/// The names the wrapper gives the graph and the NEFF in its work directory, for the entry
/// `entry_name` (`MODULE_<key>`) whose graph file is `graph_file` (`model.hlo_module.pb`,
/// `model.hlo.pb`): `model.MODULE_<key>.hlo_module.pb` and `model.MODULE_<key>.neff`.
pub fn work_names(entry_name: &str, graph_file: &str) -> (String, String) {
    let suffix = graph_file.strip_prefix("model.").unwrap_or(graph_file);
    (
        format!("model.{entry_name}.{suffix}"),
        format!("model.{entry_name}.neff"),
    )
}

/// The compile arguments the wrapper gives the compiler (after `compile`): `--framework=XLA
/// <graph> --output <neff> <flags>`.
pub fn compile_args(graph: &str, neff: &str, flags: &[String]) -> Vec<String> {
    let mut argv = vec![
        "--framework=XLA".to_string(),
        graph.to_string(),
        "--output".to_string(),
        neff.to_string(),
    ];
    argv.extend(flags.iter().cloned());
    argv
}

/// The flags of a legacy entry's `compile_flags.txt`: its white-space separated words.
pub(crate) fn legacy_flags(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_wrappers_flags_are_dropped_with_their_values() {
        let (kept, dropped) = drop_wrapper_flags(&v(&[
            "--target=trn2",
            "--log_level=INFO",
            "--dump",
            "/d",
            "-O1",
            "--cache_dir=/c",
            "--retry_failed_compilation",
            "--compile_workdir",
            "/w",
            "--model-type=transformer",
        ]));
        assert_eq!(
            kept,
            v(&["--target=trn2", "-O1", "--model-type=transformer"])
        );
        assert_eq!(
            dropped,
            v(&[
                "--log_level=INFO",
                "--dump /d",
                "--cache_dir=/c",
                "--retry_failed_compilation",
                "--compile_workdir /w"
            ])
        );
        // A flag whose name merely starts like one of them is the compiler's.
        let (kept, dropped) = drop_wrapper_flags(&v(&["--dumpx", "--no_cache_please"]));
        assert_eq!((kept.len(), dropped.len()), (2, 0));
    }

    #[test]
    fn the_work_names_and_argv_are_the_wrappers() {
        let (g, n) = work_names("MODULE_123+d41d8cd9", "model.hlo_module.pb");
        assert_eq!(g, "model.MODULE_123+d41d8cd9.hlo_module.pb");
        assert_eq!(n, "model.MODULE_123+d41d8cd9.neff");
        assert_eq!(
            work_names("MODULE_1+2", "model.hlo.pb").0,
            "model.MODULE_1+2.hlo.pb"
        );
        assert_eq!(
            compile_args("/w/g.pb", "/w/g.neff", &v(&["--fast-math", "all"])),
            v(&[
                "--framework=XLA",
                "/w/g.pb",
                "--output",
                "/w/g.neff",
                "--fast-math",
                "all"
            ])
        );
        assert_eq!(legacy_flags(""), Vec::<String>::new());
        assert_eq!(legacy_flags(" -O1\n--lnc 1 "), v(&["-O1", "--lnc", "1"]));
    }
}
