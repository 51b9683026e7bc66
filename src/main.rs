//! `nxcc` (also installed as `neuronx-cc`): the compile driver.

fn main() {
    std::process::exit(nxcc::driver::main(std::env::args_os().collect()));
}
