//! Fault and cost injection settings of the simulated tools, read from the environment:
//! `NXCC_SIM_FAULT`, `NXCC_SIM_WORK_MS`, `NXCC_SIM_WORK_MS_PER_MB`, `NXCC_SIM_WAIT_MS`,
//! `NXCC_SIM_RSS_MB`, `NXCC_SIM_RECORD` and `NXCC_SIM_STATE`. This module only parses and selects; [`super::effects`] carries them out.
//!
//! Each of the five setting variables is a comma list of `<tool>:<setting>` entries, where
//! `<tool>` is one of the native tool names (`hlo2penguin`, `walrus_driver`, ...) or `*` for every
//! tool. A setting may end in `@first`: it then applies only to the first run of that tool for a
//! given model (see [`super::effects::first_run`]).
//!
//! - `NXCC_SIM_FAULT`: `segv` | `abort` | `kill` | `exit=N` (0–255) | `hang` | `stderr=<text>`;
//! - `NXCC_SIM_WORK_MS`: milliseconds of CPU-bound work before the outputs are written;
//! - `NXCC_SIM_WORK_MS_PER_MB`: more CPU-bound work, this many milliseconds per MiB of the model
//!   the tool reads (`hlo2penguin`, `xla_infergoldens`, `hlo-neff-wrapper`; the other tools read
//!   no model and get none) — so compiles of models of different sizes cost differently under one
//!   setting;
//! - `NXCC_SIM_WAIT_MS`: milliseconds the tool sleeps before the outputs are written (time that
//!   costs no CPU, as a tool waiting on a device or a remote service: many such compiles on
//!   different simulated hosts do not compete for this machine's cores);
//! - `NXCC_SIM_RSS_MB`: MiB of memory to touch and hold until the tool returns.
//!
//! Rules:
//! - a comma starts a new entry only when what follows it begins with a known tool name or `*`
//!   and a colon, so a `stderr=` text may itself contain commas;
//! - an entry naming a specific tool wins over a `*` entry; among entries of the same kind, the
//!   last one wins;
//! - an unknown tool name, an unknown fault or a malformed number is an error (the tool exits 2),
//!   so that a typo never silently disables an injection.

use std::path::PathBuf;

/// The fault variable.
pub const FAULT_ENV: &str = "NXCC_SIM_FAULT";
/// The CPU-work variable.
pub const WORK_ENV: &str = "NXCC_SIM_WORK_MS";
/// The per-MiB CPU-work variable.
pub const WORK_PER_MB_ENV: &str = "NXCC_SIM_WORK_MS_PER_MB";
/// The sleeping variable.
pub const WAIT_ENV: &str = "NXCC_SIM_WAIT_MS";
/// The memory variable.
pub const RSS_ENV: &str = "NXCC_SIM_RSS_MB";
/// The invocation-record variable (a file path; relative to the tool's working directory).
pub const RECORD_ENV: &str = "NXCC_SIM_RECORD";
/// The `@first` state directory variable.
pub const STATE_ENV: &str = "NXCC_SIM_STATE";
/// The suffix that limits a setting to the first run of a tool for a model.
pub const FIRST_SUFFIX: &str = "@first";

/// How a tool dies (or misbehaves) on purpose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Raise SIGSEGV on itself.
    Segv,
    /// Raise SIGABRT on itself.
    Abort,
    /// Send SIGKILL to itself.
    Kill,
    /// Return this exit status without writing outputs.
    Exit(i32),
    /// Sleep forever.
    Hang,
    /// Print the text on stderr and exit 1.
    Stderr(String),
}

impl Fault {
    fn parse(text: &str) -> Result<Fault, String> {
        match text {
            "segv" => Ok(Fault::Segv),
            "abort" => Ok(Fault::Abort),
            "kill" => Ok(Fault::Kill),
            "hang" => Ok(Fault::Hang),
            _ => {
                if let Some(n) = text.strip_prefix("exit=") {
                    match n.parse::<i32>() {
                        Ok(n) if (0..=255).contains(&n) => Ok(Fault::Exit(n)),
                        _ => Err(format!("exit status {n:?} is not an integer from 0 to 255")),
                    }
                } else if let Some(t) = text.strip_prefix("stderr=") {
                    Ok(Fault::Stderr(t.to_string()))
                } else {
                    Err(format!(
                        "unknown fault {text:?} (expected segv, abort, kill, exit=N, hang or stderr=TEXT)"
                    ))
                }
            }
        }
    }
}

/// Which tools an entry applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `*`.
    All,
    /// One tool by name.
    Tool(String),
}

impl Selector {
    fn matches(&self, tool: &str) -> bool {
        match self {
            Selector::All => true,
            Selector::Tool(t) => t == tool,
        }
    }
}

/// One `<tool>:<setting>[@first]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<T> {
    /// The tools it applies to.
    pub selector: Selector,
    /// The setting.
    pub value: T,
    /// Ends in `@first`.
    pub first_only: bool,
}

/// A setting chosen for one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen<T> {
    /// The setting.
    pub value: T,
    /// It applies only to the tool's first run for a model (`@first`).
    pub first_only: bool,
}

/// Everything the environment asks of the simulated tools.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Inject {
    /// `NXCC_SIM_FAULT`'s entries, in order.
    pub faults: Vec<Entry<Fault>>,
    /// `NXCC_SIM_WORK_MS`'s entries, in order (milliseconds).
    pub work_ms: Vec<Entry<u64>>,
    /// `NXCC_SIM_WORK_MS_PER_MB`'s entries, in order (milliseconds per MiB of model).
    pub work_ms_per_mb: Vec<Entry<u64>>,
    /// `NXCC_SIM_WAIT_MS`'s entries, in order (milliseconds).
    pub wait_ms: Vec<Entry<u64>>,
    /// `NXCC_SIM_RSS_MB`'s entries, in order (MiB).
    pub rss_mb: Vec<Entry<u64>>,
    /// `NXCC_SIM_RECORD`, as given.
    pub record: Option<PathBuf>,
    /// `NXCC_SIM_STATE`, as given (`None`: the default, see [`Inject::state_dir`]).
    pub state: Option<PathBuf>,
}

/// The settings that apply to one tool.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ForTool {
    /// The fault to play (`None`: run normally).
    pub fault: Option<Chosen<Fault>>,
    /// CPU-bound work before writing outputs, milliseconds (`None`: none).
    pub work_ms: Option<Chosen<u64>>,
    /// More CPU-bound work, milliseconds per MiB of the model read (`None`: none).
    pub work_ms_per_mb: Option<Chosen<u64>>,
    /// Time asleep before writing outputs, milliseconds (`None`: none).
    pub wait_ms: Option<Chosen<u64>>,
    /// Memory to touch and hold until the tool returns, MiB (`None`: none).
    pub rss_mb: Option<Chosen<u64>>,
}

impl ForTool {
    /// Whether any chosen setting depends on the `@first` state.
    pub fn needs_first(&self) -> bool {
        self.fault.as_ref().is_some_and(|c| c.first_only)
            || self.work_ms.as_ref().is_some_and(|c| c.first_only)
            || self.work_ms_per_mb.as_ref().is_some_and(|c| c.first_only)
            || self.wait_ms.as_ref().is_some_and(|c| c.first_only)
            || self.rss_mb.as_ref().is_some_and(|c| c.first_only)
    }

    /// Drop the `@first` settings (this is not the first run).
    pub fn without_first_only(self) -> ForTool {
        ForTool {
            fault: self.fault.filter(|c| !c.first_only),
            work_ms: self.work_ms.filter(|c| !c.first_only),
            work_ms_per_mb: self.work_ms_per_mb.filter(|c| !c.first_only),
            wait_ms: self.wait_ms.filter(|c| !c.first_only),
            rss_mb: self.rss_mb.filter(|c| !c.first_only),
        }
    }
}

impl Inject {
    /// From the process environment.
    pub fn from_env() -> Result<Inject, String> {
        Inject::from_lookup(|name| std::env::var(name).ok())
    }

    /// From any variable lookup (tests pass a table).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Inject, String> {
        let var = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let mut inject = Inject::default();
        if let Some(v) = var(FAULT_ENV) {
            inject.faults = parse_list(FAULT_ENV, &v, Fault::parse)?;
        }
        if let Some(v) = var(WORK_ENV) {
            inject.work_ms = parse_list(WORK_ENV, &v, parse_count)?;
        }
        if let Some(v) = var(WORK_PER_MB_ENV) {
            inject.work_ms_per_mb = parse_list(WORK_PER_MB_ENV, &v, parse_count)?;
        }
        if let Some(v) = var(WAIT_ENV) {
            inject.wait_ms = parse_list(WAIT_ENV, &v, parse_count)?;
        }
        if let Some(v) = var(RSS_ENV) {
            inject.rss_mb = parse_list(RSS_ENV, &v, parse_count)?;
        }
        inject.record = var(RECORD_ENV).map(PathBuf::from);
        inject.state = var(STATE_ENV).map(PathBuf::from);
        Ok(inject)
    }

    /// The `@first` state directory: `NXCC_SIM_STATE`, else `$TMPDIR/nxcc-sim-state`. A relative
    /// `NXCC_SIM_STATE` is taken relative to `cwd`.
    pub fn state_dir(&self, cwd: &std::path::Path) -> PathBuf {
        match &self.state {
            Some(p) => cwd.join(p),
            None => std::env::temp_dir().join("nxcc-sim-state"),
        }
    }

    /// The record file, if any, relative paths against `cwd`.
    pub fn record_file(&self, cwd: &std::path::Path) -> Option<PathBuf> {
        self.record.as_ref().map(|p| cwd.join(p))
    }

    /// The settings that apply to `tool`.
    pub fn for_tool(&self, tool: &str) -> ForTool {
        ForTool {
            fault: choose(&self.faults, tool),
            work_ms: choose(&self.work_ms, tool),
            work_ms_per_mb: choose(&self.work_ms_per_mb, tool),
            wait_ms: choose(&self.wait_ms, tool),
            rss_mb: choose(&self.rss_mb, tool),
        }
    }
}

/// A specific entry wins over `*`; the last entry of the winning kind wins.
fn choose<T: Clone>(entries: &[Entry<T>], tool: &str) -> Option<Chosen<T>> {
    let pick = |specific: bool| {
        entries
            .iter()
            .rev()
            .find(|e| e.selector.matches(tool) && (e.selector != Selector::All) == specific)
    };
    pick(true).or_else(|| pick(false)).map(|e| Chosen {
        value: e.value.clone(),
        first_only: e.first_only,
    })
}

fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse::<u64>()
        .map_err(|_| format!("{text:?} is not a non-negative integer"))
}

/// The tool-name prefix of a segment (`walrus_driver:` or `*:`), if it is a known one.
fn known_prefix(segment: &str) -> Option<(&str, &str)> {
    let (tool, rest) = segment.split_once(':')?;
    let tool_t = tool.trim();
    (tool_t == "*" || crate::toolchain::TOOLS.contains(&tool_t)).then_some((tool_t, rest))
}

fn parse_list<T>(
    var: &str,
    text: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<Entry<T>>, String> {
    // Split on commas that start a new `<known tool>:` entry; any other comma belongs to the
    // previous entry's setting.
    let mut raw: Vec<String> = Vec::new();
    for segment in text.split(',') {
        if known_prefix(segment).is_some() || raw.is_empty() {
            raw.push(segment.to_string());
        } else if let Some(last) = raw.last_mut() {
            last.push(',');
            last.push_str(segment);
        }
    }
    let mut out = Vec::with_capacity(raw.len());
    for entry in raw {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((tool, setting)) = known_prefix(&entry) else {
            let name = entry.split_once(':').map(|(t, _)| t.trim());
            return Err(match name {
                Some(t) => format!(
                    "{var}: unknown tool {t:?} in {entry:?} (expected one of *, {})",
                    crate::toolchain::TOOLS.join(", ")
                ),
                None => format!("{var}: expected <tool>:<setting>, got {entry:?}"),
            });
        };
        let (setting, first_only) = match setting.strip_suffix(FIRST_SUFFIX) {
            Some(s) => (s, true),
            None => (setting, false),
        };
        let value = parse(setting).map_err(|e| format!("{var}: {tool}: {e}"))?;
        out.push(Entry {
            selector: if tool == "*" {
                Selector::All
            } else {
                Selector::Tool(tool.to_string())
            },
            value,
            first_only,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Result<Inject, String> {
        let table: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Inject::from_lookup(move |n| table.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn empty_environment_injects_nothing() {
        let i = from(&[]).unwrap();
        assert_eq!(i.for_tool("walrus_driver"), ForTool::default());
        assert!(i.record.is_none());
        let blank = from(&[(FAULT_ENV, "  ")]).unwrap();
        assert!(blank.faults.is_empty());
    }

    #[test]
    fn every_fault_kind_parses() {
        let i = from(&[(
            FAULT_ENV,
            "hlo2penguin:segv,xla_infergoldens:abort,walrus_driver:kill,nn_executor:exit=7,watchpoint_insert:hang,hlo-neff-wrapper:stderr=boom",
        )])
        .unwrap();
        let f = |t: &str| i.for_tool(t).fault.map(|c| c.value);
        assert_eq!(f("hlo2penguin"), Some(Fault::Segv));
        assert_eq!(f("xla_infergoldens"), Some(Fault::Abort));
        assert_eq!(f("walrus_driver"), Some(Fault::Kill));
        assert_eq!(f("nn_executor"), Some(Fault::Exit(7)));
        assert_eq!(f("watchpoint_insert"), Some(Fault::Hang));
        assert_eq!(f("hlo-neff-wrapper"), Some(Fault::Stderr("boom".into())));
    }

    #[test]
    fn specific_beats_star_and_last_wins() {
        let i = from(&[(
            FAULT_ENV,
            "walrus_driver:exit=3,*:segv,walrus_driver:exit=4,*:abort",
        )])
        .unwrap();
        assert_eq!(
            i.for_tool("walrus_driver").fault.unwrap().value,
            Fault::Exit(4)
        );
        assert_eq!(i.for_tool("hlo2penguin").fault.unwrap().value, Fault::Abort);
    }

    #[test]
    fn first_suffix_is_recognised_per_entry() {
        let i = from(&[
            (FAULT_ENV, "walrus_driver:segv@first"),
            (WORK_ENV, "*:250"),
            (RSS_ENV, "hlo2penguin:64@first"),
        ])
        .unwrap();
        let w = i.for_tool("walrus_driver");
        assert_eq!(
            w.fault,
            Some(Chosen {
                value: Fault::Segv,
                first_only: true
            })
        );
        assert_eq!(
            w.work_ms,
            Some(Chosen {
                value: 250,
                first_only: false
            })
        );
        assert!(w.needs_first());
        let later = w.without_first_only();
        assert_eq!(later.fault, None);
        assert_eq!(later.work_ms.map(|c| c.value), Some(250));
        assert_eq!(i.for_tool("hlo2penguin").rss_mb.unwrap().value, 64);
        assert!(!i.for_tool("nn_executor").needs_first());
    }

    #[test]
    fn waiting_is_a_setting_of_its_own() {
        let i = from(&[(WORK_ENV, "*:5"), (WAIT_ENV, "hlo2penguin:700,*:3@first")]).unwrap();
        let h = i.for_tool("hlo2penguin");
        assert_eq!(h.wait_ms.map(|c| c.value), Some(700));
        assert_eq!(h.work_ms.map(|c| c.value), Some(5));
        let w = i.for_tool("walrus_driver");
        assert!(w.needs_first());
        assert_eq!(w.without_first_only().wait_ms, None);
        assert!(from(&[(WAIT_ENV, "hlo2penguin:soon")]).is_err());
    }

    #[test]
    fn work_per_mib_is_a_setting_of_its_own() {
        let i = from(&[
            (WORK_ENV, "*:5"),
            (WORK_PER_MB_ENV, "hlo2penguin:40,*:2@first"),
        ])
        .unwrap();
        let h = i.for_tool("hlo2penguin");
        assert_eq!(h.work_ms.map(|c| c.value), Some(5));
        assert_eq!(h.work_ms_per_mb.as_ref().map(|c| c.value), Some(40));
        let w = i.for_tool("walrus_driver");
        assert!(w.needs_first());
        assert_eq!(w.without_first_only().work_ms_per_mb, None);
        let e = from(&[(WORK_PER_MB_ENV, "hlo2penguin:lots")]).unwrap_err();
        assert!(e.starts_with(WORK_PER_MB_ENV), "{e}");
    }

    #[test]
    fn stderr_text_may_hold_commas_and_colons() {
        let i = from(&[(
            FAULT_ENV,
            "walrus_driver:stderr=error: bad, very bad,hlo2penguin:exit=2",
        )])
        .unwrap();
        assert_eq!(
            i.for_tool("walrus_driver").fault.unwrap().value,
            Fault::Stderr("error: bad, very bad".into())
        );
        assert_eq!(
            i.for_tool("hlo2penguin").fault.unwrap().value,
            Fault::Exit(2)
        );
        let first = from(&[(FAULT_ENV, "*:stderr=x@first")]).unwrap();
        let c = first.for_tool("nn_executor").fault.unwrap();
        assert_eq!(c.value, Fault::Stderr("x".into()));
        assert!(c.first_only);
    }

    #[test]
    fn mistakes_are_errors() {
        for (var, value, needle) in [
            (FAULT_ENV, "walrus:segv", "unknown tool \"walrus\""),
            (FAULT_ENV, "segv", "expected <tool>:<setting>"),
            (FAULT_ENV, "walrus_driver:segfault", "unknown fault"),
            (FAULT_ENV, "walrus_driver:exit=300", "0 to 255"),
            (FAULT_ENV, "walrus_driver:exit=x", "0 to 255"),
            (WORK_ENV, "walrus_driver:fast", "not a non-negative integer"),
            (RSS_ENV, "walrus_driver:-5", "not a non-negative integer"),
            (
                RSS_ENV,
                "walrus_driver:5,walrus:6",
                "not a non-negative integer",
            ),
        ] {
            let e = from(&[(var, value)]).unwrap_err();
            assert!(e.contains(needle), "{value}: {e}");
            assert!(e.starts_with(var), "{e}");
        }
    }

    #[test]
    fn record_and_state_paths_are_relative_to_cwd() {
        let i = from(&[(RECORD_ENV, "rec.jsonl"), (STATE_ENV, "st")]).unwrap();
        let cwd = std::path::Path::new("/w/sg00");
        assert_eq!(i.record_file(cwd).unwrap(), cwd.join("rec.jsonl"));
        assert_eq!(i.state_dir(cwd), cwd.join("st"));
        let abs = from(&[(RECORD_ENV, "/tmp/r")]).unwrap();
        assert_eq!(
            abs.record_file(cwd).unwrap(),
            std::path::PathBuf::from("/tmp/r")
        );
        let default = from(&[]).unwrap();
        assert_eq!(
            default.state_dir(cwd),
            std::env::temp_dir().join("nxcc-sim-state")
        );
    }

    #[test]
    fn the_toolchain_page_documents_every_setting() {
        let page = include_str!("../../../docs/toolchain.md");
        for name in [
            FAULT_ENV,
            WORK_ENV,
            WORK_PER_MB_ENV,
            WAIT_ENV,
            RSS_ENV,
            RECORD_ENV,
            STATE_ENV,
            nxcc_core::toolchain::SIM_SUBGRAPHS_ENV,
        ] {
            let row = format!("\n| `{name}` | ");
            assert!(
                page.contains(&row),
                "{name} has no row in docs/toolchain.md's table"
            );
        }
    }
}
