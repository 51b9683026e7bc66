//! What the memory estimates know of a compile's model — its file size and its graph's figures —
//! as the key records them and the estimates compare them.

use serde::{Deserialize, Serialize};

/// What the estimate knows of a compile's model: its size and, when its HLO module could be
/// read, its graph's figures (else 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Features {
    /// The model's size in bytes (a directory: the sum of its files).
    pub model_size: u64,
    /// Bytes of the entry computation's parameters (0: graph not read).
    #[serde(default)]
    pub parameter_bytes: u64,
    /// Bytes of the entry computation's results (0: graph not read).
    #[serde(default)]
    pub result_bytes: u64,
    /// Instructions in every computation (0: graph not read).
    #[serde(default)]
    pub instructions: u64,
}

impl Features {
    /// A model known only by its size.
    pub fn of_size(model_size: u64) -> Features {
        Features {
            model_size,
            ..Features::default()
        }
    }

    /// The features of a plan's model (its graph, when the plan read it).
    pub fn of_plan(plan: &crate::plan::Plan) -> Features {
        let mut f = Features::of_size(plan.model_facts.size);
        if let Some(Ok(m)) = &plan.model_graph {
            f.parameter_bytes = m.parameter_bytes();
            f.result_bytes = m.result_bytes();
            f.instructions = m.instruction_count as u64;
        }
        f
    }
}
