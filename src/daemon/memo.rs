//! What the daemon keeps between requests because it does not change: the probes' reading of a
//! model's graph (the plan's summary and the memory estimate), by the model file's stat identity
//! ([`crate::cache::digests::StatId`]: device, inode, size, modification and change times).
//! A model rewritten, replaced or touched is read again; a model changed within
//! [`crate::cache::digests::RACY_MARGIN_NS`] of its reading is not kept (git's racy rule, as for
//! the digests).
//!
//! The rest of what does not change is kept where it is computed, in this process's memory and
//! by the same identities: the digests of the tools and of the model, from which the toolchain's
//! identity and the key are made ([`crate::cache::digests`]), the answer of the `python3` probe
//! for an installed toolchain package (`crate::cache::identity::installed_package`: asked once,
//! not per request, while the interpreter and the package are unchanged), and the cache's
//! configuration file ([`crate::cache::settings::File::read_in`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::cache::digests::{now_ns, StatId};
use crate::hlo::Module;
use crate::plan::{ModelFacts, Probe, RequestProbe};
use crate::toolchain::{Request, Toolchain};

/// The bytes of models whose graphs are kept at most (a full memo is cleared).
const GRAPH_BYTES_LIMIT: u64 = 256 << 20;

/// A graph as read, with the identity of the file it was read from.
type Graph = (StatId, Result<Module, String>);

/// What the daemon keeps between requests.
#[derive(Debug, Default)]
pub struct Memo {
    graphs: Mutex<Graphs>,
}

#[derive(Debug, Default)]
struct Graphs {
    by_path: HashMap<PathBuf, Graph>,
    bytes: u64,
}

impl Memo {
    fn graph(&self, path: &Path, id: &StatId) -> Option<Result<Module, String>> {
        let graphs = self.graphs.lock().ok()?;
        let (known, graph) = graphs.by_path.get(path)?;
        (known == id).then(|| graph.clone())
    }

    fn keep_graph(&self, path: &Path, id: StatId, graph: &Result<Module, String>) {
        let Ok(mut graphs) = self.graphs.lock() else {
            return;
        };
        if graphs.bytes + id.size > GRAPH_BYTES_LIMIT {
            *graphs = Graphs::default();
        }
        graphs.bytes += id.size;
        graphs
            .by_path
            .insert(path.to_path_buf(), (id, graph.clone()));
    }
}

/// The stat identity of the regular file at `path` (links followed), if it is one.
fn identity(path: &Path) -> Option<StatId> {
    let st = rustix::fs::stat(path).ok()?;
    let regular =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
    regular.then(|| StatId::of(&st))
}

/// A request's probe whose readings of a model's graph are kept in a [`Memo`].
pub struct MemoProbe<'a> {
    /// The request's own probe.
    pub probe: RequestProbe<'a>,
    /// The daemon's memo.
    pub memo: &'a Memo,
}

impl Probe for MemoProbe<'_> {
    fn launch_dir(&self) -> &Path {
        self.probe.launch_dir()
    }
    fn env(&self, name: &str) -> Option<String> {
        self.probe.env(name)
    }
    fn model(&self, path: &Path) -> Option<ModelFacts> {
        self.probe.model(path)
    }
    fn model_graph(&self, path: &Path) -> Option<Result<Module, String>> {
        let start = now_ns();
        let Some(before) = identity(path) else {
            return self.probe.model_graph(path);
        };
        if let Some(graph) = self.memo.graph(path, &before) {
            return Some(graph);
        }
        let graph = self.probe.model_graph(path)?;
        // Kept only when the file read is the file stat'ed, and has settled.
        if identity(path) == Some(before) && before.settled_before(start) {
            self.memo.keep_graph(path, before, &graph);
        }
        Some(graph)
    }
    fn toolchain(&self, request: &Request) -> Option<Toolchain> {
        self.probe.toolchain(request)
    }
    fn cpu_count(&self) -> usize {
        self.probe.cpu_count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::SystemProbe;

    fn model(name: &str) -> Vec<u8> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models");
        std::fs::read(dir.join(name)).unwrap()
    }

    /// Wait until the file at `path` has settled (its times older than the racy margin).
    fn settle(path: &Path) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !identity(path).unwrap().settled_before(now_ns()) {
            assert!(std::time::Instant::now() < deadline, "never settled");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    #[test]
    fn a_settled_graph_is_kept_and_a_changed_file_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pb");
        std::fs::write(&path, model("mlp.hlo_module.pb")).unwrap();
        let memo = Memo::default();
        let probe = MemoProbe {
            probe: RequestProbe {
                system: SystemProbe::at(dir.path()),
                env: &[],
            },
            memo: &memo,
        };
        // Too fresh to be kept.
        let first = probe.model_graph(&path).unwrap().unwrap();
        assert!(memo.graph(&path, &identity(&path).unwrap()).is_none());
        settle(&path);
        assert_eq!(probe.model_graph(&path).unwrap().unwrap(), first);
        assert_eq!(
            memo.graph(&path, &identity(&path).unwrap()),
            Some(Ok(first.clone()))
        );
        // Rewritten in place: another graph, read again.
        std::fs::write(&path, model("attention.hlo_module.pb")).unwrap();
        let second = probe.model_graph(&path).unwrap().unwrap();
        assert_ne!(second, first);
        assert_eq!(
            second,
            SystemProbe::at(dir.path())
                .model_graph(&path)
                .unwrap()
                .unwrap()
        );
    }
}
