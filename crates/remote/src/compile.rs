//! A compile through a Remote Execution API server, behind the seam
//! ([`crate::engine::strategy`]) and behind the local compile cache (a local hit never reaches
//! the server):
//!
//! - `--remote grpc://HOST:PORT`: [`Execution`], a way to run a plan — the action cache first
//!   (`GetActionResult`); on a miss the missing blobs are uploaded, the action is executed on the
//!   server's workers and followed to its end, and the NEFF is downloaded, checked against its
//!   digest and as a NEFF, and renamed into place (`super::result`; a cached result that fails
//!   the check is executed again, bypassing the server's cache). SIGINT/SIGTERM (or the
//!   caller's cancellation) end the compile at once (exit 130/143) and cancel the remote
//!   operation. A failed remote compile is reported as a local one is: `Child process job
//!   "RemoteCompile" exited abnormally!`, the last 50 lines of the remote stderr, the F-code
//!   banner of a crash status, exit 70. An unreachable server is an error naming the address
//!   (exit 70).
//! - `--remote-cache grpc://HOST:PORT`: [`ActionCache`], a cache layer — the action cache first;
//!   on a miss the rest of the stack compiles here, and a success is uploaded (the model, the
//!   action, the NEFF) and recorded in the action cache. The server is an optimisation there:
//!   when it fails, or its result fails the check, the compile still runs (a warning).

use std::collections::BTreeMap;
use std::path::Path;

use super::action::{self, Built, OUTPUT};
use super::cas::Blob;
use super::client::{Address, ErrorKind, Remote, RemoteError};
use super::digest;
use super::re;
use super::text;
use crate::engine::events::Event;
use crate::engine::failure;
use crate::engine::log;
use crate::engine::metrics::{JobMetrics, JobStatus};
use crate::engine::result::CompileResult;
use crate::engine::session::Session;
use crate::engine::strategy::{Layer, Strategy};
use crate::engine::Engine;
use crate::plan::Invocation;
use crate::run::process::End;
use nxcc_core::error::{NccError, EXIT_COMPILE_FAILED};
use nxcc_core::job_name::JobName;
use nxcc_core::result::{CancelReason, Failure, RemoteFailure, Status};

/// The pseudo-job a remote compile reports as.
pub const JOB_NAME: JobName = JobName::RemoteCompile;

/// How many lines of the remote stderr a failure shows.
pub const STDERR_TAIL: usize = 50;

/// At most this much of the end of a remote stderr is read (and logged).
pub const STDERR_BYTES: u64 = 1 << 20;

/// What the server is used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--remote`: its action cache and its workers.
    Execute,
    /// `--remote-cache`: its action cache only; compiles run here.
    CacheOnly,
}

/// A remote server and what it is used for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteConfig {
    /// Where.
    pub address: Address,
    /// For what.
    pub mode: Mode,
}

impl RemoteConfig {
    /// From a compile's flags (`--remote`, `--remote-cache`, `--remote-instance`): `None`
    /// when neither is given; an error for a malformed address or both at once.
    pub fn of(inv: &Invocation) -> Result<Option<RemoteConfig>, NccError> {
        let flags = &inv.settings.remote;
        RemoteConfig::from_flags(
            flags.execute().map(str::to_string),
            flags.cache().map(str::to_string),
            &flags.instance,
        )
    }

    /// From the values of `--remote`, `--remote-cache` and `--remote-instance`.
    pub fn from_flags(
        remote: Option<String>,
        remote_cache: Option<String>,
        instance: &str,
    ) -> Result<Option<RemoteConfig>, NccError> {
        let (url, mode) = match (remote, remote_cache) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(NccError::remote(
                    "--remote and --remote-cache exclude each other (--remote uses the server's action cache too)",
                ))
            }
            (Some(u), None) => (u, Mode::Execute),
            (None, Some(u)) => (u, Mode::CacheOnly),
        };
        let address = Address::parse(&url, instance).map_err(NccError::remote)?;
        Ok(Some(RemoteConfig { address, mode }))
    }
}

/// The environment a compile's Command carries: the variables of this process (and of the
/// request, `worker_env`) that a compile request may forward ([`crate::environ::is_forwarded`]).
pub fn command_env(worker_env: &[(String, String)]) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| crate::environ::is_forwarded(k))
        .collect();
    for (k, v) in worker_env {
        if crate::environ::is_forwarded(k) {
            env.insert(k.clone(), v.clone());
        }
    }
    env
}

/// `inv` (the session's, or the invocation as it is compiled: its model the snapshot) as an action,
/// for the toolchain `engine` stands for; logged.
fn action_of(
    session: &Session,
    inv: &Invocation,
    engine: &Engine,
    address: &Address,
) -> Result<Built, String> {
    let plan = &inv.plan;
    let tc = action::toolchain_id(&plan.toolchain_request, plan.toolchain.as_ref(), engine);
    let env = command_env(&session.options().worker_env);
    let built = action::build(inv, &tc, &env)?;
    session.log().info(
        log::DRIVER,
        &format!(
            "Remote action {} ({}): {}",
            digest::show(&built.digest),
            address.url,
            crate::shell::join(&built.command.arguments)
        ),
    );
    Ok(built)
}

/// A connection for this compile's action, cancelled with the compile.
fn connect(session: &Session, address: &Address, built: &Built) -> Result<Remote, RemoteError> {
    let cancel = Some(session.cancel().flag().clone());
    Remote::connect_with(address, cancel).map(|r| r.for_action(&built.digest))
}

/// A usable cached result: exit 0 with the NEFF among its outputs.
fn usable(r: &re::ActionResult) -> bool {
    r.exit_code == 0 && r.output_files.iter().any(|f| f.path == OUTPUT)
}

/// What a failed remote call means for the compile.
fn failure_of(e: &RemoteError) -> RemoteFailure {
    match e.kind {
        ErrorKind::Unreachable => RemoteFailure::Unreachable,
        ErrorKind::Refused => RemoteFailure::Refused,
        ErrorKind::Untrusted => RemoteFailure::Untrusted,
        ErrorKind::Cancelled | ErrorKind::Local => RemoteFailure::Error,
    }
}

/// The remote compile's pseudo-job, as the session sees it: its figures, its end.
struct RemoteJob<'s, 'a> {
    session: &'s Session<'a>,
}

impl RemoteJob<'_, '_> {
    fn metrics(&self, status: JobStatus, exit_status: Option<i32>) -> JobMetrics {
        JobMetrics {
            job: JOB_NAME,
            status,
            start_s: 0.0,
            wall_s: self.session.elapsed().as_secs_f64(),
            user_s: 0.0,
            sys_s: 0.0,
            max_rss_kb: 0,
            exit_status,
            signal: None,
            processes: 0,
        }
    }

    /// The compile failed, so, with `lines` (exit 70).
    fn fail(&self, failure: Failure, lines: Vec<String>) -> CompileResult {
        let session = self.session;
        for l in lines {
            session.error(log::DRIVER, l);
        }
        let m = self.metrics(JobStatus::Failed, Some(EXIT_COMPILE_FAILED));
        session.emit(&Event::JobFinished(m));
        session.log().user(&format!(
            "Diagnostic logs stored in {}",
            session.plan().logfile.display()
        ));
        session.result(Status::Failed(failure))
    }

    /// The compile failed on an error of the exchange with the server, of this kind.
    fn fail_remote(&self, kind: RemoteFailure, e: impl std::fmt::Display) -> CompileResult {
        let lines = vec![NccError::remote(e).to_string()];
        self.fail(Failure::Remote(kind), lines)
    }

    /// A failed remote call: the compile's failure, or its interruption when it was cancelled.
    fn fail_call(&self, e: RemoteError) -> CompileResult {
        if e.cancelled() || self.session.cancel().is_cancelled() {
            return self.interrupted();
        }
        self.fail_remote(failure_of(&e), e)
    }

    /// The compile was cancelled (a signal, the caller): exit 130/143 after the signal.
    fn interrupted(&self) -> CompileResult {
        let session = self.session;
        let status = session
            .cancel()
            .status()
            .unwrap_or(Status::Cancelled(CancelReason::Stopped));
        let sig = match status {
            Status::Interrupted(sig) => sig,
            _ => libc::SIGTERM,
        };
        session.error(log::DRIVER, failure::interrupted(sig));
        let m = self.metrics(JobStatus::Cancelled, None);
        session.emit(&Event::JobFinished(m));
        session.result(status)
    }

    fn succeed(&self) -> CompileResult {
        let m = self.metrics(JobStatus::Ok, Some(0));
        self.session.emit(&Event::JobFinished(m));
        self.session.log().user("Compiler status PASS");
        self.session.result(Status::Succeeded)
    }
}

/// Download the result's NEFF, check it, and publish it into `product` (a new file) and at
/// `--output` ([`super::result::deliver`]).
fn deliver(
    session: &Session,
    remote: &Remote,
    result: &re::ActionResult,
    product: Option<&Path>,
    built: &Built,
) -> Result<(), RemoteError> {
    let origin = serde_json::json!({
        "remote": remote.address.url,
        "instance": remote.address.instance,
        "action": digest::show(&built.digest),
        "worker": result
            .execution_metadata
            .as_ref()
            .map(|m| text::message(&m.worker))
            .unwrap_or_default(),
        "checked": "neff-info --verify",
    });
    let output = &session.plan().output;
    let d = super::result::deliver(remote, result, output, product, &origin)?;
    session.log().info(
        log::DRIVER,
        &format!(
            "Downloaded the NEFF {} ({} bytes) from {}, checked",
            d.digest.hash, d.digest.size_bytes, remote.address.url
        ),
    );
    Ok(())
}

/// `--remote`: the plan run on the server's workers (see the module documentation).
pub struct Execution<'a> {
    /// The server.
    pub address: &'a Address,
    /// What the workers compile with (the toolchain identity the action names).
    pub engine: &'a Engine,
}

impl Strategy for Execution<'_> {
    fn run(&self, session: &Session, product: Option<&Path>) -> CompileResult {
        let job = RemoteJob { session };
        session.handle_signals();
        // The action is the snapshot's: what is looked up, uploaded and compiled are the bytes
        // a local cache derives its key from again.
        let compiled = match session.compiled() {
            Ok(p) => p,
            Err(f) => return session.result(Status::Failed(f)),
        };
        let built = match action_of(session, compiled, self.engine, self.address) {
            Ok(b) => b,
            Err(e) => return job.fail_remote(RemoteFailure::Error, e),
        };
        session.pseudo_job(JOB_NAME);
        let remote = match connect(session, self.address, &built) {
            Ok(r) => r,
            Err(e) => return job.fail_call(e),
        };
        let mut skip_cache_lookup = false;
        match remote.get_action_result(&built.digest) {
            Ok(Some(r)) if usable(&r) => match deliver(session, &remote, &r, product, &built) {
                Ok(()) => {
                    session.log().user(&format!(
                        "Using a remote cached neff (action {}) from {}",
                        built.digest.hash, self.address.url
                    ));
                    return job.succeed();
                }
                Err(e) if e.cancelled() => return job.interrupted(),
                // A result whose NEFF the CAS lost, or that is not a NEFF: compile again, past
                // the server's cache.
                Err(e) => {
                    skip_cache_lookup = true;
                    session.log().warning_shown(
                        log::DRIVER,
                        &format!(
                            "the remote cached result is not usable ({e}); compiling remotely"
                        ),
                    )
                }
            },
            Ok(_) => {}
            Err(e) => return job.fail_call(e),
        }
        self.execute(&job, &remote, &built, product, skip_cache_lookup)
    }
}

impl Execution<'_> {
    /// Upload what the server lacks, execute the action, and take its result.
    fn execute(
        &self,
        job: &RemoteJob,
        remote: &Remote,
        built: &Built,
        product: Option<&Path>,
        skip_cache_lookup: bool,
    ) -> CompileResult {
        let (session, url) = (job.session, &self.address.url);
        let (resp, sent) =
            match remote.execute_uploading(&built.digest, &built.blobs, skip_cache_lookup) {
                Ok(r) => r,
                Err(e) => return job.fail_call(e),
            };
        session.log().info(
            log::DRIVER,
            &format!(
                "Uploaded {} blobs ({} bytes) to {url}",
                sent.blobs, sent.bytes
            ),
        );
        if let Some(st) = resp.status.as_ref().filter(|s| s.code != 0) {
            let (kind, what) = if st.code == tonic::Code::DeadlineExceeded as i32 {
                (
                    RemoteFailure::TimedOut,
                    "the remote compile ran past its time limit",
                )
            } else {
                (
                    RemoteFailure::Refused,
                    "the server could not run the action",
                )
            };
            let status = tonic::Status::new(tonic::Code::from(st.code), st.message.clone());
            return job.fail_remote(kind, remote.error(what, &status));
        }
        let Some(result) = resp.result else {
            let e = format!("the server answered without a result ({url})");
            return job.fail_remote(RemoteFailure::Error, e);
        };
        if let Some(failed) = failed_remotely(job, remote, &result, url) {
            return failed;
        }
        match deliver(session, remote, &result, product, built) {
            Ok(()) => job.succeed(),
            Err(e) => job.fail_call(e),
        }
    }
}

/// Log the remote stderr; when the compile failed remotely (or the reading was interrupted),
/// its result: reported as a local job's failure, with the worker that ran it.
fn failed_remotely(
    job: &RemoteJob,
    remote: &Remote,
    result: &re::ActionResult,
    url: &str,
) -> Option<CompileResult> {
    let job_logger = log::job_logger(JOB_NAME.name());
    let stderr = match stream_text(remote, &result.stderr_raw, result.stderr_digest.as_ref()) {
        Ok(s) => s,
        Err(e) if e.cancelled() => return Some(job.interrupted()),
        Err(e) => vec![format!("(the remote stderr could not be read: {e})")],
    };
    for line in &stderr {
        job.session.log().info(&job_logger, line);
    }
    if result.exit_code == 0 {
        return None;
    }
    let tail = &stderr[stderr.len().saturating_sub(STDERR_TAIL)..];
    let end = End::Exited(result.exit_code);
    let mut errors = failure::job_lines(JOB_NAME.name(), end, tail, 0, None);
    errors.push(format!(
        "[ERROR] The remote compile ran on {}",
        result
            .execution_metadata
            .as_ref()
            .map(|m| text::message(&m.worker))
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| url.to_string())
    ));
    let failed = Failure::Remote(RemoteFailure::FailedRemotely(result.exit_code));
    Some(job.fail(failed, errors))
}

/// A Command's stdout or stderr as safe lines: inline, or the end of it from the CAS (at most
/// [`STDERR_BYTES`] either way).
fn stream_text(
    remote: &Remote,
    raw: &[u8],
    digest: Option<&re::Digest>,
) -> Result<Vec<String>, RemoteError> {
    if !raw.is_empty() {
        let from = raw.len().saturating_sub(STDERR_BYTES as usize);
        return Ok(text::lines(&raw[from..]));
    }
    match digest {
        Some(d) if d.size_bytes > 0 => Ok(text::lines(&remote.read_tail(d, STDERR_BYTES)?)),
        _ => Ok(Vec::new()),
    }
}

/// `--remote-cache`: the server's action cache in front of the rest of the stack (see the module
/// documentation).
pub struct ActionCache<'a> {
    /// The server.
    pub address: &'a Address,
    /// What compiles here (the toolchain identity the action names).
    pub engine: &'a Engine,
}

impl Layer for ActionCache<'_> {
    fn run(&self, session: &Session, product: Option<&Path>, next: &dyn Strategy) -> CompileResult {
        session.handle_signals();
        let built = match action_of(session, session.invocation(), self.engine, self.address) {
            Ok(b) => b,
            Err(e) => {
                session
                    .log()
                    .warning_shown(log::DRIVER, &format!("not using the remote cache: {e}"));
                return next.run(session, product);
            }
        };
        let job = RemoteJob { session };
        let remote = match connect(session, self.address, &built) {
            Ok(r) => Some(r),
            Err(e) if e.cancelled() => return job.interrupted(),
            Err(e) => {
                warn(session, &format!("{e}; compiling here without it"));
                None
            }
        };
        if let Some(remote) = &remote {
            match remote.get_action_result(&built.digest) {
                Ok(Some(r)) if usable(&r) => match deliver(session, remote, &r, product, &built) {
                    Ok(()) => return self.hit(&job, &built),
                    Err(e) if e.cancelled() => return job.interrupted(),
                    // Not usable (lost, or not a NEFF): a miss.
                    Err(e) => warn(session, &format!("{e}; compiling here")),
                },
                Ok(_) => {}
                Err(e) if e.cancelled() => return job.interrupted(),
                Err(e) => warn(session, &e),
            }
        }
        self.compile_here(session, product, next, remote.as_ref(), &built)
    }
}

/// A warning about the remote cache, shown whatever `--verbose` says.
fn warn(session: &Session, e: &dyn std::fmt::Display) {
    session
        .log()
        .warning_shown(log::DRIVER, &format!("the remote cache: {e}"));
}

impl ActionCache<'_> {
    /// The server had the result (delivered): the compile is its pseudo-job.
    fn hit(&self, job: &RemoteJob, built: &Built) -> CompileResult {
        job.session.served_by("remote");
        job.session.pseudo_job(JOB_NAME);
        job.session.log().user(&format!(
            "Using a remote cached neff (action {}) from {}",
            built.digest.hash, self.address.url
        ));
        job.succeed()
    }

    /// Compile here; the NEFF for the upload is the one the compile wrote itself (into the
    /// caller's private product, or into a private directory of ours).
    fn compile_here(
        &self,
        session: &Session,
        product: Option<&Path>,
        next: &dyn Strategy,
        remote: Option<&Remote>,
        built: &Built,
    ) -> CompileResult {
        let own = tempfile::Builder::new()
            .prefix("nxcc-remote-")
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .ok();
        let product_path = product
            .map(Path::to_path_buf)
            .or_else(|| own.as_ref().map(|d| d.path().join(OUTPUT)));
        let result = next.run(session, product_path.as_deref());
        let (true, Some(remote), Some(neff)) = (result.ok(), remote, product_path) else {
            return result;
        };
        let Some(built) = self.rederive(session, built) else {
            return result;
        };
        match upload_result(remote, &built, &neff) {
            Err(e) => warn(session, &e),
            Ok(()) => session.log().info(
                log::DRIVER,
                &format!(
                    "Stored the compile in the remote cache {} (action {})",
                    self.address.url, built.digest.hash
                ),
            ),
        }
        result
    }
}

impl ActionCache<'_> {
    /// The action derived again from what the compile read — the model's snapshot — whose
    /// blobs (the snapshot's files) are what is uploaded; `None` (warned) when it is not the
    /// action looked up (the model changed between the lookup and the snapshot, or nothing was
    /// read): the result is not stored under an action it does not belong to.
    fn rederive(&self, session: &Session, looked_up: &Built) -> Option<Built> {
        let compiled = match session.snapshot().and(session.compiled().ok()) {
            Some(p) => p,
            None => {
                warn(
                    session,
                    &"the compile read no snapshot of the model; not stored",
                );
                return None;
            }
        };
        match action_of(session, compiled, self.engine, self.address) {
            Ok(b) if b.digest == looked_up.digest => Some(b),
            Ok(b) => {
                let what = format!(
                    "the model {} changed between the lookup and the compile's snapshot of it (action {}, not {}); not stored",
                    session.plan().model.display(),
                    digest::show(&b.digest),
                    digest::show(&looked_up.digest)
                );
                warn(session, &what);
                None
            }
            Err(e) => {
                warn(session, &format!("{e}; not stored"));
                None
            }
        }
    }
}

/// Upload the action, its inputs and the NEFF, and record the result in the action cache.
pub fn upload_result(remote: &Remote, built: &Built, neff: &Path) -> Result<(), RemoteError> {
    let d = digest::of_file(neff)
        .map_err(|e| remote.other(format!("cannot read {}: {e}", neff.display())))?;
    let mut blobs = built.blobs.clone();
    blobs.push((d.clone(), Blob::File(neff.to_path_buf())));
    remote.upload_missing(&blobs)?;
    let result = re::ActionResult {
        output_files: vec![re::OutputFile {
            path: OUTPUT.to_string(),
            digest: Some(d),
            is_executable: false,
            contents: Default::default(),
            node_properties: None,
        }],
        exit_code: 0,
        ..Default::default()
    };
    remote.update_action_result(&built.digest, result)
}
