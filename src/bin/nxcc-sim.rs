//! `nxcc-sim`: the simulated Neuron toolchain, one binary acting as every native tool by the name
//! it is invoked under. A test instrument: its outputs cannot run on Neuron hardware.

fn main() {
    eprintln!("nxcc-sim: not available in this build");
    std::process::exit(2);
}
