//! What `cache clean --neuron-cache` is asked to remove and what it reports: the data that
//! [`super::maintain::clean`] and each place's lock cleaning ([`super::place::Place::clean_locks`])
//! share.

use serde::Serialize;

/// What `clean` is asked to remove.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanRequest {
    /// Failed entries' logs (`--failed`): the entry is to do again.
    pub failed: bool,
    /// Stale locks: those whose holder is proven gone (at any age), and foreign ones nobody
    /// `flock`s at least [`CleanRequest::min_age_s`] old; the staging directories of dead runs.
    pub locks: bool,
    /// The minimum age of a foreign lock removed, seconds.
    pub min_age_s: u64,
    /// Every version directory but this one (`--old-versions`).
    pub keep_version: Option<String>,
    /// Say what would be removed, remove nothing.
    pub dry_run: bool,
}

/// One thing `clean` removed (or would remove).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Removal {
    /// Its path.
    pub path: String,
    /// Why.
    pub why: String,
}

/// What `clean` did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CleanReport {
    /// Nothing was removed: this is what would have been.
    pub dry_run: bool,
    /// What was removed (or would be).
    pub removed: Vec<Removal>,
    /// What was left, and why (a lock held, too young, an entry locked).
    pub kept: Vec<Removal>,
}
