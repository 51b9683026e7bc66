//! RECON rules of toolchain location (03-jobs.md).

/// Where the toolchain is looked for, in order: `--toolchain DIR|sim`, then the environment
/// variable below, then an installed `neuronxcc` Python package (`<package>/starfish/bin`, asked of
/// `python3` once, with [`PYTHON_PROBE_TIMEOUT_MS`], only when a tool path is actually needed).
pub const TOOLCHAIN_ENV: &str = "NXCC_TOOLCHAIN";

/// How long the one `python3` probe for an installed `neuronxcc` package may take.
pub const PYTHON_PROBE_TIMEOUT_MS: u64 = 5_000;

/// The probe `python3` runs: prints the package's `starfish/bin` directory.
pub const PYTHON_PROBE: &str =
    "import os, neuronxcc; print(os.path.join(os.path.dirname(neuronxcc.__file__), 'starfish', 'bin'))";

/// A toolchain directory given as the root of a layout (`DIR/bin/<tools>`, as `nxcc toolchain
/// sim DIR` writes it) is used through its `bin/` subdirectory when `DIR` itself holds no tools.
pub(crate) fn prefer_bin_subdir(dir_has_tools: bool, bin_has_tools: bool) -> bool {
    !dir_has_tools && bin_has_tools
}

/// The marker file that identifies a simulated toolchain's `bin/` directory.
pub const SIM_MARKER: &str = ".nxcc-simulated-toolchain";
