//! The simulated frontend: what the Frontend job runs, in-process, with the simulated toolchain
//! (the real one is Penguin, inside the Neuron compiler's Python package).
//!
//! It requires `penguin.py` in the work dir, written for this model by the (simulated)
//! `hlo2penguin` before it, and writes per subgraph `sgNN/bir.json`, `sgNN/tensor_map.json` and
//! `sgNN/io_transposes.json`, and `W/hlo_netlist.json`:
//! - subgraphs: one by default; N for a model directory holding N `*.pb` files (one per file);
//!   or the override (the driver passes `NXCC_SIM_SUBGRAPHS`), in which case the model's bytes
//!   are split into that many equal runs;
//! - the BIR's instruction count scales with the subgraph's model bytes ([`crate::sim::bir`]);
//! - for an HLO text model, the inputs are the ENTRY computation's parameters and
//!   `sg00/io_transposes.json` holds one entry per parameter of rank ≥ 2 (`reshape` = its shape,
//!   `transpose` = the identity with the last two axes swapped), so StaticIOTranspose has real
//!   work; the module's `input_output_alias` becomes the alias map. Later subgraphs take the
//!   previous subgraph's output and have an empty io_transposes array. For a binary model,
//!   every io_transposes array is empty and the inputs are derived from the model's digest.
//!
//! The fault and cost injection of the simulated tools does not apply here: the frontend runs
//! inside the driver's own process.
//!
//! Its output is a test instrument's: it cannot run on Neuron hardware.

use std::path::Path;

use serde_json::{json, Value};

use crate::sim::bir::{self, AliasEntry, Port, SubgraphSource};
use crate::sim::files::{atomic_write, Model};
use crate::sim::hlo_text;
use crate::sim::tools::hlo2penguin::MODEL_LINE_PREFIX;

/// The file the frontend requires in the work dir.
pub const PENGUIN: &str = "penguin.py";
/// The netlist the frontend writes in the work dir.
pub const NETLIST: &str = "hlo_netlist.json";

/// Run the simulated frontend; returns the subgraph directory names it created, in order.
pub fn run(
    model: &Path,
    work_dir: &Path,
    subgraphs_override: Option<usize>,
) -> Result<Vec<String>, String> {
    if subgraphs_override == Some(0) {
        return Err("the subgraph count must be at least 1".into());
    }
    let penguin_path = work_dir.join(PENGUIN);
    let penguin = match std::fs::read(&penguin_path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "{} does not exist: HLOToTensorizer (hlo2penguin) must run before Frontend",
                penguin_path.display()
            ))
        }
        Err(e) => return Err(format!("cannot read {}: {e}", penguin_path.display())),
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
        ));
    }
    let penguin_digest = blake3::hash(&penguin);

    let segments = segments(&model_data, subgraphs_override);
    let count = segments.len();
    let names: Vec<String> = (0..count).map(|i| format!("sg{i:02}")).collect();
    let signature = model_data.hlo_text().map(hlo_text::entry_signature);
    let model_inputs = match &signature {
        Some(sig) => sig.parameters.iter().map(port).collect(),
        None => proto_inputs(&model_data.digest),
    };
    let last_output = match signature.as_ref().and_then(|s| s.root.as_ref()) {
        Some(root) => port(root),
        None => Port {
            name: "output0".into(),
            dtype: "f32".into(),
            shape: vec![],
        },
    };
    let mut netlist_sgs = Vec::with_capacity(count);
    for (i, seg) in segments.iter().enumerate() {
        let sg = &names[i];
        let inputs = if i == 0 {
            model_inputs.clone()
        } else {
            vec![Port {
                name: format!("{}_output0", names[i - 1]),
                dtype: last_output.dtype.clone(),
                shape: last_output.shape.clone(),
            }]
        };
        let outputs = if i + 1 == count {
            vec![last_output.clone()]
        } else {
            vec![Port {
                name: format!("{sg}_output0"),
                dtype: last_output.dtype.clone(),
                shape: last_output.shape.clone(),
            }]
        };
        let aliases = match (&signature, i) {
            (Some(sig), 0) if count == 1 => sig
                .aliases
                .iter()
                .filter_map(|a| {
                    let input = sig.parameters.get(a.parameter)?;
                    (a.output_index < outputs.len()).then(|| AliasEntry {
                        input_name: input.name.clone(),
                        output_name: outputs[a.output_index].name.clone(),
                        must_alias: a.must_alias,
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        let transposes: Vec<Value> = match (&signature, i) {
            (Some(sig), 0) => sig
                .parameters
                .iter()
                .filter_map(|p| {
                    let shape = p.shape.as_ref()?;
                    (shape.len() >= 2).then(|| {
                        let r = shape.len();
                        let mut perm: Vec<usize> = (0..r).collect();
                        perm.swap(r - 2, r - 1);
                        json!({"input_name": p.name, "reshape": shape, "transpose": perm})
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        let src = SubgraphSource {
            sg: sg.clone(),
            index: i,
            count,
            bytes: seg,
            model_digest: model_data.digest,
            penguin_digest,
            inputs: inputs.clone(),
            outputs: outputs.clone(),
            aliases: aliases.clone(),
        };
        let dir = work_dir.join(sg);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        write(&dir.join("bir.json"), &bir::to_bytes(&bir::generate(&src)))?;
        write_json(
            &dir.join("tensor_map.json"),
            &json!({
                "inputs": inputs.iter().map(Port::to_json).collect::<Vec<_>>(),
                "alias_map": aliases.iter().map(AliasEntry::to_json).collect::<Vec<_>>(),
            }),
        )?;
        write_json(&dir.join("io_transposes.json"), &Value::Array(transposes))?;
        netlist_sgs.push(json!({
            "sg": sg,
            "inputs": inputs.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
            "outputs": outputs.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
        }));
    }
    write_json(
        &work_dir.join(NETLIST),
        &json!({
            "format": "nxcc-sim-netlist/1",
            "note": crate::sim::NOT_FOR_HARDWARE,
            "model_blake3": model_data.digest.to_hex().to_string(),
            "subgraphs": netlist_sgs,
        }),
    )?;
    Ok(names)
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

fn port(t: &hlo_text::Tensor) -> Port {
    Port {
        name: t.name.clone(),
        dtype: t.dtype.clone(),
        shape: t.shape.clone().unwrap_or_default(),
    }
}

/// Inputs of a binary model, which this frontend does not decode: one to three rank-2 `f32`
/// inputs whose dimensions come from the model's digest.
fn proto_inputs(digest: &blake3::Hash) -> Vec<Port> {
    let d = digest.as_bytes();
    (0..1 + d[0] as usize % 3)
        .map(|i| Port {
            name: format!("input{i}"),
            dtype: "f32".into(),
            shape: vec![1 + d[1 + 2 * i] as u64 % 16, 1 + d[2 + 2 * i] as u64 % 16],
        })
        .collect()
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), String> {
    atomic_write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn write_json(path: &Path, value: &Value) -> Result<(), String> {
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
        assert_eq!(crate::sim::run_tool("hlo2penguin", &args, work), 0);
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
        let bir = crate::sim::bir::Bir::check(&std::fs::read(work.join("sg00/bir.json")).unwrap())
            .unwrap();
        assert_eq!(bir.sg, "sg00");
        assert!(bir.engines().contains(&"PE"));
    }

    #[test]
    fn the_tiny_example_has_one_transposed_input() {
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/tiny.hlo");
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
        std::fs::write(model.join("a.pb"), vec![1u8; 100]).unwrap();
        std::fs::write(model.join("b.pb"), vec![2u8; 40_000]).unwrap();
        std::fs::write(model.join("c.pb"), vec![3u8; 300]).unwrap();
        std::fs::write(model.join("README"), b"not a graph").unwrap();
        let work = dir.path().join("w");
        std::fs::create_dir(&work).unwrap();
        penguin(&model, &work);
        let sgs = run(&model, &work, None).unwrap();
        assert_eq!(sgs, vec!["sg00", "sg01", "sg02"]);
        let size = |sg: &str| {
            std::fs::metadata(work.join(sg).join("bir.json"))
                .unwrap()
                .len()
        };
        assert!(
            size("sg01") > 10 * size("sg00"),
            "bir.json scales with its graph"
        );
        for sg in &sgs {
            assert_eq!(
                read_json(work.join(sg).join("io_transposes.json")),
                json!([])
            );
            assert!(work.join(sg).join("tensor_map.json").is_file());
        }
        let netlist = read_json(work.join(NETLIST));
        assert_eq!(netlist["subgraphs"].as_array().unwrap().len(), 3);
        assert_eq!(netlist["subgraphs"][1]["inputs"], json!(["sg00_output0"]));
    }

    #[test]
    fn the_override_sets_the_subgraph_count() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.pb");
        std::fs::write(&model, vec![9u8; 5000]).unwrap();
        penguin(&model, dir.path());
        let sgs = run(&model, dir.path(), Some(4)).unwrap();
        assert_eq!(sgs, vec!["sg00", "sg01", "sg02", "sg03"]);
        assert!(dir.path().join("sg03/bir.json").is_file());
        assert!(run(&model, dir.path(), Some(0)).is_err());
    }

    #[test]
    fn penguin_py_must_exist_and_match_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("m.pb");
        std::fs::write(&model, b"model one").unwrap();
        let e = run(&model, dir.path(), None).unwrap_err();
        assert!(
            e.contains("penguin.py does not exist") && e.contains("hlo2penguin"),
            "{e}"
        );
        let other = dir.path().join("other.pb");
        std::fs::write(&other, b"model two").unwrap();
        penguin(&other, dir.path());
        let e = run(&model, dir.path(), None).unwrap_err();
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
