//! The Remote Execution API (REAPI v2) for nxcc: a client that turns a compile into an action
//! (a shared action cache for a fleet, remote execution on the server's workers), and
//! `nxcc worker`, a bot of the Remote Workers API that runs compile actions with nxcc's
//! admission. Files: [`settings`] (deadlines, retries, TLS and credentials from the
//! environment), `connection` (the process's one runtime and one channel per server),
//! `credentials`, `address`, `error`, `client` (a handle; calls with deadlines, retries
//! and cancellation), `retry`, `metadata` (`RequestMetadata`), `text` (server text made safe to
//! print), [`digest`], [`cas`], `ac` (action cache), `execute`, [`action`] (actions built
//! from plans, the toolchain identity), `result` (a remote NEFF checked before it is
//! published), [`compile`] (`--remote` / `--remote-cache` behind the local cache), [`bots`] (the
//! Remote Workers API messages and client, written here from the public schema), [`worker`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

// The layers below, under the names the client's modules use.
pub(crate) use nxcc_core::{
    admission, cache, cli, engine, environ, fsx, hlo, neff, plan, run, shell, toolchain, VERSION,
};

pub(crate) mod ac;
pub mod action;
pub(crate) mod address;
pub mod bots;
pub mod cas;
pub(crate) mod client;
pub mod compile;
pub(crate) mod connection;
pub(crate) mod credentials;
pub mod digest;
pub(crate) mod error;
pub(crate) mod execute;
pub(crate) mod metadata;
pub(crate) mod result;
pub(crate) mod retry;
pub mod settings;
pub(crate) mod text;
pub mod worker;

/// The generated REAPI v2 types and clients.
pub use bazel_remote_apis::build::bazel::remote::execution::v2 as re;

pub use client::{Address, ErrorKind, Remote, RemoteError};
pub use compile::{Mode, RemoteConfig};
