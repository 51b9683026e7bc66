//! An object store in memory, with S3's conditional writes and entity tags, and a clock the
//! tests move: what is kept in a bucket tested without a server (the real one is tested against
//! one in `tests/s3/`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::*;

/// An object: its bytes, entity tag and last write.
type Stored = (Vec<u8>, String, u64);

/// The store.
#[derive(Default)]
pub struct Memory {
    objects: Mutex<BTreeMap<String, Stored>>,
    version: AtomicU64,
    /// The server's clock, ms (0: the real one).
    pub now_ms: AtomicU64,
}

/// The real clock, ms since the epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Memory {
    fn now(&self) -> u64 {
        match self.now_ms.load(Ordering::SeqCst) {
            0 => now_ms(),
            t => t,
        }
    }

    fn info(name: &str, o: &Stored) -> Info {
        Info {
            name: name.to_string(),
            size: o.0.len() as u64,
            etag: Some(o.1.clone()),
            modified_ms: o.2,
        }
    }

    /// Replace an object's bytes behind the tier's back.
    pub(crate) fn tamper(&self, name: &str, bytes: &[u8]) {
        let mut m = self.objects.lock().unwrap();
        m.get_mut(name).unwrap().0 = bytes.to_vec();
    }

    /// Set an object's last write.
    pub fn age(&self, name: &str, modified_ms: u64) {
        self.objects.lock().unwrap().get_mut(name).unwrap().2 = modified_ms;
    }

    pub fn names(&self) -> Vec<String> {
        self.objects.lock().unwrap().keys().cloned().collect()
    }
}

impl Storage for Memory {
    fn url(&self) -> &str {
        "s3://memory/test"
    }

    fn get(&self, name: &str, limit: u64) -> Result<Option<Object>, StorageError> {
        let m = self.objects.lock().unwrap();
        let Some(o) = m.get(name) else {
            return Ok(None);
        };
        if o.0.len() as u64 > limit {
            return Err(StorageError::TooLarge(name.into()));
        }
        Ok(Some(Object {
            bytes: o.0.clone(),
            info: Memory::info(name, o),
        }))
    }

    fn get_into(
        &self,
        name: &str,
        limit: u64,
        out: &mut dyn Write,
    ) -> Result<Option<u64>, StorageError> {
        let Some(o) = self.get(name, limit)? else {
            return Ok(None);
        };
        out.write_all(&o.bytes)
            .map_err(|e| StorageError::Other(e.to_string()))?;
        Ok(Some(o.info.size))
    }

    fn put(&self, name: &str, bytes: Vec<u8>, mode: PutMode) -> Result<Put, StorageError> {
        let mut m = self.objects.lock().unwrap();
        let refused = match (&mode, m.get(name)) {
            (PutMode::Create, Some(_)) => true,
            (PutMode::Replace(_), None) => true,
            (PutMode::Replace(tag), Some(o)) => &o.1 != tag,
            _ => false,
        };
        if refused {
            return Ok(Put::Refused);
        }
        let tag = format!("v{}", self.version.fetch_add(1, Ordering::SeqCst));
        m.insert(name.to_string(), (bytes, tag.clone(), self.now()));
        Ok(Put::Done(Some(tag)))
    }

    fn put_file(&self, name: &str, mut file: File, mode: PutMode) -> Result<Put, StorageError> {
        let mut b = Vec::new();
        file.read_to_end(&mut b)
            .map_err(|e| StorageError::Other(e.to_string()))?;
        self.put(name, b, mode)
    }

    fn head(&self, name: &str) -> Result<Option<Info>, StorageError> {
        Ok(self
            .objects
            .lock()
            .unwrap()
            .get(name)
            .map(|o| Memory::info(name, o)))
    }

    fn delete(&self, name: &str) -> Result<(), StorageError> {
        self.objects.lock().unwrap().remove(name);
        Ok(())
    }

    fn list(&self, prefix: &str, max: usize) -> Result<Vec<Info>, StorageError> {
        let folder = format!("{}/", prefix.trim_end_matches('/'));
        let found: Vec<Info> = self
            .objects
            .lock()
            .unwrap()
            .iter()
            .filter(|(k, _)| k.starts_with(&folder))
            .map(|(k, o)| Memory::info(k, o))
            .collect();
        if found.len() > max {
            return Err(StorageError::TooLarge(format!(
                "{folder}: over {max} objects"
            )));
        }
        Ok(found)
    }

    fn list_dir(&self, dir: &str, max: usize) -> Result<Level, StorageError> {
        let folder = match dir.trim_end_matches('/') {
            "" => String::new(),
            d => format!("{d}/"),
        };
        let mut level = Level::default();
        for (k, o) in self.objects.lock().unwrap().iter() {
            let Some(rest) = k.strip_prefix(&folder) else {
                continue;
            };
            match rest.split_once('/') {
                Some((f, _)) if level.folders.last().map(String::as_str) != Some(f) => {
                    level.folders.push(f.to_string())
                }
                Some(_) => {}
                None => level.objects.push(Memory::info(k, o)),
            }
        }
        if level.folders.len() + level.objects.len() > max {
            return Err(StorageError::TooLarge(format!(
                "{folder}: over {max} names"
            )));
        }
        Ok(level)
    }
}
