//! A built plan as data: what running it needs, serialisable, so a worker in another process (the
//! daemon's fork server forks it) runs the very plan its supervisor built and never plans again.
//!
//! [`PlanData`] carries every field the worker reads (the namespace, the paths, the pipeline, the
//! walrus passes, the predicted subgraphs, the toolchain) and the ones the log shows (warnings,
//! user messages, the command line). The planning record stays with the planner: the decisions,
//! the model's graph, the jobs' predicted steps (a worker describes each job's steps from its
//! context when it runs it, as it always has) and the missing tools (checked by the supervisor
//! before the worker starts) come back empty.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Derived, ModelFacts, Plan};
use crate::cli::namespace::{Namespace, NamespaceData};
use crate::jobs::Job;
use crate::toolchain::{Request, Toolchain};

/// What running a plan needs (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanData {
    ns: NamespaceData,
    derived: Derived,
    prog: String,
    launch_dir: PathBuf,
    model: PathBuf,
    model_facts: ModelFacts,
    output: PathBuf,
    logfile: PathBuf,
    collected: Vec<Job>,
    pipeline: Vec<Job>,
    walrus_passes: Vec<String>,
    subgraphs: Vec<String>,
    subgraphs_known: bool,
    toolchain_request: Request,
    toolchain: Option<Toolchain>,
    warnings: Vec<String>,
    user_messages: Vec<String>,
    no_neff: Option<String>,
    argv: Vec<String>,
}

impl PlanData {
    /// What running `plan` needs.
    pub fn of(plan: &Plan) -> PlanData {
        PlanData {
            ns: plan.ns.to_data(),
            derived: plan.derived.clone(),
            prog: plan.prog.clone(),
            launch_dir: plan.launch_dir.clone(),
            model: plan.model.clone(),
            model_facts: plan.model_facts.clone(),
            output: plan.output.clone(),
            logfile: plan.logfile.clone(),
            collected: plan.collected.clone(),
            pipeline: plan.pipeline.clone(),
            walrus_passes: plan.walrus_passes.iter().map(|p| p.to_string()).collect(),
            subgraphs: plan.subgraphs.clone(),
            subgraphs_known: plan.subgraphs_known,
            toolchain_request: plan.toolchain_request.clone(),
            toolchain: plan.toolchain.clone(),
            warnings: plan.warnings.clone(),
            user_messages: plan.user_messages.clone(),
            no_neff: plan.no_neff.clone(),
            argv: plan.argv.clone(),
        }
    }

    /// The plan again, for running. Meant for a worker process, which lives for one compile: the
    /// walrus pass names become static strings by leaking them (a few hundred bytes); job names
    /// are the registry's own.
    pub fn into_plan(self) -> Result<Plan, String> {
        let walrus_passes = self
            .walrus_passes
            .into_iter()
            .map(|p| &*Box::leak(p.into_boxed_str()))
            .collect();
        Ok(Plan {
            ns: Namespace::from_data(self.ns)?,
            derived: self.derived,
            prog: self.prog,
            launch_dir: self.launch_dir,
            model: self.model,
            model_facts: self.model_facts,
            model_graph: None,
            output: self.output,
            logfile: self.logfile,
            collected: self.collected,
            pipeline: self.pipeline,
            walrus_passes,
            subgraphs: self.subgraphs,
            subgraphs_known: self.subgraphs_known,
            toolchain_request: self.toolchain_request,
            toolchain: self.toolchain,
            jobs: Vec::new(),
            decisions: Vec::new(),
            warnings: self.warnings,
            missing_tools: Vec::new(),
            user_messages: self.user_messages,
            no_neff: self.no_neff,
            argv: self.argv,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::namespace::Dest;
    use crate::plan::StaticProbe;

    fn plan_of(argv: &str) -> Plan {
        let argv: Vec<String> = argv.split_whitespace().map(String::from).collect();
        let args = match crate::cli::parse("nxcc", &argv).unwrap() {
            crate::cli::Command::Compile(c) => c,
            _ => unreachable!(),
        };
        crate::plan::build(&args, &StaticProbe::new("/launch")).unwrap()
    }

    #[test]
    fn what_the_worker_reads_survives_the_trip() {
        let plan = plan_of(
            "compile m.pb --target trn2 --toolchain sim -O1 --job-timeout 2.5 --skip-pass a --skip-pass b --verbose 35",
        );
        let json = serde_json::to_vec(&PlanData::of(&plan)).unwrap();
        let back: PlanData = serde_json::from_slice(&json).unwrap();
        let again = back.into_plan().unwrap();
        assert_eq!(again.ns, plan.ns);
        assert_eq!(again.pipeline, plan.pipeline);
        assert_eq!(again.collected, plan.collected);
        assert_eq!(again.walrus_passes, plan.walrus_passes);
        assert_eq!(again.derived, plan.derived);
        assert_eq!(
            (
                &again.model,
                &again.output,
                &again.logfile,
                &again.launch_dir
            ),
            (&plan.model, &plan.output, &plan.logfile, &plan.launch_dir)
        );
        assert_eq!(again.toolchain_request, plan.toolchain_request);
        assert_eq!(again.subgraphs, plan.subgraphs);
        assert_eq!(again.argv, plan.argv);
        // A float stays a float: the job timeout is read back as 2.5 s.
        assert_eq!(again.ns.get(Dest::JobTimeout).as_float(), Some(2.5));
        // Every job describes the same steps from the plan that came back.
        for name in &plan.pipeline {
            let job = name.row();
            let a = (job.steps)(&plan.job_context(&plan.subgraphs, &[], false, None, None));
            let b = (job.steps)(&again.job_context(&again.subgraphs, &[], false, None, None));
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "{name}");
        }
    }

    #[test]
    fn data_that_does_not_fit_is_refused() {
        let plan = plan_of("compile m.pb --target trn2");
        let mut v = serde_json::to_value(PlanData::of(&plan)).unwrap();
        v["pipeline"] = serde_json::json!(["NoSuchJob"]);
        let e = serde_json::from_value::<PlanData>(v.clone()).unwrap_err();
        assert!(e.to_string().contains("NoSuchJob"), "{e}");
        v["ns"]["values"].as_array_mut().unwrap().pop();
        v["pipeline"] = serde_json::json!([]);
        let d: PlanData = serde_json::from_value(v).unwrap();
        assert!(d.into_plan().unwrap_err().contains("flag table"));
    }
}
