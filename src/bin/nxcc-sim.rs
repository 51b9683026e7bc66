//! `nxcc-sim`: the simulated Neuron toolchain, one binary acting as every native tool by the name
//! it is invoked under (`hlo2penguin`, `xla_infergoldens`, `walrus_driver`, `hlo-neff-wrapper`,
//! `nn_executor`, `watchpoint_insert`), or as `nxcc-sim <tool> args...`. A test instrument: its
//! outputs cannot run on Neuron hardware. See [`nxcc_sim`].

fn main() {
    let status = nxcc_sim::binary_main(std::env::args_os().collect());
    std::process::exit(status);
}
