//! Small binary formats the simulated tools write or check: NumPy `.npy` (v1, float32), a
//! minimal Python pickle (protocol 2, one string), and the NEFF sniff (`05-neff.md`'s layout
//! detection).

/// A `.npy` version 1.0 file holding a C-contiguous little-endian float32 array.
pub fn npy_f32(shape: &[usize], values: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + header length (2) + header, padded with spaces and ended by a
    // newline to a multiple of 64 bytes.
    let unpadded = 10 + header.len() + 1;
    let pad = (64 - unpadded % 64) % 64;
    header.push_str(&" ".repeat(pad));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + values.len() * 4);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// Whether `bytes` start like a `.npy` file.
pub fn is_npy(bytes: &[u8]) -> bool {
    bytes.len() >= 10 && bytes.starts_with(b"\x93NUMPY")
}

/// A protocol-2 pickle of one Python `str`.
pub fn pickle_str(text: &str) -> Vec<u8> {
    let mut out = vec![0x80, 0x02, b'X'];
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    out.push(b'.');
    out
}

/// Whether `bytes` look like a NEFF: a 1024-byte header (u64 1024 at offset 8) followed by a
/// gzip or tar archive, or such an archive at offset 0.
pub fn looks_like_neff(bytes: &[u8]) -> bool {
    let archive_at = |off: usize| {
        bytes.get(off..off + 2) == Some(&[0x1f, 0x8b][..])
            || bytes.get(off + 257..off + 262) == Some(&b"ustar"[..])
    };
    let header = bytes
        .get(8..16)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()) == 1024)
        .unwrap_or(false);
    (header && archive_at(1024)) || archive_at(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_header_is_aligned_and_parsable() {
        let b = npy_f32(&[2, 4], &[0.5; 8]);
        assert!(is_npy(&b));
        let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0);
        let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
        assert!(header.contains("'shape': (2, 4)"), "{header}");
        assert!(header.ends_with('\n'));
        assert_eq!(b.len(), 10 + hlen + 32);
        assert_eq!(&b[10 + hlen..10 + hlen + 4], &0.5f32.to_le_bytes());
        let one = npy_f32(&[3], &[1.0, 2.0, 3.0]);
        assert!(String::from_utf8_lossy(&one).contains("(3,)"));
    }

    #[test]
    fn pickle_layout() {
        let p = pickle_str("ab");
        assert_eq!(p, b"\x80\x02X\x02\x00\x00\x00ab.");
    }

    #[test]
    fn neff_sniff() {
        let mut with_header = vec![0u8; 1024];
        with_header[8..16].copy_from_slice(&1024u64.to_le_bytes());
        with_header.extend_from_slice(&[0x1f, 0x8b, 8, 0]);
        assert!(looks_like_neff(&with_header));
        assert!(looks_like_neff(&[0x1f, 0x8b, 8, 0]));
        assert!(!looks_like_neff(b"HloModule x"));
        assert!(!looks_like_neff(&vec![0u8; 2048]));
    }
}
