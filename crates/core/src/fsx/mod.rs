//! File-system primitives nxcc builds on, knowing nothing of compiling:
//!
//! - [`atomic`]: [`AtomicFile`] — the one way nxcc publishes a file: written where no reader can
//!   see it, then put in place whole by a rename at [`atomic::AtomicFile::commit`], with a stated
//!   [`Durability`];
//! - [`unique`]: [`unique::name`] — the one unique-name helper (pid, sequence, time), for
//!   temporary names no two writers share;
//! - `dir`: [`Dir`] — a directory held by its descriptor, with every operation relative to it
//!   and no symbolic link followed, for trees nxcc must not be led out of (the compile cache);
//! - `mapped`: [`Mapped`] — a file mapped read-only, a truncation meanwhile read as zeros and
//!   reported rather than a SIGBUS;
//! - [`path`]: [`absolute`] — a command line's path made absolute against its launch directory,
//!   lexically, as the original does;
//! - [`regular`]: a file the user named (a model), opened only if it is a regular file — without
//!   waiting on a FIFO — and read within a limit counted in bytes read;
//! - [`trust`]: [`Trusted`] — the one trust rule (ssh's `StrictModes`) for the directories nxcc
//!   reads instructions from or writes into on behalf of others, and no link followed on the way.

pub mod atomic;
pub(crate) mod dir;
pub(crate) mod mapped;
pub mod path;
pub mod regular;
pub mod trust;
pub mod unique;

pub use atomic::{AtomicFile, Durability};
pub use dir::Dir;
pub use mapped::Mapped;
pub use path::absolute;
pub use trust::{Subject, Trusted, Untrusted};
