//! The NEFF header: 1024 little-endian bytes in front of the archive (05-neff.md). Field offsets
//! the sources state are constants here; the reconstructed placements come from
//! [`crate::recon::neff`]. Every byte outside the fields is zero.

use crate::recon::neff::{
    ARCHIVE_LENGTH_OFFSET, ENGINES_OFFSET, ENGINE_ORDER, IR_SIGNATURE_OFFSET, VERSION_STRING_OFFSET,
};

use super::NeffError;

/// The header's size in bytes (and the value of its header-size field).
pub const HEADER_SIZE: usize = 1024;
/// The format version nxcc writes.
pub const FORMAT_VERSION: u64 = 2;
/// The version string the header must carry.
pub const VERSION_STRING: &str = "Dynamic";

/// Offset of the format version (u64).
pub const FORMAT_VERSION_OFFSET: usize = 0;
/// Offset of the header size (u64).
pub const HEADER_SIZE_OFFSET: usize = 8;
/// Size of the IR signature field (lower-case hex MD5).
pub const IR_SIGNATURE_LEN: usize = 32;
/// Size of the version-string field.
pub const VERSION_STRING_LEN: usize = 8;
/// Offset of the version major (u32).
pub const VERSION_MAJOR_OFFSET: usize = 168;
/// Offset of the feature-flag bitmask (u64).
pub const FEATURE_FLAGS_OFFSET: usize = 192;
/// Offset of the UUID (16 bytes).
pub const UUID_OFFSET: usize = 204;
/// Offset of the NEFF file name (NUL-padded).
pub const FILENAME_OFFSET: usize = 220;
/// Size of the file-name field; the name itself is at most one byte shorter.
pub const FILENAME_FIELD_LEN: usize = 256;
/// Offset of the version minor (u32).
pub const VERSION_MINOR_OFFSET: usize = 476;
/// Size of the engine-present field (one byte per engine, the rest zero).
pub const ENGINES_FIELD_LEN: usize = 8;
/// Offset of the collective-communication world size (u32).
pub const WORLD_SIZE_OFFSET: usize = 544;
/// Offset of the arch mode (u32).
pub const ARCH_MODE_OFFSET: usize = 552;

/// Every field's byte range, with its name; the bytes outside them are zero.
pub const FIELDS: [(&str, usize, usize); 13] = [
    ("format version", FORMAT_VERSION_OFFSET, 8),
    ("header size", HEADER_SIZE_OFFSET, 8),
    ("archive length", ARCHIVE_LENGTH_OFFSET, 8),
    ("IR signature", IR_SIGNATURE_OFFSET, IR_SIGNATURE_LEN),
    ("version string", VERSION_STRING_OFFSET, VERSION_STRING_LEN),
    ("version major", VERSION_MAJOR_OFFSET, 4),
    ("feature flags", FEATURE_FLAGS_OFFSET, 8),
    ("UUID", UUID_OFFSET, 16),
    ("NEFF file name", FILENAME_OFFSET, FILENAME_FIELD_LEN),
    ("version minor", VERSION_MINOR_OFFSET, 4),
    ("engines", ENGINES_OFFSET, ENGINES_FIELD_LEN),
    ("world size", WORLD_SIZE_OFFSET, 4),
    ("arch mode", ARCH_MODE_OFFSET, 4),
];

/// The decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The header's format version ([`FORMAT_VERSION`] in the NEFFs nxcc writes).
    pub format_version: u64,
    /// The header size it states ([`HEADER_SIZE`] in a well-formed header).
    pub header_size: u64,
    /// The archive's length in bytes (what follows the header).
    pub archive_length: u64,
    /// 32 lower-case hex characters in a well-formed header (decoded as text, NULs trimmed).
    pub ir_signature: String,
    /// `Dynamic` in a well-formed header (decoded up to the first NUL).
    pub version_string: String,
    /// The NEFF format's major version.
    pub version_major: u32,
    /// The NEFF format's minor version.
    pub version_minor: u32,
    /// The feature-flag bitmask.
    pub feature_flags: u64,
    /// The NEFF's UUID, as stored (a version-4 UUID in a well-formed header).
    pub uuid: [u8; 16],
    /// Decoded up to the first NUL.
    pub neff_filename: String,
    /// One flag per engine, in [`ENGINE_ORDER`].
    pub engines: [bool; 5],
    /// The collective-communication rank world size.
    pub world_size: u32,
    /// The arch mode of the target ([`crate::recon::neff::arch_mode`]).
    pub arch_mode: u32,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Text up to the first NUL (lossily decoded).
fn text_at(b: &[u8], at: usize, len: usize) -> String {
    let field = &b[at..at + len];
    let end = field.iter().position(|&c| c == 0).unwrap_or(len);
    String::from_utf8_lossy(&field[..end]).into_owned()
}

impl Header {
    /// Encode the header. Fails when a text field does not fit.
    pub fn encode(&self) -> Result<[u8; HEADER_SIZE], NeffError> {
        let sig = self.ir_signature.as_bytes();
        if sig.len() != IR_SIGNATURE_LEN {
            return Err(NeffError::Invalid(format!(
                "the IR signature must be {IR_SIGNATURE_LEN} characters, not {}",
                sig.len()
            )));
        }
        let vs = self.version_string.as_bytes();
        if vs.len() > VERSION_STRING_LEN || vs.contains(&0) {
            return Err(NeffError::Invalid(format!(
                "the version string '{}' does not fit in {VERSION_STRING_LEN} bytes",
                self.version_string
            )));
        }
        check_filename(&self.neff_filename)?;
        let mut b = [0u8; HEADER_SIZE];
        b[FORMAT_VERSION_OFFSET..][..8].copy_from_slice(&self.format_version.to_le_bytes());
        b[HEADER_SIZE_OFFSET..][..8].copy_from_slice(&self.header_size.to_le_bytes());
        b[ARCHIVE_LENGTH_OFFSET..][..8].copy_from_slice(&self.archive_length.to_le_bytes());
        b[IR_SIGNATURE_OFFSET..][..IR_SIGNATURE_LEN].copy_from_slice(sig);
        b[VERSION_STRING_OFFSET..][..vs.len()].copy_from_slice(vs);
        b[VERSION_MAJOR_OFFSET..][..4].copy_from_slice(&self.version_major.to_le_bytes());
        b[FEATURE_FLAGS_OFFSET..][..8].copy_from_slice(&self.feature_flags.to_le_bytes());
        b[UUID_OFFSET..][..16].copy_from_slice(&self.uuid);
        let name = self.neff_filename.as_bytes();
        b[FILENAME_OFFSET..][..name.len()].copy_from_slice(name);
        b[VERSION_MINOR_OFFSET..][..4].copy_from_slice(&self.version_minor.to_le_bytes());
        for (i, present) in self.engines.iter().enumerate() {
            b[ENGINES_OFFSET + i] = u8::from(*present);
        }
        b[WORLD_SIZE_OFFSET..][..4].copy_from_slice(&self.world_size.to_le_bytes());
        b[ARCH_MODE_OFFSET..][..4].copy_from_slice(&self.arch_mode.to_le_bytes());
        Ok(b)
    }

    /// Decode the first [`HEADER_SIZE`] bytes. Never fails on content: `layout_problems` says
    /// what is malformed.
    pub fn decode(bytes: &[u8]) -> Result<Header, NeffError> {
        if bytes.len() < HEADER_SIZE {
            return Err(NeffError::Corrupt(format!(
                "the header needs {HEADER_SIZE} bytes, the file has {}",
                bytes.len()
            )));
        }
        let b = &bytes[..HEADER_SIZE];
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[UUID_OFFSET..UUID_OFFSET + 16]);
        let mut engines = [false; 5];
        for (i, e) in engines.iter_mut().enumerate() {
            *e = b[ENGINES_OFFSET + i] != 0;
        }
        Ok(Header {
            format_version: u64_at(b, FORMAT_VERSION_OFFSET),
            header_size: u64_at(b, HEADER_SIZE_OFFSET),
            archive_length: u64_at(b, ARCHIVE_LENGTH_OFFSET),
            ir_signature: text_at(b, IR_SIGNATURE_OFFSET, IR_SIGNATURE_LEN),
            version_string: text_at(b, VERSION_STRING_OFFSET, VERSION_STRING_LEN),
            version_major: u32_at(b, VERSION_MAJOR_OFFSET),
            version_minor: u32_at(b, VERSION_MINOR_OFFSET),
            feature_flags: u64_at(b, FEATURE_FLAGS_OFFSET),
            uuid,
            neff_filename: text_at(b, FILENAME_OFFSET, FILENAME_FIELD_LEN),
            engines,
            world_size: u32_at(b, WORLD_SIZE_OFFSET),
            arch_mode: u32_at(b, ARCH_MODE_OFFSET),
        })
    }

    /// The names of the engines marked present, in [`ENGINE_ORDER`].
    pub(crate) fn engine_names(&self) -> Vec<&'static str> {
        engine_names(&self.engines)
    }
}

/// The names of the engines flagged present, in [`ENGINE_ORDER`].
pub(crate) fn engine_names(engines: &[bool; 5]) -> Vec<&'static str> {
    ENGINE_ORDER
        .iter()
        .zip(engines)
        .filter(|(_, p)| **p)
        .map(|(n, _)| *n)
        .collect()
}

/// Check a NEFF file name for the header: at most 255 bytes, no NUL.
pub(crate) fn check_filename(name: &str) -> Result<(), NeffError> {
    if name.len() >= FILENAME_FIELD_LEN {
        return Err(NeffError::Invalid(format!(
            "the NEFF file name is {} bytes; the header holds at most {}",
            name.len(),
            FILENAME_FIELD_LEN - 1
        )));
    }
    if name.contains('\0') {
        return Err(NeffError::Invalid(
            "the NEFF file name contains a NUL byte".to_string(),
        ));
    }
    Ok(())
}

/// What is malformed in a header's byte layout, beyond its values: non-zero bytes outside the
/// fields, text fields that are not NUL-padded text, engine bytes other than 0 and 1.
pub(crate) fn layout_problems(bytes: &[u8; HEADER_SIZE]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut in_field = [false; HEADER_SIZE];
    for (_, at, len) in FIELDS {
        in_field[at..at + len].iter_mut().for_each(|x| *x = true);
    }
    let stray: Vec<usize> = (0..HEADER_SIZE)
        .filter(|&i| !in_field[i] && bytes[i] != 0)
        .collect();
    if let Some(first) = stray.first() {
        problems.push(format!(
            "header: {} non-zero byte(s) outside the fields (first at offset {first})",
            stray.len()
        ));
    }
    for (name, at, len) in [
        ("version string", VERSION_STRING_OFFSET, VERSION_STRING_LEN),
        ("NEFF file name", FILENAME_OFFSET, FILENAME_FIELD_LEN),
    ] {
        let field = &bytes[at..at + len];
        match field.iter().position(|&c| c == 0) {
            None => problems.push(format!("header: the {name} is not NUL-terminated")),
            Some(end) => {
                if field[end..].iter().any(|&c| c != 0) {
                    problems.push(format!("header: the {name} is not NUL-padded"));
                }
                if std::str::from_utf8(&field[..end]).is_err() {
                    problems.push(format!("header: the {name} is not UTF-8"));
                }
            }
        }
    }
    let engines = &bytes[ENGINES_OFFSET..ENGINES_OFFSET + ENGINES_FIELD_LEN];
    if engines[..ENGINE_ORDER.len()].iter().any(|&e| e > 1) {
        problems.push("header: an engine-present byte is neither 0 nor 1".to_string());
    }
    if engines[ENGINE_ORDER.len()..].iter().any(|&e| e != 0) {
        problems.push("header: the unused engine-present bytes are not zero".to_string());
    }
    problems
}

/// The UUID in its text form (`8-4-4-4-12` lower-case hex).
pub fn format_uuid(u: &[u8; 16]) -> String {
    let hex: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Parse a UUID's text form (`8-4-4-4-12` hex, either case).
pub(crate) fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = text.split('-').collect();
    if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [8, 4, 4, 4, 12] {
        return None;
    }
    let hex: String = groups.concat();
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut u = [0u8; 16];
    for (i, byte) in u.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(u)
}

/// Whether a UUID has the RFC 4122 version-4 layout (version nibble 4, variant bits `10`).
pub(crate) fn is_v4(u: &[u8; 16]) -> bool {
    u[6] >> 4 == 4 && u[8] >> 6 == 0b10
}

/// Whether a text is a lower-case hex MD5 (32 characters of `0-9a-f`).
pub fn is_md5_hex(s: &str) -> bool {
    s.len() == IR_SIGNATURE_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            format_version: FORMAT_VERSION,
            header_size: HEADER_SIZE as u64,
            archive_length: 0x0102_0304_0506,
            ir_signature: "0123456789abcdef0123456789abcdef".to_string(),
            version_string: VERSION_STRING.to_string(),
            version_major: 2,
            version_minor: 7,
            feature_flags: 0x8000_0000_0000_0001,
            uuid: crate::recon::neff::uuid_from_signature("0123456789abcdef0123456789abcdef"),
            neff_filename: "model.neff".to_string(),
            engines: [true, false, true, false, true],
            world_size: 32,
            arch_mode: 3,
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let h = sample();
        let b = h.encode().unwrap();
        assert_eq!(Header::decode(&b).unwrap(), h);
        assert!(layout_problems(&b).is_empty(), "{:?}", layout_problems(&b));
    }

    #[test]
    fn fields_sit_at_their_offsets_little_endian() {
        let b = sample().encode().unwrap();
        assert_eq!(&b[0..8], &2u64.to_le_bytes());
        assert_eq!(&b[8..16], &1024u64.to_le_bytes());
        assert_eq!(&b[16..24], &0x0102_0304_0506u64.to_le_bytes());
        assert_eq!(&b[24..56], b"0123456789abcdef0123456789abcdef");
        assert_eq!(&b[56..64], b"Dynamic\0");
        assert_eq!(&b[168..172], &2u32.to_le_bytes());
        assert_eq!(&b[192..200], &0x8000_0000_0000_0001u64.to_le_bytes());
        assert_eq!(&b[220..230], b"model.neff");
        assert!(b[230..476].iter().all(|&c| c == 0));
        assert_eq!(&b[476..480], &7u32.to_le_bytes());
        assert_eq!(&b[480..488], &[1, 0, 1, 0, 1, 0, 0, 0]);
        assert_eq!(&b[544..548], &32u32.to_le_bytes());
        assert_eq!(&b[552..556], &3u32.to_le_bytes());
        // Bytes between fields are zero.
        assert!(b[64..168].iter().all(|&c| c == 0));
        assert!(b[556..].iter().all(|&c| c == 0));
    }

    #[test]
    fn the_file_name_holds_at_most_255_bytes() {
        let mut h = sample();
        h.neff_filename = "n".repeat(255);
        let b = h.encode().unwrap();
        assert_eq!(Header::decode(&b).unwrap().neff_filename.len(), 255);
        h.neff_filename = "n".repeat(256);
        assert!(h.encode().unwrap_err().to_string().contains("at most 255"));
        h.neff_filename = "a\0b".to_string();
        assert!(h.encode().is_err());
    }

    #[test]
    fn stray_bytes_and_bad_engine_bytes_are_reported() {
        let mut b = sample().encode().unwrap();
        b[100] = 7;
        b[481] = 2;
        b[486] = 1;
        b[240] = b'x';
        let p = layout_problems(&b);
        assert!(p.iter().any(|m| m.contains("offset 100")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("neither 0 nor 1")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("unused engine")), "{p:?}");
        assert!(
            p.iter().any(|m| m.contains("file name is not NUL-padded")),
            "{p:?}"
        );
    }

    #[test]
    fn short_input_is_an_error() {
        assert!(Header::decode(&[0u8; 100]).is_err());
    }

    #[test]
    fn uuid_text_round_trip() {
        let u = sample().uuid;
        let t = format_uuid(&u);
        assert_eq!(t.len(), 36);
        assert_eq!(parse_uuid(&t), Some(u));
        assert!(is_v4(&u));
        assert_eq!(parse_uuid("not-a-uuid"), None);
        assert_eq!(parse_uuid("0123456789abcdef0123456789abcdef"), None);
        assert_eq!(parse_uuid("+1234567-1234-1234-1234-123456789abc"), None);
        assert!(!is_v4(&[0u8; 16]));
    }

    #[test]
    fn md5_hex_check() {
        assert!(is_md5_hex("0123456789abcdef0123456789abcdef"));
        assert!(!is_md5_hex("0123456789ABCDEF0123456789ABCDEF"));
        assert!(!is_md5_hex("0123"));
    }
}
