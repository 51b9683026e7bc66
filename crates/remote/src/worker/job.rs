//! One lease's action: fetched and checked whole before anything is created (the Action and
//! Command as bounded messages; a compile action only, [`super::check_compile_args`]; the
//! toolchain; the environment; the input tree within the worker's limits, without the output's
//! name, and with room for it on disk), laid out in a fresh directory, admitted by memory, run
//! under nxcc's supervision within the action's `timeout` (the compile ended and the lease
//! answered `DEADLINE_EXCEEDED` when it passes) and the lease's cancellation, and its outputs
//! stored: the NEFF only when the compile itself wrote it (a regular file, not a link), stdout
//! and stderr (their ends).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bazel_remote_apis::google::rpc::Status;
use prost::Message;

use super::status::Refusal;
use super::tree;
use super::{With, Worker};
use crate::action::{self, OUTPUT, PROGRAM};
use crate::bots::Lease;
use crate::cas::Blob;
use crate::client::Remote;
use crate::digest;
use crate::engine::log::{Console, Sink};
use crate::engine::result::CompileResult;
use crate::engine::session::{Cancellation, Options};
use crate::engine::Engine;
use crate::metadata::Metadata;
use crate::plan::{Invocation, RequestProbe, SystemProbe};
use crate::re;
use crate::run::process::Cancel;
use crate::text;
use nxcc_core::result::Status as CompileStatus;
use nxcc_core::result::{CancelReason, Environment, Failure, IoCause, JobEnd};

/// At most this much of a command's stdout or stderr is kept (the end of it).
pub const OUTPUT_KEEP: usize = 4 << 20;

/// The largest Action or Command message read.
pub const MESSAGE_MAX: u64 = 1 << 20;

/// Free space kept on the work directory's file system beyond the inputs (for the compile's
/// own files).
const SPACE_MARGIN: u64 = 256 << 20;

/// An action that ran: its result and the status to report it with (`OK`, or
/// `DEADLINE_EXCEEDED` when its time limit ended it).
#[derive(Debug)]
pub struct Ran {
    /// The result (exit code, outputs, streams).
    pub result: re::ActionResult,
    /// How the lease completed.
    pub status: Status,
}

/// A checked compile action, ready to lay out and run.
struct Checked {
    args: Vec<String>,
    env: Vec<(String, String)>,
    timeout: Option<Duration>,
    tree: tree::Tree,
}

/// Fetch, check, run and store one lease's action (see the module documentation).
pub fn run(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    lease: &Lease,
    cancel: &Cancel,
) -> Result<Ran, Refusal> {
    let (action, action_digest) = action_of(remote, lease)?;
    let remote = remote
        .clone()
        .with_cancel(cancel.clone())
        .with_metadata(Metadata::new("nxcc worker", None).for_action(&action_digest));
    let checked = check(w, &remote, &action).inspect_err(|r| {
        w.say(&format!(
            "{bot_id}: lease {} refused: {}",
            lease.id,
            text::message(r.message())
        ));
    })?;
    let dir = tempfile::Builder::new()
        .prefix("action-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(&w.work_dir)
        .map_err(|e| Refusal::Internal(format!("cannot make the action's directory: {e}")))?;
    checked.tree.materialize(&remote, dir.path())?;
    let planned = plan_of(w, &checked, dir.path());
    let estimate = estimate_of(w, planned.as_ref().ok(), dir.path(), &checked.args[1..]);
    w.say(&format!(
        "{bot_id}: lease {} waiting for memory ({} estimated)",
        lease.id,
        crate::hlo::summary::human(estimate)
    ));
    let Some(permit) = w.admission.acquire(estimate, Some(cancel)) else {
        return Err(Refusal::Cancelled(
            "cancelled while waiting for memory".into(),
        ));
    };
    let now = w.running.fetch_add(1, Ordering::SeqCst) + 1;
    w.say(&format!(
        "{bot_id}: lease {} started (running: {now})",
        lease.id
    ));
    let ran = compile(w, &checked, planned, cancel);
    let left = w.running.fetch_sub(1, Ordering::SeqCst) - 1;
    drop(permit);
    let (exit_code, timed_out) = match answer(&w.with, &ran.result) {
        Answer::Result {
            exit_code,
            timed_out,
        } => (exit_code, timed_out),
        Answer::Refuse(r) => return Err(r),
    };
    w.say(&format!(
        "{bot_id}: lease {} finished with exit status {exit_code}{} (running: {left})",
        lease.id,
        if timed_out {
            " (its time limit passed)"
        } else {
            ""
        }
    ));
    let result = store(
        &remote,
        bot_id,
        dir.path(),
        exit_code,
        ran.stdout,
        ran.stderr,
    )?;
    let status = match timed_out {
        true => Refusal::status_of(
            tonic::Code::DeadlineExceeded,
            &format!(
                "the compile ran past the action's time limit ({} s)",
                checked.timeout.unwrap_or_default().as_secs_f64()
            ),
        ),
        false => Refusal::status_of(tonic::Code::Ok, ""),
    };
    Ok(Ran { result, status })
}

/// What a compile's end makes of its lease — a decision on the typed result, nothing read
/// back from its lines: a result to store, with its exit code and whether the action's time
/// limit ended it; or a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Store the compile's result.
    Result {
        /// The action's exit code.
        exit_code: i32,
        /// The action's time limit ended it (the lease is answered `DEADLINE_EXCEEDED`).
        timed_out: bool,
    },
    /// Answer the lease with this refusal (no result).
    Refuse(Refusal),
}

/// The answer to a lease whose compile ended as `result` (see [`Answer`]):
/// - a success: exit 0 (the NEFF is stored);
/// - the action's time limit: exit 124, `DEADLINE_EXCEEDED`;
/// - a cancellation (the server cancelled the lease, the worker stopped): `CANCELLED`;
/// - the worker's disk filled up: `RESOURCE_EXHAUSTED`, a worker without room (another worker
///   may run it), as when there is no room before it starts;
/// - any other failure: the compile's result, with the exit status `nxcc compile` ends with —
///   or, for an external compiler, the compiler's own ([`compiler_exit_code`]).
pub fn answer(with: &With, result: &CompileResult) -> Answer {
    let done = |exit_code| Answer::Result {
        exit_code,
        timed_out: false,
    };
    match &result.status {
        CompileStatus::Succeeded => done(0),
        CompileStatus::Cancelled(CancelReason::TimeLimit) => Answer::Result {
            exit_code: 124,
            timed_out: true,
        },
        CompileStatus::Cancelled(_) | CompileStatus::Interrupted(_) => {
            Answer::Refuse(Refusal::Cancelled("the compile was cancelled".into()))
        }
        CompileStatus::Failed(Failure::Environment(Environment::Io(
            IoCause::DiskFull | IoCause::Quota,
        ))) => Answer::Refuse(Refusal::Exhausted(
            "the worker's disk filled up during the compile".into(),
        )),
        CompileStatus::Failed(f) => match with {
            With::Toolchain(_) => done(result.exit_status()),
            With::Compiler(_) => done(compiler_exit_code(f, result)),
        },
    }
}

/// The exit code an external compiler that failed so ended with, as a shell reports it: its own
/// exit status, 128 + the signal that ended it, 124 after a timeout, 127 when it could not run.
pub fn compiler_exit_code(failure: &Failure, result: &CompileResult) -> i32 {
    match failure {
        Failure::Job {
            end: JobEnd::Exited(code),
            ..
        } => *code,
        Failure::Job {
            end: JobEnd::Crashed(sig),
            ..
        }
        | Failure::Environment(Environment::Signal(sig)) => 128 + sig,
        Failure::OutOfMemory { .. } => 128 + libc::SIGKILL,
        Failure::Timeout { .. } => 124,
        Failure::Environment(Environment::MissingTool(_) | Environment::Spawn) => 127,
        // Its figures say how it ended (an error of the environment its stderr showed).
        _ => result
            .jobs
            .last()
            .and_then(|j| j.exit_status.or(j.signal.map(|s| 128 + s)))
            .unwrap_or_else(|| result.exit_status()),
    }
}

/// The lease's Action (inline, or by digest from the CAS) and its digest.
fn action_of(remote: &Remote, lease: &Lease) -> Result<(re::Action, re::Digest), Refusal> {
    let payload = lease
        .payload
        .as_ref()
        .ok_or_else(|| Refusal::Invalid("the lease carries no action".into()))?;
    let malformed =
        |what: &str, e: prost::DecodeError| Refusal::Invalid(format!("a malformed {what}: {e}"));
    if payload
        .type_url
        .ends_with("build.bazel.remote.execution.v2.Action")
    {
        let a = re::Action::decode(payload.value.as_slice()).map_err(|e| malformed("Action", e))?;
        let (_, d) = digest::of_message(&a);
        Ok((a, d))
    } else if payload
        .type_url
        .ends_with("build.bazel.remote.execution.v2.Digest")
    {
        let d = re::Digest::decode(payload.value.as_slice()).map_err(|e| malformed("Digest", e))?;
        let bytes = remote
            .read_blob(&d, MESSAGE_MAX)
            .map_err(Refusal::from_cas)?;
        let a = re::Action::decode(bytes.as_slice()).map_err(|e| malformed("Action", e))?;
        Ok((a, d))
    } else {
        Err(Refusal::Invalid(format!(
            "an unknown payload {}",
            text::message(&payload.type_url)
        )))
    }
}

/// Everything checked before anything is created: the command, the toolchain, the environment,
/// the time limit, the input tree and the room for it.
fn check(w: &Worker, remote: &Remote, action: &re::Action) -> Result<Checked, Refusal> {
    let cmd_digest = action
        .command_digest
        .clone()
        .ok_or_else(|| Refusal::Invalid("the action has no command".into()))?;
    let bytes = remote
        .read_blob(&cmd_digest, MESSAGE_MAX)
        .map_err(Refusal::from_cas)?;
    let command = re::Command::decode(bytes.as_slice())
        .map_err(|e| Refusal::Invalid(format!("a malformed Command: {e}")))?;
    let args = command.arguments.clone();
    check_command(&command)?;
    check_toolchain(w, action, &command)?;
    let mut env = Vec::new();
    for v in &command.environment_variables {
        crate::environ::check(&v.name, w.allow_test_env)
            .map_err(|why| Refusal::Invalid(format!("refused: {why}")))?;
        env.push((v.name.clone(), v.value.clone()));
    }
    let timeout = time_limit(w, action)?;
    let root = action
        .input_root_digest
        .clone()
        .ok_or_else(|| Refusal::Invalid("the action has no input root".into()))?;
    let tree = tree::fetch(remote, &root, &w.limits)?;
    if tree.root_has(OUTPUT) {
        return Err(Refusal::Invalid(format!(
            "the input root holds {OUTPUT}, the action's output: only what the compile writes is returned"
        )));
    }
    let free = free_space(&w.work_dir);
    if free.is_some_and(|f| f < tree.bytes.saturating_add(SPACE_MARGIN)) {
        return Err(Refusal::Exhausted(format!(
            "the work directory has {} free, the inputs need {} and some room",
            crate::hlo::summary::human(free.unwrap_or(0)),
            crate::hlo::summary::human(tree.bytes)
        )));
    }
    Ok(Checked {
        args,
        env,
        timeout,
        tree,
    })
}

/// Only `neuronx-cc compile <model> ... --output model.neff`, with model.neff as its one output.
fn check_command(command: &re::Command) -> Result<(), Refusal> {
    let args = &command.arguments;
    #[allow(deprecated)]
    let outputs_ok = command
        .output_paths
        .iter()
        .chain(command.output_files.iter())
        .all(|p| p == OUTPUT);
    let is_compile = args.len() >= 5
        && args[0] == PROGRAM
        && args[1] == "compile"
        && args[args.len() - 2] == "--output"
        && args[args.len() - 1] == OUTPUT
        && outputs_ok
        && !args[2].starts_with('-');
    if !is_compile {
        return Err(Refusal::Invalid(format!(
            "refused: nxcc worker runs only compile actions ({PROGRAM} compile <model> ... --output {OUTPUT}), not {}",
            text::line(&crate::shell::join(args), 500)
        )));
    }
    super::check_compile_args(&args[2..])
        .map_err(|why| Refusal::Invalid(format!("refused: {}", text::message(&why))))
}

/// The action's toolchain must be this worker's.
fn check_toolchain(w: &Worker, action: &re::Action, command: &re::Command) -> Result<(), Refusal> {
    #[allow(deprecated)]
    let wanted = command
        .platform
        .as_ref()
        .or(action.platform.as_ref())
        .and_then(|p| {
            p.properties
                .iter()
                .find(|p| p.name == action::TOOLCHAIN_PROPERTY)
        })
        .map(|p| p.value.clone());
    match wanted {
        Some(t) if t != w.toolchain_id => Err(Refusal::Precondition(format!(
            "refused: the action wants the toolchain {}, this worker has {}",
            text::message(&t),
            w.toolchain_id
        ))),
        _ => Ok(()),
    }
}

/// The action's `timeout`, within the worker's `--max-timeout` (which is also the limit of an
/// action that sets none).
fn time_limit(w: &Worker, action: &re::Action) -> Result<Option<Duration>, Refusal> {
    let own = match &action.timeout {
        None => None,
        Some(t) if t.seconds < 0 || t.nanos < 0 || (t.seconds == 0 && t.nanos == 0) => {
            return Err(Refusal::Invalid(format!(
                "the action's timeout ({} s, {} ns) is not a positive duration",
                t.seconds, t.nanos
            )))
        }
        Some(t) => Some(Duration::new(t.seconds as u64, t.nanos as u32)),
    };
    Ok(match (own, w.max_timeout) {
        (Some(a), Some(m)) => Some(a.min(m)),
        (a, m) => a.or(m),
    })
}

/// Bytes free for this user on the file system of `dir` (`None`: unknown).
fn free_space(dir: &Path) -> Option<u64> {
    let s = rustix::fs::statvfs(dir).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// The action's invocation, as `nxcc compile` would make it in the action's directory with the
/// action's environment (with this worker's `--toolchain`, and its log in that directory), or
/// how planning failed: its status and its text.
fn plan_of(w: &Worker, c: &Checked, dir: &Path) -> Result<Invocation, (CompileStatus, String)> {
    let mut argv: Vec<String> = c.args[1..].to_vec();
    if let With::Toolchain(t) = &w.with {
        argv.extend(["--toolchain".into(), t.clone()]);
        argv.extend(["--logfile".into(), "log-neuron-cc.txt".into()]);
    }
    let probe = RequestProbe {
        system: SystemProbe::at(dir),
        env: &c.env,
    };
    Invocation::from_argv(PROGRAM, &argv, &probe).map_err(|r| match r.failure() {
        Some(failure) if !matches!(r, crate::plan::Refusal::NotACompile(_)) => {
            (CompileStatus::Failed(failure), r.render())
        }
        _ => {
            let text = "the action is not a compile".to_string();
            (CompileStatus::Failed(Failure::Usage), text)
        }
    })
}

/// A compile as the lease saw it: its result, and its console's stdout and stderr.
struct Compiled {
    result: CompileResult,
    stdout: Tail,
    stderr: Tail,
}

/// Run the compile through the one entry point, its console kept as its stdout and stderr,
/// ended when the lease is cancelled or the action's time limit passes.
fn compile(
    w: &Worker,
    c: &Checked,
    planned: Result<Invocation, (CompileStatus, String)>,
    cancel: &Cancel,
) -> Compiled {
    let streams = Arc::new(Mutex::new((Tail::default(), Tail::default())));
    let plan = match planned {
        Ok(p) => p,
        Err((status, text)) => {
            let mut s = streams.lock().unwrap_or_else(|p| p.into_inner());
            text.trim_end().lines().for_each(|l| s.1.push(l));
            let lines = text.trim_end().lines().map(str::to_string).collect();
            let (stdout, stderr) = std::mem::take(&mut *s);
            let result = CompileResult::new(status, lines, Vec::new());
            return Compiled {
                result,
                stdout,
                stderr,
            };
        }
    };
    let kept = streams.clone();
    let sink: Sink = Arc::new(move |line: &str, is_err: bool| {
        let mut s = kept.lock().unwrap_or_else(|p| p.into_inner());
        if is_err {
            s.1.push(line)
        } else {
            s.0.push(line)
        }
    });
    let cancellation = Cancellation::new();
    let options = Options {
        console: Console::Sink(sink),
        cancel: cancellation.clone(),
        worker_env: c.env.clone(),
        ..Options::terminal()
    };
    let engine = match &w.with {
        With::Toolchain(_) => Engine::Pipeline,
        With::Compiler(p) => Engine::external(p),
    };
    let result = within(c.timeout, cancel, &cancellation, || {
        (w.compile)(&plan, options, &engine)
    });
    let (stdout, stderr) = std::mem::take(&mut *streams.lock().unwrap_or_else(|p| p.into_inner()));
    Compiled {
        result,
        stdout,
        stderr,
    }
}

/// How often the watch of a running compile looks at the lease's cancellation.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// Run `f` with `cancellation` (the compile's own, not the lease's: the lease's flag also ends
/// the calls that store the result), cancelled when the lease is cancelled (the server, a
/// drain) or for its time limit once `limit` has passed.
fn within<T>(
    limit: Option<Duration>,
    lease: &Cancel,
    cancellation: &Cancellation,
    f: impl FnOnce() -> T,
) -> T {
    let deadline = limit.map(|l| std::time::Instant::now() + l);
    let (done, ended) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || loop {
            if ended.recv_timeout(WATCH_EVERY) != Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                return;
            }
            if lease.is_cancelled() {
                return cancellation.cancel(CancelReason::Stopped);
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return cancellation.cancel(CancelReason::TimeLimit);
            }
        });
        let out = f();
        drop(done);
        out
    })
}

/// Store the streams and, after a success, the NEFF the compile wrote; the result.
fn store(
    remote: &Remote,
    bot_id: &str,
    dir: &Path,
    exit_code: i32,
    stdout: Tail,
    stderr: Tail,
) -> Result<re::ActionResult, Refusal> {
    let mut blobs = Vec::new();
    let (out_b, err_b) = (stdout.bytes(), stderr.bytes());
    let (out_d, err_d) = (digest::of_bytes(&out_b), digest::of_bytes(&err_b));
    blobs.push((out_d.clone(), Blob::Bytes(out_b)));
    blobs.push((err_d.clone(), Blob::Bytes(err_b)));
    let mut output_files = Vec::new();
    if exit_code == 0 {
        // The compile's own file: a regular file it created (the input root cannot hold one of
        // this name), never followed through a link.
        let neff = dir.join(OUTPUT);
        let written = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&neff)
            .and_then(|f| f.metadata())
            .map(|m| m.is_file());
        if let Ok(true) = written {
            let d = digest::of_file(&neff).map_err(|e| {
                Refusal::Internal(format!("cannot read the compile's {OUTPUT}: {e}"))
            })?;
            blobs.push((d.clone(), Blob::File(neff)));
            output_files.push(re::OutputFile {
                path: OUTPUT.into(),
                digest: Some(d),
                is_executable: false,
                contents: Default::default(),
                node_properties: None,
            });
        }
    }
    remote.upload_missing(&blobs).map_err(Refusal::from_cas)?;
    Ok(re::ActionResult {
        output_files,
        exit_code,
        stdout_digest: Some(out_d),
        stderr_digest: Some(err_d),
        execution_metadata: Some(re::ExecutedActionMetadata {
            worker: bot_id.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The memory estimate of the compile `args` (`compile <model> ...`) laid out in `dir`: the
/// cache's estimate for its plan (recorded, similar, or the formula), as the daemon makes it.
fn estimate_of(w: &Worker, plan: Option<&Invocation>, dir: &Path, args: &[String]) -> u64 {
    let engine = match &w.with {
        With::Compiler(p) => Engine::external(p),
        With::Toolchain(_) => Engine::Pipeline,
    };
    let size = std::fs::metadata(dir.join(&args[1]))
        .map(|m| m.len())
        .unwrap_or(0);
    let key = plan.and_then(|p| crate::cache::CacheConfig::off().key(p, &engine).ok());
    match key {
        Some(k) => crate::cache::estimate(None, &k).bytes,
        None => crate::cache::estimate::formula_estimate(
            &crate::cache::features::Features::of_size(size),
        ),
    }
}

/// The last [`OUTPUT_KEEP`] bytes of a stream, whole lines.
#[derive(Default)]
pub struct Tail {
    lines: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Tail {
    /// Add a line.
    pub fn push(&mut self, line: &str) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line.to_string());
        while self.bytes > OUTPUT_KEEP {
            match self.lines.pop_front() {
                Some(l) => self.bytes -= l.len() + 1,
                None => break,
            }
        }
    }

    /// The kept lines, each ended by a newline.
    pub fn bytes(&self) -> Vec<u8> {
        let mut s = String::with_capacity(self.bytes);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.into_bytes()
    }
}
