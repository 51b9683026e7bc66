//! How the product executable `nxcc` is linked (see [`link_product_position_dependent`]), and
//! the commit it is built from (`NXCC_COMMIT`, `NXCC_COMMIT_DATE`, when built in a git checkout;
//! `build/commit.rs`).

#[path = "build/commit.rs"]
mod commit;

fn main() {
    link_product_position_dependent();
    embed_commit();
}

/// The commit `nxcc --version` names, when there is one.
fn embed_commit() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/commit.rs");
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    for file in commit::watched(&dir) {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    if let Some((hash, date)) = commit::head(&dir) {
        println!("cargo:rustc-env=NXCC_COMMIT={hash}");
        println!("cargo:rustc-env=NXCC_COMMIT_DATE={date}");
    }
}

/// How the product executable is linked, to touch fewer pages at every start (BENCHMARKS.md,
/// start-up); its code is compiled as before, position-independent (the default), only its link
/// differs:
/// - position-dependent (`-no-pie`): the linker resolves its thousands of relative relocations,
///   so the dynamic loader has none to apply and the pages holding them are not written;
/// - the unwinder linked in (`libgcc_eh.a`, what `-static-libgcc` links for C programs) instead
///   of loading `libgcc_s.so.1`, whose load-time constructor probes the CPU with `cpuid`: an
///   archive named `libgcc_s.a` in a directory searched first is what the standard library's
///   `-lgcc_s` then finds. Where the C compiler has no `libgcc_eh.a`, `libgcc_s.so.1` is loaded
///   as before.
fn link_product_position_dependent() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
        || std::env::var("CARGO_CFG_TARGET_ENV").as_deref() != Ok("gnu")
    {
        return;
    }
    println!("cargo:rustc-link-arg-bin=nxcc=-no-pie");
    println!("cargo:rerun-if-env-changed=CC");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let Ok(out) = std::process::Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
    else {
        return;
    };
    let eh = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !out.status.success() || !eh.is_absolute() || !eh.is_file() {
        return;
    }
    let dir = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("unwind");
    std::fs::create_dir_all(&dir).expect("OUT_DIR/unwind");
    std::fs::copy(&eh, dir.join("libgcc_s.a")).expect("copy libgcc_eh.a");
    println!("cargo:rustc-link-arg-bin=nxcc=-L{}", dir.display());
}
