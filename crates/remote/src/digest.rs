//! Content digests as the Remote Execution API spells them: SHA-256 in lower-case hex and the
//! size in bytes ([`re::Digest`]), of bytes, of a protobuf message, of a file read streaming.

use std::io::Read;
use std::path::Path;

use prost::Message;
use sha2::{Digest as _, Sha256};

use super::re;

/// The buffer files are hashed and uploaded in.
pub const CHUNK: usize = 1 << 20;

/// The digest of `bytes`.
pub fn of_bytes(bytes: &[u8]) -> re::Digest {
    re::Digest {
        hash: hex(&Sha256::digest(bytes)),
        size_bytes: bytes.len() as i64,
    }
}

/// A message's canonical bytes (prost writes fields in number order) and their digest.
pub fn of_message<M: Message>(m: &M) -> (Vec<u8>, re::Digest) {
    let bytes = m.encode_to_vec();
    let d = of_bytes(&bytes);
    (bytes, d)
}

/// The digest of a file, read once in [`CHUNK`]s.
pub fn of_file(path: &Path) -> std::io::Result<re::Digest> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        size += n as u64;
    }
    Ok(re::Digest {
        hash: hex(&h.finalize()),
        size_bytes: size as i64,
    })
}

/// A streaming hasher for what is downloaded.
#[derive(Default)]
pub struct Hasher {
    h: Sha256,
    size: u64,
}

impl Hasher {
    /// Add bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.h.update(bytes);
        self.size += bytes.len() as u64;
    }

    /// The digest of everything added.
    pub fn finish(self) -> re::Digest {
        re::Digest {
            hash: hex(&self.h.finalize()),
            size_bytes: self.size as i64,
        }
    }
}

/// `hash/size`, as logs and resource names spell a digest.
pub fn show(d: &re::Digest) -> String {
    format!("{}/{}", d.hash, d.size_bytes)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_sha256_hex_and_size() {
        let d = of_bytes(b"");
        assert_eq!(
            d.hash,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.size_bytes, 0);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..3 * CHUNK + 17).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        assert_eq!(of_file(&p).unwrap(), of_bytes(&data));
        let mut h = Hasher::default();
        for c in data.chunks(1000) {
            h.update(c);
        }
        assert_eq!(h.finish(), of_bytes(&data));
    }
}
