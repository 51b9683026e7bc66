//! What a run of compiles looked like, as data, and its two renderings: a compile's (or a
//! batch's) [`Run`] — every compile a bar on its slot's lane with its outcome, peak RSS, memory
//! estimate, cache key and the jobs it ran — drawn as a Chrome trace ([`trace`]: `--profile`,
//! opened in Perfetto as is) and as a self-contained HTML page ([`page`]: `--timings`); the
//! memory in use over time (admitted estimates and measured RSS, against the budget) follows
//! from the bars ([`memory`]). Whoever ran the compiles builds the [`Run`]; nothing here knows
//! how a compile runs.

pub mod memory;
pub mod page;
pub mod trace;

/// A run of compiles: one `nxcc compile`, or a `parallel-compile` batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// What the page is titled (`nxcc parallel-compile (12 compiles)`).
    pub title: String,
    /// What ran them (the trace's process name: `nxcc parallel-compile`).
    pub process: String,
    /// The lanes' names, by slot (`slot 1`, `slot 2`, ...; `compile` for one compile).
    pub lanes: Vec<String>,
    /// The memory budget, bytes (`None`: no budget).
    pub budget: Option<u64>,
    /// Every bar, in any order.
    pub compiles: Vec<Compile>,
}

/// One attempt of one compile: a bar.
#[derive(Debug, Clone, PartialEq)]
pub struct Compile {
    /// The graph's name (the input's stem; the trace event's name, the bar's `data-graph`).
    pub graph: String,
    /// The input, as given (absolute).
    pub input: String,
    /// The lane it ran in (an index of [`Run::lanes`]).
    pub slot: usize,
    /// 0 for the first run, then 1, 2, ... for the retries.
    pub attempt: u32,
    /// When it started: seconds from the start of the run.
    pub start_s: f64,
    /// When it ended, in the same seconds.
    pub end_s: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// The largest peak RSS of its jobs, KiB (`None`: no job ran).
    pub peak_rss_kb: Option<u64>,
    /// Its estimated peak memory, bytes, as admission used it (`None`: not estimated).
    pub estimate: Option<u64>,
    /// What the estimate came from (`recorded`, `similar`, a formula's name).
    pub basis: Option<String>,
    /// Its cache key (`None`: no cache).
    pub key: Option<String>,
    /// The jobs it ran where nxcc ran them (its pipeline's), in order; times in the run's seconds.
    pub phases: Vec<Phase>,
    /// The first error line it printed, when it failed.
    pub error: Option<String>,
    /// Its log file.
    pub log: Option<String>,
    /// The reproducer bundle written for its failure.
    pub reproducer: Option<String>,
}

/// One job of a compile.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// The job (`WalrusDriver`).
    pub name: String,
    /// When it started: seconds from the start of the run.
    pub start_s: f64,
    /// When it ended, in the same seconds.
    pub end_s: f64,
    /// How it ended (`ok`, `failed`, ...).
    pub status: String,
    /// Its peak RSS, KiB.
    pub peak_rss_kb: u64,
}

/// How a compile (one attempt of it) ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// It ran and succeeded.
    Compiled,
    /// A cache served it; `tier` says which (`local`, `secondary`, `shared`, `shared-secondary`, `remote`).
    Hit {
        /// The cache that answered.
        tier: String,
    },
    /// It ran and failed.
    Failed {
        /// The error code it printed (`NCC_EDRV082`, `F137`), if any.
        code: Option<String>,
        /// The signal that ended a process of it, if one did.
        signal: Option<String>,
        /// What failed, in a few words.
        what: String,
    },
    /// A cache answered with a failure it remembered; nothing ran.
    Remembered {
        /// The error code the remembered failure printed, if any.
        code: Option<String>,
        /// What failed, in a few words.
        what: String,
    },
    /// It was stopped (an interrupt, a cancelled batch), or never started.
    Cancelled,
    /// It was not compiled (an entry of the framework's cache locked or done meanwhile).
    Skipped,
    /// It succeeded, but its plan writes no NEFF.
    NoNeff,
}

impl Outcome {
    /// Its name, as the page's `data-outcome` and the trace's `outcome` say it.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Compiled => "compiled",
            Outcome::Hit { .. } => "hit",
            Outcome::Failed { .. } => "failed",
            Outcome::Remembered { .. } => "remembered",
            Outcome::Cancelled => "cancelled",
            Outcome::Skipped => "skipped",
            Outcome::NoNeff => "no-neff",
        }
    }

    /// What a failure is grouped under: its code, else its signal, else `no code`.
    pub(crate) fn failure_group(&self) -> Option<String> {
        match self {
            Outcome::Failed { code, signal, .. } => Some(
                code.clone()
                    .or_else(|| signal.clone())
                    .unwrap_or_else(|| "no code".into()),
            ),
            Outcome::Remembered { code, .. } => {
                Some(code.clone().unwrap_or_else(|| "no code".into()))
            }
            _ => None,
        }
    }
}

/// Every outcome, in the order the page's legend shows them.
pub const OUTCOMES: [&str; 7] = [
    "compiled",
    "hit",
    "failed",
    "remembered",
    "cancelled",
    "skipped",
    "no-neff",
];

/// The first error code in `lines`: `NCC_<letters and digits>` in brackets (`[NCC_EDRV082]`),
/// else the banner's `F<digits>` (`[F137]`). A code is reported, never decided on.
pub fn code_in(lines: &[String]) -> Option<String> {
    let bracketed = |line: &str, ok: &dyn Fn(&str) -> bool| -> Option<String> {
        let mut rest = line;
        while let Some(open) = rest.find('[') {
            let after = &rest[open + 1..];
            let close = after.find(']')?;
            let inner = &after[..close];
            if ok(inner) {
                return Some(inner.to_string());
            }
            rest = &after[close..];
        }
        None
    };
    let ncc = |s: &str| {
        s.strip_prefix("NCC_").is_some_and(|c| {
            !c.is_empty() && c.len() <= 16 && c.chars().all(|ch| ch.is_ascii_alphanumeric())
        })
    };
    let banner = |s: &str| {
        s.strip_prefix('F')
            .is_some_and(|d| (1..=4).contains(&d.len()) && d.chars().all(|c| c.is_ascii_digit()))
    };
    lines
        .iter()
        .find_map(|l| bracketed(l, &ncc))
        .or_else(|| lines.iter().find_map(|l| bracketed(l, &banner)))
}

impl Run {
    /// The last attempt of every graph, in the order the graphs first appear.
    pub(crate) fn finals(&self) -> Vec<&Compile> {
        let mut order: Vec<&str> = Vec::new();
        for c in &self.compiles {
            if !order.contains(&c.graph.as_str()) {
                order.push(&c.graph);
            }
        }
        order
            .iter()
            .filter_map(|g| {
                self.compiles
                    .iter()
                    .filter(|c| c.graph == *g)
                    .max_by(|a, b| a.attempt.cmp(&b.attempt).then(a.end_s.total_cmp(&b.end_s)))
            })
            .collect()
    }

    /// When the last bar ends, seconds (at least a millisecond).
    pub fn makespan_s(&self) -> f64 {
        self.compiles
            .iter()
            .map(|c| c.end_s)
            .fold(0.0f64, f64::max)
            .max(1e-3)
    }

    /// The lane's name of `slot`.
    pub(crate) fn lane(&self, slot: usize) -> String {
        self.lanes
            .get(slot)
            .cloned()
            .unwrap_or_else(|| format!("slot {}", slot + 1))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn bar(
        graph: &str,
        slot: usize,
        start_s: f64,
        end_s: f64,
        outcome: Outcome,
    ) -> Compile {
        Compile {
            graph: graph.into(),
            input: format!("/m/{graph}.pb"),
            slot,
            attempt: 0,
            start_s,
            end_s,
            outcome,
            peak_rss_kb: Some(100 << 10),
            estimate: Some(300 << 20),
            basis: Some("graph-v1".into()),
            key: Some(format!("{graph:0>64}")),
            phases: Vec::new(),
            error: None,
            log: None,
            reproducer: None,
        }
    }

    pub(crate) fn run() -> Run {
        let mut failed = bar(
            "b<&\"x",
            1,
            0.0,
            2.0,
            Outcome::Failed {
                code: Some("NCC_EDVR003".into()),
                signal: None,
                what: "WalrusDriver exited with status 2".into(),
            },
        );
        failed.phases = vec![
            Phase {
                name: "HLOToTensorizer".into(),
                start_s: 0.1,
                end_s: 0.5,
                status: "ok".into(),
                peak_rss_kb: 50 << 10,
            },
            Phase {
                name: "WalrusDriver".into(),
                start_s: 0.5,
                end_s: 2.5,
                status: "failed".into(),
                peak_rss_kb: 120 << 10,
            },
        ];
        failed.error = Some("[ERROR] boom".into());
        failed.reproducer = Some("/o/nxcc-reproducer-abc.tar.gz".into());
        Run {
            title: "nxcc parallel-compile (3 compiles)".into(),
            process: "nxcc parallel-compile".into(),
            lanes: vec!["slot 1".into(), "slot 2".into()],
            budget: Some(700 << 20),
            compiles: vec![
                bar("a", 0, 0.0, 1.0, Outcome::Compiled),
                failed,
                bar(
                    "c",
                    0,
                    1.0,
                    1.2,
                    Outcome::Hit {
                        tier: "local".into(),
                    },
                ),
            ],
        }
    }

    #[test]
    fn codes_are_found_in_error_lines() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            code_in(&l(&["[ERROR] [NCC_EDRV082] Could not find x - y"])),
            Some("NCC_EDRV082".into())
        );
        assert_eq!(
            code_in(&l(&["[ERROR] Child ... [x]", "  [ERROR] [NCC_DVR003] bad"])),
            Some("NCC_DVR003".into())
        );
        // An NCC code anywhere wins over a banner.
        assert_eq!(
            code_in(&l(&[
                "[F137] neuronx-cc was forcibly killed",
                "[NCC_EXYZ001] q"
            ])),
            Some("NCC_EXYZ001".into())
        );
        assert_eq!(code_in(&l(&["[F137] killed"])), Some("F137".into()));
        assert_eq!(code_in(&l(&["[ERROR] no code [NCC_] [F] [Fx1]"])), None);
        assert_eq!(code_in(&[]), None);
    }

    #[test]
    fn the_last_attempt_of_each_graph_is_final() {
        let mut r = run();
        let mut retry = bar("a", 1, 2.0, 3.0, Outcome::Compiled);
        retry.attempt = 1;
        r.compiles[0].outcome = Outcome::Failed {
            code: Some("F137".into()),
            signal: Some("SIGKILL".into()),
            what: "killed".into(),
        };
        r.compiles.push(retry);
        let f = r.finals();
        assert_eq!(f.len(), 3);
        assert_eq!((f[0].graph.as_str(), f[0].attempt), ("a", 1));
        assert_eq!(f[0].outcome, Outcome::Compiled);
        assert_eq!(r.makespan_s(), 3.0);
    }
}
