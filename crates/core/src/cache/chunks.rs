//! Reading a file in large chunks with the reads overlapped with the caller's work: for a large
//! file a helper thread reads the next chunks (into a few recycled 1 MiB buffers) while the
//! calling thread hashes or writes the current one, so hashing a 100 MB model costs about
//! max(read, hash) rather than their sum. Small files are read in the calling thread.

use std::fs::File;
use std::io::Read;
use std::sync::mpsc::sync_channel;

/// The chunk size.
pub const CHUNK: usize = 1 << 20;
/// Files at least this large are read on a helper thread.
pub const OVERLAP_FROM: u64 = 4 << 20;
/// Buffers in flight between the reader and the caller.
const BUFFERS: usize = 4;

fn read_some(mut file: &File, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        match file.read(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Call `f` with every chunk of `file`, in order, from its current position to its end; returns
/// the number of bytes read. An error of `f` stops the reading and is returned.
pub(crate) fn for_each_chunk(
    file: &File,
    f: &mut dyn FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<u64> {
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut total = 0u64;
    if len < OVERLAP_FROM {
        let mut buf = vec![0u8; CHUNK.min(len as usize + 1).max(64 << 10)];
        loop {
            let n = read_some(file, &mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            f(&buf[..n])?;
            total += n as u64;
        }
    }
    std::thread::scope(|s| {
        let (full_tx, full_rx) = sync_channel::<std::io::Result<Vec<u8>>>(BUFFERS);
        let (empty_tx, empty_rx) = sync_channel::<Vec<u8>>(BUFFERS);
        for _ in 0..BUFFERS {
            let _ = empty_tx.send(vec![0u8; CHUNK]);
        }
        s.spawn(move || {
            while let Ok(mut b) = empty_rx.recv() {
                b.resize(CHUNK, 0);
                match read_some(file, &mut b) {
                    Ok(n) => {
                        b.truncate(n);
                        if full_tx.send(Ok(b)).is_err() || n == 0 {
                            return;
                        }
                    }
                    Err(e) => {
                        let _ = full_tx.send(Err(e));
                        return;
                    }
                }
            }
        });
        loop {
            let b = match full_rx.recv() {
                Ok(r) => r?,
                Err(_) => return Err(std::io::Error::other("the reading thread stopped")),
            };
            if b.is_empty() {
                return Ok(total);
            }
            f(&b)?;
            total += b.len() as u64;
            let _ = empty_tx.send(b);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(data: &[u8]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, data).unwrap();
        let f = File::open(&p).unwrap();
        let mut out = Vec::new();
        let n = for_each_chunk(&f, &mut |c| {
            out.extend_from_slice(c);
            Ok(())
        })
        .unwrap();
        assert_eq!(n, data.len() as u64);
        out
    }

    #[test]
    fn every_byte_arrives_in_order() {
        for len in [0, 1, 65_537, OVERLAP_FROM as usize - 1, 5 * CHUNK + 3] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            assert_eq!(collect(&data), data, "{len}");
        }
    }

    #[test]
    fn an_error_of_the_caller_stops_the_reading() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 8 * CHUNK]).unwrap();
        let f = File::open(&p).unwrap();
        let mut calls = 0;
        let e = for_each_chunk(&f, &mut |_| {
            calls += 1;
            if calls == 2 {
                Err(std::io::Error::other("enough"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "enough");
        assert_eq!(calls, 2);
    }
}
