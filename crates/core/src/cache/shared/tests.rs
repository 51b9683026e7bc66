//! The shared tier's protocol against an object store in memory ([`crate::objstore::memory`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{PutMode, Storage};
use crate::cache::meta::NEFF_FILE;
use crate::cache::shared::{lock, maintain, objects};
use crate::cache::store::tests::put;
use crate::cache::store::{Cache, Lookup};
use crate::objstore::memory::Memory;

fn key(c: char) -> String {
    c.to_string().repeat(64)
}

#[test]
fn an_entry_published_from_one_cache_is_fetched_verified_into_another() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        Cache::new(dir.path().join("a")),
        Cache::new(dir.path().join("b")),
    );
    let store = Memory::default();
    let k = key('a');
    put(&a, &k, b"the neff");
    let ours = || Ok(());
    assert!(matches!(
        objects::publish(&store, &a, &k, &ours).unwrap(),
        objects::Published::Done { .. }
    ));
    // A second publication of the key is beaten, and leaves nothing of its own.
    let before = store.names();
    assert_eq!(
        objects::publish(&store, &a, &k, &ours).unwrap(),
        objects::Published::Beaten
    );
    assert_eq!(store.names(), before);
    let entry = objects::fetch(&store, &b, &k, None, true).unwrap().unwrap();
    assert_eq!(std::fs::read(entry.join(NEFF_FILE)).unwrap(), b"the neff");
    assert!(matches!(b.lookup(&k), Lookup::Hit(_)));
    assert!(objects::check(&store, &k).is_ok());

    // A NEFF changed in the store is refused, and nothing is kept.
    let other = key('b');
    put(&a, &other, b"good neff");
    objects::publish(&store, &a, &other, &ours).unwrap();
    let neff = store
        .names()
        .into_iter()
        .find(|n| n.contains(&other) && n.ends_with(NEFF_FILE))
        .unwrap();
    store.tamper(&neff, b"evil neff");
    let e = objects::fetch(&store, &b, &other, None, true).unwrap_err();
    assert!(matches!(e, objects::FetchError::Corrupt(_)), "{e}");
    assert_eq!(b.lookup(&other), Lookup::Absent);
    // Larger than recorded: refused before it is read whole, a bad entry all the same.
    store.tamper(&neff, &[b'x'; 4096]);
    let e = objects::fetch(&store, &b, &other, None, true).unwrap_err();
    assert!(matches!(e, objects::FetchError::Corrupt(_)), "{e}");
    let r = maintain::verify(&store).unwrap();
    assert_eq!((r.checked, r.ok, r.corrupt.len()), (2, 1, 1));
    assert!(objects::fetch(&store, &b, &other, None, true)
        .unwrap()
        .is_none());
}

#[test]
fn a_publication_whose_lock_was_lost_is_abandoned() {
    let dir = tempfile::tempdir().unwrap();
    let a = Cache::new(dir.path().join("a"));
    let store = Memory::default();
    let k = key('c');
    put(&a, &k, b"neff");
    let lost = || Err("taken over".to_string());
    assert!(objects::publish(&store, &a, &k, &lost).is_err());
    assert!(store.names().is_empty(), "{:?}", store.names());
}

#[test]
fn lock_objects_exclude_take_over_the_expired_and_notice_a_loss() {
    let mem = Arc::new(Memory::default());
    let store: Arc<dyn Storage> = mem.clone();
    let k = key('d');
    let name = lock::lock_name(&k);
    let held = lock::acquire(&store, &k, None, &mut |_| {})
        .unwrap()
        .unwrap();
    assert!(held.verify().is_ok());
    drop(held);
    assert!(
        store.head(&name).unwrap().is_none(),
        "released locks are removed"
    );

    // Another host's lock, its lease running: waited for (here until cancelled).
    let other = "nxcc pid=1 started=1 host=elsewhere lease=1000\n";
    store
        .put(&name, other.as_bytes().to_vec(), PutMode::Create)
        .unwrap();
    let cancel = crate::run::process::Cancel::new();
    let c2 = cancel.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        c2.cancel();
    });
    let mut told = Vec::new();
    let waited = lock::acquire(&store, &k, Some(&cancel), &mut |w| told.push(w.to_string()));
    t.join().unwrap();
    assert!(waited.unwrap().is_none());
    assert!(told[0].contains("host elsewhere"), "{told:?}");

    // Its lease over: taken over, and said so.
    mem.age(&name, 1_000);
    let took = lock::acquire(&store, &k, None, &mut |_| {})
        .unwrap()
        .unwrap();
    assert!(matches!(
        took.replaced,
        Some(crate::lockfile::Holder::Expired { .. })
    ));
    // Rewritten behind the holder's back: no longer its own, and not removed by it.
    store.put(&name, b"x".to_vec(), PutMode::Overwrite).unwrap();
    assert!(took.verify().is_err());
    drop(took);
    assert!(store.head(&name).unwrap().is_some());
}

#[test]
fn gc_evicts_least_recently_used_first_and_publication_keeps_the_size() {
    let dir = tempfile::tempdir().unwrap();
    let a = Cache::new(dir.path().join("a"));
    let store = Memory::default();
    let ours = || Ok(());
    let keys: Vec<String> = ['e', 'f', 'g'].into_iter().map(key).collect();
    let mut sizes = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        put(&a, k, &vec![b'n'; 1000]);
        store
            .now_ms
            .store(1_000_000 + i as u64 * 1000, Ordering::SeqCst);
        match objects::publish(&store, &a, k, &ours).unwrap() {
            objects::Published::Done { bytes } => sizes.push(bytes),
            other => panic!("{other:?}"),
        }
    }
    // The first entry used last: the second is the least recently used.
    store.age(&format!("{}/done", objects::key_dir(&keys[0])), 9_000_000);
    let total: u64 = sizes.iter().sum();
    let r = maintain::gc(&store, total - 1, 10_000_000).unwrap();
    assert_eq!((r.evicted, r.entries_left), (1, 2));
    assert!(objects::published_id(&store, &keys[1]).unwrap().is_none());
    assert!(objects::published_id(&store, &keys[0]).unwrap().is_some());
    assert_eq!(maintain::stats(&store).unwrap().bytes, r.bytes_left);

    // With a max_size, a publication that passes it evicts; one that does not lists nothing.
    let conf = crate::cache::settings::File {
        max_size: Some(r.bytes_left + sizes[0] / 2),
        ..Default::default()
    };
    maintain::write_config(&store, &conf).unwrap();
    assert!(maintain::after_publish(&store, 10, 10_000_000)
        .unwrap()
        .is_none());
    let again = match objects::publish(&store, &a, &keys[1], &ours).unwrap() {
        objects::Published::Done { bytes } => bytes,
        other => panic!("{other:?}"),
    };
    let r = maintain::after_publish(&store, again, 10_000_000)
        .unwrap()
        .unwrap();
    assert_eq!(r.evicted, 1);
    assert!(maintain::stats(&store).unwrap().bytes <= conf.max_size.unwrap());
}
