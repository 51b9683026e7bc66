//! A compile through a Remote Execution API server, behind the seam
//! ([`crate::engine::strategy`]) and behind the local compile cache (a local hit never reaches
//! the server):
//!
//! - `--remote grpc://HOST:PORT`: [`Execution`], a way to run a plan — the action cache first
//!   (`GetActionResult`); on a miss the missing blobs are uploaded, the action is executed on the
//!   server's workers and followed to its end, and the NEFF is downloaded, verified against its
//!   digest and renamed into place. A failed remote compile is reported as a local one is: `Child
//!   process job "RemoteCompile" exited abnormally!`, the last 50 lines of the remote stderr, the
//!   F-code banner of a crash status, exit 70. An unreachable server is an error naming the
//!   address (exit 70).
//! - `--remote-cache grpc://HOST:PORT`: [`ActionCache`], a cache layer — the action cache first;
//!   on a miss the rest of the stack compiles here, and a success is uploaded (the model, the
//!   action, the NEFF) and recorded in the action cache. The server is an optimisation there:
//!   when it fails, the compile still runs (a warning).

use std::collections::BTreeMap;
use std::path::Path;

use super::action::{self, Built, OUTPUT};
use super::cas::Blob;
use super::client::{Address, Remote, RemoteError};
use super::digest;
use super::re;
use crate::cli::namespace::Dest;
use crate::engine::events::Event;
use crate::engine::failure;
use crate::engine::log;
use crate::engine::metrics::{JobMetrics, JobStatus};
use crate::engine::result::CompileResult;
use crate::engine::session::Session;
use crate::engine::strategy::{Layer, Strategy};
use crate::engine::Engine;
use crate::error::{NccError, EXIT_COMPILE_FAILED};
use crate::plan::Plan;
use crate::result::{Failure, RemoteFailure, Status};
use crate::run::process::End;

/// The pseudo-job a remote compile reports as.
pub const JOB_NAME: &str = "RemoteCompile";

/// How many lines of the remote stderr a failure shows.
pub const STDERR_TAIL: usize = 50;

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
    pub fn from_plan(plan: &Plan) -> Result<Option<RemoteConfig>, NccError> {
        let instance = plan.ns.str(Dest::RemoteInstance).unwrap_or("");
        let get = |d: Dest| plan.ns.str(d).filter(|s| !s.is_empty()).map(str::to_string);
        RemoteConfig::from_flags(get(Dest::Remote), get(Dest::RemoteCache), instance)
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

/// The session's plan as an action, for the toolchain `engine` stands for; logged.
fn action_of(session: &Session, engine: &Engine, address: &Address) -> Result<Built, String> {
    let plan = session.plan();
    let tc = action::toolchain_id(&plan.toolchain_request, plan.toolchain.as_ref(), engine);
    let built = action::build(plan, &tc, &command_env(&session.options().worker_env))?;
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

/// A usable cached result: exit 0 with the NEFF among its outputs.
fn usable(r: &re::ActionResult) -> bool {
    r.exit_code == 0 && r.output_files.iter().any(|f| f.path == OUTPUT)
}

/// The remote compile's pseudo-job, as the session sees it: its figures, its end.
struct RemoteJob<'s, 'a> {
    session: &'s Session<'a>,
}

impl RemoteJob<'_, '_> {
    fn metrics(&self, status: JobStatus, exit_status: Option<i32>) -> JobMetrics {
        JobMetrics {
            job: JOB_NAME.to_string(),
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
    fn fail(&self, failure: RemoteFailure, lines: Vec<String>) -> CompileResult {
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
        session.result(Status::Failed(Failure::Remote(failure)))
    }

    /// The compile failed on an error of the exchange with the server.
    fn fail_remote(&self, e: impl std::fmt::Display) -> CompileResult {
        self.fail(RemoteFailure::Error, vec![NccError::remote(e).to_string()])
    }

    /// The compile failed on a remote call's error: an unreachable server says so.
    fn fail_call(&self, e: RemoteError) -> CompileResult {
        let kind = if e.unreachable {
            RemoteFailure::Unreachable
        } else {
            RemoteFailure::Error
        };
        self.fail(kind, vec![NccError::remote(e).to_string()])
    }

    fn succeed(&self) -> CompileResult {
        let m = self.metrics(JobStatus::Ok, Some(0));
        self.session.emit(&Event::JobFinished(m));
        self.session.log().user("Compiler status PASS");
        self.session.result(Status::Succeeded)
    }
}

/// Download the result's NEFF (verified), into `product` (a new file) and then to `--output`
/// through a temporary name.
fn deliver(
    session: &Session,
    remote: &Remote,
    result: &re::ActionResult,
    product: Option<&Path>,
) -> Result<(), String> {
    let neff = result
        .output_files
        .iter()
        .find(|f| f.path == OUTPUT)
        .and_then(|f| f.digest.clone())
        .ok_or_else(|| format!("the remote result has no {OUTPUT}"))?;
    let out = &session.plan().output;
    let name = out
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("file.neff");
    let partial = out.with_file_name(crate::fsx::unique::name(&format!(
        ".{name}.nxcc-partial-remote-"
    )));
    remote
        .download_to(&neff, &partial)
        .map_err(|e| e.to_string())?;
    let placed = (|| -> std::io::Result<()> {
        if let Some(p) = product {
            let mut src = std::fs::File::open(&partial)?;
            let mut dst = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)?;
            std::io::copy(&mut src, &mut dst)?;
        }
        std::fs::rename(&partial, out)
    })();
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&partial);
        return Err(NccError::output_not_written(out.display(), e).to_string());
    }
    session.log().info(
        log::DRIVER,
        &format!(
            "Downloaded the NEFF {} ({} bytes) from {}",
            neff.hash, neff.size_bytes, remote.address.url
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
        let built = match action_of(session, self.engine, self.address) {
            Ok(b) => b,
            Err(e) => return job.fail_remote(e),
        };
        session.pseudo_job(JOB_NAME);
        let remote = match Remote::connect(self.address) {
            Ok(r) => r,
            Err(e) => return job.fail_call(e),
        };
        match remote.get_action_result(&built.digest) {
            Ok(Some(r)) if usable(&r) => match deliver(session, &remote, &r, product) {
                Ok(()) => {
                    session.log().user(&format!(
                        "Using a remote cached neff (action {}) from {}",
                        built.digest.hash, self.address.url
                    ));
                    return job.succeed();
                }
                // A result whose NEFF the CAS lost (or that came back corrupt): compile again.
                Err(e) => session.log().warning_shown(
                    log::DRIVER,
                    &format!("the remote cached result is not usable ({e}); compiling remotely"),
                ),
            },
            Ok(_) => {}
            Err(e) => return job.fail_call(e),
        }
        self.execute(&job, &remote, &built, product)
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
    ) -> CompileResult {
        let (session, url) = (job.session, &self.address.url);
        let sent = match remote.upload_missing(&built.blobs) {
            Ok(s) => s,
            Err(e) => return job.fail_call(e),
        };
        session.log().info(
            log::DRIVER,
            &format!(
                "Uploaded {} blobs ({} bytes) to {url}",
                sent.blobs, sent.bytes
            ),
        );
        let resp = match remote.execute(&built.digest, false) {
            Ok(r) => r,
            Err(e) => return job.fail_call(e),
        };
        if let Some(st) = resp.status.as_ref().filter(|s| s.code != 0) {
            let e = RemoteError {
                url: url.clone(),
                what: format!(
                    "the server could not run the action: {} (code {})",
                    st.message, st.code
                ),
                unreachable: false,
            };
            return job.fail(
                RemoteFailure::Refused,
                vec![NccError::remote(e).to_string()],
            );
        }
        let Some(result) = resp.result else {
            return job.fail_remote(format!("the server answered without a result ({url})"));
        };
        if result.exit_code != 0 {
            let lines = remote_failure_lines(session, remote, &result, url);
            return job.fail(RemoteFailure::FailedRemotely(result.exit_code), lines);
        }
        match deliver(session, remote, &result, product) {
            Ok(()) => job.succeed(),
            Err(e) => job.fail_remote(e),
        }
    }
}

/// A failed remote compile's lines, as a local one's: the abnormal exit, the last lines of the
/// remote stderr (all of it in the log), and where it ran.
fn remote_failure_lines(
    session: &Session,
    remote: &Remote,
    result: &re::ActionResult,
    url: &str,
) -> Vec<String> {
    let job_logger = log::job_logger(JOB_NAME);
    let stderr = match stream_text(remote, &result.stderr_raw, result.stderr_digest.as_ref()) {
        Ok(s) => s,
        Err(e) => format!("(the remote stderr could not be read: {e})"),
    };
    for line in stderr.lines() {
        session.log().info(&job_logger, line);
    }
    let lines: Vec<String> = stderr.lines().map(str::to_string).collect();
    let tail = &lines[lines.len().saturating_sub(STDERR_TAIL)..];
    let mut errors = failure::job_lines(JOB_NAME, End::Exited(result.exit_code), tail, 0, None);
    errors.push(format!(
        "[ERROR] The remote compile ran on {}",
        result
            .execution_metadata
            .as_ref()
            .map(|m| m.worker.clone())
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| url.to_string())
    ));
    errors
}

/// A Command's stdout or stderr: inline, or from the CAS.
fn stream_text(
    remote: &Remote,
    raw: &[u8],
    digest: Option<&re::Digest>,
) -> Result<String, RemoteError> {
    if !raw.is_empty() {
        return Ok(String::from_utf8_lossy(raw).into_owned());
    }
    match digest {
        Some(d) if d.size_bytes > 0 => {
            Ok(String::from_utf8_lossy(&remote.read_blob(d)?).into_owned())
        }
        _ => Ok(String::new()),
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
        let built = match action_of(session, self.engine, self.address) {
            Ok(b) => b,
            Err(e) => {
                session
                    .log()
                    .warning_shown(log::DRIVER, &format!("not using the remote cache: {e}"));
                return next.run(session, product);
            }
        };
        let warn = |e: &dyn std::fmt::Display| {
            session
                .log()
                .warning_shown(log::DRIVER, &format!("the remote cache: {e}"));
        };
        let remote = match Remote::connect(self.address) {
            Ok(r) => Some(r),
            Err(e) => {
                warn(&format!("{e}; compiling here without it"));
                None
            }
        };
        if let Some(remote) = &remote {
            match remote.get_action_result(&built.digest) {
                Ok(Some(r)) if usable(&r) => match deliver(session, remote, &r, product) {
                    Ok(()) => return self.hit(session, &built),
                    Err(e) => warn(&format!("{e}; compiling here")),
                },
                Ok(_) => {}
                Err(e) => warn(&e),
            }
        }
        self.compile_here(session, product, next, remote.as_ref(), &built)
    }
}

impl ActionCache<'_> {
    /// The server had the result (delivered): the compile is its pseudo-job.
    fn hit(&self, session: &Session, built: &Built) -> CompileResult {
        session.pseudo_job(JOB_NAME);
        session.log().user(&format!(
            "Using a remote cached neff (action {}) from {}",
            built.digest.hash, self.address.url
        ));
        RemoteJob { session }.succeed()
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
            .tempdir()
            .ok();
        let product_path = product
            .map(Path::to_path_buf)
            .or_else(|| own.as_ref().map(|d| d.path().join(OUTPUT)));
        let result = next.run(session, product_path.as_deref());
        let (true, Some(remote), Some(neff)) = (result.ok(), remote, product_path) else {
            return result;
        };
        match upload_result(remote, built, &neff) {
            Err(e) => session
                .log()
                .warning_shown(log::DRIVER, &format!("the remote cache: {e}")),
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
