//! The simulated frontend: what the Frontend job runs, in-process, with the simulated toolchain
//! (the real one is Penguin, inside the Neuron compiler's Python package).
//!
//! It requires `penguin.py` in the work dir, written for this model by the (simulated)
//! `hlo2penguin` before it, reads the model's HLO modules (`Model::graphs`: a file is one module,
//! text or binary; a directory one per `*.pb` file; anything else is refused), and writes per
//! subgraph `sgNN/bir.json`, `sgNN/tensor_map.json` and `sgNN/io_transposes.json`, and
//! `W/hlo_netlist.json`:
//! - subgraphs: one by default; N for a model directory holding N `*.pb` files (one per module);
//!   or the override (the driver passes `NXCC_SIM_SUBGRAPHS`), in which case the model's bytes
//!   are split into that many equal runs;
//! - the BIR's instruction count scales with the subgraph's model bytes (`crate::bir`);
//! - a subgraph that is a whole module has that module's entry parameters as inputs and its
//!   results as outputs (name, dtype, dimensions, bytes), and its `input_output_alias` as the
//!   alias map; `io_transposes.json` holds one entry per parameter of rank 2 to 6 (`reshape` = its
//!   shape, `transpose` = the identity with the last two axes swapped), so StaticIOTranspose has
//!   real work. When one module is split over several subgraphs, the first takes its parameters,
//!   the last gives its results, and the ones between pass `sgNN_output0` (shaped like the first
//!   result) along, with empty io_transposes arrays.
//!
//! The fault and cost injection of the simulated tools does not apply here: the frontend runs
//! inside the driver's own process.
//!
//! Its output is a test instrument's: it cannot run on Neuron hardware.

use std::path::Path;

use serde_json::{json, Value};

use crate::bir::{self, AliasEntry, Port, SubgraphSource};
use crate::files::{atomic_write, Model};
use crate::hlo;
use crate::tools::hlo2penguin::MODEL_LINE_PREFIX;

/// The file the frontend requires in the work dir.
pub const PENGUIN: &str = "penguin.py";
/// The netlist the frontend writes in the work dir.
pub const NETLIST: &str = "hlo_netlist.json";

/// Why the simulated frontend failed: what it says, and the operating system's error number
/// when a file could not be read or written (a real frontend's `OSError`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendError {
    /// The message.
    pub message: String,
    /// The error number behind it, if an I/O error caused it.
    pub os_error: Option<i32>,
}

impl From<String> for FrontendError {
    fn from(message: String) -> FrontendError {
        FrontendError {
            message,
            os_error: None,
        }
    }
}

impl From<&str> for FrontendError {
    fn from(message: &str) -> FrontendError {
        FrontendError::from(message.to_string())
    }
}

impl std::fmt::Display for FrontendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// An I/O error while doing `what` (`cannot write X`).
fn io_failure(what: String, e: std::io::Error) -> FrontendError {
    FrontendError {
        message: format!("{what}: {e}"),
        os_error: e.raw_os_error(),
    }
}

/// Run the simulated frontend; returns the subgraph directory names it created, in order.
pub fn run(
    model: &Path,
    work_dir: &Path,
    subgraphs_override: Option<usize>,
) -> Result<Vec<String>, FrontendError> {
    if subgraphs_override == Some(0) {
        return Err("the subgraph count must be at least 1".into());
    }
    let (model_data, penguin_digest) = penguin_of(model, work_dir)?;
    let graphs = model_data.graphs(model)?;
    let segments = segments(&model_data, subgraphs_override);
    let count = segments.len();
    let split = Split {
        graphs: &graphs,
        names: (0..count).map(|i| format!("sg{i:02}")).collect(),
        model_digest: model_data.digest,
        penguin_digest,
    };
    let mut netlist_sgs = Vec::with_capacity(count);
    for (i, seg) in segments.iter().enumerate() {
        netlist_sgs.push(split.write(i, seg, work_dir)?);
    }
    write_json(
        &work_dir.join(NETLIST),
        &json!({
            "format": "nxcc-sim-netlist/1",
            "note": crate::NOT_FOR_HARDWARE,
            "model_blake3": model_data.digest.to_hex().to_string(),
            "subgraphs": netlist_sgs,
        }),
    )?;
    Ok(split.names)
}

/// The model, read, and the digest of the `penguin.py` HLOToTensorizer wrote for it (it must
/// have run on this model first).
fn penguin_of(model: &Path, work_dir: &Path) -> Result<(Model, blake3::Hash), FrontendError> {
    let penguin_path = work_dir.join(PENGUIN);
    let penguin = match std::fs::read(&penguin_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{} does not exist: HLOToTensorizer (hlo2penguin) must run before Frontend",
                penguin_path.display()
            )
            .into())
        }
        Err(e) => {
            return Err(io_failure(
                format!("cannot read {}", penguin_path.display()),
                e,
            ))
        }
    };
    let model_data =
        Model::read(model).map_err(|e| format!("cannot read model {}: {e}", model.display()))?;
    let expected = format!("{MODEL_LINE_PREFIX}{}", model_data.digest.to_hex());
    if !String::from_utf8_lossy(&penguin)
        .lines()
        .any(|l| l == expected)
    {
        return Err(format!(
            "{} was not written for the model {} (its blake3 is not in it): run HLOToTensorizer on this model first",
            penguin_path.display(),
            model.display()
        )
        .into());
    }
    Ok((model_data, blake3::hash(&penguin)))
}

/// The model split into subgraphs: one graph per subgraph (a directory of modules), or one
/// graph split over every subgraph.
struct Split<'a> {
    graphs: &'a [hlo::Module],
    names: Vec<String>,
    model_digest: blake3::Hash,
    penguin_digest: blake3::Hash,
}

impl Split<'_> {
    fn count(&self) -> usize {
        self.names.len()
    }

    /// Whether each subgraph has a graph of its own.
    fn one_graph_each(&self) -> bool {
        self.graphs.len() == self.count()
    }

    /// Subgraph `i`'s own graph, if it has one.
    fn own_graph(&self, i: usize) -> Option<&hlo::Module> {
        if self.one_graph_each() {
            self.graphs.get(i)
        } else if i == 0 {
            self.graphs.first()
        } else {
            None
        }
    }

    /// The tensor a subgraph of a split graph hands to the next.
    fn link(&self, sg: &str) -> Port {
        let last = self
            .graphs
            .last()
            .expect("graphs() gives at least one module");
        let first = last.results.first();
        Port {
            name: format!("{sg}_output0"),
            dtype: first.map_or("f32", |t| t.shape.dtype_name()).to_string(),
            shape: first.map(|t| t.shape.dims().to_vec()).unwrap_or_default(),
            bytes: first.map_or(0, hlo::Tensor::bytes),
        }
    }

    /// Subgraph `i`'s inputs and outputs.
    fn ports(&self, i: usize) -> (Vec<Port>, Vec<Port>) {
        let sg = &self.names[i];
        let inputs = match self.own_graph(i) {
            Some(g) => g.parameters.iter().map(port).collect(),
            None => vec![self.link(&self.names[i - 1])],
        };
        let outputs = match (self.one_graph_each(), i + 1 == self.count()) {
            (true, _) => self.graphs[i].results.iter().map(port).collect(),
            (false, true) => {
                let last = self
                    .graphs
                    .last()
                    .expect("graphs() gives at least one module");
                last.results.iter().map(port).collect()
            }
            (false, false) => vec![self.link(sg)],
        };
        (inputs, outputs)
    }

    /// Subgraph `i`'s aliases (only a graph of its own has them).
    fn aliases(&self, i: usize, outputs: &[Port]) -> Vec<AliasEntry> {
        match self.own_graph(i) {
            Some(g) if self.one_graph_each() => g
                .aliases
                .iter()
                .filter_map(|a| {
                    let input = g.parameters.get(a.parameter)?;
                    let output = outputs.get(a.output_index)?;
                    Some(AliasEntry {
                        input_name: input.name.clone(),
                        output_name: output.name.clone(),
                        must_alias: a.must_alias,
                    })
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Write subgraph `i`'s directory (`bir.json`, `tensor_map.json`, `io_transposes.json`);
    /// its entry in the netlist.
    fn write(&self, i: usize, seg: &[u8], work_dir: &Path) -> Result<Value, FrontendError> {
        let sg = &self.names[i];
        let (inputs, outputs) = self.ports(i);
        let aliases = self.aliases(i, &outputs);
        let transposes: Vec<Value> = self
            .own_graph(i)
            .map(|g| g.parameters.iter().filter_map(transpose).collect())
            .unwrap_or_default();
        let src = SubgraphSource {
            sg: sg.clone(),
            index: i,
            count: self.count(),
            bytes: seg,
            model_digest: self.model_digest,
            penguin_digest: self.penguin_digest,
            inputs: inputs.clone(),
            outputs: outputs.clone(),
            aliases: aliases.clone(),
        };
        let dir = work_dir.join(sg);
        std::fs::create_dir_all(&dir)
            .map_err(|e| io_failure(format!("cannot create {}", dir.display()), e))?;
        write(&dir.join("bir.json"), &bir::to_bytes(&bir::generate(&src)))?;
        write_json(
            &dir.join("tensor_map.json"),
            &json!({
                "inputs": inputs.iter().map(Port::to_json).collect::<Vec<_>>(),
                "outputs": outputs.iter().map(Port::to_json).collect::<Vec<_>>(),
                "alias_map": aliases.iter().map(AliasEntry::to_json).collect::<Vec<_>>(),
            }),
        )?;
        write_json(&dir.join("io_transposes.json"), &Value::Array(transposes))?;
        Ok(json!({
            "sg": sg,
            "inputs": inputs.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
        }))
    }
}

/// The model bytes each subgraph stands for.
fn segments(model: &Model, subgraphs_override: Option<usize>) -> Vec<Vec<u8>> {
    let pbs = model.pb_parts();
    match subgraphs_override {
        None if model.is_dir && !pbs.is_empty() => pbs.iter().map(|(_, b)| b.clone()).collect(),
        n => {
            let n = n.unwrap_or(1).max(1);
            let all = model.bytes();
            let size = all.len().div_ceil(n);
            (0..n)
                .map(|i| {
                    let start = (i * size).min(all.len());
                    let end = ((i + 1) * size).min(all.len());
                    all[start..end].to_vec()
                })
                .collect()
        }
    }
}

fn port(t: &hlo::Tensor) -> Port {
    Port {
        name: t.name.clone(),
        dtype: t.shape.dtype_name().to_string(),
        shape: t.shape.dims().to_vec(),
        bytes: t.bytes(),
    }
}

/// The `io_transposes.json` entry of a parameter: for an array of rank 2 to
/// [`MAX_DIMS`](crate::jobs::static_io_transpose::MAX_DIMS) with positive dimensions, `reshape` =
/// its shape and `transpose` = the identity with the last two axes swapped.
fn transpose(p: &hlo::Tensor) -> Option<Value> {
    let hlo::Shape::Array { dims, .. } = &p.shape else {
        return None;
    };
    let r = dims.len();
    if !(2..=crate::jobs::static_io_transpose::MAX_DIMS).contains(&r) || dims.contains(&0) {
        return None;
    }
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 2, r - 1);
    Some(json!({"input_name": p.name, "reshape": dims, "transpose": perm}))
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), FrontendError> {
    atomic_write(path, bytes).map_err(|e| io_failure(format!("cannot write {}", path.display()), e))
}

fn write_json(path: &Path, value: &Value) -> Result<(), FrontendError> {
    let mut b = serde_json::to_vec_pretty(value).unwrap_or_default();
    b.push(b'\n');
    write(path, &b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Run the simulated hlo2penguin in-process on `model` with `work` as the work dir.
    fn penguin(model: &Path, work: &Path) {
        let args: Vec<String> = [
            "--input",
            &model.display().to_string(),
            "--out-dir",
            "./",
            "--output",
            "penguin.py",
            "--target-instance=trn1",
            "--logical-nc-config=1",
            "--verbose=user",
            "--logfile=/tmp/log-neuron-cc.txt",
            "--logfile-verbose=info",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(crate::run_tool("hlo2penguin", &args, work), 0);
    }

    fn read_json(p: PathBuf) -> Value {
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    }

    const RANKS: &str = "HloModule ranks, input_output_alias={ {}: (1, {}, must-alias) }

ENTRY main {
  a = f32[16]{0} parameter(0)
  b = f32[4,8]{1,0} parameter(1)
  c = bf16[2,3,5]{2,1,0} parameter(2)
  s = f32[] parameter(3)
  ROOT r = f32[4,8]{1,0} add(b, b)
}
";

    #[test]
    fn hlo_text_parameters_of_rank_two_or_more_get_transposes() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("ranks.hlo");
        std::fs::write(&model, RANKS).unwrap();
        let work = dir.path().join("w");
        std::fs::create_dir(&work).unwrap();
        penguin(&model, &work);
        let sgs = run(&model, &work, None).unwrap();
        assert_eq!(sgs, vec!["sg00"]);
        let t = read_json(work.join("sg00/io_transposes.json"));
        assert_eq!(
            t,
            json!([
                {"input_name": "b", "reshape": [4, 8], "transpose": [1, 0]},
                {"input_name": "c", "reshape": [2, 3, 5], "transpose": [0, 2, 1]},
            ])
        );
        let tm = read_json(work.join("sg00/tensor_map.json"));
        let names: Vec<&str> = tm["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c", "s"]);
        assert_eq!(
            tm["alias_map"],
            json!([{"input_name": "b", "output_name": "r", "must_alias": true}])
        );
        let netlist = read_json(work.join(NETLIST));
        assert_eq!(netlist["subgraphs"][0]["outputs"], json!(["r"]));
        let bir =
            crate::bir::Bir::check(&std::fs::read(work.join("sg00/bir.json")).unwrap()).unwrap();
        assert_eq!(bir.sg, "sg00");
        assert!(bir.engines().contains(&"PE"));
    }

    #[test]
    fn the_tiny_example_has_one_transposed_input() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models/tiny.hlo");
        let work = tempfile::tempdir().unwrap();
        penguin(&example, work.path());
        run(&example, work.path(), None).unwrap();
        assert_eq!(
            read_json(work.path().join("sg00/io_transposes.json")),
            json!([{"input_name": "p0", "reshape": [8, 16], "transpose": [1, 0]}])
        );
    }

    #[test]
    fn a_directory_of_three_pb_files_gives_three_subgraphs() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("graphs");
        std::fs::create_dir(&model).unwrap();
        let zoo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        for (part, example) in [("a", "mlp"), ("b", "many_params"), ("c", "matmul")] {
            std::fs::copy(
                zoo.join(format!("{example}.hlo_module.pb")),
                model.join(format!("{part}.pb")),
            )
            .unwrap();
        }
        std::fs::write(model.join("README"), b"not a graph").unwrap();
        let work = dir.path().join("w");
        std::fs::create_dir(&work).unwrap();
        penguin(&model, &work);
        let sgs = run(&model, &work, None).unwrap();
        assert_eq!(sgs, vec!["sg00", "sg01", "sg02"]);
        let instructions = |sg: &str| {
            crate::bir::Bir::check(&std::fs::read(work.join(sg).join("bir.json")).unwrap())
                .unwrap()
                .instruction_count
        };
        assert!(
            instructions("sg01") > 10 * instructions("sg00"),
            "the BIR scales with its graph's bytes"
        );
        // Each subgraph is its own module: its inputs and outputs are the module's.
        let inputs = |sg: &str| -> Vec<String> {
            read_json(work.join(sg).join("tensor_map.json"))["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(inputs("sg00"), ["x.1", "w.1", "b.1"]);
        assert_eq!(inputs("sg01").len(), 48);
        assert_eq!(inputs("sg02").len(), 2);
        // The rank-2 parameters of mlp (x, w) and matmul (a, b) get transposes; many_params's
        // rank-3 ones too, its vectors and scalars not.
        let transposes = |sg: &str| {
            read_json(work.join(sg).join("io_transposes.json"))
                .as_array()
                .unwrap()
                .len()
        };
        assert_eq!(
            (transposes("sg00"), transposes("sg01"), transposes("sg02")),
            (2, 12, 2)
        );
        let netlist = read_json(work.join(NETLIST));
        assert_eq!(netlist["subgraphs"].as_array().unwrap().len(), 3);
        assert_eq!(
            netlist["subgraphs"][1]["outputs"].as_array().unwrap().len(),
            2
        );
    }

    #[test]
    fn the_override_sets_the_subgraph_count() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.hlo");
        std::fs::write(&model, crate::testing::text_model(5000, 9)).unwrap();
        penguin(&model, dir.path());
        let sgs = run(&model, dir.path(), Some(4)).unwrap();
        assert_eq!(sgs, vec!["sg00", "sg01", "sg02", "sg03"]);
        assert!(dir.path().join("sg03/bir.json").is_file());
        assert!(run(&model, dir.path(), Some(0)).is_err());
    }

    #[test]
    fn penguin_py_must_exist_and_match_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.hlo");
        std::fs::write(&model, crate::testing::text_model(200, 1)).unwrap();
        let e = run(&model, dir.path(), None).unwrap_err().message;
        assert!(
            e.contains("penguin.py does not exist") && e.contains("hlo2penguin"),
            "{e}"
        );
        let other = dir.path().join("other.hlo");
        std::fs::write(&other, crate::testing::text_model(200, 2)).unwrap();
        penguin(&other, dir.path());
        let e = run(&model, dir.path(), None).unwrap_err().message;
        assert!(e.contains("was not written for the model"), "{e}");
        assert!(!dir.path().join("sg00").exists());
    }

    #[test]
    fn outputs_do_not_depend_on_where_the_work_dir_is() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let mut trees = Vec::new();
        for d in [a.path(), b.path()] {
            let model = d.join("model.hlo");
            std::fs::write(&model, RANKS).unwrap();
            let work = d.join("some").join("work");
            std::fs::create_dir_all(&work).unwrap();
            penguin(&model, &work);
            run(&model, &work, Some(2)).unwrap();
            let mut files = Vec::new();
            for f in [
                "penguin.py",
                "hlo_netlist.json",
                "sg00/bir.json",
                "sg01/bir.json",
                "sg00/tensor_map.json",
                "sg01/io_transposes.json",
            ] {
                files.push(std::fs::read(work.join(f)).unwrap());
            }
            trees.push(files);
        }
        assert_eq!(trees[0], trees[1]);
    }
}
