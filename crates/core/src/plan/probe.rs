//! What the plan builder may know about the world, behind a trait so the builder itself does no
//! I/O: the launch directory, the environment, facts about the model path, the model's graph, and
//! where the tools are. [`SystemProbe`] answers from the real system (a stat, and a read of a model
//! file's HLO module; no process is spawned); tests answer from tables.

use std::path::{Path, PathBuf};

use crate::jobs::ModelFormat;
use crate::toolchain::{self, Request, Toolchain};

/// What the plan needs to know about the model path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ModelFacts {
    /// The path is a directory of `*.pb` files rather than one model file.
    pub is_dir: bool,
    /// The model file's format (a directory counts as binary protos).
    pub format: ModelFormat,
    /// For a directory: how many `*.pb` files it holds (the simulated frontend writes one
    /// subgraph per file).
    pub pb_files: usize,
    /// Size in bytes (a directory: the sum of its files).
    pub size: u64,
    /// What the path is when it is neither a regular file nor a directory (`a FIFO`, `a
    /// device`, `a socket`): such a model is refused, never opened for reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_regular: Option<String>,
    /// The file is there but could not be read ([`ModelFacts::format`] is then only a default).
    #[serde(default)]
    pub unreadable: bool,
}

/// The builder's view of the world.
pub trait Probe {
    /// The directory nxcc was launched in, absolute.
    fn launch_dir(&self) -> &Path;
    /// The value of environment variable `name`, if it is set.
    fn env(&self, name: &str) -> Option<String>;
    /// `None` when the path does not exist.
    fn model(&self, path: &Path) -> Option<ModelFacts>;
    /// The HLO module of a model file (`None`: not read — a directory, or a probe that reads no
    /// files; `Some(Err)`: the reader's message). For the dry run's summary and the memory
    /// estimate; the compile itself does not depend on it.
    fn model_graph(&self, _path: &Path) -> Option<Result<crate::hlo::Module, String>> {
        None
    }
    /// The toolchain for a request, without spawning anything (`Auto` gives `None` here: the
    /// `python3` probe runs only when a compile actually needs a tool).
    fn toolchain(&self, request: &Request) -> Option<Toolchain>;
    /// How many CPUs the machine offers (at least 1).
    fn cpu_count(&self) -> usize;
}

/// The largest model file whose graph [`SystemProbe`] reads (it is read whole into memory; a
/// larger model is planned, and estimated by its size, without its graph). Every compile plans,
/// a cache hit included, and reading costs about 1.3 ms and 1 MiB of memory per MiB of model:
/// past 16 MiB the summary would cost a hit more than the hit itself (`nxcc hlo-info` reads any
/// size).
pub const GRAPH_READ_LIMIT: u64 = 16 << 20;

/// The real system.
#[derive(Debug, Clone)]
pub struct SystemProbe {
    /// The directory nxcc was launched in (the current directory when made with
    /// [`SystemProbe::new`]).
    pub launch_dir: PathBuf,
}

impl SystemProbe {
    /// A probe of the current process's world, launched in its current directory.
    pub fn new() -> std::io::Result<SystemProbe> {
        Ok(SystemProbe {
            launch_dir: std::env::current_dir()?,
        })
    }

    /// A probe of the current process's world, as if launched in `dir` (`nxcc worker` plans an
    /// action in its own directory).
    pub fn at(dir: &Path) -> SystemProbe {
        SystemProbe {
            launch_dir: dir.to_path_buf(),
        }
    }
}

impl Probe for SystemProbe {
    fn launch_dir(&self) -> &Path {
        &self.launch_dir
    }

    fn env(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }

    fn model(&self, path: &Path) -> Option<ModelFacts> {
        use crate::fsx::regular::{self, Opened};
        // Opened without waiting and judged on the descriptor: a FIFO or a device never holds
        // up the plan (nor a daemon's thread).
        let opened = match regular::open_or_dir(path) {
            Ok(o) => o,
            Err(e) if regular::is_not_regular(&e) => {
                let what = e.to_string();
                return Some(ModelFacts {
                    is_dir: false,
                    format: ModelFormat::Proto,
                    pb_files: 0,
                    size: 0,
                    not_regular: what.split(',').next().map(str::to_string),
                    unreadable: false,
                });
            }
            // There, but it cannot be opened (a permission): what it holds is not known.
            Err(_) if std::fs::symlink_metadata(path).is_ok() => {
                return Some(ModelFacts {
                    is_dir: false,
                    format: ModelFormat::Proto,
                    pb_files: 0,
                    size: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                    not_regular: None,
                    unreadable: true,
                });
            }
            Err(_) => return None,
        };
        if let Opened::Dir = opened {
            let mut pb_files = 0;
            let mut size = 0;
            for e in std::fs::read_dir(path).ok()?.flatten() {
                if let Ok(m) = e.metadata() {
                    if m.is_file() {
                        size += m.len();
                        if e.path().extension().is_some_and(|x| x == "pb") {
                            pb_files += 1;
                        }
                    }
                }
            }
            return Some(ModelFacts {
                is_dir: true,
                format: ModelFormat::Proto,
                pb_files,
                size,
                not_regular: None,
                unreadable: false,
            });
        }
        let Opened::File(file, size) = opened else {
            return None;
        };
        let mut head = [0u8; 16];
        let read = {
            use std::io::Read;
            (&file).read(&mut head)
        };
        Some(ModelFacts {
            is_dir: false,
            format: ModelFormat::detect(&head[..*read.as_ref().unwrap_or(&0)]),
            pb_files: 0,
            size,
            not_regular: None,
            unreadable: read.is_err(),
        })
    }

    fn model_graph(&self, path: &Path) -> Option<Result<crate::hlo::Module, String>> {
        let too_large = || {
            format!(
                "{}: not read: larger than {} MiB (the plan reads a model's graph only up to that)",
                path.display(),
                GRAPH_READ_LIMIT >> 20
            )
        };
        let file = match crate::fsx::regular::open_or_dir(path) {
            Ok(crate::fsx::regular::Opened::File(f, size)) if size <= GRAPH_READ_LIMIT => f,
            Ok(crate::fsx::regular::Opened::File(..)) => return Some(Err(too_large())),
            Ok(crate::fsx::regular::Opened::Dir) => return None,
            Err(e) if crate::fsx::regular::is_not_regular(&e) => {
                return Some(Err(crate::hlo::io_error(&e).render(path)))
            }
            // There but not readable (a permission): say why.
            Err(e) if std::fs::symlink_metadata(path).is_ok() => {
                return Some(Err(crate::hlo::io_error(&e).render(path)))
            }
            Err(_) => return None,
        };
        // The limit counts the bytes read, not the size reported.
        Some(
            match crate::fsx::regular::read_limited(&file, GRAPH_READ_LIMIT) {
                Ok(bytes) => crate::hlo::parse(&bytes).map_err(|e| e.render(path)),
                Err(e) if crate::fsx::regular::is_too_large(&e) => Err(too_large()),
                Err(e) => Err(crate::hlo::io_error(&e).render(path)),
            },
        )
    }

    fn toolchain(&self, request: &Request) -> Option<Toolchain> {
        match request {
            Request::Auto => None,
            other => toolchain::locate(other),
        }
    }

    fn cpu_count(&self) -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    }
}

/// The system's view for a compile someone else asked for (a daemon's request, a remote
/// action): launched in its working directory, with the request's environment over this
/// process's (as its worker and tools will see it).
pub struct RequestProbe<'a> {
    /// The system, launched in the request's working directory.
    pub system: SystemProbe,
    /// The request's environment (the last value of a name wins).
    pub env: &'a [(String, String)],
}

impl Probe for RequestProbe<'_> {
    fn launch_dir(&self) -> &Path {
        self.system.launch_dir()
    }
    fn env(&self, name: &str) -> Option<String> {
        match self.env.iter().rev().find(|(k, _)| k == name) {
            Some((_, v)) => Some(v.clone()),
            None => self.system.env(name),
        }
    }
    fn model(&self, path: &Path) -> Option<ModelFacts> {
        self.system.model(path)
    }
    fn model_graph(&self, path: &Path) -> Option<Result<crate::hlo::Module, String>> {
        self.system.model_graph(path)
    }
    fn toolchain(&self, request: &Request) -> Option<Toolchain> {
        self.system.toolchain(request)
    }
    fn cpu_count(&self) -> usize {
        self.system.cpu_count()
    }
}

/// A probe answering from fixed facts, with no I/O at all: every model path exists (as a
/// protobuf file of `model_size` bytes) unless listed in `missing`; paths ending in `.hlo` are
/// HLO text. For tests, benchmarks and plan previews.
#[derive(Debug, Clone)]
pub struct StaticProbe {
    /// The launch directory it reports.
    pub launch_dir: PathBuf,
    /// The whole environment it reports: (name, value), the first of a name wins.
    pub env: Vec<(String, String)>,
    /// Model paths it says do not exist.
    pub missing: Vec<PathBuf>,
    /// The size in bytes it gives every existing model file (1 MiB from [`StaticProbe::new`]).
    pub model_size: u64,
    /// The toolchain it gives every request but `Auto` (which finds none).
    pub toolchain: Option<Toolchain>,
    /// The CPU count it reports.
    pub cpus: usize,
}

impl StaticProbe {
    /// A probe launched in `launch_dir`: empty environment, every model 1 MiB, no toolchain, 2
    /// CPUs.
    pub fn new(launch_dir: impl Into<PathBuf>) -> StaticProbe {
        StaticProbe {
            launch_dir: launch_dir.into(),
            env: Vec::new(),
            missing: Vec::new(),
            model_size: 1 << 20,
            toolchain: None,
            cpus: 2,
        }
    }
}

impl Probe for StaticProbe {
    fn launch_dir(&self) -> &Path {
        &self.launch_dir
    }
    fn env(&self, name: &str) -> Option<String> {
        self.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
    fn model(&self, path: &Path) -> Option<ModelFacts> {
        if self.missing.iter().any(|m| m == path) {
            return None;
        }
        let format = if path.extension().is_some_and(|e| e == "hlo") {
            ModelFormat::Text
        } else {
            ModelFormat::Proto
        };
        Some(ModelFacts {
            is_dir: false,
            format,
            pb_files: 0,
            size: self.model_size,
            not_regular: None,
            unreadable: false,
        })
    }
    fn toolchain(&self, request: &Request) -> Option<Toolchain> {
        match request {
            Request::Auto => None,
            _ => self.toolchain.clone(),
        }
    }
    fn cpu_count(&self) -> usize {
        self.cpus
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_probe_reads_a_graph_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let probe = SystemProbe {
            launch_dir: dir.path().into(),
        };
        let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models/mlp.hlo");
        let m = probe.model_graph(&model).unwrap().unwrap();
        assert_eq!(m.parameters.len(), 3);
        // A directory is not read; a file past the limit (sparse: no disk used) is not either.
        assert!(probe.model_graph(dir.path()).is_none());
        let huge = dir.path().join("huge.pb");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(GRAPH_READ_LIMIT + 1)
            .unwrap();
        let e = probe.model_graph(&huge).unwrap().unwrap_err();
        assert!(e.contains("not read: larger than 16 MiB"), "{e}");
        assert!(probe.model_graph(&dir.path().join("missing.pb")).is_none());
    }
}
