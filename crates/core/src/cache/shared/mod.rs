//! The cache's shared tier: the same entries as a cache directory's, kept in an object store
//! (Amazon S3, or a server that speaks its protocol) that a fleet of hosts shares, behind a local
//! cache directory that answers first — sccache's chain of storages, a local level in front of a
//! remote one. A hit from the shared tier is kept in the local directory; a local hit never asks
//! the store.
//!
//! - [`crate::objstore::Storage`]: the seam — a small key-value interface (get within a size
//!   bound, put in one of three modes, head, delete, list) that the cache reaches its objects
//!   through, with the client the program registered.
//! - [`objects`]: the layout of entries as objects, publication (the files under a publication
//!   id, then a `done` marker created only if absent: two hosts never both publish a key), and
//!   fetching an entry into the local directory with its NEFF verified before it is kept.
//! - [`lock`]: one compile per key across hosts, by a lock object created only if absent, with
//!   a lease — the one lock protocol on objects ([`crate::lockfile::object`]).
//! - [`maintain`]: its configuration, `nxcc cache stats|verify|gc|clear`, and eviction by
//!   `max_size` (least recently used first) without a listing per publication.
//! - [`tier`]: the tier as a layer of the compile stack ([`tier::SharedTier`]).

pub(crate) mod actions;
pub mod lock;
pub mod maintain;
pub mod objects;
pub mod tier;

#[cfg(test)]
mod tests;

use crate::objstore::{Object, Put, PutMode, Storage, StorageError};
