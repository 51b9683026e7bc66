//! RECON defaults of the flag table (01-cli.md, `flags.tsv`): values every source leaves open.

/// `layer_unroll_factor`'s default. The seed's default flow schedules Kelper, and the backend
/// gate requires `layer_unroll_factor > 0`, so the default must be positive; 1 is the smallest.
pub const LAYER_UNROLL_FACTOR_DEFAULT: i64 = 1;
