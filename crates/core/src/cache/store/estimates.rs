//! The memory-estimate index's place in the cache: `nxcc-v1/estimates`, reached like every other
//! directory of the cache (no link followed) and removed the way entries are (renamed away, then
//! deleted). What it holds is [`crate::cache::estimate`]'s.

use super::{subdir, Cache, EVICT_PREFIX};
use crate::fsx::{unique, Dir};

/// The subdirectory (of [`super::LAYOUT_DIR`]) of the memory-estimate index.
pub const ESTIMATES_DIR: &str = "estimates";

impl Cache {
    /// The estimate index directory, `nxcc-v1/estimates` (created when `create`).
    pub(crate) fn estimates_dir(&self, create: bool) -> std::io::Result<Option<Dir>> {
        match self.open_root(create)? {
            Some(root) => subdir(&root, ESTIMATES_DIR, create),
            None => Ok(None),
        }
    }

    /// Remove the estimate index (renamed away, then deleted; a link is removed, not followed).
    pub(crate) fn clear_estimates(&self) -> std::io::Result<bool> {
        let Some(root) = self.open_root(false)? else {
            return Ok(false);
        };
        let away = unique::name(&format!("{EVICT_PREFIX}{ESTIMATES_DIR}-"));
        match root.rename(ESTIMATES_DIR, &root, &away) {
            Ok(()) => root.remove_all(&away).map(|_| true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}
