//! The `libwalrus.so` entry point of the simulated toolchain: the crate's `cdylib`
//! (`libnxcc.so`), laid out as `<toolchain>/lib/libwalrus.so`, exports
//! `run_backend_driver(argc, argv)` with the original's signature, for the driver's
//! `--enable-internal-fork-walrus` path.
//!
//! It runs the simulated `walrus_driver` with that argv (argv[0] first). Relative paths resolve
//! against the process's current directory, as in the original; nxcc never changes it and passes
//! an absolute `bir.json` path instead, and the simulated walrus writes its outputs next to its
//! input file. Injected faults apply here too — `segv`, `abort` and `kill` end the host process,
//! `exit=N` returns N, `hang` never returns. A panic is caught at the boundary and returns 101.
//! Like every part of the simulated toolchain, this is a test instrument: its outputs cannot run
//! on Neuron hardware.

use std::ffi::{c_char, c_int, CStr};

/// The status returned when the call panics or its arguments are unusable.
pub const PANIC_STATUS: c_int = 101;

/// Run the simulated `walrus_driver` in-process.
///
/// # Safety
/// `argv` must point to `argc` valid NUL-terminated strings (the C `main` convention).
#[no_mangle]
pub unsafe extern "C" fn run_backend_driver(argc: c_int, argv: *const *const c_char) -> c_int {
    let mut args: Vec<String> = Vec::new();
    if argc > 0 && !argv.is_null() {
        for i in 0..argc as usize {
            // SAFETY: the caller guarantees `argc` valid entries.
            let p = unsafe { *argv.add(i) };
            if p.is_null() {
                eprintln!("run_backend_driver: error: argv[{i}] is NULL");
                return 2;
            }
            // SAFETY: the caller guarantees NUL-terminated strings.
            match unsafe { CStr::from_ptr(p) }.to_str() {
                Ok(s) => args.push(s.to_string()),
                Err(_) => {
                    eprintln!("run_backend_driver: error: argv[{i}] is not valid UTF-8");
                    return 2;
                }
            }
        }
    }
    std::panic::catch_unwind(|| {
        let cwd = match std::env::current_dir() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("run_backend_driver: error: cannot read the current directory: {e}");
                return 2;
            }
        };
        let argv0 = args
            .first()
            .cloned()
            .unwrap_or_else(|| "walrus_driver".into());
        let rest = if args.is_empty() { &[][..] } else { &args[1..] };
        crate::sim::tools::run_invocation("walrus_driver", &argv0, rest, &cwd)
    })
    .unwrap_or(PANIC_STATUS)
}
