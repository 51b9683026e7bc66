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
pub(crate) fn signature_covers(member: &str) -> bool {
    member != "info.json"
}

/// The engine a member's bytes belong to: a member whose file name (its last path component) is
/// `<Engine>.bin` for one of [`ENGINE_ORDER`] marks that engine present (index into the order).
/// The sources name the engine-present bytes but not how they are derived; nxcc derives them from
/// the engine binaries the backend wrote, so a NEFF says which engines have a program.
pub(crate) fn engine_of_member(member: &str) -> Option<usize> {
    let file = member.rsplit('/').next().unwrap_or(member);
    let engine = file.strip_suffix(".bin")?;
    ENGINE_ORDER.iter().position(|e| *e == engine)
}

/// The engine-present flags for a set of member names, in [`ENGINE_ORDER`].
pub(crate) fn engines_present<'a>(members: impl IntoIterator<Item = &'a str>) -> [bool; 5] {
    let mut present = [false; 5];
    for m in members {
        if let Some(i) = engine_of_member(m) {
            present[i] = true;
        }
    }
    present
}

/// The header's arch-mode number for a `--target` (or `--arch`) family: the NeuronCore
/// generation the family runs (`inf1` → 1; `inf2`, `trn1`, `trn1n` → 2; `trn2`, `trn2n` → 3;
/// `trn3` → 4). `sunda` is the architecture name the backend tools use for the NeuronCore
/// generation of `trn2` (the experimental Backend runs with `--sunda`), so it maps to 3. An
/// unknown family gives 0 ("unspecified"). The sources place the field but give no numbering.
pub fn arch_mode(target: &str) -> u32 {
    match target {
        "inf1" => 1,
        "inf2" | "trn1" | "trn1n" => 2,
        "trn2" | "trn2n" | "sunda" => 3,
        "trn3" => 4,
        _ => 0,
    }
}

/// The header's collective-communication world size when the compile does not set one: a single
/// rank. (The field's meaning is WIKI; the default is RECON.)
pub const DEFAULT_WORLD_SIZE: u32 = 1;

/// The header's feature-flag bitmask for a compile: the sources name the field but none of its
/// bits, so nxcc sets none.
pub const FEATURE_FLAGS: u64 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_members() {
        assert_eq!(engine_of_member("sg00/PE.bin"), Some(0));
        assert_eq!(engine_of_member("sg01/DVE.bin"), Some(4));
        assert_eq!(engine_of_member("Activation.bin"), Some(2));
        assert_eq!(engine_of_member("sg00/PE.json"), None);
        assert_eq!(engine_of_member("sg00/XPE.bin"), None);
        assert_eq!(
            engines_present(["sg00/Pool.bin", "sg01/SP.bin", "neff.json"]),
            [false, true, false, true, false]
        );
    }

    #[test]
    fn arch_modes_follow_the_core_generation() {
        assert_eq!(arch_mode("inf1"), 1);
        assert_eq!(arch_mode("trn1"), arch_mode("inf2"));
        assert_eq!(arch_mode("trn2"), 3);
        assert_eq!(arch_mode("trn3"), 4);
        assert_eq!(arch_mode("bogus"), 0);
    }

    #[test]
    fn uuid_is_v4_and_deterministic() {
        let a = uuid_from_signature("0123456789abcdef0123456789abcdef");
        assert_eq!(a, uuid_from_signature("0123456789abcdef0123456789abcdef"));
        assert_eq!(a[6] >> 4, 4);
        assert_eq!(a[8] >> 6, 0b10);
        assert_ne!(a, uuid_from_signature("ffffffffffffffffffffffffffffffff"));
    }
}
