//! Reading a NEFF without trusting it: layout detection (header + archive, or a bare archive), and
//! a streaming tar reader that refuses absolute names, `..` components, links, devices and fifos,
//! duplicate names, and stops at [`Limits`] (4 GiB of decompressed data, 100,000 members).
//!
//! Decompression streams: a member is never read into memory to be rejected, and truncated or
//! corrupt input is an error, never a panic. Every operation is one or two passes over the file.

use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use md5::{Digest, Md5};
use serde::Serialize;

use super::header::{Header, HEADER_SIZE};
use super::tar::{self, kind, BLOCK};
use super::{names, NeffError};
use crate::recon::neff::signature_covers;

/// Most decompressed archive bytes read before giving up.
pub const MAX_DECOMPRESSED_BYTES: u64 = 4 << 30;
/// Most archive entries read before giving up.
pub const MAX_MEMBERS: u64 = 100_000;
/// Largest PAX extended header or GNU long name accepted.
pub const MAX_METADATA_BYTES: u64 = 1 << 20;
/// Most bytes of JSON members kept in memory for summaries, in total.
pub const MAX_KEPT_BYTES: u64 = 256 << 20;

/// The reader's limits (the defaults are the constants above; tests lower them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most archive bytes read after decompression (also the largest member accepted).
    pub max_decompressed_bytes: u64,
    /// Most archive entries read.
    pub max_members: u64,
    /// Largest PAX extended header or GNU long name accepted, in bytes.
    pub max_metadata_bytes: u64,
    /// Most bytes of JSON members kept in memory for summaries, in total.
    pub max_kept_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_decompressed_bytes: MAX_DECOMPRESSED_BYTES,
            max_members: MAX_MEMBERS,
            max_metadata_bytes: MAX_METADATA_BYTES,
            max_kept_bytes: MAX_KEPT_BYTES,
        }
    }
}

/// How the file is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// A 1024-byte header precedes the archive.
    pub header: bool,
    /// The archive is gzip-compressed.
    pub compressed: bool,
}

impl Layout {
    /// Where the archive starts.
    pub(crate) fn archive_offset(&self) -> u64 {
        if self.header {
            HEADER_SIZE as u64
        } else {
            0
        }
    }

    /// A short description (`1024-byte header + gzip-compressed tar`).
    pub fn describe(&self) -> String {
        format!(
            "{}{} tar",
            if self.header {
                "1024-byte header + "
            } else {
                "no header, "
            },
            if self.compressed {
                "gzip-compressed"
            } else {
                "uncompressed"
            }
        )
    }
}

/// A regular-file member: its name and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    /// Its path in the archive, normalised (no `.` components, no repeated or trailing `/`).
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Which archive (if any) starts at `at`: `Some(true)` gzip, `Some(false)` tar.
fn archive_at(prefix: &[u8], at: usize) -> Option<bool> {
    if prefix.len() >= at + 2 && prefix[at..at + 2] == GZIP_MAGIC {
        return Some(true);
    }
    let m = at + tar::MAGIC_OFFSET;
    if prefix.len() >= m + 5 && &prefix[m..m + 5] == b"ustar" {
        return Some(false);
    }
    None
}

/// Detect the layout from the first bytes of a file (at least `HEADER_SIZE + 512` of them when
/// the file has that many).
pub fn detect(prefix: &[u8]) -> Result<Layout, NeffError> {
    if prefix.is_empty() {
        return Err(NeffError::NotNeff("the file is empty".to_string()));
    }
    let header_size =
        (prefix.len() >= 16).then(|| u64::from_le_bytes(prefix[8..16].try_into().expect("8")));
    if header_size == Some(HEADER_SIZE as u64) {
        if let Some(compressed) = archive_at(prefix, HEADER_SIZE) {
            return Ok(Layout {
                header: true,
                compressed,
            });
        }
    }
    if let Some(compressed) = archive_at(prefix, 0) {
        return Ok(Layout {
            header: false,
            compressed,
        });
    }
    Err(NeffError::NotNeff(
        if header_size == Some(HEADER_SIZE as u64) {
            if prefix.len() <= HEADER_SIZE {
                format!(
                    "it starts like a NEFF header but ends after {} bytes, before any archive",
                    prefix.len()
                )
            } else {
                "it has a NEFF header but no gzip or tar archive follows at offset 1024".to_string()
            }
        } else {
            "no NEFF header (the header size at offset 8 is not 1024) and no gzip or tar archive at offset 0"
            .to_string()
        },
    ))
}

enum Source {
    File { file: File, path: PathBuf },
    Bytes(Arc<[u8]>),
}

/// A `Read` over a file from an offset, by positional reads (the file's own offset is unused).
struct FileAt<'a> {
    file: &'a File,
    pos: u64,
}

impl Read for FileAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// A NEFF opened for reading.
pub struct Neff {
    source: Source,
    limits: Limits,
    layout: Layout,
    file_len: u64,
    header_bytes: Option<Box<[u8; HEADER_SIZE]>>,
    header: Option<Header>,
}

fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Neff {
    /// Open a file with the default limits.
    pub fn open(path: &Path) -> Result<Neff, NeffError> {
        Neff::open_with(path, Limits::default())
    }

    /// Open a file.
    pub(crate) fn open_with(path: &Path, limits: Limits) -> Result<Neff, NeffError> {
        let file = File::open(path).map_err(|e| NeffError::io(path, e))?;
        let meta = file.metadata().map_err(|e| NeffError::io(path, e))?;
        if meta.is_dir() {
            return Err(NeffError::NotNeff("it is a directory".to_string()));
        }
        let mut prefix = vec![0u8; HEADER_SIZE + BLOCK];
        let n = read_full(
            &mut FileAt {
                file: &file,
                pos: 0,
            },
            &mut prefix,
        )
        .map_err(|e| NeffError::io(path, e))?;
        prefix.truncate(n);
        Neff::with_prefix(
            Source::File {
                file,
                path: path.to_path_buf(),
            },
            &prefix,
            meta.len(),
            limits,
        )
    }

    /// Read a NEFF held in memory, with the default limits.
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Result<Neff, NeffError> {
        Neff::from_bytes_with(bytes, Limits::default())
    }

    /// Read a NEFF held in memory.
    pub fn from_bytes_with(bytes: impl Into<Arc<[u8]>>, limits: Limits) -> Result<Neff, NeffError> {
        let bytes: Arc<[u8]> = bytes.into();
        let len = bytes.len() as u64;
        let prefix_len = bytes.len().min(HEADER_SIZE + BLOCK);
        let prefix = bytes[..prefix_len].to_vec();
        Neff::with_prefix(Source::Bytes(bytes), &prefix, len, limits)
    }

    fn with_prefix(
        source: Source,
        prefix: &[u8],
        file_len: u64,
        limits: Limits,
    ) -> Result<Neff, NeffError> {
        let layout = detect(prefix)?;
        let (header_bytes, header) = if layout.header {
            let mut b = Box::new([0u8; HEADER_SIZE]);
            b.copy_from_slice(&prefix[..HEADER_SIZE]);
            let h = Header::decode(&b[..])?;
            (Some(b), Some(h))
        } else {
            (None, None)
        };
        Ok(Neff {
            source,
            limits,
            layout,
            file_len,
            header_bytes,
            header,
        })
    }

    /// How the file is laid out (header or not, compressed or not).
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// The limits every read of this NEFF enforces.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// The decoded header (when the file has one).
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// The header's raw bytes (when the file has one).
    pub(crate) fn header_bytes(&self) -> Option<&[u8; HEADER_SIZE]> {
        self.header_bytes.as_deref()
    }

    /// The whole file's length.
    pub(crate) fn file_len(&self) -> u64 {
        self.file_len
    }

    /// The bytes after the header (the archive, as stored).
    pub(crate) fn archive_len(&self) -> u64 {
        self.file_len.saturating_sub(self.layout.archive_offset())
    }

    /// The file's path (`None` for a NEFF read from memory).
    pub fn path(&self) -> Option<&Path> {
        match &self.source {
            Source::File { path, .. } => Some(path),
            Source::Bytes(_) => None,
        }
    }

    /// Start a pass over the archive's entries.
    pub fn scan(&self) -> Scanner<'_> {
        let offset = self.layout.archive_offset();
        let (raw, label): (Box<dyn Read + '_>, PathBuf) = match &self.source {
            Source::File { file, path } => (
                Box::new(io::BufReader::with_capacity(
                    1 << 16,
                    FileAt { file, pos: offset },
                )),
                path.clone(),
            ),
            Source::Bytes(b) => (
                Box::new(&b[(offset as usize).min(b.len())..]),
                PathBuf::from("<memory>"),
            ),
        };
        let input: Box<dyn Read + '_> = if self.layout.compressed {
            Box::new(flate2::read::GzDecoder::new(raw))
        } else {
            raw
        };
        Scanner {
            input: Counted {
                inner: input,
                count: 0,
                max: self.limits.max_decompressed_bytes,
            },
            limits: self.limits,
            label,
            remaining: 0,
            pad: 0,
            current: String::new(),
            entries: 0,
            names: HashSet::new(),
            ended: false,
        }
    }

    /// Every regular-file member, in archive order (the whole archive is checked).
    pub fn members(&self) -> Result<Vec<Member>, NeffError> {
        let mut scan = self.scan();
        let mut out = Vec::new();
        while let Some(e) = scan.next_entry()? {
            if !e.is_dir {
                out.push(Member {
                    name: e.name,
                    size: e.size,
                });
            }
        }
        Ok(out)
    }

    /// One member's bytes (the whole archive is checked first).
    pub fn read_member(&self, name: &str) -> Result<Vec<u8>, NeffError> {
        let mut out = Vec::new();
        self.copy_member(name, &mut out)?;
        Ok(out)
    }

    /// Stream one member's bytes into `out`, after a first pass that checks the whole archive
    /// (so nothing is written for a hostile or corrupt archive). Returns the size.
    pub(crate) fn copy_member(
        &self,
        name: &str,
        out: &mut dyn io::Write,
    ) -> Result<u64, NeffError> {
        let wanted = names::normalise(name).map_err(|_| NeffError::NoSuchMember(name.into()))?;
        if !self.members()?.iter().any(|m| m.name == wanted) {
            return Err(NeffError::NoSuchMember(name.to_string()));
        }
        let mut scan = self.scan();
        while let Some(e) = scan.next_entry()? {
            if !e.is_dir && e.name == wanted {
                return scan.copy_data(out);
            }
        }
        Err(NeffError::NoSuchMember(name.to_string()))
    }

    /// One pass over everything: the member list, the signature the members hash to, and the
    /// JSON members the summaries and the verification need.
    pub fn inspect(&self) -> Result<Inspection, NeffError> {
        let mut scan = self.scan();
        let mut ins = Inspection::default();
        let mut md5 = Md5::new();
        let mut kept_total = 0u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Some(e) = scan.next_entry()? {
            if e.is_dir {
                ins.directories.push(e.name);
                continue;
            }
            let covered = signature_covers(&e.name);
            let keep = is_summary_member(&e.name);
            let mut kept = if keep && kept_total + e.size <= self.limits.max_kept_bytes {
                kept_total += e.size;
                // Grown as data arrives: a declared size is not trusted for an allocation.
                Some(Vec::with_capacity(e.size.min(1 << 20) as usize))
            } else {
                if keep {
                    ins.not_kept.push(e.name.clone());
                }
                None
            };
            loop {
                let n = scan.read_data(&mut buf)?;
                if n == 0 {
                    break;
                }
                if covered {
                    md5.update(&buf[..n]);
                }
                if let Some(k) = kept.as_mut() {
                    k.extend_from_slice(&buf[..n]);
                }
            }
            if let Some(k) = kept {
                ins.kept.insert(e.name.clone(), k);
            }
            ins.members.push(Member {
                name: e.name,
                size: e.size,
            });
        }
        ins.computed_signature = md5.finalize().iter().map(|b| format!("{b:02x}")).collect();
        ins.decompressed_bytes = scan.decompressed_bytes();
        Ok(ins)
    }
}

/// The members kept in memory by [`Neff::inspect`]: `info.json`, `neff.json`, and each
/// subgraph's `def.json` and `tensor_map.json`.
pub(crate) fn is_summary_member(name: &str) -> bool {
    match name.split_once('/') {
        None => name == "info.json" || name == "neff.json",
        Some((_, file)) => file == "def.json" || file == "tensor_map.json",
    }
}

/// What one pass over a NEFF found.
#[derive(Debug, Clone, Default)]
pub struct Inspection {
    /// Regular-file members in archive order.
    pub members: Vec<Member>,
    /// Directory entries (allowed, not needed).
    pub directories: Vec<String>,
    /// The MD5 the members covered by the signature hash to, in archive order.
    pub computed_signature: String,
    /// The JSON members kept for summaries, by name.
    pub kept: BTreeMap<String, Vec<u8>>,
    /// JSON members not kept because of [`Limits::max_kept_bytes`].
    pub not_kept: Vec<String>,
    /// How many decompressed archive bytes were read.
    pub decompressed_bytes: u64,
}

/// The decompressed stream, counted, failing once it passes the limit.
struct Counted<R> {
    inner: R,
    count: u64,
    max: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Allow one byte past the limit, so that reaching the limit exactly is not an error.
        let allowed = (self.max + 1).saturating_sub(self.count);
        let len = buf
            .len()
            .min(usize::try_from(allowed).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..len])?;
        self.count += n as u64;
        if self.count > self.max {
            return Err(io::Error::other(NeffError::Limit(format!(
                "the archive decompresses to more than {} bytes",
                self.max
            ))));
        }
        Ok(n)
    }
}

/// One archive entry (a regular file or a directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path in the archive, normalised (no `.` components, no repeated or trailing `/`).
    pub name: String,
    /// Its data's size in bytes (0 for a directory).
    pub size: u64,
    /// The entry is a directory.
    pub is_dir: bool,
}

/// A pass over an archive's entries. After `Scanner::next_entry`, the entry's data can be read
/// with `Scanner::read_data`; whatever is not read is skipped by the next call.
pub struct Scanner<'a> {
    input: Counted<Box<dyn Read + 'a>>,
    limits: Limits,
    label: PathBuf,
    remaining: u64,
    pad: u64,
    current: String,
    entries: u64,
    names: HashSet<String>,
    ended: bool,
}

impl Scanner<'_> {
    /// How many decompressed bytes have been read.
    pub(crate) fn decompressed_bytes(&self) -> u64 {
        self.input.count
    }

    fn io_error(&self, e: io::Error) -> NeffError {
        if e.get_ref().is_some_and(|inner| inner.is::<NeffError>()) {
            if let Some(inner) = e.into_inner() {
                if let Ok(ne) = inner.downcast::<NeffError>() {
                    return *ne;
                }
            }
            return NeffError::Corrupt("unreadable archive".to_string());
        }
        match e.kind() {
            io::ErrorKind::UnexpectedEof => NeffError::Corrupt(
                "truncated archive: the compressed stream ends early".to_string(),
            ),
            io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
                NeffError::Corrupt(format!("the compressed stream is corrupt ({e})"))
            }
            _ => NeffError::io(self.label.clone(), e),
        }
    }

    fn read_into(&mut self, buf: &mut [u8]) -> Result<usize, NeffError> {
        read_full(&mut self.input, buf).map_err(|e| self.io_error(e))
    }

    /// Discard `n` bytes; fails when the stream ends first.
    fn skip(&mut self, mut n: u64, what: &str) -> Result<(), NeffError> {
        let mut buf = [0u8; 8192];
        while n > 0 {
            let want = n.min(buf.len() as u64) as usize;
            let got = self.read_into(&mut buf[..want])?;
            if got == 0 {
                return Err(NeffError::Corrupt(format!("truncated archive: {what}")));
            }
            n -= got as u64;
        }
        Ok(())
    }

    fn finish_current(&mut self) -> Result<(), NeffError> {
        if self.remaining > 0 {
            let what = format!(
                "member '{}' ends {} bytes early",
                names::shown(&self.current),
                self.remaining
            );
            let n = self.remaining;
            self.remaining = 0;
            self.skip(n, &what)?;
        }
        if self.pad > 0 {
            let what = format!("member '{}' is not padded", names::shown(&self.current));
            let n = self.pad;
            self.pad = 0;
            self.skip(n, &what)?;
        }
        Ok(())
    }

    /// Read a metadata entry's data (PAX header, GNU long name), bounded by the limit.
    fn read_metadata(&mut self, size: u64, what: &str) -> Result<Vec<u8>, NeffError> {
        if size > self.limits.max_metadata_bytes {
            return Err(NeffError::Limit(format!(
                "a {what} of {size} bytes exceeds the limit of {} bytes",
                self.limits.max_metadata_bytes
            )));
        }
        let mut data = vec![0u8; size as usize];
        if self.read_into(&mut data)? < data.len() {
            return Err(NeffError::Corrupt(format!(
                "truncated archive: a {what} ends early"
            )));
        }
        self.skip(tar::padded(size) - size, &format!("a {what} is not padded"))?;
        Ok(data)
    }

    /// The next regular-file or directory entry, or `None` at the end of the archive.
    pub(crate) fn next_entry(&mut self) -> Result<Option<Entry>, NeffError> {
        self.finish_current()?;
        if self.ended {
            return Ok(None);
        }
        let mut pending = Extended::default();
        loop {
            let offset = self.input.count;
            let mut block = [0u8; BLOCK];
            let n = self.read_into(&mut block)?;
            if n == 0 {
                return Err(NeffError::Corrupt(
                    "truncated archive: it ends without the end-of-archive marker".to_string(),
                ));
            }
            if n < BLOCK {
                return Err(NeffError::Corrupt(format!(
                    "truncated archive: an incomplete header block at offset {offset}"
                )));
            }
            if tar::is_zero_block(&block) {
                if pending.path.is_some() || pending.size.is_some() || pending.gnu_name.is_some() {
                    return Err(NeffError::Corrupt(
                        "an extended header with no entry after it".to_string(),
                    ));
                }
                self.ended = true;
                self.drain()?;
                return Ok(None);
            }
            let raw = tar::parse_header(&block)
                .map_err(|e| NeffError::Corrupt(format!("{e} at offset {offset}")))?;
            if self.extended(&raw, offset, &mut pending)? {
                continue;
            }
            let taken = std::mem::take(&mut pending);
            if let Some(entry) = self.member(&block, raw, taken)? {
                return Ok(Some(entry));
            }
        }
    }

    /// An extended header (PAX, GNU long name or link) read into `pending`: `true`; `false` for
    /// any other header.
    fn extended(
        &mut self,
        raw: &tar::RawHeader,
        offset: u64,
        pending: &mut Extended,
    ) -> Result<bool, NeffError> {
        let corrupt = |e: String| NeffError::Corrupt(format!("{e} at offset {offset}"));
        match raw.typeflag {
            kind::PAX_LOCAL => {
                let data = self.read_metadata(raw.size, "PAX extended header")?;
                for (key, value) in tar::parse_pax(&data).map_err(corrupt)? {
                    match key.as_str() {
                        "path" => pending.path = Some(value),
                        "size" => {
                            let v = std::str::from_utf8(&value)
                                .ok()
                                .filter(|s| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
                                .and_then(|s| s.parse::<u64>().ok())
                                .ok_or_else(|| {
                                    NeffError::Corrupt(format!(
                                        "a PAX size record that is not a number at offset {offset}"
                                    ))
                                })?;
                            pending.size = Some(v);
                        }
                        _ => {}
                    }
                }
            }
            kind::PAX_GLOBAL => {
                let data = self.read_metadata(raw.size, "PAX global header")?;
                tar::parse_pax(&data).map_err(corrupt)?;
            }
            kind::GNU_LONG_NAME => {
                let mut data = self.read_metadata(raw.size, "GNU long name")?;
                if let Some(end) = data.iter().position(|&c| c == 0) {
                    data.truncate(end);
                }
                pending.gnu_name = Some(data);
            }
            kind::GNU_LONG_LINK => {
                self.read_metadata(raw.size, "GNU long link name")?;
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The member a header names (with the extended headers before it), checked: a regular
    /// file or a directory, a UTF-8 name that stays inside, within the limits, not twice.
    /// `None` for the archive's root directory, which is skipped.
    fn member(
        &mut self,
        block: &[u8; BLOCK],
        raw: tar::RawHeader,
        pending: Extended,
    ) -> Result<Option<Entry>, NeffError> {
        let name_bytes = pending.path.or(pending.gnu_name).unwrap_or(raw.name);
        let raw_name = String::from_utf8_lossy(&name_bytes).into_owned();
        let shown = names::shown(&raw_name);
        let is_dir = member_is_dir(raw.typeflag, block, &shown)?;
        if std::str::from_utf8(&name_bytes).is_err() {
            return Err(NeffError::Unsafe(format!(
                "member '{shown}' has a name that is not UTF-8"
            )));
        }
        self.entries += 1;
        if self.entries > self.limits.max_members {
            return Err(NeffError::Limit(format!(
                "the archive has more than {} members",
                self.limits.max_members
            )));
        }
        let size = pending.size.unwrap_or(raw.size);
        // The archive's root directory (`./`, as `tar -C dir .` writes it): nothing to list.
        if is_dir && raw_name.split('/').all(|p| p.is_empty() || p == ".") {
            self.remaining = size;
            self.pad = tar::padded(self.remaining) - self.remaining;
            self.finish_current()?;
            return Ok(None);
        }
        let name = names::normalise(&raw_name).map_err(|e| NeffError::Unsafe(e.to_string()))?;
        if size > self.limits.max_decompressed_bytes {
            return Err(NeffError::Limit(format!(
                "member '{shown}' is {size} bytes, more than the limit of {} bytes",
                self.limits.max_decompressed_bytes
            )));
        }
        if !self.names.insert(name.clone()) && !is_dir {
            return Err(NeffError::Unsafe(format!(
                "member '{shown}' appears more than once"
            )));
        }
        self.remaining = size;
        self.pad = tar::padded(size) - size;
        self.current = name.clone();
        Ok(Some(Entry { name, size, is_dir }))
    }

    /// Read past the end-of-archive marker to the end of the stream (the rest of the record, and
    /// for gzip the trailer whose checksum is checked), within the limit.
    fn drain(&mut self) -> Result<(), NeffError> {
        let mut buf = [0u8; 8192];
        while self.read_into(&mut buf)? > 0 {}
        Ok(())
    }

    /// Read the current entry's data; `Ok(0)` at its end. A stream that ends early is an error.
    pub(crate) fn read_data(&mut self, buf: &mut [u8]) -> Result<usize, NeffError> {
        if self.remaining == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = loop {
            match self.input.read(&mut buf[..want]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(self.io_error(e)),
                Ok(n) => break n,
            }
        };
        if n == 0 {
            return Err(NeffError::Corrupt(format!(
                "truncated archive: member '{}' ends {} bytes early",
                names::shown(&self.current),
                self.remaining
            )));
        }
        self.remaining -= n as u64;
        Ok(n)
    }

    /// Copy the rest of the current entry's data into `out`.
    pub(crate) fn copy_data(&mut self, out: &mut dyn io::Write) -> Result<u64, NeffError> {
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let n = self.read_data(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            out.write_all(&buf[..n])
                .map_err(|e| NeffError::io("<output>", e))?;
            total += n as u64;
        }
    }
}

/// What extended headers said of the next member: its path and size (PAX), its GNU long name.
#[derive(Default)]
struct Extended {
    path: Option<Vec<u8>>,
    size: Option<u64>,
    gnu_name: Option<Vec<u8>>,
}

/// Whether a member is a directory (`false`: a regular file); any other type is refused.
fn member_is_dir(typeflag: u8, block: &[u8; BLOCK], shown: &str) -> Result<bool, NeffError> {
    let refuse = |what: &str| {
        Err(NeffError::Unsafe(format!(
            "member '{shown}' is {what}; NEFF members are regular files"
        )))
    };
    let link = || String::from_utf8_lossy(&tar::link_name(block)).into_owned();
    match typeflag {
        kind::REGULAR | kind::REGULAR_OLD | kind::CONTIGUOUS => Ok(false),
        kind::DIRECTORY => Ok(true),
        kind::HARD_LINK => refuse(&format!("a hard link (to '{}')", names::shown(&link()))),
        kind::SYMLINK => refuse(&format!("a symbolic link (to '{}')", names::shown(&link()))),
        kind::CHAR_DEVICE => refuse("a character device"),
        kind::BLOCK_DEVICE => refuse("a block device"),
        kind::FIFO => refuse("a fifo"),
        other => refuse(&format!(
            "an entry of unsupported type '{}'",
            (other as char).escape_default()
        )),
    }
}
