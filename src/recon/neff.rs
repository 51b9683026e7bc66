//! RECON rules of the NEFF container (05-neff.md): field placements the sources leave open, and
//! how the deterministic values are derived.

/// Header offset of the archive length (u64).
pub const ARCHIVE_LENGTH_OFFSET: usize = 16;
/// Header offset of the IR signature (32 lower-case hex characters).
pub const IR_SIGNATURE_OFFSET: usize = 24;
/// Header offset of the version string `Dynamic` (8 bytes, NUL-padded).
pub const VERSION_STRING_OFFSET: usize = 56;
/// Header offset of the engine-present bytes, one per engine in [`ENGINE_ORDER`].
pub const ENGINES_OFFSET: usize = 480;
/// The order of the engine-present bytes.
pub const ENGINE_ORDER: [&str; 5] = ["PE", "Pool", "Activation", "SP", "DVE"];

/// The UUID: the first 16 bytes of blake3(IR signature), with the RFC 4122 version-4 and variant
/// bits set (WIKI: the original draws it from a constant-seeded generator, so it is deterministic).
pub fn uuid_from_signature(ir_signature: &str) -> [u8; 16] {
    let h = blake3::hash(ir_signature.as_bytes());
    let mut u = [0u8; 16];
    u.copy_from_slice(&h.as_bytes()[..16]);
    u[6] = (u[6] & 0x0f) | 0x40;
    u[8] = (u[8] & 0x3f) | 0x80;
    u
}

/// Which members the IR signature covers: every member except `info.json`, in member order
/// (MD5 over their bytes).
pub fn signature_covers(member: &str) -> bool {
    member != "info.json"
}
