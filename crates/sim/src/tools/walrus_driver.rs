//! The simulated `walrus_driver` (WalrusDriver, and BIRVerifier / BIRSim), one process per
//! subgraph, run in `W/sgNN` — or in-process through `libwalrus.so`'s `run_backend_driver`:
//!
//! ```text
//! walrus_driver bir.json --pass <passes joined by ','>
//!   --memory-analysis-dump=memory-pressure --memory-analysis-mem-types=dram
//!   [--dge-levels <sorted levels joined by ','>] [--smt-allocation]
//!   [--max-instruction-limit <n>] [--print-after <pass>] [--dma-qos-class-count <n>]
//!   [<internal_backend_options>...]
//! ```
//!
//! - `--optlevel` or `--allocator` together with `--pass` is rejected, as the native tool does
//!   (WIKI DVR003, DVR005) — also when they arrive among the extra options.
//! - Every pass must be one of the walrus pass corpus (02-plan.md), each at most once;
//!   `--print-after` must name one of the given passes.
//! - Outputs go next to the input file (the directory of the `bir.json` path), never into the
//!   process's current directory: the fork-walrus path passes an absolute `bir.json` path.
//! - Modes: a pass list made only of `birverifier` and/or `bir_sim` checks (verify-only,
//!   simulate-only) and writes no file; it prints a one-line summary on stdout. Any other pass
//!   list writes `def.json` (schema "0.6"), `tensor_map.json`, `neff.json` (schema "0.5") and one
//!   `<Engine>.bin` per engine the BIR uses, each `.bin` 64 + 32 bytes per instruction on that
//!   engine.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::{Prepared, ToolError};
use crate::argv::{checks::*, opt, Args, Form, Opt, Spec};
use crate::bir::Bir;
use crate::error::NccError;
use crate::files::{atomic_write, resolve};

/// Every pass name the driver may send (the seed's corpus, with the scheduler variants).
pub const PASSES: &[&str] = &[
    "unroll",
    "lower_ac",
    "pre_sched",
    "experimental_loop_lsa",
    "experimental_loop_shift_left",
    "partitioner",
    "bir_splitter",
    "coloring_allocator",
    "linear_scan_allocator",
    "dma_optimization",
    "anti_dependency_analyzer",
    "vn_splitter",
    "shift_left",
    "post_sched",
    "tensorcopy_accel",
    "dep_reduction",
    "print_metrics",
    "birverifier",
    "bir_sim",
];

/// The passes that only check the BIR.
const CHECK_PASSES: [&str; 2] = ["birverifier", "bir_sim"];

/// Bytes of an engine `.bin` besides its per-instruction bytes.
pub const BIN_BASE: usize = 64;
/// Bytes of an engine `.bin` per instruction on that engine.
pub const BIN_PER_INSTRUCTION: usize = 32;

fn pass_list(v: &str) -> Result<(), String> {
    let passes: Vec<&str> = v.split(',').collect();
    for (i, p) in passes.iter().enumerate() {
        if !PASSES.contains(p) {
            return Err(format!("unknown pass {p:?}"));
        }
        if passes[..i].contains(p) {
            return Err(format!("pass {p:?} given twice"));
        }
    }
    Ok(())
}

fn pass_name(v: &str) -> Result<(), String> {
    if PASSES.contains(&v) {
        Ok(())
    } else {
        Err(format!("unknown pass {v:?}"))
    }
}

fn memory_dump(v: &str) -> Result<(), String> {
    one_of(v, &["memory-pressure"])
}

fn mem_types(v: &str) -> Result<(), String> {
    one_of(v, &["dram"])
}

fn allocator(v: &str) -> Result<(), String> {
    one_of(v, &["coloring", "lsa"])
}

static OPTS: &[Opt] = &[
    opt("--pass", Form::Sep, pass_list).required(),
    opt("--memory-analysis-dump", Form::Eq, memory_dump),
    opt("--memory-analysis-mem-types", Form::Eq, mem_types),
    opt("--dge-levels", Form::Sep, sorted_list),
    opt("--smt-allocation", Form::Switch, nonempty),
    opt("--max-instruction-limit", Form::Sep, int),
    opt("--print-after", Form::Sep, pass_name),
    opt("--dma-qos-class-count", Form::Sep, non_negative),
    opt("--optlevel", Form::Either, nonempty).everywhere(),
    opt("--allocator", Form::Either, allocator).everywhere(),
];

/// The command line.
pub static SPEC: Spec = Spec {
    input_first: Some("bir.json"),
    opts: OPTS,
    extra: Some("<internal_backend_options>"),
};

/// What the invocation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Compile,
    /// Only `birverifier` and/or `bir_sim`.
    Check,
}

struct Job {
    bir: Bir,
    bir_digest: blake3::Hash,
    out_dir: PathBuf,
    passes: Vec<String>,
    mode: Mode,
    print_after: Option<String>,
    options: Value,
}

/// The [`PrepareFn`](super::PrepareFn) of `walrus_driver`: check the argv, read the BIR.
pub fn prepare(args: &Args, cwd: &Path) -> Result<Box<dyn Prepared>, ToolError> {
    if args.has("--optlevel") {
        return Err(ToolError::Ncc(NccError::new(
            "DVR003",
            "--optlevel cannot be combined with --pass",
            "Give either an optimization level or an explicit pass list, not both.",
        )));
    }
    if args.has("--allocator") {
        return Err(ToolError::Ncc(NccError::new(
            "DVR005",
            "--allocator cannot be combined with --pass",
            "Name the allocator pass in the --pass list instead.",
        )));
    }
    let passes: Vec<String> = args
        .value("--pass")
        .split(',')
        .map(str::to_string)
        .collect();
    if let Some(p) = args.get("--print-after") {
        if !passes.iter().any(|x| x == p) {
            return Err(ToolError::Usage(format!(
                "--print-after {p}: {p} is not in the --pass list"
            )));
        }
    }
    let input = resolve(cwd, args.input.as_deref().unwrap_or_default());
    let bytes = std::fs::read(&input).map_err(|e| ToolError::reading("input", &input, e))?;
    let bir = Bir::check(&bytes)
        .map_err(|e| ToolError::Failed(format!("{}: invalid BIR: {e}", input.display())))?;
    let mode = if passes.iter().all(|p| CHECK_PASSES.contains(&p.as_str())) {
        Mode::Check
    } else {
        Mode::Compile
    };
    let levels: Vec<&str> = args
        .get("--dge-levels")
        .map(|l| l.split(',').collect())
        .unwrap_or_default();
    let int_opt = |name: &str| args.get(name).and_then(|v| v.parse::<i64>().ok());
    let options = json!({
        "memory_analysis_dump": args.get("--memory-analysis-dump"),
        "memory_analysis_mem_types": args.get("--memory-analysis-mem-types"),
        "dge_levels": levels,
        "smt_allocation": args.has("--smt-allocation"),
        "max_instruction_limit": int_opt("--max-instruction-limit"),
        "print_after": args.get("--print-after"),
        "dma_qos_class_count": int_opt("--dma-qos-class-count"),
        "extra": args.extra,
    });
    Ok(Box::new(Job {
        bir,
        bir_digest: blake3::hash(&bytes),
        out_dir: input
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| cwd.to_path_buf()),
        passes,
        mode,
        print_after: args.get("--print-after").map(str::to_string),
        options,
    }))
}

impl Job {
    fn engine_bin(&self, engine: &str, count: usize, options_digest: &blake3::Hash) -> Vec<u8> {
        let mut out = vec![0u8; BIN_BASE + BIN_PER_INSTRUCTION * count];
        let mut h = blake3::Hasher::new();
        h.update(b"nxcc-sim engine bin\0");
        h.update(self.bir_digest.as_bytes());
        h.update(options_digest.as_bytes());
        h.update(engine.as_bytes());
        h.finalize_xof().fill(&mut out[32..]);
        out[..8].copy_from_slice(b"NXCCSIM\0");
        let mut name = [0u8; 16];
        name[..engine.len()].copy_from_slice(engine.as_bytes());
        out[8..24].copy_from_slice(&name);
        out[24..32].copy_from_slice(&(count as u64).to_le_bytes());
        out
    }

    fn write(&self, name: &str, bytes: &[u8]) -> Result<(), ToolError> {
        let p = self.out_dir.join(name);
        atomic_write(&p, bytes).map_err(|e| ToolError::writing(&p, e))
    }

    fn write_json(&self, name: &str, value: &Value) -> Result<(), ToolError> {
        let mut b = serde_json::to_vec_pretty(value).unwrap_or_default();
        b.push(b'\n');
        self.write(name, &b)
    }

    fn compile(&self) -> Result<(), ToolError> {
        let bir = &self.bir;
        let engines = bir.engines();
        let settings = json!({"passes": self.passes, "options": self.options});
        let options_digest = blake3::hash(settings.to_string().as_bytes());
        let mut engine_table = serde_json::Map::new();
        for (i, engine) in crate::jobs::walrus_driver::ENGINES.iter().enumerate() {
            let count = bir.per_engine[i];
            if count == 0 {
                continue;
            }
            let bin = self.engine_bin(engine, count, &options_digest);
            let file = format!("{engine}.bin");
            engine_table.insert(
                engine.to_string(),
                json!({"instructions": count, "bin": file, "size": bin.len()}),
            );
            self.write(&file, &bin)?;
        }
        let tensor_map = json!({
            "inputs": bir.field("inputs"),
            "outputs": bir.field("outputs"),
            "alias_map": bir.field("aliases"),
        });
        self.write_json("tensor_map.json", &tensor_map)?;
        let mut def = json!({
            "schema_version": "0.6",
            "producer": "nxcc-sim walrus_driver",
            "note": crate::NOT_FOR_HARDWARE,
            "sg": bir.sg,
            "bir_blake3": self.bir_digest.to_hex().to_string(),
            "passes": self.passes,
            "options": self.options,
            "instruction_count": bir.instruction_count,
            "engines": engine_table,
            "inputs": bir.field("inputs"),
            "outputs": bir.field("outputs"),
        });
        if let (Some(w), Some(obj)) = (bir.doc.get("watchpoint"), def.as_object_mut()) {
            obj.insert("watchpoint".into(), w.clone());
        }
        self.write_json("def.json", &def)?;
        let neff = json!({
            "schema_version": "0.5",
            "sg": bir.sg,
            "op": "__kelf",
            "engines": engines,
            "instruction_count": bir.instruction_count,
            "def": "def.json",
            "tensor_map": "tensor_map.json",
            "note": crate::NOT_FOR_HARDWARE,
        });
        self.write_json("neff.json", &neff)
    }
}

impl Prepared for Job {
    fn key(&self) -> blake3::Hash {
        self.bir_digest
    }

    fn execute(&self) -> Result<(), ToolError> {
        if let Some(p) = &self.print_after {
            println!(
                "walrus_driver: IR after {p}: {} instructions of {} on {}",
                self.bir.instruction_count,
                self.bir.sg,
                self.bir.engines().join(", ")
            );
        }
        match self.mode {
            Mode::Check => {
                println!(
                    "walrus_driver: {}: {} of {} instructions on {}: ok (simulated)",
                    self.passes.join(","),
                    self.bir.sg,
                    self.bir.instruction_count,
                    self.bir.engines().join(", ")
                );
                Ok(())
            }
            Mode::Compile => self.compile(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A work dir with the simulated frontend's output for a model of about `size` bytes.
    fn work_dir(size: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.hlo");
        std::fs::write(&model, crate::testing::text_model(size, 1)).unwrap();
        let args: Vec<String> = [
            "--input",
            &model.display().to_string(),
            "--out-dir",
            "./",
            "--output",
            "penguin.py",
            "--target-instance=trn2",
            "--logical-nc-config=2",
            "--verbose=user",
            "--logfile=/tmp/log",
            "--logfile-verbose=info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(crate::run_tool("hlo2penguin", &args, dir.path()), 0);
        crate::frontend::run(&model, dir.path(), None).unwrap();
        dir
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn outputs_go_next_to_an_absolute_input_not_into_cwd() {
        let w = work_dir(3000);
        let elsewhere = tempfile::tempdir().unwrap();
        let bir = w.path().join("sg00/bir.json").display().to_string();
        let status = crate::run_tool(
            "walrus_driver",
            &s(&[&bir, "--pass", "unroll,coloring_allocator,birverifier"]),
            elsewhere.path(),
        );
        assert_eq!(status, 0);
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
        let def: Value =
            serde_json::from_slice(&std::fs::read(w.path().join("sg00/def.json")).unwrap())
                .unwrap();
        assert_eq!(def["schema_version"], "0.6");
        let neff: Value =
            serde_json::from_slice(&std::fs::read(w.path().join("sg00/neff.json")).unwrap())
                .unwrap();
        assert_eq!(neff["schema_version"], "0.5");
        assert_eq!(neff["sg"], "sg00");
        for e in neff["engines"].as_array().unwrap() {
            let bin = w
                .path()
                .join("sg00")
                .join(format!("{}.bin", e.as_str().unwrap()));
            let n = def["engines"][e.as_str().unwrap()]["instructions"]
                .as_u64()
                .unwrap() as usize;
            assert_eq!(
                std::fs::metadata(bin).unwrap().len() as usize,
                BIN_BASE + BIN_PER_INSTRUCTION * n
            );
        }
    }

    #[test]
    fn check_only_pass_lists_write_nothing() {
        let w = work_dir(0);
        let sg = w.path().join("sg00");
        let before: Vec<_> = std::fs::read_dir(&sg).unwrap().collect();
        for pass in ["birverifier", "bir_sim", "birverifier,bir_sim"] {
            assert_eq!(
                crate::run_tool("walrus_driver", &s(&["bir.json", "--pass", pass]), &sg),
                0
            );
        }
        assert_eq!(std::fs::read_dir(&sg).unwrap().count(), before.len());
        std::fs::write(sg.join("bir.json"), b"{\"format\": \"other\"}").unwrap();
        assert_eq!(
            crate::run_tool(
                "walrus_driver",
                &s(&["bir.json", "--pass", "birverifier"]),
                &sg
            ),
            1
        );
    }

    #[test]
    fn optlevel_and_allocator_are_rejected_with_pass() {
        let w = work_dir(0);
        let sg = w.path().join("sg00");
        for extra in [
            &["--optlevel", "2"][..],
            &["--optlevel=1"][..],
            &["--allocator", "coloring"][..],
            &["--foo", "--allocator=lsa"][..],
        ] {
            let mut a = s(&["bir.json", "--pass", "unroll"]);
            a.extend(s(extra));
            assert_eq!(crate::run_tool("walrus_driver", &a, &sg), 2, "{extra:?}");
        }
        assert!(!sg.join("def.json").exists());
    }

    #[test]
    fn larger_bir_gives_larger_engine_binaries() {
        let small = work_dir(1000);
        let large = work_dir(100_000);
        let total = |w: &tempfile::TempDir| {
            let sg = w.path().join("sg00");
            assert_eq!(
                crate::run_tool("walrus_driver", &s(&["bir.json", "--pass", "unroll"]), &sg),
                0
            );
            std::fs::read_dir(&sg)
                .unwrap()
                .flatten()
                .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
                .map(|e| e.metadata().unwrap().len())
                .sum::<u64>()
        };
        assert!(total(&large) > 20 * total(&small));
    }
}
