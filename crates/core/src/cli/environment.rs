//! Every environment variable nxcc reads, in one table ([`VARIABLES`]): the `Environment:`
//! section of `nxcc --help` and of the manual page is generated from it, and a test keeps it in
//! step with the constants the code reads them by.

/// Who a variable is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// A user sets it: listed in the help.
    User,
    /// nxcc sets it for processes of its own (a worker, a shim it runs): never listed.
    Internal,
}

/// One environment variable (or a family of them, `NAME_*`) nxcc reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    /// Its name, or a prefix ending in `*` for a family.
    pub name: &'static str,
    /// What it sets, in one sentence.
    pub what: &'static str,
    /// Who sets it.
    pub audience: Audience,
}

const fn user(name: &'static str, what: &'static str) -> Variable {
    Variable {
        name,
        what,
        audience: Audience::User,
    }
}

const fn internal(name: &'static str, what: &'static str) -> Variable {
    Variable {
        name,
        what,
        audience: Audience::Internal,
    }
}

/// Every environment variable nxcc reads.
pub const VARIABLES: &[Variable] = &[
    user(
        "NEURON_PLATFORM_TARGET_OVERRIDE",
        "The target when compile has no --target.",
    ),
    user(
        "NXCC_TOOLCHAIN",
        "The toolchain directory when no --toolchain is given (`sim`: the simulated toolchain).",
    ),
    user(
        "NEURON_CC_FLAGS",
        "The framework's compile flags: its --cache_dir names the framework's cache (parallel-compile --neuron-cache); forwarded by compile --daemon.",
    ),
    user(
        "NEURON_COMPILE_CACHE_URL",
        "The framework's cache when NEURON_CC_FLAGS names none (parallel-compile --neuron-cache); never nxcc's own cache.",
    ),
    user(
        "XDG_CACHE_HOME",
        "Where nxcc's own cache (nxcc/) and the simulated toolchain go; else ~/.cache.",
    ),
    user(
        "XDG_RUNTIME_DIR",
        "Where the daemon's socket goes (nxcc/daemon.sock); else a private directory in /tmp.",
    ),
    user(
        "NXCC_DAEMON_SOCKET",
        "The socket compile --daemon connects to (default: under XDG_RUNTIME_DIR).",
    ),
    user(
        "NO_COLOR",
        "Set and not empty: no colour, unless --color=always.",
    ),
    user(
        "NXCC_LOCK_LEASE_MS",
        "The lease of a lock nxcc holds, in milliseconds (default 60000).",
    ),
    user(
        "NXCC_LOCK_LEASE_MAX_S",
        "The longest lease honoured, in seconds (default 600).",
    ),
    user(
        "NXCC_LOCK_CLOCK_SKEW_S",
        "How far ahead of this host's clock a lock may be, in seconds (default 60).",
    ),
    user(
        "NXCC_REMOTE_CONNECT_TIMEOUT",
        "--remote: seconds to connect and get the server's first answer (default 5).",
    ),
    user(
        "NXCC_REMOTE_CALL_TIMEOUT",
        "--remote: seconds one unary call may take (default 60).",
    ),
    user(
        "NXCC_REMOTE_IDLE_TIMEOUT",
        "--remote: seconds a stream may go without progress (default 60).",
    ),
    user(
        "NXCC_REMOTE_RETRY_TIMEOUT",
        "--remote: seconds a failing call is tried again for (default 60).",
    ),
    user(
        "NXCC_REMOTE_MIN_RATE",
        "--remote: bytes per second a transfer must move to count as progress (default 64K).",
    ),
    user(
        "NXCC_REMOTE_MAX_BLOB",
        "--remote: the largest blob downloaded (default 4G).",
    ),
    user(
        "NXCC_REMOTE_CA",
        "--remote: PEM file of the authorities a grpcs:// server is checked against.",
    ),
    user(
        "NXCC_REMOTE_CLIENT_CERT",
        "--remote: PEM file of the client's certificate (mutual TLS).",
    ),
    user(
        "NXCC_REMOTE_CLIENT_KEY",
        "--remote: PEM file of the client's key (mutual TLS).",
    ),
    user(
        "NXCC_REMOTE_TOKEN_FILE",
        "--remote: a file holding a bearer token (grpcs:// only).",
    ),
    user(
        "NXCC_REMOTE_INVOCATION_ID",
        "--remote: the invocation id sent with every call (default: one per process).",
    ),
    user(
        "NXCC_S3_RETRY_TIMEOUT",
        "s3:// caches: seconds a failing request is tried again for (default 60).",
    ),
    user(
        "AWS_*",
        "s3:// caches: the standard AWS configuration (credentials, AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...).",
    ),
    user(
        "NXCC_SIM_*",
        "The simulated toolchain's settings (faults, costs, records; see docs/toolchain.md).",
    ),
    internal(
        "NXCC_SHIM_HOPS",
        "How many shims ran one another (the shim's loop guard).",
    ),
    internal(
        "NXCC_WORKER_*",
        "What nxcc hands a worker process of its own.",
    ),
];

/// Whether `name` is in the table, by its own row or a family's (`NXCC_SIM_FAULT`: `NXCC_SIM_*`).
pub fn is_listed(name: &str) -> bool {
    VARIABLES.iter().any(|v| match v.name.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => v.name == name,
    })
}

/// The variables a user sets, as the help lists them.
pub fn for_users() -> impl Iterator<Item = &'static Variable> {
    VARIABLES.iter().filter(|v| v.audience == Audience::User)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_families_match_their_members() {
        let mut names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a name twice");
        assert!(is_listed("NXCC_SIM_FAULT"));
        assert!(is_listed("NXCC_TOOLCHAIN"));
        assert!(!is_listed("NXCC_TOOLCHAINS"));
        assert!(!is_listed("PATH"));
        assert!(for_users().all(|v| v.audience == Audience::User));
        assert!(!for_users().any(|v| v.name == "NXCC_WORKER_*"));
    }
}
