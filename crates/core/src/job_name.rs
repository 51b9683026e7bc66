//! Which job a failure, an event or a job's figures are about: a [`Job`] of the original's
//! registry, or one of the two pseudo-jobs that stand for a whole compile run another way — the
//! external compiler, a remote compile ([`JobName`]). Each is written as its name
//! (`WalrusDriver`, `ExternalCompiler`, `RemoteCompile`), on the console, in reports and on every
//! wire; the registry itself (what each job runs) is `crate::jobs`.

use serde::Deserialize;

/// A job of the original's registry, by its class name: the seed's spelling (`WalrusDriver`) is
/// its [`Display`](std::fmt::Display), its serialised form, and what `--pipeline` names it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Job {
    /// `hlo2penguin`: the model to the tensorizer's input.
    HLOToTensorizer,
    /// `xla_infergoldens`: the golden outputs of an XLA model.
    XLAInferGoldens,
    /// Golden evaluation of a non-XLA framework (not compiled by nxcc).
    InferGoldens,
    /// Golden evaluation of a meta-module (not compiled by nxcc).
    MetaInferGoldens,
    /// The frontend: the subgraphs.
    Frontend,
    /// The static input/output transposes.
    StaticIOTranspose,
    /// `walrus_driver`: the backend passes.
    WalrusDriver,
    /// The experimental legacy backend (`nn_executor`).
    Backend,
    /// Packs the NEFF.
    Kelper,
    /// `hlo-neff-wrapper`: the NEFF wrapped in an HLO module.
    NeffWrapper,
    /// BIR verification (`walrus_driver`).
    BIRVerifier,
    /// BIR simulation (`walrus_driver`).
    BIRSim,
    /// Copies the work dir into the launch directory.
    SaveTemps,
    /// `watchpoint_insert`.
    Watchpoint,
}

impl Job {
    /// Every job, in the registry's order.
    pub const ALL: [Job; 14] = [
        Job::HLOToTensorizer,
        Job::XLAInferGoldens,
        Job::InferGoldens,
        Job::MetaInferGoldens,
        Job::Frontend,
        Job::StaticIOTranspose,
        Job::WalrusDriver,
        Job::Backend,
        Job::Kelper,
        Job::NeffWrapper,
        Job::BIRVerifier,
        Job::BIRSim,
        Job::SaveTemps,
        Job::Watchpoint,
    ];

    /// The class name (`WalrusDriver`).
    pub const fn name(self) -> &'static str {
        match self {
            Job::HLOToTensorizer => "HLOToTensorizer",
            Job::XLAInferGoldens => "XLAInferGoldens",
            Job::InferGoldens => "InferGoldens",
            Job::MetaInferGoldens => "MetaInferGoldens",
            Job::Frontend => "Frontend",
            Job::StaticIOTranspose => "StaticIOTranspose",
            Job::WalrusDriver => "WalrusDriver",
            Job::Backend => "Backend",
            Job::Kelper => "Kelper",
            Job::NeffWrapper => "NeffWrapper",
            Job::BIRVerifier => "BIRVerifier",
            Job::BIRSim => "BIRSim",
            Job::SaveTemps => "SaveTemps",
            Job::Watchpoint => "Watchpoint",
        }
    }

    /// The job a name names (SEED `__getJob`), exactly as spelled.
    pub fn named(name: &str) -> Option<Job> {
        Job::ALL.into_iter().find(|j| j.name() == name)
    }
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for Job {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Job {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Job, D::Error> {
        let name = String::deserialize(d)?;
        Job::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("a job this nxcc does not know: {name}"))
        })
    }
}

/// The job a failure, an event or a job's figures are about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobName {
    /// A job of the registry.
    Registry(Job),
    /// The whole compile, run by an external compiler as one job (`ExternalCompiler`).
    ExternalCompiler,
    /// The whole compile, run on a Remote Execution API server (`RemoteCompile`).
    RemoteCompile,
}

impl JobName {
    /// Its name (`WalrusDriver`, `ExternalCompiler`, `RemoteCompile`).
    pub const fn name(self) -> &'static str {
        match self {
            JobName::Registry(job) => job.name(),
            JobName::ExternalCompiler => "ExternalCompiler",
            JobName::RemoteCompile => "RemoteCompile",
        }
    }

    /// The job a name names, exactly as spelled.
    pub fn named(name: &str) -> Option<JobName> {
        match name {
            "ExternalCompiler" => Some(JobName::ExternalCompiler),
            "RemoteCompile" => Some(JobName::RemoteCompile),
            other => Job::named(other).map(JobName::Registry),
        }
    }

    /// The registry's job, when it is one.
    pub fn job(self) -> Option<Job> {
        match self {
            JobName::Registry(job) => Some(job),
            _ => None,
        }
    }
}

impl From<Job> for JobName {
    fn from(job: Job) -> JobName {
        JobName::Registry(job)
    }
}

impl PartialEq<Job> for JobName {
    fn eq(&self, job: &Job) -> bool {
        *self == JobName::Registry(*job)
    }
}

/// A name compares equal to its spelling (`WalrusDriver`).
impl PartialEq<str> for JobName {
    fn eq(&self, name: &str) -> bool {
        self.name() == name
    }
}

impl PartialEq<&str> for JobName {
    fn eq(&self, name: &&str) -> bool {
        self.name() == *name
    }
}

impl std::fmt::Display for JobName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl serde::Serialize for JobName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for JobName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JobName, D::Error> {
        let name = String::deserialize(d)?;
        JobName::named(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("a job this nxcc does not know: {name}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_reads_back_as_itself() {
        let all = Job::ALL
            .into_iter()
            .map(JobName::from)
            .chain([JobName::ExternalCompiler, JobName::RemoteCompile]);
        for j in all {
            assert_eq!(JobName::named(j.name()), Some(j));
            let json = serde_json::to_string(&j).unwrap();
            assert_eq!(json, format!("\"{j}\""));
            assert_eq!(serde_json::from_str::<JobName>(&json).unwrap(), j);
        }
        assert_eq!(JobName::named("Nope"), None);
        assert!(serde_json::from_str::<JobName>("\"Nope\"").is_err());
        assert_eq!(JobName::from(Job::Kelper), Job::Kelper);
        assert_eq!(JobName::RemoteCompile.job(), None);
    }
}
