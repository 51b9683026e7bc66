//! The original's error line: `[ERROR] [NCC_<CAT><nnn>] <cause> - <resolution>`, and the compile
//! failure type every layer returns. A compile failure exits with status 70 (`EX_SOFTWARE`).

use std::fmt;

/// Exit status of a compile that failed after parsing.
pub const EXIT_COMPILE_FAILED: i32 = 70;

/// One error in the original's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NccError {
    /// `EARG001`, `DRV068`, ... (`None` for the original's uncoded texts).
    pub code: Option<&'static str>,
    /// What went wrong, as the original words it.
    pub cause: String,
    /// What the user can do; empty when the original gives none.
    pub resolution: String,
    /// The operating system's error number behind it, when an I/O error caused it (a full disk,
    /// a permission): what a failure's classification reads, never the words.
    pub os_error: Option<i32>,
}

/// The code of a missing tool or toolchain.
const TOOL_NOT_FOUND: &str = "EDRV082";
/// The code of nxcc failing to do its own part.
const INTERNAL: &str = "EDRV090";

impl NccError {
    /// An error with the code `code` (`EDRV082`: the text after `NCC_`).
    pub fn new(
        code: &'static str,
        cause: impl Into<String>,
        resolution: impl Into<String>,
    ) -> NccError {
        NccError {
            code: Some(code),
            cause: cause.into(),
            resolution: resolution.into(),
            os_error: None,
        }
    }

    /// An error the original prints without a code.
    pub fn plain(cause: impl Into<String>) -> NccError {
        NccError {
            code: None,
            cause: cause.into(),
            resolution: String::new(),
            os_error: None,
        }
    }

    /// This error, caused by the I/O error `e` (its error number is kept).
    pub(crate) fn caused_by(mut self, e: &std::io::Error) -> NccError {
        self.os_error = e.raw_os_error();
        self
    }

    /// Whether it says a tool (or the toolchain, or the compiler) is missing.
    pub(crate) fn is_missing_tool(&self) -> bool {
        self.code == Some(TOOL_NOT_FOUND)
    }

    /// Whether it says nxcc could not do its own part (write a file, start a process, load a
    /// library).
    pub(crate) fn is_internal(&self) -> bool {
        self.code == Some(INTERNAL)
    }
}

/// The resolution every "a tool or the toolchain is missing" error gives.
const FIND_TOOLCHAIN: &str =
    "Point --toolchain (or NXCC_TOOLCHAIN) at a Neuron compiler toolchain, or use --toolchain sim.";

/// Every error nxcc raises with a code, each code defined here once, with its resolution. The
/// codes of the original's own rules (DRV017, DRV068, DRV077, EARG001, the simulated tools'
/// DVR codes) keep the original's numbers; nxcc's own start at EDRV081 (01-cli.md).
impl NccError {
    /// NCC_DRV017: more than one model file for the XLA flow.
    pub(crate) fn one_model_only() -> NccError {
        NccError::new(
            "DRV017",
            "XLA flow only takes 1 model file",
            "Pass exactly one model file.",
        )
    }

    /// NCC_DRV068: the model file does not exist.
    pub(crate) fn model_missing(model: impl fmt::Display) -> NccError {
        NccError::new(
            "DRV068",
            format!("HLO module {model} doesn't exist"),
            "Check the path of the model file.",
        )
    }

    /// NCC_DRV077: the work dir holds an earlier compile's artifacts.
    pub(crate) fn artifacts_exist(dir: impl fmt::Display) -> NccError {
        NccError::new(
            "DRV077",
            format!("Compilation artifacts already exist in the output directory ({dir})."),
            "Please ensure to run the compiler with a clean artifacts directory to avoid unintended mixing of compilation artifacts between multiple models.",
        )
    }

    /// NCC_EARG001: an argument value validation refuses.
    pub(crate) fn illegal_argument(
        cause: impl fmt::Display,
        resolution: impl Into<String>,
    ) -> NccError {
        NccError::new(
            "EARG001",
            format!("Illegal argument(s) - {cause}"),
            resolution,
        )
    }

    /// NCC_EDRV081: a job name the registry does not know.
    pub(crate) fn unknown_job(name: &str, known: &[&str]) -> NccError {
        NccError::new(
            "EDRV081",
            format!("Unknown job '{name}'"),
            format!("Known jobs: {}.", known.join(", ")),
        )
    }

    /// NCC_EDRV082: a tool (or the toolchain itself) is missing.
    pub(crate) fn tool_not_found(what: impl fmt::Display) -> NccError {
        NccError::new(
            TOOL_NOT_FOUND,
            format!("Could not find {what}"),
            FIND_TOOLCHAIN,
        )
    }

    /// NCC_EDRV082: the simulated toolchain could not be had.
    pub fn simulated_toolchain(cause: impl fmt::Display) -> NccError {
        NccError::new(
            TOOL_NOT_FOUND,
            format!("Could not lay out the simulated toolchain: {cause}"),
            "Check that the cache directory (XDG_CACHE_HOME, else ~/.cache) is writable, or lay one out with nxcc toolchain sim DIR and use --toolchain DIR.",
        )
    }

    /// NCC_EDRV082 (the program is missing) or NCC_EDRV090 (it cannot be started): the external
    /// compiler.
    pub(crate) fn compiler_not_run(not_found: bool, cause: impl fmt::Display) -> NccError {
        NccError::new(
            if not_found { TOOL_NOT_FOUND } else { INTERNAL },
            format!("Could not run the compiler: {cause}"),
            "Check --compiler.",
        )
    }

    /// NCC_EDRV083: a job of a framework nxcc does not compile.
    pub(crate) fn not_for_xla(job: &str) -> NccError {
        NccError::new(
            "EDRV083",
            format!("{job} is only available for non-XLA frameworks, which nxcc does not compile"),
            "Remove it from --pipeline.",
        )
    }

    /// NCC_EDRV084: StaticIOTranspose refuses its inputs or cannot do its work.
    pub(crate) fn static_io(cause: impl fmt::Display, resolution: impl Into<String>) -> NccError {
        NccError::new("EDRV084", cause.to_string(), resolution)
    }

    /// NCC_EDRV085: an option's value cannot be split into words.
    pub(crate) fn unsplittable(dest: &str, text: &str, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV085",
            format!(
                "Could not split --{} value {text:?}: {cause}",
                dest.replace('_', "-")
            ),
            "Balance the quotes in the option's value.",
        )
    }

    /// NCC_EDRV087: the NEFF could not be packed or written.
    pub(crate) fn neff_pack(cause: impl fmt::Display, resolution: impl Into<String>) -> NccError {
        NccError::new("EDRV087", cause.to_string(), resolution)
    }

    /// NCC_EDRV088: SaveTemps could not copy an artifact.
    pub(crate) fn save_temps(path: impl fmt::Display, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV088",
            format!("SaveTemps could not copy {path}: {cause}"),
            "Check the launch directory is writable.",
        )
    }

    /// NCC_EDRV089: no work directory could be made.
    pub fn work_dir(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV089",
            cause.to_string(),
            "Check --temp-dir (or pass one) and that its directory is writable.",
        )
    }

    /// NCC_EDRV090: nxcc could not do its own part of a job (write a file, start a process, load
    /// a library).
    pub fn internal(cause: impl fmt::Display) -> NccError {
        NccError::new(
            INTERNAL,
            cause.to_string(),
            "Check the toolchain, the work directory and that the nxcc executable is intact.",
        )
    }

    /// NCC_EDRV091: the log file cannot be opened.
    pub fn log_file(path: impl fmt::Display, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV091",
            format!("Cannot open the log file {path}: {cause}"),
            "Check --logfile.",
        )
    }

    /// NCC_EDRV092: the simulated frontend refused the model.
    pub fn simulated_frontend(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV092",
            format!("The simulated frontend failed: {cause}"),
            "Check the model file.",
        )
    }

    /// NCC_EDRV093: the job selection leaves nothing to run; `cause` names the selector.
    pub(crate) fn empty_plan(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV093",
            format!("No job to run: {cause}"),
            "Select at least one job with --pipeline and --state.",
        )
    }

    /// NCC_EDRV110: a remote cache URL.
    pub fn remote_cache(dir: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV110",
            format!("Remote compile caches are not supported: {dir}"),
            "Use a local directory for --cache_dir (or --no_cache).",
        )
    }

    /// NCC_EDRV111: a cached NEFF cannot be written to `--output`.
    pub fn output_not_written(output: impl fmt::Display, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV111",
            format!("Cannot write the output {output}: {cause}"),
            "Check --output and its directory.",
        )
    }

    /// NCC_EDRV112: the external compiler succeeded but its output could not be moved.
    pub(crate) fn compiler_output(
        partial: impl fmt::Display,
        output: impl fmt::Display,
        cause: impl fmt::Display,
    ) -> NccError {
        NccError::new(
            "EDRV112",
            format!("The compiler succeeded but its output {partial} could not be moved to {output}: {cause}"),
            "Check that the compiler writes --output, and the output directory.",
        )
    }

    /// NCC_EDRV130: a remote compile (`--remote`) or a remote cache operation failed: the server
    /// did not answer, refused, or the action could not be built (`cause` names the address).
    pub fn remote(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV130",
            format!("Remote compile failed: {cause}"),
            "Check --remote (grpc://HOST:PORT), that the server answers there, and that workers for this toolchain are connected.",
        )
    }

    /// NCC_EDRV114: the model path is neither a regular file nor a directory (`what`: `a FIFO`,
    /// `a device`, `a socket`); it is never opened for reading.
    pub(crate) fn model_not_regular(model: impl fmt::Display, what: &str) -> NccError {
        NccError::new(
            "EDRV114",
            format!("HLO module {model} is {what}, not a regular file or a directory"),
            "Give the path of a model file (a FIFO, a device or a socket is never read).",
        )
    }

    /// NCC_EDRV113: a cache directory that others could write, or that is not what it must be
    /// (`cause` says what is wrong and what fixes it).
    pub(crate) fn unsafe_cache_dir(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV113",
            format!("Cannot use {cause}"),
            "Fix the cache directory as said, or use another one (--cache_dir), or --no_cache.",
        )
    }
}

impl NccError {
    /// NCC_EDRV115: a hit-only cache (`--cache-mode hit-only`) has no entry for the compile
    /// (`why` names what differs from the nearest entry).
    pub(crate) fn cache_miss_refused(dir: impl fmt::Display, why: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV115",
            format!("No cached NEFF for this compile in the hit-only cache {dir}, and a hit-only cache never compiles: {why}"),
            "Compile it where compiles may run (nxcc cache explain -- ARGS says what differs), or use --cache-mode read-write.",
        )
    }

    /// NCC_EDRV116: a cache setting that does not read (a flag's value, the cache's
    /// configuration).
    pub(crate) fn cache_setting(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV116",
            format!("Invalid cache setting: {cause}"),
            "Fix the value (nxcc compile --help-hidden lists the cache flags; nxcc cache config shows the cache's configuration).",
        )
    }
}

impl NccError {
    /// NCC_EDRV118: the model could not be read into the compile's private snapshot (`cause`
    /// says why), or it changed between the plan and the snapshot.
    pub(crate) fn model_snapshot(model: impl fmt::Display, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV118",
            format!("Cannot read the model {model} into the compile's private snapshot: {cause}"),
            "Compile it again once nothing writes to it; the snapshot is made where the work directory goes (--temp-dir, or the launch directory), which must be writable.",
        )
    }

    /// NCC_EDRV119: a setting of the environment the tools would run with does not read (the
    /// simulated toolchain's injection variables): the compile's environment is at fault, not
    /// the model.
    pub(crate) fn environment_setting(cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV119",
            format!("Invalid setting in the environment: {cause}"),
            "Fix or unset the variable; nothing was compiled.",
        )
    }

    /// NCC_EDRV117: a shared cache in an object store (`--cache_dir s3://...`) that cannot be
    /// used: no such bucket, access denied, the endpoint unreachable (`cause` says which).
    pub(crate) fn shared_cache(url: impl fmt::Display, cause: impl fmt::Display) -> NccError {
        NccError::new(
            "EDRV117",
            format!("Cannot use the shared cache {url}: {cause}"),
            "Check the bucket, the credentials (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...), AWS_REGION and AWS_ENDPOINT_URL, or use a local --cache_dir.",
        )
    }
}

impl fmt::Display for NccError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "[ERROR] [NCC_{code}] {}", self.cause)?,
            None => write!(f, "[ERROR] {}", self.cause)?,
        }
        if !self.resolution.is_empty() {
            write!(f, " - {}", self.resolution)?;
        }
        Ok(())
    }
}

impl std::error::Error for NccError {}
