//! The compile daemon (06-daemon.md): `nxcc daemon` serves compiles over HTTP/1.1 on a Unix
//! socket — the original's protocol (`POST /compile?working_directory=...`, body = the
//! shell-quoted compile arguments), plus a streaming JSON route, a status route and `/exit` — with
//! access control by peer uid, many compiles at once under admission control, and a clean stop.
//! `nxcc compile --daemon ...` is its client.
//!
//! - [`config`]: the command line and the default places (socket, pid file);
//! - [`pidfile`]: the `flock`ed pid file; [`listen`]: binding the socket;
//! - [`server`]: the process — start, serve, stop; [`state`]: what its parts share;
//!   [`peer`]: who may connect (the uid check at `accept`, connection limits, refusals logged
//!   at a bounded rate); [`conn`]: one connection (hyper, timeouts, a peer that goes away);
//! - [`http`]: routes, limits and answers (hyper); [`environ`]: what a request's environment may
//!   set; [`events`]: the `/v1/compile` stream;
//! - [`job`]: one compile request from arguments to exit status; [`explain`]: whether one
//!   would hit the cache (`/v1/explain`);
//! - [`engine`]: the seam where a compile is run (nxcc's pipeline; the cache and an external
//!   compiler plug in here) and the memory estimate;
//! - [`wire`]: the JSON of the routes, as the types the server and its clients both use;
//! - [`client`]: `nxcc compile --daemon`;
//! - [`status`]: `nxcc daemon status`, what the daemon of a socket is doing;
//! - [`stop`]: `nxcc daemon stop`, the daemon of a socket stopped cleanly;
//! - [`memo`]: what it keeps between requests because it does not change;
//! - [`log`]: the daemon's own log.

pub mod client;
pub mod config;
pub mod conn;
pub mod engine;
pub use crate::environ;
pub mod events;
pub mod explain;
pub mod http;
pub mod job;
pub mod listen;
pub mod log;
pub mod memo;
pub mod peer;
pub mod pidfile;
pub mod server;
pub mod state;
pub mod status;
pub mod stop;
pub mod wire;

use std::io::Write;

/// Write to stdout, ignoring a closed pipe.
pub(crate) fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// Write to stderr, ignoring errors.
pub(crate) fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// `nxcc daemon ARGS...` (or `nxcc daemon status|stop ARGS...`); returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    match config::parse(prog, args) {
        Ok(config::Parse::Help(text)) => {
            out(&text);
            0
        }
        Ok(config::Parse::Stop(which)) => stop::main(&which),
        Ok(config::Parse::Status(which)) => status::main(&which),
        Ok(config::Parse::Run(c)) => server::run(*c),
        Err(text) => {
            err(&text);
            crate::cli::CliError::EXIT_STATUS
        }
    }
}
