//! Which environment variables a compile request may set (the daemon's `/v1/compile` `env`, what
//! `nxcc compile --daemon` forwards, and what a remote compile's Command carries to `nxcc worker`): an allow-list of names, because a compile runs as the
//! daemon's user and a variable such as `LD_PRELOAD` or `PATH` would make a client's code run in
//! the daemon's name.
//!
//! - Allowed: the variables that change a compile — [`ALLOWED`] (the target override, the
//!   toolchain, the cache directory, the flags the frameworks pass).
//! - For tests only: the simulated toolchain's injection variables (`NXCC_SIM_*`), accepted only
//!   by a daemon started with `--allow-test-env`.
//! - Everything else is refused with `400` and the reason: `LD_*`, `PATH`, nxcc's own
//!   `NXCC_WORKER_*`, any other name.

use crate::cache::CACHE_URL_ENV;
use crate::plan::TARGET_OVERRIDE_ENV;
use crate::recon::toolchain::TOOLCHAIN_ENV;

/// The variables a request may always set.
pub const ALLOWED: [&str; 4] = [
    TARGET_OVERRIDE_ENV,
    TOOLCHAIN_ENV,
    CACHE_URL_ENV,
    "NEURON_CC_FLAGS",
];

/// The prefix of the simulated toolchain's injection variables (faults, delays, records).
pub const TEST_PREFIX: &str = "NXCC_SIM_";

/// How a daemon treats one variable name of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Changes a compile; always accepted.
    Allowed,
    /// A simulated-toolchain injection variable: accepted with `--allow-test-env` only.
    Test,
    /// Never accepted.
    Refused,
}

/// Classify a variable name.
pub fn classify(name: &str) -> Class {
    if ALLOWED.contains(&name) {
        Class::Allowed
    } else if name.starts_with(TEST_PREFIX) && name.len() > TEST_PREFIX.len() {
        Class::Test
    } else {
        Class::Refused
    }
}

/// Check one variable of a request (`allow_test_env`: the daemon's `--allow-test-env`); the
/// error is the reason given with the `400`.
pub fn check(name: &str, allow_test_env: bool) -> Result<(), String> {
    match classify(name) {
        Class::Allowed => Ok(()),
        Class::Test if allow_test_env => Ok(()),
        Class::Test => Err(format!(
            "the environment variable {name} is a test variable of the simulated toolchain; this daemon takes it only when started with --allow-test-env"
        )),
        Class::Refused => Err(format!(
            "the environment variable {name} may not be set by a request (a compile runs as the daemon's user); a request may set only {}, and {TEST_PREFIX}* on a daemon started with --allow-test-env",
            ALLOWED.join(", ")
        )),
    }
}

/// Whether `nxcc compile --daemon` sends a variable of its own environment with the request:
/// the allowed ones and the test variables (which a daemon without `--allow-test-env` refuses,
/// saying so).
pub fn is_forwarded(name: &str) -> bool {
    classify(name) != Class::Refused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for n in ALLOWED {
            assert_eq!(check(n, false), Ok(()));
        }
        assert_eq!(classify("NXCC_SIM_FAULT"), Class::Test);
        assert!(check("NXCC_SIM_FAULT", true).is_ok());
        let e = check("NXCC_SIM_FAULT", false).unwrap_err();
        assert!(e.contains("--allow-test-env"), "{e}");
        for n in [
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "PATH",
            "PYTHONPATH",
            "NXCC_WORKER_ARGV",
            "NXCC_DAEMON_SOCKET",
            "NXCC_SIM_",
            "HOME",
        ] {
            assert_eq!(classify(n), Class::Refused, "{n}");
            let e = check(n, true).unwrap_err();
            assert!(e.contains(n) && e.contains("may not be set"), "{e}");
        }
        assert!(is_forwarded("NXCC_TOOLCHAIN") && is_forwarded("NXCC_SIM_STATE"));
        assert!(!is_forwarded("NXCC_DAEMON_SOCKET") && !is_forwarded("LD_PRELOAD"));
    }
}
