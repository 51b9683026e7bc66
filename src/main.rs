//! `nxcc` (also installed as `neuronx-cc`): the compile driver, which is also the simulated
//! toolchain (registered behind `nxcc::toolchain::Simulator`, its tools served from this
//! executable), with the S3 client of `nxcc-s3` behind the cache's shared tier.

fn main() {
    nxcc_sim::serve_from_this_executable();
    nxcc_s3::register();
    std::process::exit(nxcc::driver::main(std::env::args_os().collect()));
}
