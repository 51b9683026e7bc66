//! The NEFF container end to end: packing, reading, verifying, hostile archives, and the
//! `nxcc neff-info` command run as a real process.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nxcc::neff::header::{self, Header, HEADER_SIZE};
use nxcc::neff::kelper::pack_work_dir;
use nxcc::neff::read::{Limits, Neff};
use nxcc::neff::verify::verify;
use nxcc::neff::{extract, pack, NeffError, PackOptions};
use nxcc::recon::neff::uuid_from_signature;
use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Helpers

/// Deterministic pseudo-random bytes (xorshift), so binaries are not trivially compressible.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sample_members() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    m.insert(
        "neff.json".to_string(),
        serde_json::to_vec(&json!({"schema_version": "0.5", "graphs": {
            "sg_coreV10": {"op": "__kelf", "sg": "sg00", "engines": ["PE", "Activation"]}
        }}))
        .unwrap(),
    );
    m.insert(
        "sg00/def.json".to_string(),
        serde_json::to_vec(
            &json!({"schema_version": "0.6", "instructions": [1, 2, 3], "name": "sg00"}),
        )
        .unwrap(),
    );
    m.insert(
        "sg00/tensor_map.json".to_string(),
        serde_json::to_vec(&json!({
            "inputs": ["input0", "input1"],
            "alias_map": [{"input_name": "input1", "output_name": "output0", "must_alias": true}]
        }))
        .unwrap(),
    );
    m.insert("sg00/PE.bin".to_string(), noise(100_000, 7));
    m.insert("sg00/Activation.bin".to_string(), noise(3_000, 9));
    m
}

fn opts(compress: bool) -> PackOptions {
    PackOptions {
        neff_filename: "model.neff".to_string(),
        compress,
        feature_flags: 0x11,
        world_size: 4,
        arch_mode: nxcc::recon::neff::arch_mode("trn1"),
        version_major: 2,
        version_minor: 0,
        simulated: false,
    }
}

/// The archive part of a headed NEFF, decompressed.
fn tar_of(neff: &[u8]) -> Vec<u8> {
    let archive = &neff[HEADER_SIZE..];
    if archive[..2] == [0x1f, 0x8b] {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(archive)
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        archive.to_vec()
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// A raw ustar header block, built by hand (the `tar` crate refuses some of these).
fn raw_header(name: &[u8], typeflag: u8, size: u64, link: &[u8]) -> [u8; 512] {
    let mut b = [0u8; 512];
    b[..name.len()].copy_from_slice(name);
    b[100..108].copy_from_slice(b"0000644\0");
    b[108..116].copy_from_slice(b"0000000\0");
    b[116..124].copy_from_slice(b"0000000\0");
    b[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    b[136..148].copy_from_slice(b"00000000000\0");
    b[156] = typeflag;
    b[157..157 + link.len()].copy_from_slice(link);
    b[257..263].copy_from_slice(b"ustar\0");
    b[263..265].copy_from_slice(b"00");
    b[148..156].copy_from_slice(b"        ");
    let sum: u32 = b.iter().map(|&c| u32::from(c)).sum();
    b[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    b
}

/// A tar of raw entries `(header, data)`, with data padded and the end-of-archive marker.
fn raw_tar(entries: &[([u8; 512], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (h, data) in entries {
        out.extend_from_slice(h);
        out.extend_from_slice(data);
        let rem = out.len() % 512;
        if rem != 0 {
            out.resize(out.len() + 512 - rem, 0);
        }
    }
    out.resize(out.len() + 1024, 0);
    out
}

fn file_entry(name: &str, data: &[u8]) -> ([u8; 512], Vec<u8>) {
    (
        raw_header(name.as_bytes(), b'0', data.len() as u64, b""),
        data.to_vec(),
    )
}

fn pax_entry(records: &[(&str, &str)]) -> ([u8; 512], Vec<u8>) {
    let mut data = Vec::new();
    for (k, v) in records {
        data.extend_from_slice(&nxcc::neff::tar::pax_record(k, v.as_bytes()));
    }
    (
        raw_header(b"././@PaxHeader", b'x', data.len() as u64, b""),
        data,
    )
}

fn refusal(bytes: Vec<u8>, limits: Limits) -> NeffError {
    let neff = Neff::from_bytes_with(bytes, limits).expect("detected as an archive");
    let err = neff.members().expect_err("the archive must be refused");
    // The other readers refuse it the same way.
    assert!(neff.inspect().is_err());
    assert!(!verify(&neff).is_ok());
    err
}

/// A work directory as walrus_driver leaves it: per subgraph `def.json`, `tensor_map.json`,
/// `neff.json`, some engine binaries, and files Kelper does not pack.
fn work_dir(subgraphs: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let engines = ["PE", "Pool", "Activation", "SP", "DVE"];
    for i in 0..subgraphs {
        let sg = format!("sg{i:02}");
        let d = dir.path().join(&sg);
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("def.json"),
            serde_json::to_vec(&json!({"schema_version": "0.6", "index": i})).unwrap(),
        )
        .unwrap();
        std::fs::write(
            d.join("tensor_map.json"),
            serde_json::to_vec(&json!({"inputs": [format!("in{i}")], "alias_map": []})).unwrap(),
        )
        .unwrap();
        // Subgraph i has binaries for engines i and i+1 (mod 5).
        let mine = [engines[i % 5], engines[(i + 1) % 5]];
        std::fs::write(
            d.join("neff.json"),
            serde_json::to_vec(&json!({
                "schema_version": "0.5", "sg": sg, "engines": mine,
                "io_bytes": 1000 + i, "future_field": {"x": i}
            }))
            .unwrap(),
        )
        .unwrap();
        for e in mine {
            std::fs::write(d.join(format!("{e}.bin")), noise(2000 + i, i as u64 + 3)).unwrap();
        }
        std::fs::write(d.join("bir.json"), b"{}").unwrap();
        std::fs::write(d.join("log.txt"), b"not packed").unwrap();
    }
    dir
}

fn listing(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// Round trips

fn round_trip(compress: bool) {
    let members = sample_members();
    let bytes = pack(members.clone(), &opts(compress)).unwrap();
    let neff = Neff::from_bytes(bytes.clone()).unwrap();
    assert!(neff.layout().header);
    assert_eq!(neff.layout().compressed, compress);

    let listed = neff.members().unwrap();
    let names: Vec<&str> = listed.iter().map(|m| m.name.as_str()).collect();
    let mut expected: Vec<String> = members.keys().cloned().collect();
    expected.push("info.json".to_string());
    expected.sort();
    assert_eq!(names, expected);
    for (name, data) in &members {
        assert_eq!(&neff.read_member(name).unwrap(), data, "{name}");
        let size = listed.iter().find(|m| &m.name == name).unwrap().size;
        assert_eq!(size, data.len() as u64);
    }

    let h = neff.header().unwrap();
    assert_eq!(h.format_version, 2);
    assert_eq!(h.header_size, 1024);
    assert_eq!(h.archive_length, (bytes.len() - HEADER_SIZE) as u64);
    assert_eq!(h.version_string, "Dynamic");
    assert_eq!(h.version_major, 2);
    assert_eq!(h.version_minor, 0);
    assert_eq!(h.feature_flags, 0x11);
    assert_eq!(h.world_size, 4);
    assert_eq!(h.arch_mode, 2);
    assert_eq!(h.neff_filename, "model.neff");
    assert_eq!(h.engines, [true, false, true, false, false]);
    assert!(header::is_md5_hex(&h.ir_signature));
    assert_eq!(h.uuid, uuid_from_signature(&h.ir_signature));

    // The signature is the MD5 of every member but info.json, in name order.
    let mut all = Vec::new();
    for data in members.values() {
        all.extend_from_slice(data);
    }
    let md5 = nxcc::neff::write::ir_signature([("all", all.as_slice())]);
    assert_eq!(h.ir_signature, md5);

    let info: Value = serde_json::from_slice(&neff.read_member("info.json").unwrap()).unwrap();
    assert_eq!(info["ir_signature"], h.ir_signature.as_str());
    assert_eq!(info["uuid"], header::format_uuid(&h.uuid).as_str());
    assert_eq!(info["engines"]["Activation"], true);
    assert_eq!(info["neff_filename"], "model.neff");

    let v = verify(&neff);
    assert!(v.is_ok(), "{:?}", v.problems);
    assert!(v.nxcc_written);
}

#[test]
fn round_trip_compressed() {
    round_trip(true);
}

#[test]
fn round_trip_uncompressed() {
    round_trip(false);
}

#[test]
fn a_bare_archive_without_header_is_read() {
    for compress in [true, false] {
        let members = sample_members();
        let bytes = pack(members.clone(), &opts(compress)).unwrap();
        let bare = bytes[HEADER_SIZE..].to_vec();
        let neff = Neff::from_bytes(bare).unwrap();
        assert!(!neff.layout().header);
        assert_eq!(neff.layout().compressed, compress);
        assert!(neff.header().is_none());
        for (name, data) in &members {
            assert_eq!(&neff.read_member(name).unwrap(), data);
        }
        let v = verify(&neff);
        assert!(v.is_ok(), "{:?}", v.problems);
    }
}

#[test]
fn reading_from_a_file_matches_reading_from_memory() {
    let bytes = pack(sample_members(), &opts(true)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.neff");
    nxcc::neff::write_atomically(&p, &bytes).unwrap();
    let from_file = Neff::open(&p).unwrap();
    let from_mem = Neff::from_bytes(bytes).unwrap();
    assert_eq!(from_file.members().unwrap(), from_mem.members().unwrap());
    assert_eq!(from_file.header(), from_mem.header());
    assert!(verify(&from_file).is_ok());
}

#[test]
fn the_archive_is_deterministic_pax_with_fixed_ownership() {
    let mut members = sample_members();
    let long = format!("sg00/{}.bin", "n".repeat(120));
    members.insert(long.clone(), b"long".to_vec());
    let bytes = pack(members, &opts(false)).unwrap();
    let tar = tar_of(&bytes);
    let mut ar = tar::Archive::new(tar.as_slice());
    let mut names = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        assert_eq!(h.entry_type(), tar::EntryType::Regular);
        assert_eq!(h.mode().unwrap(), 0o644);
        assert_eq!(h.uid().unwrap(), 0);
        assert_eq!(h.gid().unwrap(), 0);
        assert_eq!(h.mtime().unwrap(), 0);
        assert_eq!(h.username().unwrap(), Some("nobody"));
        assert_eq!(h.groupname().unwrap(), Some("nobody"));
        if let Some(ext) = e.pax_extensions().unwrap() {
            for x in ext {
                let x = x.unwrap();
                assert_eq!(x.key().unwrap(), "path", "only path records");
            }
        }
        names.push(e.path().unwrap().to_string_lossy().into_owned());
    }
    let mut sorted = names.clone();
    sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    assert_eq!(names, sorted, "members in byte order");
    assert!(names.contains(&long));
    assert!(
        names.iter().all(|n| !n.ends_with('/')),
        "no directory entries"
    );
}

#[test]
fn the_gzip_header_carries_no_name_and_no_time() {
    let bytes = pack(sample_members(), &opts(true)).unwrap();
    let dec = flate2::read::GzDecoder::new(&bytes[HEADER_SIZE..]);
    let h = dec.header().unwrap();
    assert_eq!(h.filename(), None);
    assert_eq!(h.mtime(), 0);
    assert_eq!(h.comment(), None);
}

// ---------------------------------------------------------------------------------------------
// Determinism

#[test]
fn packing_is_deterministic_and_order_independent() {
    for compress in [true, false] {
        let a = pack(sample_members(), &opts(compress)).unwrap();
        let b = pack(sample_members(), &opts(compress)).unwrap();
        assert_eq!(a, b);
        let mut reversed = BTreeMap::new();
        for (k, v) in sample_members().into_iter().rev() {
            reversed.insert(k, v);
        }
        assert_eq!(pack(reversed, &opts(compress)).unwrap(), a);
    }
    // A different member changes the signature and the UUID.
    let mut m = sample_members();
    m.get_mut("sg00/PE.bin").unwrap()[0] ^= 1;
    let a = Neff::from_bytes(pack(sample_members(), &opts(true)).unwrap()).unwrap();
    let b = Neff::from_bytes(pack(m, &opts(true)).unwrap()).unwrap();
    assert_ne!(
        a.header().unwrap().ir_signature,
        b.header().unwrap().ir_signature
    );
    assert_ne!(a.header().unwrap().uuid, b.header().unwrap().uuid);
}

#[test]
fn kelper_packing_does_not_depend_on_the_subgraph_order_given() {
    let w = work_dir(3);
    let sorted: Vec<String> = ["sg00", "sg01", "sg02"].map(String::from).to_vec();
    let shuffled: Vec<String> = ["sg02", "sg00", "sg01"].map(String::from).to_vec();
    assert_eq!(
        pack_work_dir(w.path(), &sorted, &opts(true)).unwrap(),
        pack_work_dir(w.path(), &shuffled, &opts(true)).unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// Kelper

fn check_work_dir_pack(n: usize) {
    let w = work_dir(n);
    let sgs: Vec<String> = (0..n).map(|i| format!("sg{i:02}")).collect();
    let bytes = pack_work_dir(w.path(), &sgs, &opts(true)).unwrap();
    let neff = Neff::from_bytes(bytes).unwrap();
    let v = verify(&neff);
    assert!(v.is_ok(), "{:?}", v.problems);

    let names: Vec<String> = neff
        .members()
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    for sg in &sgs {
        for f in ["def.json", "tensor_map.json"] {
            let name = format!("{sg}/{f}");
            assert!(names.contains(&name), "{name}");
            assert_eq!(
                neff.read_member(&name).unwrap(),
                std::fs::read(w.path().join(sg).join(f)).unwrap(),
                "{name} packed as it is"
            );
        }
        assert!(
            !names.contains(&format!("{sg}/neff.json")),
            "per-subgraph neff.json not packed"
        );
        assert!(!names.contains(&format!("{sg}/bir.json")));
        assert!(!names.contains(&format!("{sg}/log.txt")));
    }

    let manifest: Value = serde_json::from_slice(&neff.read_member("neff.json").unwrap()).unwrap();
    assert_eq!(manifest["schema_version"], "0.5");
    let graphs = manifest["graphs"].as_object().unwrap();
    let keys: Vec<&String> = graphs.keys().collect();
    let expected: Vec<String> = (0..n).map(|i| format!("sg_coreV1{i}")).collect();
    assert_eq!(keys, expected.iter().collect::<Vec<_>>());
    let engines = ["PE", "Pool", "Activation", "SP", "DVE"];
    let mut union = [false; 5];
    for (i, (_, g)) in graphs.iter().enumerate() {
        assert_eq!(g["op"], "__kelf");
        assert_eq!(g["sg"], format!("sg{i:02}"));
        assert_eq!(g["io_bytes"], 1000 + i);
        assert_eq!(g["future_field"]["x"], i);
        assert!(g.get("schema_version").is_none());
        let first: Vec<&str> = g
            .as_object()
            .unwrap()
            .keys()
            .take(2)
            .map(String::as_str)
            .collect();
        assert_eq!(first, ["op", "sg"]);
        union[i % 5] = true;
        union[(i + 1) % 5] = true;
        for e in [engines[i % 5], engines[(i + 1) % 5]] {
            assert!(names.contains(&format!("sg{i:02}/{e}.bin")));
        }
    }
    assert_eq!(neff.header().unwrap().engines, union);
    let info: Value = serde_json::from_slice(&neff.read_member("info.json").unwrap()).unwrap();
    for (i, e) in engines.iter().enumerate() {
        assert_eq!(info["engines"][e], union[i], "{e}");
    }
}

#[test]
fn kelper_packs_one_subgraph() {
    check_work_dir_pack(1);
}

#[test]
fn kelper_packs_three_subgraphs() {
    check_work_dir_pack(3);
}

#[test]
fn kelper_names_the_missing_or_unusable_input() {
    for missing in ["def.json", "tensor_map.json", "neff.json"] {
        let w = work_dir(2);
        let gone = w.path().join("sg01").join(missing);
        std::fs::remove_file(&gone).unwrap();
        let e = pack_work_dir(w.path(), &["sg00".into(), "sg01".into()], &opts(true)).unwrap_err();
        assert!(
            matches!(&e, NeffError::MissingInput(p) if p == &gone),
            "{e}"
        );
        let ncc: nxcc::error::NccError = e.into();
        assert_eq!(ncc.code, Some("EDRV087"));
        assert!(ncc.to_string().contains(&gone.display().to_string()));
    }
    let w = work_dir(1);
    let bad = w.path().join("sg00").join("tensor_map.json");
    std::fs::write(&bad, b"{not json").unwrap();
    let e = pack_work_dir(w.path(), &["sg00".into()], &opts(true)).unwrap_err();
    assert!(e.to_string().contains(&bad.display().to_string()), "{e}");
    // A subgraph directory that is not there.
    let e = pack_work_dir(w.path(), &["sg07".into()], &opts(true)).unwrap_err();
    assert!(e.to_string().contains("sg07"), "{e}");
    // A subgraph neff.json naming another subgraph.
    let w = work_dir(1);
    std::fs::write(
        w.path().join("sg00/neff.json"),
        br#"{"schema_version": "0.5", "sg": "sg05"}"#,
    )
    .unwrap();
    let e = pack_work_dir(w.path(), &["sg00".into()], &opts(true)).unwrap_err();
    assert!(e.to_string().contains("sg05"), "{e}");
    // Nothing to pack, or a name that is not a directory name.
    assert!(pack_work_dir(w.path(), &[], &opts(true)).is_err());
    assert!(pack_work_dir(w.path(), &["../x".into()], &opts(true)).is_err());
}

// ---------------------------------------------------------------------------------------------
// Corruption

/// Where a member's data starts in an uncompressed tar (its header's name field matches).
fn data_offset(tar: &[u8], name: &str) -> usize {
    let mut at = 0;
    while at + 512 <= tar.len() {
        let block = &tar[at..at + 512];
        let end = block[..100].iter().position(|&c| c == 0).unwrap_or(100);
        let size = usize::from_str_radix(
            std::str::from_utf8(&block[124..135])
                .unwrap()
                .trim_matches('\0'),
            8,
        )
        .unwrap_or(0);
        if &block[..end] == name.as_bytes() {
            return at + 512;
        }
        at += 512 + size.div_ceil(512) * 512;
    }
    panic!("{name} not found");
}

#[test]
fn a_flipped_member_byte_is_a_signature_mismatch() {
    // Uncompressed: flip a byte of PE.bin in place.
    let mut bytes = pack(sample_members(), &opts(false)).unwrap();
    let at = HEADER_SIZE + data_offset(&bytes[HEADER_SIZE..], "sg00/PE.bin") + 10;
    bytes[at] ^= 0xff;
    let v = verify(&Neff::from_bytes(bytes).unwrap());
    assert!(!v.is_ok());
    assert!(
        v.problems
            .iter()
            .any(|p| p.starts_with("IR signature: the header says")),
        "{:?}",
        v.problems
    );
    assert!(
        v.problems
            .iter()
            .any(|p| p.starts_with("IR signature: info.json says")),
        "{:?}",
        v.problems
    );

    // Compressed: decompress, flip, recompress, and fix the archive length so that only the
    // signature is wrong.
    let bytes = pack(sample_members(), &opts(true)).unwrap();
    let mut tar = tar_of(&bytes);
    let at = data_offset(&tar, "sg00/def.json") + 3;
    tar[at] ^= 0x01;
    let gz = gzip(&tar);
    let mut out = bytes[..HEADER_SIZE].to_vec();
    out[16..24].copy_from_slice(&(gz.len() as u64).to_le_bytes());
    out.extend_from_slice(&gz);
    let v = verify(&Neff::from_bytes(out).unwrap());
    assert!(
        v.problems.iter().any(|p| p.contains("IR signature")),
        "{:?}",
        v.problems
    );
    assert!(
        !v.problems.iter().any(|p| p.contains("archive length")),
        "{:?}",
        v.problems
    );
}

#[test]
fn a_wrong_archive_length_is_reported() {
    let mut bytes = pack(sample_members(), &opts(true)).unwrap();
    let real = (bytes.len() - HEADER_SIZE) as u64;
    bytes[16..24].copy_from_slice(&(real + 5).to_le_bytes());
    let v = verify(&Neff::from_bytes(bytes).unwrap());
    assert_eq!(v.problems.len(), 1, "{:?}", v.problems);
    assert!(
        v.problems[0].starts_with("archive length"),
        "{:?}",
        v.problems
    );

    // Trailing bytes appended to the file: the same finding.
    let mut bytes = pack(sample_members(), &opts(false)).unwrap();
    bytes.extend_from_slice(b"junk");
    let v = verify(&Neff::from_bytes(bytes).unwrap());
    assert!(
        v.problems.iter().any(|p| p.starts_with("archive length")),
        "{:?}",
        v.problems
    );
}

#[test]
fn header_field_damage_is_reported() {
    let good = pack(sample_members(), &opts(true)).unwrap();
    let cases: [(usize, u8, &str); 5] = [
        (0, 3, "format version"),
        (60, b'X', "version string"),
        (24, b'G', "IR signature"),
        (204 + 6, 0x10, "UUID"),
        (700, 1, "outside the fields"),
    ];
    for (at, value, what) in cases {
        let mut b = good.clone();
        b[at] = value;
        let v = verify(&Neff::from_bytes(b).unwrap());
        assert!(
            v.problems.iter().any(|p| p.contains(what)),
            "{what}: {:?}",
            v.problems
        );
    }
    // The header and info.json disagree on the feature flags.
    let mut b = good.clone();
    b[192] ^= 0x40;
    let v = verify(&Neff::from_bytes(b).unwrap());
    assert!(
        v.problems.iter().any(|p| p.starts_with("feature flags")),
        "{:?}",
        v.problems
    );
}

// ---------------------------------------------------------------------------------------------
// Hostile archives

#[test]
fn hostile_member_names_are_refused() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (raw_tar(&[file_entry("../evil", b"x")]), "'..'"),
        (raw_tar(&[file_entry("sg00/../../evil", b"x")]), "'..'"),
        (raw_tar(&[file_entry("/tmp/x", b"x")]), "absolute"),
        (
            raw_tar(&[
                pax_entry(&[("path", "../evil")]),
                file_entry("benign", b"x"),
            ]),
            "'..'",
        ),
        (
            raw_tar(&[
                pax_entry(&[("path", "/etc/passwd")]),
                file_entry("benign", b"x"),
            ]),
            "absolute",
        ),
        (
            raw_tar(&[
                (
                    raw_header(b"././@LongLink", b'L', 8, b""),
                    b"../evil\0".to_vec(),
                ),
                file_entry("benign", b"x"),
            ]),
            "'..'",
        ),
        (
            raw_tar(&[file_entry("a", b"1"), file_entry("./a", b"2")]),
            "more than once",
        ),
    ];
    for (tar, what) in cases {
        for compressed in [false, true] {
            let bytes = if compressed { gzip(&tar) } else { tar.clone() };
            let e = refusal(bytes, Limits::default());
            assert!(matches!(e, NeffError::Unsafe(_)), "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
    }
}

#[test]
fn links_devices_and_fifos_are_refused() {
    let cases = [
        (b'2', "symbolic link"),
        (b'1', "hard link"),
        (b'3', "character device"),
        (b'4', "block device"),
        (b'6', "fifo"),
        (b'S', "unsupported type"),
    ];
    for (flag, what) in cases {
        let tar = raw_tar(&[
            file_entry("ok.json", b"{}"),
            (
                raw_header(b"sg00/PE.bin", flag, 0, b"/etc/passwd"),
                Vec::new(),
            ),
        ]);
        let e = refusal(tar, Limits::default());
        assert!(matches!(e, NeffError::Unsafe(_)), "{e}");
        assert!(e.to_string().contains(what), "{e}");
        assert!(e.to_string().contains("sg00/PE.bin"), "{e}");
    }
}

#[test]
fn a_gzip_bomb_stops_at_the_limit() {
    // 16 MiB of zeros compress to a few KiB.
    let big = vec![0u8; 16 << 20];
    let tar = raw_tar(&[file_entry("sg00/PE.bin", &big)]);
    let gz = gzip(&tar);
    assert!(gz.len() < 100_000);
    let limits = Limits {
        max_decompressed_bytes: 1 << 20,
        ..Limits::default()
    };
    // The member's declared size is over the limit: refused before reading it.
    let e = refusal(gz.clone(), limits);
    assert!(matches!(e, NeffError::Limit(_)), "{e}");

    // Many members each under the limit, together over it: stopped while streaming.
    let chunk = vec![0u8; 512 << 10];
    let entries: Vec<_> = (0..8)
        .map(|i| file_entry(&format!("m{i}"), &chunk))
        .collect();
    let gz = gzip(&raw_tar(&entries));
    let e = refusal(gz, limits);
    assert!(matches!(e, NeffError::Limit(_)), "{e}");
    assert!(e.to_string().contains("more than 1048576 bytes"), "{e}");

    // Zero padding after the end-of-archive marker counts too.
    let mut tar = raw_tar(&[file_entry("a", b"x")]);
    tar.resize(4 << 20, 0);
    let e = refusal(gzip(&tar), limits);
    assert!(matches!(e, NeffError::Limit(_)), "{e}");
}

#[test]
fn too_many_members_are_refused() {
    let entries: Vec<_> = (0..25)
        .map(|i| file_entry(&format!("m{i:03}"), b""))
        .collect();
    let tar = raw_tar(&entries);
    let limits = Limits {
        max_members: 10,
        ..Limits::default()
    };
    let e = refusal(tar.clone(), limits);
    assert!(matches!(e, NeffError::Limit(_)), "{e}");
    assert!(e.to_string().contains("more than 10 members"), "{e}");
    // Under the limit the same archive reads.
    let n = Neff::from_bytes(tar).unwrap().members().unwrap().len();
    assert_eq!(n, 25);
}

#[test]
fn oversized_metadata_is_refused() {
    let long = "a".repeat(5000);
    let tar = raw_tar(&[pax_entry(&[("path", &long)]), file_entry("x", b"")]);
    let limits = Limits {
        max_metadata_bytes: 1024,
        ..Limits::default()
    };
    let e = refusal(tar, limits);
    assert!(matches!(e, NeffError::Limit(_)), "{e}");
}

#[test]
fn truncation_is_always_detected() {
    for compress in [true, false] {
        let bytes = pack(sample_members(), &opts(compress)).unwrap();
        let len = bytes.len();
        let cuts = [
            0,
            1,
            15,
            100,
            1023,
            1024,
            1025,
            1030,
            1024 + 511,
            1024 + 512,
            1024 + 600,
            len / 2,
            len - 1024,
            len - 513,
            len - 100,
            len - 1,
        ];
        for cut in cuts {
            let part = bytes[..cut].to_vec();
            match Neff::from_bytes(part) {
                Err(e) => assert!(matches!(e, NeffError::NotNeff(_)), "cut {cut}: {e}"),
                Ok(neff) => {
                    let v = verify(&neff);
                    assert!(!v.is_ok(), "cut {cut} of {len} passed verification");
                    if compress {
                        assert!(neff.inspect().is_err(), "cut {cut}");
                    }
                }
            }
        }
    }
}

#[test]
fn truncated_bare_archives_are_errors() {
    let tar = raw_tar(&[file_entry("a.json", &[b'x'; 3000]), file_entry("b", b"y")]);
    for cut in [300, 512, 700, 3584, 3584 + 512 + 1, tar.len() - 1024] {
        let part = tar[..cut].to_vec();
        if let Ok(neff) = Neff::from_bytes(part) {
            let e = neff.members().unwrap_err();
            assert!(matches!(e, NeffError::Corrupt(_)), "cut {cut}: {e}");
            assert!(e.to_string().contains("truncated"), "cut {cut}: {e}");
        }
    }
}

#[test]
fn not_a_neff_is_said_so() {
    for (bytes, what) in [
        (Vec::new(), "empty"),
        (b"hello world".to_vec(), "no NEFF header"),
        (vec![0u8; 4096], "no NEFF header"),
    ] {
        let e = Neff::from_bytes(bytes).err().unwrap();
        assert!(e.to_string().starts_with("not a NEFF file: "), "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    // A header with nothing recognisable after it.
    let mut b = pack(sample_members(), &opts(true)).unwrap();
    b[1024] = 0;
    let e = Neff::from_bytes(b).err().unwrap();
    assert!(
        e.to_string()
            .contains("no gzip or tar archive follows at offset 1024"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// Extraction

#[test]
fn extract_all_unpacks_every_member() {
    let members = sample_members();
    let neff = Neff::from_bytes(pack(members.clone(), &opts(true)).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("out").join("deeper");
    let written = extract::extract_all(&neff, &target).unwrap();
    assert_eq!(written.len(), members.len() + 1);
    for (name, data) in &members {
        assert_eq!(&std::fs::read(target.join(name)).unwrap(), data, "{name}");
    }
    assert!(target.join("info.json").is_file());
    // No temporary file is left behind.
    let leftovers: Vec<_> = listing(&target)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Nothing is left beside it either: the temporary directory became the target.
    let beside: Vec<_> = listing(target.parent().unwrap());
    assert_eq!(
        beside
            .iter()
            .filter(|p| p.parent() == target.parent())
            .count(),
        1,
        "{beside:?}"
    );
    // A second extraction into the (now full) target is refused and changes nothing.
    let before = listing(&target);
    let e = extract::extract_all(&neff, &target).unwrap_err();
    assert!(e.to_string().contains("exists and is not empty"), "{e}");
    assert_eq!(listing(&target), before);
    assert_eq!(
        std::fs::read(target.join("sg00/PE.bin")).unwrap(),
        members["sg00/PE.bin"]
    );
    // An empty directory is replaced.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    extract::extract_all(&neff, &empty).unwrap();
    assert!(empty.join("info.json").is_file());
}

#[test]
fn extract_all_writes_all_or_nothing() {
    // Each archive passes the archive check and fails while it is written: a member `a` and
    // then `a/b` (a file where a directory is needed), the other way round, a directory member
    // named like a file written before it.
    let conflicting = [
        raw_tar(&[
            file_entry("first.json", b"{}"),
            file_entry("a", b"file"),
            file_entry("a/b", b"below a file"),
        ]),
        raw_tar(&[
            file_entry("first.json", b"{}"),
            file_entry("d/x", b"x"),
            file_entry("d", b"a file where a directory is"),
        ]),
        raw_tar(&[
            file_entry("first.json", b"{}"),
            file_entry("f", b"x"),
            (raw_header(b"f/", b'5', 0, b""), Vec::new()),
        ]),
    ];
    for (i, tar) in conflicting.into_iter().enumerate() {
        let neff = Neff::from_bytes(tar).unwrap();
        assert!(neff.members().is_ok(), "case {i}: the archive check passes");
        let parent = tempfile::tempdir().unwrap();
        // Target missing: neither it nor a temporary directory is left.
        let e = extract::extract_all(&neff, &parent.path().join("t")).unwrap_err();
        assert!(matches!(e, NeffError::Unsafe(_)), "case {i}: {e}");
        assert!(listing(parent.path()).is_empty(), "case {i}");
        // Target an empty directory: it stays, empty.
        let t = parent.path().join("t2");
        std::fs::create_dir(&t).unwrap();
        assert!(extract::extract_all(&neff, &t).is_err(), "case {i}");
        assert!(listing(&t).is_empty(), "case {i}");
        assert_eq!(listing(parent.path()), std::slice::from_ref(&t), "case {i}");
    }
    // Through the command line: exit 1, the reason, nothing written.
    let parent = tempfile::tempdir().unwrap();
    let p = parent.path().join("hostile.neff");
    std::fs::write(
        &p,
        raw_tar(&[
            file_entry("first.json", b"{}"),
            file_entry("a", b"file"),
            file_entry("a/b", b"x"),
        ]),
    )
    .unwrap();
    let out = parent.path().join("out");
    let o = nxcc(&[
        "neff-info",
        p.to_str().unwrap(),
        "--extract-all",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("'a' in the target directory is not a directory"),
        "{}",
        stderr(&o)
    );
    assert_eq!(listing(parent.path()), [p]);
}

#[test]
fn extract_all_of_a_hostile_archive_writes_nothing() {
    let hostile = [
        raw_tar(&[file_entry("good.json", b"{}"), file_entry("../evil", b"x")]),
        raw_tar(&[
            file_entry("good.json", b"{}"),
            file_entry("/tmp/nxcc-evil-abs", b"x"),
        ]),
        raw_tar(&[
            file_entry("good.json", b"{}"),
            (raw_header(b"link", b'2', 0, b"/etc"), Vec::new()),
            file_entry("link/passwd", b"x"),
        ]),
        raw_tar(&[
            file_entry("good.json", b"{}"),
            (raw_header(b"hard", b'1', 0, b"/etc/passwd"), Vec::new()),
        ]),
    ];
    for tar in hostile {
        let parent = tempfile::tempdir().unwrap();
        let before = listing(parent.path());
        let neff = Neff::from_bytes(tar.clone()).unwrap();
        // Target missing: not even created.
        assert!(extract::extract_all(&neff, &parent.path().join("t")).is_err());
        assert_eq!(listing(parent.path()), before);
        // Target present: stays empty.
        let t = parent.path().join("t2");
        std::fs::create_dir(&t).unwrap();
        assert!(extract::extract_all(&neff, &t).is_err());
        assert!(listing(&t).is_empty());
        assert!(!Path::new("/tmp/nxcc-evil-abs").exists());
    }
}

#[test]
fn extract_all_does_not_follow_a_symlink_inside_the_target() {
    let neff = Neff::from_bytes(pack(sample_members(), &opts(true)).unwrap()).unwrap();
    let root = tempfile::tempdir().unwrap();
    let outside = root.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let target = root.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&outside, target.join("sg00")).unwrap();
    // A target holding a planted link is not empty: refused, nothing written through the link.
    let e = extract::extract_all(&neff, &target).unwrap_err();
    assert!(e.to_string().contains("exists and is not empty"), "{e}");
    assert!(
        listing(&outside).is_empty(),
        "nothing written through the link"
    );
    // A target that is itself a link to a directory is refused too.
    let link = root.path().join("link");
    std::os::unix::fs::symlink(&outside, &link).unwrap();
    let e = extract::extract_all(&neff, &link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(listing(&outside).is_empty());
    assert!(link.is_symlink());
}

// ---------------------------------------------------------------------------------------------
// Never a panic

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    fn exercise(neff: &Neff) {
        let _ = neff.members();
        let _ = neff.inspect();
        let _ = verify(neff);
        if let Ok(ins) = neff.inspect() {
            let _ = nxcc::neff::summary::summary(neff, &ins);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            if let Ok(neff) = Neff::from_bytes(bytes) {
                exercise(&neff);
            }
        }

        #[test]
        fn random_bytes_behind_a_valid_prefix_never_panic(
            tail in proptest::collection::vec(any::<u8>(), 0..4096),
            header_form in any::<bool>(),
        ) {
            // A ustar magic (or a header + gzip magic) so that detection passes and the parser
            // sees the random bytes.
            let mut bytes = Vec::new();
            if header_form {
                bytes.extend_from_slice(&pack(sample_members(), &opts(true)).unwrap()[..HEADER_SIZE]);
                bytes.extend_from_slice(&[0x1f, 0x8b]);
                bytes.extend_from_slice(&tail);
            } else {
                bytes.extend_from_slice(&tail);
                bytes.resize(bytes.len().max(300), 0);
                bytes[257..262].copy_from_slice(b"ustar");
            }
            if let Ok(neff) = Neff::from_bytes(bytes) {
                exercise(&neff);
            }
        }

        #[test]
        fn damaged_neffs_never_panic_and_never_verify(
            compress in any::<bool>(),
            cut in 0.0f64..1.0,
            flips in proptest::collection::vec((0.0f64..1.0, 1u8..=255), 0..4),
        ) {
            let good = pack(sample_members(), &opts(compress)).unwrap();
            let mut bytes = good.clone();
            for (at, x) in &flips {
                let i = ((bytes.len() as f64) * at) as usize % bytes.len();
                bytes[i] ^= x;
            }
            let keep = ((bytes.len() as f64) * cut) as usize;
            let truncated = keep < bytes.len();
            bytes.truncate(keep);
            if let Ok(neff) = Neff::from_bytes(bytes.clone()) {
                exercise(&neff);
                if truncated {
                    prop_assert!(!verify(&neff).is_ok());
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The command

fn nxcc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nxcc"))
        .args(args)
        .output()
        .expect("run nxcc")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn neff_file(dir: &Path, compress: bool) -> PathBuf {
    let w = work_dir(2);
    let bytes = pack_work_dir(w.path(), &["sg00".into(), "sg01".into()], &opts(compress)).unwrap();
    let p = dir.join(if compress { "m.neff" } else { "fast.neff" });
    nxcc::neff::write_atomically(&p, &bytes).unwrap();
    p
}

#[test]
fn cli_text_output_lists_header_members_and_subgraphs() {
    let dir = tempfile::tempdir().unwrap();
    let p = neff_file(dir.path(), true);
    let o = nxcc(&["neff-info", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    let neff = Neff::open(&p).unwrap();
    let h = neff.header().unwrap();
    assert!(
        text.contains("1024-byte header + gzip-compressed tar"),
        "{text}"
    );
    assert!(text.contains(&h.ir_signature), "{text}");
    assert!(text.contains(&header::format_uuid(&h.uuid)), "{text}");
    assert!(text.contains("model.neff"), "{text}");
    for m in neff.members().unwrap() {
        let line = text
            .lines()
            .find(|l| l.trim_end().ends_with(&format!("  {}", m.name)))
            .unwrap_or_else(|| panic!("{} not listed:\n{text}", m.name));
        assert!(line.contains(&m.size.to_string()), "{line}");
    }
    assert!(text.contains("sg_coreV10  op __kelf  sg sg00"), "{text}");
    assert!(text.contains("sg_coreV11  op __kelf  sg sg01"), "{text}");
    assert!(
        text.contains("def.json: schema_version 0.6, index 1"),
        "{text}"
    );
    assert!(
        text.contains("tensor_map.json: 1 input(s) (in0); no aliases"),
        "{text}"
    );
}

#[test]
fn cli_json_output_is_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let p = neff_file(dir.path(), false);
    let o = nxcc(&["neff-info", "--json", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    let neff = Neff::open(&p).unwrap();
    assert_eq!(v["layout"], json!({"header": true, "compressed": false}));
    assert_eq!(
        v["header"]["archive_length"],
        neff.header().unwrap().archive_length
    );
    assert_eq!(v["header"]["engines"]["PE"], true);
    let names: Vec<&str> = v["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = neff
        .members()
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, expected);
    assert_eq!(v["subgraphs"][1]["sg"], "sg01");
    assert_eq!(v["subgraphs"][1]["fields"]["future_field"]["x"], 1);
    assert_eq!(
        v["subgraphs"][0]["tensor_map"]["input_names"],
        json!(["in0"])
    );
    assert_eq!(v["info"]["producer"], format!("nxcc {}", nxcc::VERSION));
}

#[test]
fn cli_extract_gives_the_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = neff_file(dir.path(), true);
    let neff = Neff::open(&p).unwrap();
    for name in ["sg01/Pool.bin", "neff.json", "./sg00/def.json"] {
        let o = nxcc(&["neff-info", p.to_str().unwrap(), "--extract", name]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(o.stdout, neff.read_member(name).unwrap(), "{name}");
    }
    let o = nxcc(&["neff-info", p.to_str().unwrap(), "--extract", "nope.bin"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no member named 'nope.bin'"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn cli_extract_all_unpacks_and_refuses_hostile_archives() {
    let dir = tempfile::tempdir().unwrap();
    let p = neff_file(dir.path(), true);
    let out = dir.path().join("unpacked");
    let o = nxcc(&[
        "neff-info",
        p.to_str().unwrap(),
        "--extract-all",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let neff = Neff::open(&p).unwrap();
    for m in neff.members().unwrap() {
        assert_eq!(
            std::fs::read(out.join(&m.name)).unwrap(),
            neff.read_member(&m.name).unwrap()
        );
    }

    let parent = tempfile::tempdir().unwrap();
    let evil = parent.path().join("evil.neff");
    std::fs::write(
        &evil,
        gzip(&raw_tar(&[
            file_entry("ok.json", b"{}"),
            file_entry("../escaped", b"x"),
        ])),
    )
    .unwrap();
    let before = listing(parent.path());
    let target = parent.path().join("t");
    let o = nxcc(&[
        "neff-info",
        evil.to_str().unwrap(),
        "--extract-all",
        target.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("'..'"), "{}", stderr(&o));
    assert_eq!(listing(parent.path()), before);

    // A directory that cannot take the members is the directory's fault, not the NEFF's.
    let o = nxcc(&[
        "neff-info",
        p.to_str().unwrap(),
        "--extract-all",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "nxcc neff-info: error: cannot extract into {}: it exists and is not empty; extract into a new or empty directory\n",
            out.display()
        )
    );
}

#[test]
fn cli_verify_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    for compress in [true, false] {
        let p = neff_file(dir.path(), compress);
        let o = nxcc(&["neff-info", "--verify", p.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
        assert_eq!(stdout(&o), "OK\n");
    }
    // Damage: flip a byte in a member of the uncompressed one.
    let p = dir.path().join("fast.neff");
    let mut bytes = std::fs::read(&p).unwrap();
    let at = HEADER_SIZE + data_offset(&bytes[HEADER_SIZE..], "sg00/def.json");
    bytes[at] ^= 0x20;
    let bad = dir.path().join("bad.neff");
    std::fs::write(&bad, &bytes).unwrap();
    let o = nxcc(&["neff-info", "--verify", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("IR signature"), "{}", stdout(&o));
    assert!(stdout(&o).contains("INVALID"), "{}", stdout(&o));
    // --json --verify: one object.
    let o = nxcc(&["neff-info", "--verify", "--json", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["ok"], false);
    assert!(!v["problems"].as_array().unwrap().is_empty());
    // A corrupt compressed archive fails verification (not a crash).
    let p = dir.path().join("m.neff");
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 6] ^= 0xff; // inside the gzip trailer's CRC/size
    std::fs::write(&bad, &bytes).unwrap();
    let o = nxcc(&["neff-info", "--verify", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).contains("archive:"), "{}", stdout(&o));
}

#[test]
fn cli_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"this is not a neff at all").unwrap();
    let o = nxcc(&["neff-info", junk.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a NEFF file: "), "{}", stderr(&o));
    assert!(o.stdout.is_empty());

    let o = nxcc(&[
        "neff-info",
        dir.path().join("missing.neff").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("missing.neff"), "{}", stderr(&o));

    let o = nxcc(&["neff-info", junk.to_str().unwrap(), "--frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: unexpected argument '--frobnicate' found"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("Usage: nxcc neff-info"),
        "{}",
        stderr(&o)
    );

    let o = nxcc(&["neff-info"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the following required arguments were not provided:\n  <FILE>"),
        "{}",
        stderr(&o)
    );

    let o = nxcc(&["neff-info", "x", "--extract", "a", "--extract-all", "d"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(
            "the argument '--extract <MEMBER>' cannot be used with '--extract-all <DIR>'"
        ),
        "{}",
        stderr(&o)
    );

    let o = nxcc(&["neff-info", "x", "--extract"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("a value is required for '--extract <MEMBER>' but none was supplied"),
        "{}",
        stderr(&o)
    );

    let o = nxcc(&["neff-info", "--help"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("--extract-all <DIR>"), "{}", stdout(&o));
    assert!(stdout(&o).contains("--extract <MEMBER>"), "{}", stdout(&o));
}

#[test]
fn cli_accepts_driver_options_before_the_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let p = neff_file(dir.path(), true);
    let o = nxcc(&[
        "--verbose",
        "info",
        "neff-info",
        "--verify",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), "OK\n");
}

#[test]
fn header_decodes_what_pack_wrote() {
    let bytes = pack(sample_members(), &opts(true)).unwrap();
    let h = Header::decode(&bytes).unwrap();
    let again = h.encode().unwrap();
    assert_eq!(&again[..], &bytes[..HEADER_SIZE]);
}

#[test]
fn foreign_archives_with_directories_and_extensions_read() {
    // As `tar -C dir .` and other writers lay archives out: the root `./`, directory entries,
    // `./` prefixes, a PAX global header, PAX time records, a GNU long name.
    let long = format!("sg00/{}.bin", "L".repeat(130));
    let tar = raw_tar(&[
        (raw_header(b"./", b'5', 0, b""), Vec::new()),
        (raw_header(b"pax_global_header", b'g', 0, b""), Vec::new()),
        (raw_header(b"./sg00/", b'5', 0, b""), Vec::new()),
        pax_entry(&[("mtime", "1700000000.5"), ("atime", "1700000001")]),
        file_entry("./sg00/def.json", b"{\"schema_version\": \"0.6\"}"),
        (
            raw_header(b"././@LongLink", b'L', long.len() as u64 + 1, b""),
            format!("{long}\0").into_bytes(),
        ),
        file_entry("truncated-name", b"long one"),
    ]);
    for bytes in [tar.clone(), gzip(&tar)] {
        let neff = Neff::from_bytes(bytes).unwrap();
        let members = neff.members().unwrap();
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["sg00/def.json", long.as_str()]);
        assert_eq!(neff.read_member(&long).unwrap(), b"long one");
        let dir = tempfile::tempdir().unwrap();
        extract::extract_all(&neff, dir.path()).unwrap();
        assert_eq!(std::fs::read(dir.path().join(&long)).unwrap(), b"long one");
        let ins = neff.inspect().unwrap();
        assert_eq!(ins.directories, ["sg00"]);
        // The summary lists the subgraph directory even without a neff.json.
        let s = nxcc::neff::summary::summary(&neff, &ins);
        assert_eq!(s["subgraphs"][0]["sg"], "sg00");
        assert_eq!(s["subgraphs"][0]["def"]["schema_version"], "0.6");
        // Not an nxcc NEFF: verification says what is missing.
        let v = verify(&neff);
        assert!(
            v.problems.iter().any(|p| p == "info.json is missing"),
            "{:?}",
            v.problems
        );
        assert!(
            v.problems.iter().any(|p| p == "neff.json is missing"),
            "{:?}",
            v.problems
        );
    }
}
