//! File-system primitives nxcc builds on, knowing nothing of compiling:
//!
//! - [`atomic`]: [`AtomicFile`] — the one way nxcc publishes a file: written where no reader can
//!   see it, then put in place whole by a rename at [`atomic::AtomicFile::commit`], with a stated
//!   [`Durability`];
//! - [`unique`]: [`unique::name`] — the one unique-name helper (pid, sequence, time), for
//!   temporary names no two writers share;
//! - [`dir`]: [`Dir`] — a directory held by its descriptor, with every operation relative to it
//!   and no symbolic link followed, for trees nxcc must not be led out of (the compile cache);
//! - [`mapped`]: [`Mapped`] — a file mapped read-only, a truncation meanwhile read as zeros and
//!   reported rather than a SIGBUS.

pub mod atomic;
pub mod dir;
pub mod mapped;
pub mod unique;

pub use atomic::{AtomicFile, Durability};
pub use dir::Dir;
pub use mapped::Mapped;
