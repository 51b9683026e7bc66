//! The tar block format both sides of the NEFF code share: 512-byte ustar headers (written the way
//! Python's `tarfile` writes them in PAX format), PAX extended-header records, and the parsing of
//! a header block from untrusted bytes (checksum, octal and base-256 numbers).
//!
//! The writer side is deterministic by construction: owner and group `nobody`, uid/gid 0, mtime
//! 0, mode 0644, and a PAX `path` record only when a name does not fit the ustar name field.

/// The tar block size.
pub const BLOCK: usize = 512;
/// The record size the archive is padded to (the POSIX default blocking factor of 20).
pub const RECORD: usize = 20 * BLOCK;
/// Owner and group name of every entry.
pub const OWNER: &str = "nobody";
/// File mode of every entry.
pub const MODE: u32 = 0o644;
/// The name of a PAX extended header entry (as Python's `tarfile` writes it).
pub const PAX_HEADER_NAME: &str = "././@PaxHeader";
/// The largest size an octal ustar size field holds (11 octal digits).
pub const MAX_OCTAL_SIZE: u64 = 0o777_7777_7777;

/// Entry type flags.
pub mod kind {
    /// A regular file (`'0'`).
    pub const REGULAR: u8 = b'0';
    /// A regular file, as pre-POSIX archives mark it (NUL).
    pub const REGULAR_OLD: u8 = 0;
    /// A hard link to an earlier member (`'1'`).
    pub const HARD_LINK: u8 = b'1';
    /// A symbolic link (`'2'`).
    pub const SYMLINK: u8 = b'2';
    /// A character device (`'3'`).
    pub const CHAR_DEVICE: u8 = b'3';
    /// A block device (`'4'`).
    pub const BLOCK_DEVICE: u8 = b'4';
    /// A directory (`'5'`).
    pub const DIRECTORY: u8 = b'5';
    /// A FIFO (`'6'`).
    pub const FIFO: u8 = b'6';
    /// A contiguous file (`'7'`), read as a regular one.
    pub const CONTIGUOUS: u8 = b'7';
    /// A PAX extended header for the next member (`'x'`).
    pub const PAX_LOCAL: u8 = b'x';
    /// A PAX global extended header (`'g'`).
    pub const PAX_GLOBAL: u8 = b'g';
    /// A GNU long name for the next member (`'L'`).
    pub const GNU_LONG_NAME: u8 = b'L';
    /// A GNU long link target for the next member (`'K'`).
    pub const GNU_LONG_LINK: u8 = b'K';
}

const NAME: (usize, usize) = (0, 100);
const MODE_F: (usize, usize) = (100, 8);
const UID: (usize, usize) = (108, 8);
const GID: (usize, usize) = (116, 8);
const SIZE: (usize, usize) = (124, 12);
const MTIME: (usize, usize) = (136, 12);
const CHKSUM: (usize, usize) = (148, 8);
const TYPEFLAG: usize = 156;
const LINKNAME: (usize, usize) = (157, 100);
const MAGIC: (usize, usize) = (257, 6);
const VERSION: (usize, usize) = (263, 2);
const UNAME: (usize, usize) = (265, 32);
const GNAME: (usize, usize) = (297, 32);
const DEVMAJOR: (usize, usize) = (329, 8);
const DEVMINOR: (usize, usize) = (337, 8);
const PREFIX: (usize, usize) = (345, 155);

/// Offset of the ustar magic in a header block (where layout detection looks for `ustar`).
pub const MAGIC_OFFSET: usize = MAGIC.0;

fn put(b: &mut [u8; BLOCK], (at, len): (usize, usize), value: &[u8]) {
    let n = value.len().min(len);
    b[at..at + n].copy_from_slice(&value[..n]);
}

/// An octal number of `len - 1` digits followed by a NUL.
fn put_octal(b: &mut [u8; BLOCK], field: (usize, usize), value: u64) {
    let text = format!("{:0width$o}\0", value, width = field.1 - 1);
    put(b, field, text.as_bytes());
}

/// A ustar header block for a deterministic entry. `name` is written truncated to the name field
/// when longer (a PAX `path` record then carries the full name); `size` must not exceed
/// [`MAX_OCTAL_SIZE`].
pub(crate) fn ustar_header(name: &[u8], size: u64, typeflag: u8) -> [u8; BLOCK] {
    debug_assert!(size <= MAX_OCTAL_SIZE);
    let mut b = [0u8; BLOCK];
    put(&mut b, NAME, name);
    put_octal(&mut b, MODE_F, u64::from(MODE));
    put_octal(&mut b, UID, 0);
    put_octal(&mut b, GID, 0);
    put_octal(&mut b, SIZE, size);
    put_octal(&mut b, MTIME, 0);
    b[TYPEFLAG] = typeflag;
    put(&mut b, MAGIC, b"ustar\0");
    put(&mut b, VERSION, b"00");
    put(&mut b, UNAME, OWNER.as_bytes());
    put(&mut b, GNAME, OWNER.as_bytes());
    put_octal(&mut b, DEVMAJOR, 0);
    put_octal(&mut b, DEVMINOR, 0);
    let sum = checksum_unsigned(&b);
    put(&mut b, CHKSUM, format!("{sum:06o}\0 ").as_bytes());
    b
}

/// One PAX record: `"<len> <key>=<value>\n"`, where `<len>` counts the whole record.
pub fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    debug_assert_eq!(r.len(), len);
    r
}

fn pad_to_block(out: &mut Vec<u8>) {
    let rem = out.len() % BLOCK;
    if rem != 0 {
        out.resize(out.len() + BLOCK - rem, 0);
    }
}

/// Whether a name needs a PAX `path` record (too long for the name field, or not ASCII).
pub(crate) fn needs_pax_path(name: &str) -> bool {
    name.len() > NAME.1 || !name.is_ascii()
}

/// Append one regular-file entry (with a PAX header before it when the name needs one).
pub fn append_file(out: &mut Vec<u8>, name: &str, data: &[u8]) {
    if needs_pax_path(name) {
        let records = pax_record("path", name.as_bytes());
        out.extend_from_slice(&ustar_header(
            PAX_HEADER_NAME.as_bytes(),
            records.len() as u64,
            kind::PAX_LOCAL,
        ));
        out.extend_from_slice(&records);
        pad_to_block(out);
    }
    let shown: Vec<u8> = name
        .bytes()
        .take(NAME.1)
        .map(|c| if c.is_ascii() { c } else { b'_' })
        .collect();
    out.extend_from_slice(&ustar_header(&shown, data.len() as u64, kind::REGULAR));
    out.extend_from_slice(data);
    pad_to_block(out);
}

/// End the archive: two zero blocks, then zeros up to a whole record.
pub fn finish(out: &mut Vec<u8>) {
    out.resize(out.len() + 2 * BLOCK, 0);
    let rem = out.len() % RECORD;
    if rem != 0 {
        out.resize(out.len() + RECORD - rem, 0);
    }
}

/// The bytes an entry's data occupies, padding included.
pub fn padded(size: u64) -> u64 {
    size.div_ceil(BLOCK as u64) * BLOCK as u64
}

fn checksum_unsigned(b: &[u8; BLOCK]) -> u64 {
    b.iter()
        .enumerate()
        .map(|(i, &c)| {
            if (CHKSUM.0..CHKSUM.0 + CHKSUM.1).contains(&i) {
                u64::from(b' ')
            } else {
                u64::from(c)
            }
        })
        .sum()
}

fn checksum_signed(b: &[u8; BLOCK]) -> i64 {
    b.iter()
        .enumerate()
        .map(|(i, &c)| {
            if (CHKSUM.0..CHKSUM.0 + CHKSUM.1).contains(&i) {
                i64::from(b' ')
            } else {
                i64::from(c as i8)
            }
        })
        .sum()
}

/// A numeric header field: octal text (leading spaces, then digits, then spaces or NULs), or
/// GNU base-256 when the first byte's high bit is set (negative values are refused).
pub(crate) fn parse_number(field: &[u8]) -> Result<u64, String> {
    if let Some(&first) = field.first() {
        if first & 0x80 != 0 {
            if first == 0xff {
                return Err("a negative number".to_string());
            }
            let mut v = u64::from(first & 0x7f);
            for &c in &field[1..] {
                v = v
                    .checked_mul(256)
                    .and_then(|v| v.checked_add(u64::from(c)))
                    .ok_or("a number too large")?;
            }
            return Ok(v);
        }
    }
    let mut i = 0;
    while i < field.len() && field[i] == b' ' {
        i += 1;
    }
    let mut v: u64 = 0;
    while i < field.len() && (b'0'..=b'7').contains(&field[i]) {
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(field[i] - b'0')))
            .ok_or("a number too large")?;
        i += 1;
    }
    if field[i..].iter().any(|&c| c != b' ' && c != 0) {
        return Err(format!(
            "a malformed number field {:?}",
            String::from_utf8_lossy(field)
        ));
    }
    Ok(v)
}

fn text(b: &[u8; BLOCK], (at, len): (usize, usize)) -> &[u8] {
    let f = &b[at..at + len];
    let end = f.iter().position(|&c| c == 0).unwrap_or(len);
    &f[..end]
}

/// A parsed header block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHeader {
    /// The name field (with the POSIX prefix joined in front when present).
    pub name: Vec<u8>,
    /// The member's size field, bytes of data after the header.
    pub size: u64,
    /// The entry type flag (see [`kind`]).
    pub typeflag: u8,
}

/// Whether a block is all zeros (an end-of-archive block).
pub(crate) fn is_zero_block(b: &[u8; BLOCK]) -> bool {
    b.iter().all(|&c| c == 0)
}

/// Parse a header block: checksum first, then the fields nxcc uses.
pub(crate) fn parse_header(b: &[u8; BLOCK]) -> Result<RawHeader, String> {
    let stored = parse_number(&b[CHKSUM.0..CHKSUM.0 + CHKSUM.1])
        .map_err(|e| format!("a header block with {e} as its checksum"))?;
    let unsigned = checksum_unsigned(b);
    let signed = checksum_signed(b);
    if stored != unsigned && i64::try_from(stored).ok() != Some(signed) {
        return Err(format!(
            "a header block with a bad checksum (stored {stored}, computed {unsigned})"
        ));
    }
    let size = parse_number(&b[SIZE.0..SIZE.0 + SIZE.1])
        .map_err(|e| format!("a header block with {e} as its size"))?;
    let mut name = Vec::new();
    // Only POSIX ustar has the prefix field; GNU tar keeps other data there.
    if &b[MAGIC.0..MAGIC.0 + MAGIC.1] == b"ustar\0" {
        let prefix = text(b, PREFIX);
        if !prefix.is_empty() {
            name.extend_from_slice(prefix);
            name.push(b'/');
        }
    }
    name.extend_from_slice(text(b, NAME));
    Ok(RawHeader {
        name,
        size,
        typeflag: b[TYPEFLAG],
    })
}

/// The link target field (for messages about refused links).
pub(crate) fn link_name(b: &[u8; BLOCK]) -> Vec<u8> {
    text(b, LINKNAME).to_vec()
}

/// Parse PAX extended-header data into `(key, value)` records.
pub(crate) fn parse_pax(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        // Trailing NUL padding ends the records.
        if rest.iter().all(|&c| c == 0) {
            break;
        }
        let space = rest
            .iter()
            .position(|&c| c == b' ')
            .ok_or("a PAX record without a length")?;
        let len: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .filter(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .and_then(|s| s.parse().ok())
            .ok_or("a PAX record with a malformed length")?;
        if len <= space + 1 || len > rest.len() || rest[len - 1] != b'\n' {
            return Err("a PAX record with a wrong length".to_string());
        }
        let record = &rest[space + 1..len - 1];
        let eq = record
            .iter()
            .position(|&c| c == b'=')
            .ok_or("a PAX record without '='")?;
        let key = std::str::from_utf8(&record[..eq])
            .map_err(|_| "a PAX record with a non-UTF-8 key")?
            .to_string();
        out.push((key, record[eq + 1..].to_vec()));
        rest = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_matches_the_deterministic_form() {
        let b = ustar_header(b"sg00/def.json", 1234, kind::REGULAR);
        assert_eq!(&b[100..108], b"0000644\0");
        assert_eq!(&b[108..116], b"0000000\0");
        assert_eq!(&b[124..136], b"00000002322\0");
        assert_eq!(&b[136..148], b"00000000000\0");
        assert_eq!(&b[257..265], b"ustar\x0000");
        assert_eq!(&b[265..272], b"nobody\0");
        assert_eq!(&b[297..304], b"nobody\0");
        let h = parse_header(&b).unwrap();
        assert_eq!(h.name, b"sg00/def.json");
        assert_eq!(h.size, 1234);
        assert_eq!(h.typeflag, kind::REGULAR);
    }

    #[test]
    fn the_tar_crate_reads_what_we_write() {
        let mut out = Vec::new();
        let long = format!("sg00/{}.bin", "x".repeat(150));
        append_file(&mut out, "a.txt", b"hello");
        append_file(&mut out, &long, b"world!");
        append_file(&mut out, "sg00/é.json", b"{}");
        finish(&mut out);
        assert_eq!(out.len() % RECORD, 0);
        let mut ar = ::tar::Archive::new(&out[..]);
        let mut seen = Vec::new();
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let h = e.header().clone();
            assert_eq!(h.mtime().unwrap(), 0);
            assert_eq!(h.mode().unwrap(), 0o644);
            assert_eq!(h.username().unwrap(), Some("nobody"));
            assert_eq!(h.groupname().unwrap(), Some("nobody"));
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut data).unwrap();
            seen.push((name, data));
        }
        assert_eq!(
            seen,
            vec![
                ("a.txt".to_string(), b"hello".to_vec()),
                (long, b"world!".to_vec()),
                ("sg00/é.json".to_string(), b"{}".to_vec()),
            ]
        );
    }

    #[test]
    fn pax_records_have_self_counting_lengths() {
        for n in [0, 1, 5, 90, 95, 96, 1000] {
            let v = vec![b'a'; n];
            let r = pax_record("path", &v);
            let parsed = parse_pax(&r).unwrap();
            assert_eq!(parsed, vec![("path".to_string(), v)]);
        }
        assert_eq!(pax_record("path", b"ab"), b"11 path=ab\n");
    }

    #[test]
    fn malformed_pax_is_an_error() {
        for bad in [
            &b"12 path=ab"[..],
            b"x path=a\n",
            b"99 path=a\n",
            b"6 ab\n\n",
            b"3 \n",
        ] {
            assert!(
                parse_pax(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_number(b"0000644\0").unwrap(), 0o644);
        assert_eq!(parse_number(b"  17 \0").unwrap(), 0o17);
        assert_eq!(parse_number(b"\0\0\0").unwrap(), 0);
        assert_eq!(parse_number(&[0x80, 0, 0, 1, 0]).unwrap(), 256);
        assert!(parse_number(&[0xff, 0xff]).is_err());
        assert!(parse_number(b"12x4").is_err());
        assert!(
            parse_number(&[0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err()
        );
    }

    #[test]
    fn a_bad_checksum_is_refused() {
        let mut b = ustar_header(b"x", 1, kind::REGULAR);
        b[0] = b'y';
        assert!(parse_header(&b).unwrap_err().contains("checksum"));
    }
}
