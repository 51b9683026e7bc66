//! The seam: one trait for the ways a plan is run ([`Strategy`]: nxcc's pipeline and an external
//! compiler here, remote execution in `crate::remote`), one for the caches in front of them
//! ([`Layer`]: the local store in `crate::cache`, a remote action cache in `crate::remote`; a
//! read-only secondary or the framework's cache would be more), and the [`Stack`] that composes
//! them — Buildbarn's executors as decorators, sccache's storages behind one trait. Which layers
//! and which strategy a compile gets is decided in one place, the entry point (`crate::compile`).

use std::path::Path;

use super::result::CompileResult;
use super::session::{Options, Session};
use super::Engine;
use crate::plan::Invocation;

/// The one entry point (`crate::compile`) as it is handed to what sits below it and compiles
/// without a cache or a remote server (`nxcc worker`, which runs the actions a server leases it):
/// compile `inv` on the engine, run as the options say.
pub type Entry = fn(&Invocation, Options<'_>, &Engine) -> CompileResult;

/// A way to run a plan.
pub trait Strategy: Sync {
    /// Run the session's plan to its end. The NEFF is written to `--output` and, when `product`
    /// is given, to that path too: a new file in a directory private to the caller (a cache's
    /// entry being made), written by the compile itself — never copied from `--output`, which
    /// another process may replace at any time. A product that cannot be written costs the
    /// compile nothing; the file is then absent.
    fn run(&self, session: &Session, product: Option<&Path>) -> CompileResult;
}

/// A cache in front of a strategy.
pub trait Layer: Sync {
    /// Answer the compile (a hit, a remembered failure), or run `next` — the rest of the stack —
    /// and keep what it gives; `product` as for [`Strategy::run`].
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult;
}

/// Layers over a strategy, outermost first: itself a strategy.
pub struct Stack<'a> {
    layers: &'a [&'a dyn Layer],
    base: &'a dyn Strategy,
}

impl<'a> Stack<'a> {
    /// `layers` (outermost first) in front of `base`.
    pub fn new(layers: &'a [&'a dyn Layer], base: &'a dyn Strategy) -> Stack<'a> {
        Stack { layers, base }
    }
}

impl Strategy for Stack<'_> {
    fn run(&self, session: &Session, product: Option<&Path>) -> CompileResult {
        match self.layers.split_first() {
            None => self.base.run(session, product),
            Some((outer, rest)) => outer.run(session, product, &Stack::new(rest, self.base)),
        }
    }
}
