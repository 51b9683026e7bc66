//! `nxcc cache stats|verify|gc|clear|config --cache_dir s3://...`: the shared tier's
//! maintenance ([`super::maintain`]), said as the directory's is. A store that cannot be used
//! is NCC_EDRV117 and exit 70. (`explain` keys the compile against the local tier, as a compile
//! through the shared tier looks there first.)

use super::maintain;
use crate::cache::actions::{gc_said, human_bytes, print, Ended, EXIT_CORRUPT};
use crate::cache::args::{action_name, CacheAction};
use crate::cache::settings;
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::words::count;

/// Run `action` on the shared tier at `url` (`explain` and `clean` are never sent here).
pub(crate) fn run(prog: &str, action: &CacheAction, url: &str, json: bool) -> Ended {
    let store = match crate::objstore::open(url) {
        Ok(s) => s,
        Err(e) => return Ok(failed(url, &e)),
    };
    let store = store.as_ref();
    let done = match action {
        CacheAction::Stats(_) => maintain::stats(store).map(|s| {
            print(json, &s, || stats_text(&s));
            0
        }),
        CacheAction::Verify(_) => maintain::verify(store).map(|r| {
            print(json, &r, || {
                let mut t = String::new();
                for (key, why) in &r.corrupt {
                    t.push_str(&format!("corrupt: {key} ({why}); evicted\n"));
                }
                t.push_str(&format!(
                    "checked {}: {} ok, {} corrupt\n",
                    count(r.checked, "entry", "entries"),
                    r.ok,
                    r.corrupt.len()
                ));
                t
            });
            if r.corrupt.is_empty() {
                0
            } else {
                EXIT_CORRUPT
            }
        }),
        CacheAction::Gc(gc) => {
            let max = match gc.max_size.as_deref() {
                Some(s) => settings::parse_size(s).map_err(|e| format!("argument --max-size: {e}"))?,
                None => match maintain::config(store).map(|c| c.max_size.filter(|n| *n > 0)) {
                    Ok(Some(n)) => n,
                    Ok(None) => {
                        return Err("gc: give --max-size, or configure one (nxcc cache config --cache_dir s3://... max_size=20G)".into())
                    }
                    Err(e) => return Ok(failed(url, &e)),
                },
            };
            maintain::gc(store, max, crate::cache::meta::now_ms()).map(|r| {
                print(json, &r, || {
                    let tail = format!(
                        "; removed {} no compile uses",
                        count(r.leftovers_removed, "leftover", "leftovers")
                    );
                    gc_said(
                        (r.evicted, r.freed_bytes),
                        (r.entries_left, r.bytes_left),
                        &tail,
                    )
                });
                0
            })
        }
        CacheAction::Config(c) => return config(prog, store, url, json, &c.pairs),
        CacheAction::Explain(_) | CacheAction::Clean(_) => {
            return Err(format!("{}: not on a shared tier", action_name(action)))
        }
        CacheAction::Clear => maintain::clear(store).map(|n| {
            print(json, &serde_json::json!({ "evicted": n }), || {
                format!("evicted {}\n", count(n, "entry", "entries"))
            });
            0
        }),
    };
    Ok(done.unwrap_or_else(|e| failed(url, &e)))
}

fn failed(url: &str, e: &super::StorageError) -> i32 {
    eprintln!("{}", NccError::shared_cache(url, e));
    EXIT_COMPILE_FAILED
}

fn stats_text(s: &maintain::Stats) -> String {
    let mut t = format!("cache: {}\n", s.url);
    t.push_str(&format!("entries: {}\n", s.entries));
    t.push_str(&format!("size: {}\n", human_bytes(s.bytes)));
    if let Some(m) = s.max_size {
        t.push_str(&format!("max_size: {}\n", human_bytes(m)));
    }
    t.push_str(&format!("unpublished keys: {}\n", s.unpublished));
    t.push_str(&format!("locks: {}\n", s.locks));
    t
}

/// `config`: print the tier's configuration, or change the keys given.
fn config(
    prog: &str,
    store: &dyn super::Storage,
    url: &str,
    json: bool,
    pairs: &[String],
) -> Ended {
    let mut file = match maintain::config(store) {
        Ok(f) => f,
        Err(e) => return Ok(failed(url, &e)),
    };
    for w in std::mem::take(&mut file.warnings) {
        eprintln!("{prog}: warning: {url}: {w}");
    }
    for p in pairs {
        file.set_line(p)
            .map_err(|e| format!("argument KEY=VALUE: {e}"))?;
    }
    if !pairs.is_empty() {
        if let Err(e) = maintain::write_config(store, &file) {
            return Ok(failed(url, &e));
        }
    }
    print(json, &file, || {
        let body: String = file
            .text()
            .lines()
            .skip(1)
            .map(|l| format!("{l}\n"))
            .collect();
        format!("config: {url}/{}\n{body}", maintain::CONFIG)
    });
    Ok(0)
}
