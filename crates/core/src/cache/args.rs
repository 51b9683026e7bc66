//! The command line of `nxcc cache ACTION [OPTIONS]`: one typed struct per action, parsed by
//! clap ([`super::command`]), each `--help` listing its own options; what the actions
//! ([`super::actions`], [`super::neuron`], the shared tier's) are handed.

use super::config::DEFAULT_DIR_TEXT;
use crate::cli::subcommand::{usage_error, DriverOptions, Stop};

/// Inspect and maintain the compile cache.
#[derive(Debug, clap::Parser)]
pub(crate) struct CacheCommand {
    /// What to do.
    #[command(subcommand)]
    pub(crate) action: CacheAction,
    /// The cache directory (nxcc's entries are in its nxcc-v1 subdirectory).
    #[arg(long = "cache_dir", visible_alias = "cache-dir", value_name = "DIR", global = true, help = format!("The cache directory (nxcc's entries are in its nxcc-v1 subdirectory; default: {DEFAULT_DIR_TEXT})"))]
    pub(crate) cache_dir: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) driver: DriverOptions,
}

/// `nxcc cache`'s actions.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum CacheAction {
    /// What the cache holds and what it did.
    Stats(Stats),
    /// Check every entry; evict the corrupt ones (exit 1 when there were any).
    Verify(Verify),
    /// Evict least recently used entries down to a size.
    Gc(Gc),
    /// Evict everything.
    Clear,
    /// Whether a compile hits the cache, and on a miss what differs from the nearest entries.
    Explain(Explain),
    /// Show or change the cache's configuration (max_size, sloppiness, stat_digests, mode).
    Config(Config),
    /// Remove the framework cache's failed entries' logs, stale locks, old versions.
    Clean(Clean),
}

/// The framework's compile cache, instead of nxcc's.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct NeuronCache {
    /// Work on the framework's compile cache DIR (its neuronxcc-<version>/MODULE_* entries)
    /// instead of nxcc's.
    #[arg(long = "neuron-cache", value_name = "DIR")]
    pub(crate) neuron_cache: Option<String>,
    /// With --neuron-cache: only this compiler version's directory.
    #[arg(
        long = "neuron-version",
        value_name = "VERSION",
        requires = "neuron_cache"
    )]
    pub(crate) neuron_version: Option<String>,
}

/// `stats`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Stats {
    /// Set the counters back to zero (after showing them).
    #[arg(long, conflicts_with = "neuron_cache")]
    pub(crate) zero: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) neuron: NeuronCache,
}

/// `verify`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Verify {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub(crate) neuron: NeuronCache,
}

/// `gc`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Gc {
    /// The size to shrink the entries to (512M, 2G, ...; default: the configured max_size).
    #[arg(long = "max-size", value_name = "SIZE")]
    pub(crate) max_size: Option<String>,
}

/// `explain -- COMPILE-ARGS`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Explain {
    /// The compile runs on this external compiler (as parallel-compile --compiler PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) compiler: Option<String>,
    /// The compile's arguments, after `--` (nxcc cache explain -- model.pb --target trn2 ...).
    #[arg(last = true, value_name = "COMPILE-ARGS", required = true)]
    pub(crate) compile_args: Vec<String>,
}

/// `config [KEY=VALUE...]`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Config {
    /// The settings to change (none: show them).
    #[arg(value_name = "KEY=VALUE")]
    pub(crate) pairs: Vec<String>,
    /// `--max-size SIZE`, as `gc` and ccache spell it: refused, pointing to `max_size=SIZE`.
    #[arg(long = "max-size", value_name = "SIZE", hide = true)]
    pub(crate) max_size: Option<String>,
}

/// `clean`, on the framework's cache only.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Clean {
    /// The framework's compile cache to clean.
    #[arg(long = "neuron-cache", value_name = "DIR", required = true)]
    pub(crate) neuron_cache: String,
    /// The compiler version kept by --old-versions (default: the newest).
    #[arg(long = "neuron-version", value_name = "VERSION")]
    pub(crate) neuron_version: Option<String>,
    /// Remove the model.log of failed entries (they are to do again).
    #[arg(long)]
    pub(crate) failed: bool,
    /// Remove lock files no process holds an flock on and older than --min-age.
    #[arg(long)]
    pub(crate) locks: bool,
    /// With --locks: the age a lock file must have (30s, 10m, 2h, 1d; 0: any).
    #[arg(long = "min-age", value_name = "AGE", default_value = "1d")]
    pub(crate) min_age: String,
    /// Remove the directories of every compiler version but --neuron-version.
    #[arg(long = "old-versions")]
    pub(crate) old_versions: bool,
    /// Say what would be removed; remove nothing.
    #[arg(long = "dry-run")]
    pub(crate) dry_run: bool,
}

/// The action's name, as the command line spells it.
pub(crate) fn action_name(a: &CacheAction) -> &'static str {
    match a {
        CacheAction::Stats(_) => "stats",
        CacheAction::Verify(_) => "verify",
        CacheAction::Gc(_) => "gc",
        CacheAction::Clear => "clear",
        CacheAction::Explain(_) => "explain",
        CacheAction::Config(_) => "config",
        CacheAction::Clean(_) => "clean",
    }
}

/// A usage error of `nxcc cache ACTION` found after parsing (exit status 2).
pub(crate) fn usage(prog: &str, action: &str, message: impl std::fmt::Display) -> Stop {
    usage_error::<CacheCommand>(prog, "cache", Some(action), message)
}
