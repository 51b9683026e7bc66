//! `nxcc` (also installed as `neuronx-cc`): the compile driver, which is also the simulated
//! toolchain (registered behind `nxcc::toolchain::Simulator`, its tools served from this
//! executable).

fn main() {
    nxcc_sim::serve_from_this_executable();
    std::process::exit(nxcc::driver::main(std::env::args_os().collect()));
}
