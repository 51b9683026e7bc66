//! What a file that is not an HLO module looks like instead, from its first bytes: a NEFF, an
//! archive (zip, tar), a compressed file (gzip, bzip2, xz, zstd), JSON, MLIR, a NumPy array, a
//! Python pickle, an executable, text — so that refusing it can say what the user handed over
//! rather than where a protobuf decoder gave up. Asked only after the file failed to read as an
//! HLO module: a module that reads is never second-guessed.

/// What `bytes` looks like (`a zip archive`), or `None` when nothing recognisable (a damaged
/// `HloModuleProto` looks like nothing else).
pub(crate) fn looks_like(bytes: &[u8]) -> Option<String> {
    magic(bytes).map(str::to_string).or_else(|| text(bytes))
}

/// A format told by its leading bytes (its "magic number").
fn magic(bytes: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (
            b"PK\x03\x04",
            "a zip archive (a PyTorch checkpoint or a .whl is one)",
        ),
        (b"PK\x05\x06", "a zip archive (an empty one)"),
        (b"\x1f\x8b", "a gzip-compressed file (.gz, .tgz)"),
        (b"BZh", "a bzip2-compressed file"),
        (b"\xfd7zXZ\x00", "an xz-compressed file"),
        (b"\x28\xb5\x2f\xfd", "a zstd-compressed file"),
        (b"\x7fELF", "an executable or a shared library (ELF)"),
        (b"\x93NUMPY", "a NumPy array (.npy)"),
        (b"ML\xefR", "MLIR bytecode (StableHLO, say), not HLO"),
    ];
    if let Some((_, what)) = MAGIC.iter().find(|(m, _)| bytes.starts_with(m)) {
        return Some(what);
    }
    if bytes.get(257..262) == Some(b"ustar") {
        return Some("a tar archive");
    }
    // A pickle of protocol 2 or later opens with PROTO (0x80) and its version.
    if matches!(bytes, [0x80, 2..=5, ..]) && bytes.ends_with(b".") {
        return Some("a Python pickle");
    }
    None
}

/// Text, told by being UTF-8 without control characters: JSON, MLIR, HLO text that does not
/// start where it must, or other text.
fn text(bytes: &[u8]) -> Option<String> {
    let t = std::str::from_utf8(bytes).ok()?;
    if t.chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t' | '\x0c'))
    {
        return None;
    }
    let body = t.trim_start_matches('\u{feff}').trim_start();
    if body.starts_with(['{', '[']) && serde_json::from_str::<serde::de::IgnoredAny>(t).is_ok() {
        return Some("a JSON document".into());
    }
    if body.starts_with("module") || t.contains("stablehlo.") || t.contains("mhlo.") {
        return Some("MLIR text (StableHLO or MHLO), not HLO".into());
    }
    if let Some(at) = t.find("HloModule ") {
        let line = 1 + t[..at].matches('\n').count();
        return Some(format!(
            "HLO text with `HloModule` on line {line}: HLO text must start with it"
        ));
    }
    Some("a text file".into())
}

#[cfg(test)]
mod tests {
    use super::looks_like;

    #[test]
    fn each_kind_is_told_by_its_first_bytes() {
        let mut tar = vec![0u8; 512];
        tar[257..262].copy_from_slice(b"ustar");
        let cases: &[(&[u8], &str)] = &[
            (b"PK\x03\x04rest", "a zip archive"),
            (b"\x1f\x8b\x08\x00", "gzip"),
            (&tar, "a tar archive"),
            (b"\x7fELF\x02\x01", "ELF"),
            (b"\x93NUMPY\x01\x00", "NumPy"),
            (b"\x80\x04\x95K.", "pickle"),
            (b"ML\xefR\x00", "MLIR bytecode"),
            (b" {\"a\": [1, 2]}\n", "a JSON document"),
            (b"module @m {\n  func.func @main() {}\n}\n", "MLIR text"),
            (b"// a comment\nHloModule m\n", "`HloModule` on line 2"),
            (b"hello world\n", "a text file"),
        ];
        for (bytes, want) in cases {
            let got = looks_like(bytes).unwrap_or_default();
            assert!(got.contains(want), "{bytes:?}: {got:?}, want {want:?}");
        }
    }

    #[test]
    fn binary_that_is_nothing_known_looks_like_nothing() {
        assert_eq!(looks_like(b"\x08\x96\x01\x12\x00\xff"), None);
        // Braces that do not close are not JSON: text.
        assert_eq!(looks_like(b"{\"a\": ").as_deref(), Some("a text file"));
    }
}
