//! Unique names for temporary files and directories: `<prefix><pid>-<sequence>-<nanoseconds>`.
//! The pid separates processes, the sequence the names one process makes (threads included), the
//! time a process from an earlier one that had the same pid; so no two writers alive at the same
//! time share a name, and a name left by a dead writer is not reused by chance.

use std::sync::atomic::{AtomicU64, Ordering};

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A name no other call, in this process or another, returns while this one lives:
/// `<prefix><pid>-<sequence>-<nanoseconds>`.
pub fn name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}{}-{}-{nanos}",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_differ_across_threads() {
        let names: Vec<String> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..1000).map(|_| super::name(".t-")).collect::<Vec<_>>()))
                .collect();
            hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
        });
        let set: std::collections::HashSet<&String> = names.iter().collect();
        assert_eq!(set.len(), names.len());
        assert!(names[0].starts_with(&format!(".t-{}-", std::process::id())));
    }
}
