//! Tests of the simulated Neuron toolchain as real processes: the `nxcc-sim` binary through links
//! named after each tool, the driver's own command lines, fault and cost injection, the layout
//! and its `libwalrus.so`.

mod common;
mod faults;
mod layout;
mod strict;
mod tools;
