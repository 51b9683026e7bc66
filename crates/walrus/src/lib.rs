//! The `libwalrus.so` of the simulated toolchain: this crate's `cdylib` (`libnxcc_walrus.so`,
//! linking the simulator and nxcc's core only), laid out as `<toolchain>/lib/libwalrus.so`, exports
//! `run_backend_driver(argc, argv)` with the original's signature, for the driver's
//! `--enable-internal-fork-walrus` path.
//!
//! It runs the simulated `walrus_driver` with that argv (`argv[0]` first). Relative paths resolve
//! against the process's current directory, as in the original; nxcc never changes it and passes
//! an absolute `bir.json` path instead, and the simulated walrus writes its outputs next to its
//! input file. The library keeps itself loaded once called (see `pin_in_memory`). Injected faults apply here too — `segv`, `abort` and `kill` end the host process,
//! `exit=N` returns N, `hang` never returns. A panic is caught at the boundary and returns 101.
//! Like every part of the simulated toolchain, this is a test instrument: its outputs cannot run
//! on Neuron hardware.

#![warn(missing_docs)]

use std::ffi::{c_char, c_int, CStr};

/// The status returned when the call panics or its arguments are unusable.
pub const PANIC_STATUS: c_int = 101;

/// Keep this library loaded for the life of the process, whatever the host does with its handle:
/// Rust's runtime registers thread-local destructors inside the library, which the C runtime
/// calls at thread exit, so unloading it would leave them pointing at unmapped code. Re-opening
/// the library by its own path with `RTLD_NOLOAD | RTLD_NODELETE` marks it as never unloaded.
fn pin_in_memory() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: dladdr and dlopen with a valid code address, out-pointer and path; RTLD_NOLOAD
        // only references an object that is already loaded.
        unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let addr = run_backend_driver as *const std::ffi::c_void;
            if libc::dladdr(addr, &mut info) != 0 && !info.dli_fname.is_null() {
                libc::dlopen(
                    info.dli_fname,
                    libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
                );
            }
        }
    });
}

/// Run the simulated `walrus_driver` in-process.
///
/// # Safety
/// `argv` must point to `argc` valid NUL-terminated strings (the C `main` convention).
#[no_mangle]
pub unsafe extern "C" fn run_backend_driver(argc: c_int, argv: *const *const c_char) -> c_int {
    pin_in_memory();
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
        nxcc_sim::tools::run_invocation("walrus_driver", &argv0, rest, &cwd)
    })
    .unwrap_or(PANIC_STATUS)
}
