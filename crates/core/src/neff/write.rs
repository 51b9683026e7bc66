//! Packing a NEFF, deterministically: the same members and options always give the same bytes.
//!
//! The archive is a POSIX PAX tar ([`super::tar`]) of the members in byte order of their names,
//! plus `info.json`; gzip level 1 with no file name and a zero mtime in the gzip header, or no
//! compression for fast loading. The IR signature is the MD5 of every member's bytes except
//! `info.json` (in member order), so it is computed first and `info.json` written after.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use md5::{Digest, Md5};
use serde_json::json;

use crate::fsx::{AtomicFile, Durability};

use super::header::{self, Header, FORMAT_VERSION, HEADER_SIZE, VERSION_STRING};
use super::{names, tar, NeffError};
use crate::recon::neff::{engines_present, signature_covers, uuid_from_signature, ENGINE_ORDER};

/// The member the packer writes itself.
pub const INFO_MEMBER: &str = "info.json";
/// The gzip compression level (WIKI).
pub const GZIP_LEVEL: u32 = 1;

/// What goes into a NEFF besides its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackOptions {
    /// The NEFF file name recorded in the header and `info.json` (at most 255 bytes; usually the
    /// output file's name).
    pub neff_filename: String,
    /// gzip the archive (`false` with `--enable-fast-loading-neuron-binaries`).
    pub compress: bool,
    /// The feature-flag bitmask.
    pub feature_flags: u64,
    /// The collective-communication rank world size.
    pub world_size: u32,
    /// The arch mode ([`crate::recon::neff::arch_mode`] of the target).
    pub arch_mode: u32,
    /// The NEFF format version recorded in `info.json` and the header.
    pub version_major: u32,
    /// The minor NEFF format version, recorded beside [`PackOptions::version_major`].
    pub version_minor: u32,
    /// The members come from the simulated toolchain: `info.json`'s producer says so
    /// ([`SIMULATED_MARK`]), so the NEFF is never mistaken for one that runs on hardware.
    pub simulated: bool,
}

impl Default for PackOptions {
    fn default() -> Self {
        PackOptions {
            neff_filename: "file.neff".to_string(),
            compress: true,
            feature_flags: 0,
            world_size: crate::recon::neff::DEFAULT_WORLD_SIZE,
            arch_mode: 0,
            version_major: 2,
            version_minor: 0,
            simulated: false,
        }
    }
}

impl PackOptions {
    /// The options a compile packs with: the output file's name, gzip unless `fast_loading`
    /// (`--enable-fast-loading-neuron-binaries`), the arch mode of `arch` (`--arch`, which
    /// normalisation defaults to the target), and the RECON feature flags and world size.
    pub(crate) fn for_compile(arch: &str, fast_loading: bool, output: &Path) -> PackOptions {
        PackOptions {
            neff_filename: output
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            compress: !fast_loading,
            feature_flags: crate::recon::neff::FEATURE_FLAGS,
            world_size: crate::recon::neff::DEFAULT_WORLD_SIZE,
            arch_mode: crate::recon::neff::arch_mode(arch),
            ..PackOptions::default()
        }
    }
}

/// The lower-case hex MD5 of the members the signature covers, in member order.
pub fn ir_signature<'a>(members: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut h = Md5::new();
    for (name, data) in members {
        if signature_covers(name) {
            h.update(data);
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The producer string recorded in `info.json`.
pub fn producer() -> String {
    format!("nxcc {}", crate::VERSION)
}

/// What the producer says after [`producer`] in a NEFF of the simulated toolchain.
pub const SIMULATED_MARK: &str = "(simulated toolchain: cannot run on Neuron hardware)";

/// The producer of a NEFF packed with `opts`: [`producer`], and [`SIMULATED_MARK`] when its
/// members come from the simulated toolchain.
pub(crate) fn producer_of(opts: &PackOptions) -> String {
    if opts.simulated {
        format!("{} {SIMULATED_MARK}", producer())
    } else {
        producer()
    }
}

/// The `info.json` member's bytes.
pub(crate) fn info_json(
    opts: &PackOptions,
    engines: &[bool; 5],
    uuid: &[u8; 16],
    ir_signature: &str,
) -> Vec<u8> {
    let mut engine_map = serde_json::Map::new();
    for (name, present) in ENGINE_ORDER.iter().zip(engines) {
        engine_map.insert(name.to_string(), json!(present));
    }
    let info = json!({
        "version": {"major": opts.version_major, "minor": opts.version_minor},
        "neff_filename": opts.neff_filename,
        "engines": engine_map,
        "feature_flags": opts.feature_flags,
        "uuid": header::format_uuid(uuid),
        "ir_signature": ir_signature,
        "producer": producer_of(opts),
    });
    let mut bytes = serde_json::to_vec_pretty(&info).expect("JSON of plain values");
    bytes.push(b'\n');
    bytes
}

/// Pack members (without `info.json`, which the packer writes) into a NEFF: header + archive.
pub fn pack(
    mut members: BTreeMap<String, Vec<u8>>,
    opts: &PackOptions,
) -> Result<Vec<u8>, NeffError> {
    header::check_filename(&opts.neff_filename)?;
    if members.contains_key(INFO_MEMBER) {
        return Err(NeffError::Invalid(format!(
            "{INFO_MEMBER} is written by the packer and cannot be given as a member"
        )));
    }
    let limits = super::read::Limits::default();
    if members.len() as u64 + 1 > limits.max_members {
        return Err(NeffError::Invalid(format!(
            "{} members are more than a NEFF may hold ({})",
            members.len() + 1,
            limits.max_members
        )));
    }
    let mut total: u64 = 0;
    for (name, data) in &members {
        names::check_for_pack(name).map_err(|e| NeffError::Invalid(e.to_string()))?;
        total += tar::padded(data.len() as u64) + 2 * tar::BLOCK as u64;
    }
    if total > limits.max_decompressed_bytes {
        return Err(NeffError::Invalid(format!(
            "the archive would be {total} bytes, more than a NEFF may hold ({} bytes)",
            limits.max_decompressed_bytes
        )));
    }
    // BTreeMap<String> iterates in byte order of the names: the member order.
    let signature = ir_signature(members.iter().map(|(n, d)| (n.as_str(), d.as_slice())));
    let uuid = uuid_from_signature(&signature);
    let engines = engines_present(members.keys().map(String::as_str));
    let info = info_json(opts, &engines, &uuid, &signature);
    members.insert(INFO_MEMBER.to_string(), info);

    let mut archive = Vec::with_capacity(total as usize + tar::RECORD + 2 * tar::BLOCK);
    for (name, data) in &members {
        tar::append_file(&mut archive, name, data);
    }
    tar::finish(&mut archive);
    let archive = if opts.compress {
        gzip(&archive)
    } else {
        archive
    };

    let head = Header {
        format_version: FORMAT_VERSION,
        header_size: HEADER_SIZE as u64,
        archive_length: archive.len() as u64,
        ir_signature: signature,
        version_string: VERSION_STRING.to_string(),
        version_major: opts.version_major,
        version_minor: opts.version_minor,
        feature_flags: opts.feature_flags,
        uuid,
        neff_filename: opts.neff_filename.clone(),
        engines,
        world_size: opts.world_size,
        arch_mode: opts.arch_mode,
    }
    .encode()?;
    let mut out = Vec::with_capacity(HEADER_SIZE + archive.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(&archive);
    Ok(out)
}

/// gzip at [`GZIP_LEVEL`] with no file name and a zero mtime in the gzip header.
fn gzip(data: &[u8]) -> Vec<u8> {
    let out = Vec::with_capacity(data.len() / 3 + 64);
    let mut enc = flate2::GzBuilder::new()
        .mtime(0)
        .write(out, flate2::Compression::new(GZIP_LEVEL));
    enc.write_all(data).expect("writing to memory");
    enc.finish().expect("writing to memory")
}

/// Write a file atomically ([`crate::fsx::AtomicFile`], committed [`Durability::Durable`]): on
/// failure nothing is created at `path` and an existing file there is left as it was. The file
/// gets mode 0644.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = AtomicFile::create(path)?.with_mode(0o644);
    f.write_all(bytes)?;
    f.commit(Durability::Durable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members() -> BTreeMap<String, Vec<u8>> {
        let mut m = BTreeMap::new();
        m.insert("neff.json".to_string(), b"{}".to_vec());
        m.insert("sg00/PE.bin".to_string(), vec![1, 2, 3]);
        m.insert("sg00/def.json".to_string(), b"{\"a\":1}".to_vec());
        m
    }

    #[test]
    fn the_signature_covers_all_but_info_json_in_order() {
        let a = ir_signature([("a", &b"xy"[..]), ("info.json", b"zzz"), ("b", b"z")]);
        let b = ir_signature([("a", &b"xyz"[..])]);
        assert_eq!(a, b);
        assert_eq!(
            ir_signature([("a", &b""[..])]),
            "d41d8cd98f00b204e9800998ecf8427e"
        );
    }

    #[test]
    fn the_gzip_header_has_no_name_and_no_time() {
        let out = pack(members(), &PackOptions::default()).unwrap();
        let gz = &out[HEADER_SIZE..];
        assert_eq!(&gz[..3], &[0x1f, 0x8b, 8]);
        assert_eq!(gz[3], 0, "no FNAME or other flags");
        assert_eq!(&gz[4..8], &[0, 0, 0, 0], "zero mtime");
    }

    #[test]
    fn uncompressed_archives_start_with_a_ustar_block() {
        let opts = PackOptions {
            compress: false,
            ..PackOptions::default()
        };
        let out = pack(members(), &opts).unwrap();
        assert_eq!(&out[HEADER_SIZE + 257..HEADER_SIZE + 262], b"ustar");
        assert_eq!((out.len() - HEADER_SIZE) % tar::RECORD, 0);
    }

    #[test]
    fn bad_members_are_refused() {
        let mut m = members();
        m.insert("info.json".to_string(), vec![]);
        assert!(pack(m, &PackOptions::default())
            .unwrap_err()
            .to_string()
            .contains("written by the packer"));
        let mut m = members();
        m.insert("../x".to_string(), vec![]);
        assert!(pack(m, &PackOptions::default()).is_err());
        let opts = PackOptions {
            neff_filename: "x".repeat(300),
            ..PackOptions::default()
        };
        assert!(pack(members(), &opts).is_err());
    }

    #[test]
    fn info_json_records_the_options() {
        let opts = PackOptions {
            neff_filename: "m.neff".to_string(),
            feature_flags: 5,
            version_minor: 3,
            ..PackOptions::default()
        };
        let bytes = info_json(&opts, &[true, false, false, false, true], &[0x40; 16], "ab");
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["version"]["minor"], 3);
        assert_eq!(v["neff_filename"], "m.neff");
        assert_eq!(v["engines"]["PE"], true);
        assert_eq!(v["engines"]["Pool"], false);
        assert_eq!(v["engines"]["DVE"], true);
        assert_eq!(v["feature_flags"], 5);
        assert_eq!(v["ir_signature"], "ab");
        assert_eq!(v["producer"], format!("nxcc {}", crate::VERSION));
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "version",
                "neff_filename",
                "engines",
                "feature_flags",
                "uuid",
                "ir_signature",
                "producer"
            ]
        );
    }

    #[test]
    fn compile_options_follow_the_flags() {
        let o = PackOptions::for_compile("trn2", false, Path::new("/out/dir/model.neff"));
        assert_eq!(o.neff_filename, "model.neff");
        assert!(o.compress);
        assert_eq!(o.arch_mode, crate::recon::neff::arch_mode("trn2"));
        let o = PackOptions::for_compile("inf1", true, Path::new("m.neff"));
        assert!(!o.compress);
        assert_eq!(o.arch_mode, 1);
    }

    #[test]
    fn atomic_write_handles_long_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(format!("{}.neff", "n".repeat(250)));
        write_atomically(&p, b"x").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"x");
    }

    #[test]
    fn atomic_write_replaces_or_leaves_alone() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.neff");
        std::fs::write(&p, b"old").unwrap();
        write_atomically(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o644);
        }
        // Only the file itself is in the directory: no temporary left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);

        // A directory in the way: the rename fails, the directory is untouched, no temp left.
        let d = dir.path().join("taken");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("keep"), b"k").unwrap();
        assert!(write_atomically(&d, b"x").is_err());
        assert_eq!(std::fs::read(d.join("keep")).unwrap(), b"k");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);

        // A missing directory: an error, nothing created.
        let missing = dir.path().join("nope").join("out.neff");
        assert!(write_atomically(&missing, b"x").is_err());
        assert!(!dir.path().join("nope").exists());
    }
}
