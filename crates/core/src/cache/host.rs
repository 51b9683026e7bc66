//! Who this process runs on, as the cache names the files each host keeps apart in a shared
//! directory (the remembered digests, the counters): a short digest of the host's name and its
//! boot id. Processes of one host and boot share those files (and lock them with `flock`,
//! which holds among them); another host, or this host after a reboot, has files of its own.

use std::sync::OnceLock;

/// This host's name (`uname -n`).
pub fn name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), if it can be read.
pub(crate) fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    Some(id.trim().to_string()).filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
}

/// 16 hex digits: blake3 of the host name alone (the part of [`key`] that stays across boots).
pub(crate) fn name_key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| short(&[name().as_bytes()]))
}

/// `<name key>-<boot key>`: 33 characters naming this host and boot in file names.
pub fn key() -> &'static str {
    static KEY: OnceLock<String> = OnceLock::new();
    KEY.get_or_init(|| {
        let boot = boot_id().unwrap_or_default();
        format!("{}-{}", name_key(), short(&[boot.as_bytes()]))
    })
}

fn short(parts: &[&[u8]]) -> String {
    let mut h = blake3::Hasher::new();
    for p in parts {
        h.update(p);
        h.update(&[0]);
    }
    h.finalize().to_hex()[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_names_host_and_boot() {
        let k = key();
        assert_eq!(k.len(), 33);
        assert!(k.starts_with(name_key()));
        assert!(k.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-'));
        assert!(boot_id().is_some(), "Linux has a boot id");
    }
}
