//! Tests of the compile daemon as real processes: `nxcc daemon` started from the built binary on
//! a socket in a temporary directory, compiles with the simulated toolchain, and requests written
//! by hand over the Unix socket (the original client's protocol and nxcc's own routes).

mod access;
mod bad_input;
#[path = "../common/bundles.rs"]
mod bundles;
mod client;
mod common;
mod connections;
mod failures;
mod forkserver;
mod forkserver_wire;
mod hostile;
mod lifecycle;
mod load;
mod memo;
mod protocol;
mod python;
mod reproducer;
