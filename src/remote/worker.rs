//! `nxcc worker --remote grpc://HOST:PORT`: a bot of the Remote Workers API. It advertises its
//! platform (`OSFamily`, `ISA`, the toolchain identity), holds `--max-concurrent` bot sessions
//! (the server hands one lease per session), and runs each lease's action through the one
//! admission ([`crate::admission`]: `--memory-budget`, the cache's estimates) in a fresh
//! directory: only compile actions (`neuronx-cc compile <model> ... --output model.neff`; anything
//! else is answered with a failed result saying why), with the environment allow-list of
//! [`crate::environ`], under nxcc's supervision (`nxcc compile`, or `--compiler PATH`). Outputs,
//! stdout and stderr go to the CAS; the result to the server. SIGTERM (or SIGINT) drains: no new
//! leases, the running ones finish and are reported, then exit 0.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;

use super::action::{self, OUTPUT, PROGRAM};
use super::bots::{self, BotSession, BotStatus, Device, Lease, LeaseState, Property};
use super::client::{Address, Remote, RemoteError};
use super::digest;
use super::re;
use crate::admission::Admission;
use crate::cli::flags::{
    flag, Action, Choices, Default as FlagDefault, Flag, Kind, Scope, Visibility,
};
use crate::cli::subcommand::{Stop, Subcommand, HELP};
use crate::engine::Engine;
use crate::run::process::{self, Cancel, End, Spec};
use crate::toolchain::Request;

/// How long a poll for a lease waits (BuildGrid answers with a lease or at the deadline).
pub const POLL: Duration = Duration::from_secs(5);

/// How often a bot with a running lease tells the server it is alive.
pub const KEEPALIVE: Duration = Duration::from_secs(2);

/// At most this much of a command's stdout or stderr is kept (the end of it).
pub const OUTPUT_KEEP: usize = 4 << 20;

/// The gRPC status code of a refused action (`INVALID_ARGUMENT`).
pub const REFUSED_CODE: i32 = 3;

#[rustfmt::skip]
static REMOTE: Flag = flag("--remote", &[], "remote", Action::Store, Kind::Str, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The server's bots service: grpc://HOST:PORT (required).");
#[rustfmt::skip]
static INSTANCE: Flag = flag("--remote-instance", &[], "remote_instance", Action::Store, Kind::Str, FlagDefault::Str(""), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The instance name (default: the server's default).");
#[rustfmt::skip]
static MAX: Flag = flag("--max-concurrent", &[], "max_concurrent", Action::Store, Kind::Int, FlagDefault::Int(1), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Leases held at once (one bot session each).");
#[rustfmt::skip]
static BUDGET: Flag = flag("--memory-budget", &[], "memory_budget", Action::Store, Kind::Str, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Run an action only while the estimated peak memory of the running ones plus its own fits (512M, 16G, ...; auto = 80% of MemAvailable).");
#[rustfmt::skip]
static TOOLCHAIN: Flag = flag("--toolchain", &[], "toolchain", Action::Store, Kind::Str, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile with this toolchain directory, or sim (the simulated toolchain).");
#[rustfmt::skip]
static COMPILER: Flag = flag("--compiler", &[], "compiler", Action::Store, Kind::Path, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Compile with this external compiler (PATH compile <args> --output model.neff).");
#[rustfmt::skip]
static WORK_DIR: Flag = flag("--work-dir", &[], "work_dir", Action::Store, Kind::Path, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Where each action gets its fresh directory (default: a private temporary directory).");
#[rustfmt::skip]
static NAME: Flag = flag("--name", &[], "name", Action::Store, Kind::Str, FlagDefault::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "The bot id prefix (default: HOST-PID).");
#[rustfmt::skip]
static TEST_ENV: Flag = flag("--allow-test-env", &[], "allow_test_env", Action::StoreTrue, Kind::Bool, FlagDefault::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Accept the simulated toolchain's NXCC_SIM_* variables in actions (tests).");

static OWN_FLAGS: [&Flag; 10] = [
    &HELP, &REMOTE, &INSTANCE, &MAX, &BUDGET, &TOOLCHAIN, &COMPILER, &WORK_DIR, &NAME, &TEST_ENV,
];

static COMMAND: Subcommand = Subcommand {
    name: "worker",
    flags: &OWN_FLAGS,
    positionals: &[],
    about: "Run compile actions for a Remote Execution API server (the Remote Workers API).",
};

/// What the worker compiles with.
#[derive(Debug, Clone)]
enum With {
    /// `nxcc compile --toolchain X` (this executable).
    Toolchain(String),
    /// `PATH compile ...`.
    Compiler(PathBuf),
}

struct Worker {
    address: Address,
    with: With,
    toolchain_id: String,
    admission: Arc<Admission>,
    work_dir: PathBuf,
    allow_test_env: bool,
    draining: Arc<AtomicBool>,
    running: AtomicUsize,
    bot_prefix: String,
    log: Mutex<()>,
}

impl Worker {
    fn say(&self, line: &str) {
        let _g = self.log.lock().unwrap_or_else(|p| p.into_inner());
        eprintln!("nxcc worker: {line}");
    }
}

/// Run `worker`; returns the exit status.
pub fn main(prog: &str, args: &[String]) -> i32 {
    let parsed = match COMMAND.parse(prog, args) {
        Ok(p) => p,
        Err(stop) => return stop.report(),
    };
    let usage = |m: String| Stop::Usage(COMMAND.usage_error(prog, m)).report();
    let Some(url) = parsed.str("remote") else {
        return usage("the following arguments are required: --remote".into());
    };
    let address = match Address::parse(url, parsed.str("remote_instance").unwrap_or("")) {
        Ok(a) => a,
        Err(e) => return usage(format!("argument --remote: {e}")),
    };
    let max = match parsed.last("max_concurrent").map(|o| &o.value) {
        Some(crate::cli::namespace::Value::Int(n)) if *n >= 1 && *n <= 256 => *n as usize,
        None => 1,
        _ => return usage("argument --max-concurrent: must be between 1 and 256".into()),
    };
    let budget = match parsed.str("memory_budget") {
        None => None,
        Some(s) => match crate::admission::parse_size(s) {
            Ok(n) => Some(n),
            Err(e) => return usage(format!("argument --memory-budget: {e}")),
        },
    };
    let launch = std::env::current_dir().unwrap_or_default();
    let (with, toolchain_id) = match (parsed.str("toolchain"), parsed.str("compiler")) {
        (Some(_), Some(_)) => {
            return usage("argument --compiler: not allowed with argument --toolchain".into())
        }
        (None, Some(c)) => {
            let p = crate::plan::absolute(&launch, c);
            if !p.is_file() {
                return usage(format!(
                    "argument --compiler: {} is not a file",
                    p.display()
                ));
            }
            let id = action::toolchain_id(&Request::Auto, None, &Engine::external(&p));
            (With::Compiler(p), id)
        }
        (t, None) => {
            let req = Request::from(t, None, &launch);
            let located = crate::toolchain::locate(&req);
            if located.is_none() {
                return usage(
                    "no toolchain found: give --toolchain DIR, --toolchain sim or --compiler PATH"
                        .into(),
                );
            }
            let spelled = match &req {
                Request::Dir(d) => d.display().to_string(),
                Request::Simulated => "sim".to_string(),
                Request::Auto => located
                    .as_ref()
                    .map(|t| t.bin.display().to_string())
                    .unwrap_or_default(),
            };
            let id = action::toolchain_id(&req, located.as_ref(), &Engine::Pipeline);
            (With::Toolchain(spelled), id)
        }
    };
    let own_tmp;
    let work_dir = match parsed.str("work_dir") {
        Some(d) => {
            let p = crate::plan::absolute(&launch, d);
            if let Err(e) = std::fs::create_dir_all(&p) {
                return usage(format!(
                    "argument --work-dir: cannot create {}: {e}",
                    p.display()
                ));
            }
            p
        }
        None => match tempfile::Builder::new().prefix("nxcc-worker-").tempdir() {
            Ok(d) => {
                own_tmp = d;
                own_tmp.path().to_path_buf()
            }
            Err(e) => {
                eprintln!("nxcc worker: cannot make a work directory: {e}");
                return crate::error::EXIT_COMPILE_FAILED;
            }
        },
    };
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let worker = Arc::new(Worker {
        address: address.clone(),
        with,
        toolchain_id,
        admission: Admission::new(max, budget),
        work_dir,
        allow_test_env: parsed.flag("allow_test_env"),
        draining: Arc::new(AtomicBool::new(false)),
        running: AtomicUsize::new(0),
        bot_prefix: parsed
            .str("name")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{host}-{}", std::process::id())),
        log: Mutex::new(()),
    });
    match crate::run::signals::install() {
        Ok(sig) => {
            let d = worker.draining.clone();
            sig.on_signal(move |_| d.store(true, Ordering::SeqCst));
        }
        Err(e) => eprintln!("nxcc worker: warning: signals are not handled ({e})"),
    }
    // Fail fast when the server is not there at all.
    if let Err(e) = Remote::connect(&address) {
        eprintln!("nxcc worker: {e}");
        return crate::error::EXIT_COMPILE_FAILED;
    }
    worker.say(&format!(
        "serving {} with {} slot(s), memory budget {}, toolchain {}",
        address.url,
        max,
        budget
            .map(crate::hlo::summary::human)
            .unwrap_or_else(|| "none".into()),
        worker.toolchain_id
    ));
    let handles: Vec<_> = (0..max)
        .map(|i| {
            let w = worker.clone();
            std::thread::spawn(move || slot(&w, i))
        })
        .collect();
    let mut status = 0;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                worker.say(&format!("stopped: {e}"));
                status = crate::error::EXIT_COMPILE_FAILED;
            }
            Err(_) => status = crate::error::EXIT_COMPILE_FAILED,
        }
    }
    if status == 0 {
        worker.say("drained; exiting");
    }
    status
}

fn properties(toolchain_id: &str) -> Vec<Property> {
    action::platform(toolchain_id)
        .properties
        .into_iter()
        .map(|p| Property {
            key: p.name,
            value: p.value,
        })
        .collect()
}

/// One bot session: poll for a lease, run it, report, until drained.
fn slot(w: &Worker, index: usize) -> Result<(), RemoteError> {
    let remote = Remote::connect(&w.address)?;
    let bot_id = format!("{}-{index}", w.bot_prefix);
    let fresh = BotSession {
        bot_id: bot_id.clone(),
        status: BotStatus::Ok as i32,
        worker: Some(bots::Worker {
            devices: vec![Device {
                handle: bot_id.clone(),
                properties: properties(&w.toolchain_id),
            }],
            ..Default::default()
        }),
        version: format!("nxcc-{}", crate::VERSION),
        ..Default::default()
    };
    let mut session = create(&remote, w, fresh.clone())?;
    let mut failures = 0;
    loop {
        if w.draining.load(Ordering::SeqCst) && session.leases.is_empty() {
            session.status = BotStatus::BotTerminating as i32;
            let _ = remote.update_bot_session(session, Duration::from_secs(2));
            return Ok(());
        }
        let lease = session.leases.first().cloned();
        let next = match lease {
            Some(l) if l.state == LeaseState::Pending as i32 => {
                let mut accepted = l.clone();
                accepted.state = LeaseState::Active as i32;
                session.leases = vec![accepted.clone()];
                match remote.update_bot_session(session.clone(), POLL) {
                    Ok(s)
                        if s.leases
                            .first()
                            .is_some_and(|x| x.state == LeaseState::Active as i32) =>
                    {
                        let done = run_lease(w, &remote, &bot_id, s.clone(), accepted);
                        let mut s = s;
                        s.leases = vec![done];
                        remote.update_bot_session(s, POLL)
                    }
                    other => other,
                }
            }
            Some(l) if l.state == LeaseState::Cancelled as i32 => {
                remote.update_bot_session(session.clone(), POLL)
            }
            Some(_) | None => {
                session.leases.clear();
                remote.update_bot_session(session.clone(), POLL)
            }
        };
        match next {
            Ok(s) => {
                failures = 0;
                session = s;
            }
            Err(e) => {
                failures += 1;
                if failures > 5 {
                    return Err(e);
                }
                w.say(&format!("{bot_id}: {e}; starting a new session"));
                std::thread::sleep(Duration::from_secs(1));
                session = create(&remote, w, fresh.clone())?;
            }
        }
    }
}

fn create(remote: &Remote, w: &Worker, s: BotSession) -> Result<BotSession, RemoteError> {
    let mut tries = 0;
    loop {
        match remote.create_bot_session(s.clone(), POLL) {
            Ok(s) => return Ok(s),
            Err(e) if tries < 5 && !w.draining.load(Ordering::SeqCst) => {
                tries += 1;
                w.say(&format!("{}: {e}; retrying", s.bot_id));
                std::thread::sleep(Duration::from_secs(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// Run a lease while keeping the session alive; the lease as it is reported back (COMPLETED,
/// with its status and result).
fn run_lease(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    session: BotSession,
    lease: Lease,
) -> Lease {
    let finished = std::sync::atomic::AtomicBool::new(false);
    let result = std::thread::scope(|s| {
        let h = s.spawn(|| {
            let r = run_action(w, remote, bot_id, &lease);
            finished.store(true, Ordering::SeqCst);
            r
        });
        let mut last = Instant::now();
        while !finished.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
            if last.elapsed() >= KEEPALIVE {
                last = Instant::now();
                let _ = remote.update_bot_session(session.clone(), Duration::from_secs(2));
            }
        }
        h.join()
    });
    let (status, result) = match result {
        Ok(Ok(r)) => (
            bazel_remote_apis::google::rpc::Status {
                code: 0,
                message: String::new(),
                details: Vec::new(),
            },
            Some(r),
        ),
        Ok(Err(refusal)) => {
            let (code, message, r) = *refusal;
            (
                bazel_remote_apis::google::rpc::Status {
                    code,
                    message,
                    details: Vec::new(),
                },
                r,
            )
        }
        Err(_) => (
            bazel_remote_apis::google::rpc::Status {
                code: 13,
                message: "the worker failed while running the action".into(),
                details: Vec::new(),
            },
            None,
        ),
    };
    let mut done = lease;
    done.state = LeaseState::Completed as i32;
    done.status = Some(status);
    done.result = result.map(|r| bazel_remote_apis::google::protobuf::Any {
        type_url: "type.googleapis.com/build.bazel.remote.execution.v2.ActionResult".into(),
        value: r.encode_to_vec(),
    });
    done
}

/// A lease that did not produce a result the normal way: the status code, its message, and the
/// result to report with it (boxed: it is large).
type Refusal = Box<(i32, String, Option<re::ActionResult>)>;

fn refuse(message: String) -> Refusal {
    let result = re::ActionResult {
        exit_code: 2,
        stderr_raw: format!("nxcc worker: {message}\n").into_bytes(),
        ..Default::default()
    };
    Box::new((REFUSED_CODE, message, Some(result)))
}

/// Fetch, check, run and upload one action.
fn run_action(
    w: &Worker,
    remote: &Remote,
    bot_id: &str,
    lease: &Lease,
) -> Result<re::ActionResult, Refusal> {
    let internal = |e: RemoteError| Box::new((13, e.to_string(), None));
    let payload = lease
        .payload
        .as_ref()
        .ok_or_else(|| refuse("the lease carries no action".into()))?;
    let action = if payload
        .type_url
        .ends_with("build.bazel.remote.execution.v2.Action")
    {
        re::Action::decode(payload.value.as_slice())
            .map_err(|e| refuse(format!("a malformed Action: {e}")))?
    } else if payload
        .type_url
        .ends_with("build.bazel.remote.execution.v2.Digest")
    {
        let d = re::Digest::decode(payload.value.as_slice())
            .map_err(|e| refuse(format!("a malformed Digest: {e}")))?;
        let bytes = remote.read_blob(&d).map_err(internal)?;
        re::Action::decode(bytes.as_slice())
            .map_err(|e| refuse(format!("a malformed Action: {e}")))?
    } else {
        return Err(refuse(format!("an unknown payload {}", payload.type_url)));
    };
    let cmd_digest = action
        .command_digest
        .clone()
        .ok_or_else(|| refuse("the action has no command".into()))?;
    let command = re::Command::decode(remote.read_blob(&cmd_digest).map_err(internal)?.as_slice())
        .map_err(|e| refuse(format!("a malformed Command: {e}")))?;
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
        let message = format!(
            "refused: nxcc worker runs only compile actions ({PROGRAM} compile <model> ... --output {OUTPUT}), not {}",
            crate::shell::join(args)
        );
        w.say(&message);
        return Err(refuse(message));
    }
    if let Err(why) = check_compile_args(&args[2..]) {
        let message = format!("refused: {why}");
        w.say(&message);
        return Err(refuse(message));
    }
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
    if wanted.as_deref().is_some_and(|t| t != w.toolchain_id) {
        return Err(refuse(format!(
            "refused: the action wants the toolchain {}, this worker has {}",
            wanted.unwrap_or_default(),
            w.toolchain_id
        )));
    }
    let mut env: Vec<(String, String)> = Vec::new();
    for v in &command.environment_variables {
        if let Err(why) = crate::environ::check(&v.name, w.allow_test_env) {
            return Err(refuse(format!("refused: {why}")));
        }
        env.push((v.name.clone(), v.value.clone()));
    }
    // A fresh directory for the action, removed afterwards.
    let dir = tempfile::Builder::new()
        .prefix("action-")
        .tempdir_in(&w.work_dir)
        .map_err(|e| Box::new((13, format!("cannot make the action's directory: {e}"), None)))?;
    let root = action
        .input_root_digest
        .clone()
        .ok_or_else(|| refuse("the action has no input root".into()))?;
    materialize(remote, &root, dir.path(), 0).map_err(|e| match e {
        Fetch::Remote(e) => internal(e),
        Fetch::Bad(m) => refuse(m),
    })?;
    let estimate = estimate_of(w, dir.path(), &args[1..]);
    w.say(&format!(
        "{bot_id}: lease {} waiting for memory ({} estimated)",
        lease.id,
        crate::hlo::summary::human(estimate)
    ));
    let cancel = Cancel::new();
    let Some(permit) = w.admission.acquire(estimate, Some(&cancel)) else {
        return Err(Box::new((
            13,
            "cancelled while waiting for memory".into(),
            None,
        )));
    };
    let now = w.running.fetch_add(1, Ordering::SeqCst) + 1;
    w.say(&format!(
        "{bot_id}: lease {} started (running: {now})",
        lease.id
    ));
    let (program, mut argv): (PathBuf, Vec<String>) = match &w.with {
        With::Toolchain(t) => {
            let mut a: Vec<String> = args[1..].to_vec();
            a.push("--toolchain".into());
            a.push(t.clone());
            (
                std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nxcc")),
                a,
            )
        }
        With::Compiler(p) => (p.clone(), args[1..].to_vec()),
    };
    if matches!(w.with, With::Toolchain(_)) {
        argv.push("--logfile".into());
        argv.push("log-neuron-cc.txt".into());
    }
    let mut spec = Spec::new(&program, dir.path()).args(argv.iter());
    for (k, v) in &env {
        spec = spec.env(k.clone(), v.clone());
    }
    let mut stdout = Tail::default();
    let mut stderr = Tail::default();
    let ran = process::run(
        &spec,
        &mut |stream, line| match stream {
            process::Stream::Stdout => stdout.push(line),
            process::Stream::Stderr => stderr.push(line),
        },
        &cancel,
    );
    let left = w.running.fetch_sub(1, Ordering::SeqCst) - 1;
    drop(permit);
    let exit_code = match &ran {
        Ok(o) => match o.end {
            End::Exited(c) => c,
            End::Signaled(s) => 128 + s,
            End::TimedOut(_) | End::Cancelled(_) => 124,
        },
        Err(e) => {
            stderr.push(&format!(
                "nxcc worker: cannot run {}: {e}",
                program.display()
            ));
            127
        }
    };
    w.say(&format!(
        "{bot_id}: lease {} finished with exit status {exit_code} (running: {left})",
        lease.id
    ));
    // Upload the outputs and the streams.
    let mut blobs = Vec::new();
    let out_b = stdout.bytes();
    let err_b = stderr.bytes();
    let out_d = digest::of_bytes(&out_b);
    let err_d = digest::of_bytes(&err_b);
    blobs.push((out_d.clone(), super::cas::Blob::Bytes(out_b)));
    blobs.push((err_d.clone(), super::cas::Blob::Bytes(err_b)));
    let mut output_files = Vec::new();
    let neff = dir.path().join(OUTPUT);
    if exit_code == 0 {
        match digest::of_file(&neff) {
            Ok(d) => {
                blobs.push((d.clone(), super::cas::Blob::File(neff.clone())));
                output_files.push(re::OutputFile {
                    path: OUTPUT.into(),
                    digest: Some(d),
                    is_executable: false,
                    contents: Default::default(),
                    node_properties: None,
                });
            }
            Err(e) => {
                return Err(Box::new((
                    13,
                    format!("the compile succeeded but left no {OUTPUT}: {e}"),
                    None,
                )))
            }
        }
    }
    remote.upload_missing(&blobs).map_err(internal)?;
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

/// A compile action's arguments (after `compile`) must name one model, a plain name in the input
/// root, and set nothing local to a machine ([`crate::cli::semantics`]: where logs, reports, work
/// dirs and caches go, which toolchain, SaveTemps) but the final `--output model.neff`: an action cannot
/// make the worker write outside the action's directory.
pub fn check_compile_args(args: &[String]) -> Result<(), String> {
    let parsed = crate::cli::compile_parser(PROGRAM)
        .parse(args)
        .map_err(|e| format!("the compile arguments do not parse: {e:?}"))?;
    if !parsed.extras.is_empty() {
        return Err(format!(
            "unknown compile arguments: {}",
            crate::shell::join(&parsed.extras)
        ));
    }
    crate::cli::semantics::check(&parsed, |o| {
        o.flag.dest == "output" && o.value.as_str() == Some(OUTPUT)
    })
    .map_err(|e| format!("the action's {e}"))?;
    let models: Vec<&String> = parsed.positionals.iter().flatten().collect();
    match models.as_slice() {
        [m] if !m.is_empty() && !m.contains('/') && *m != "." && *m != ".." => Ok(()),
        _ => Err("a compile action names exactly one model, a plain name in its input root".into()),
    }
}

/// The last [`OUTPUT_KEEP`] bytes of a stream, whole lines.
#[derive(Default)]
struct Tail {
    lines: std::collections::VecDeque<String>,
    bytes: usize,
}

impl Tail {
    fn push(&mut self, line: &str) {
        self.bytes += line.len() + 1;
        self.lines.push_back(line.to_string());
        while self.bytes > OUTPUT_KEEP {
            match self.lines.pop_front() {
                Some(l) => self.bytes -= l.len() + 1,
                None => break,
            }
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut s = String::with_capacity(self.bytes);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s.into_bytes()
    }
}

enum Fetch {
    Remote(RemoteError),
    Bad(String),
}

/// Lay out a Directory tree from the CAS under `dir` (names checked: one component each).
fn materialize(remote: &Remote, d: &re::Digest, dir: &Path, depth: usize) -> Result<(), Fetch> {
    if depth > 64 {
        return Err(Fetch::Bad("the input root is nested too deep".into()));
    }
    let bytes = remote.read_blob(d).map_err(Fetch::Remote)?;
    let tree = re::Directory::decode(bytes.as_slice())
        .map_err(|e| Fetch::Bad(format!("a malformed Directory: {e}")))?;
    let ok =
        |n: &str| !n.is_empty() && n != "." && n != ".." && !n.contains('/') && !n.contains('\0');
    for f in &tree.files {
        if !ok(&f.name) {
            return Err(Fetch::Bad(format!(
                "a bad file name {:?} in the input root",
                f.name
            )));
        }
        let digest = f.digest.clone().unwrap_or_default();
        remote
            .download_to(&digest, &dir.join(&f.name))
            .map_err(Fetch::Remote)?;
    }
    for sub in &tree.directories {
        if !ok(&sub.name) {
            return Err(Fetch::Bad(format!(
                "a bad directory name {:?} in the input root",
                sub.name
            )));
        }
        let p = dir.join(&sub.name);
        std::fs::create_dir(&p)
            .map_err(|e| Fetch::Bad(format!("cannot create {}: {e}", p.display())))?;
        materialize(
            remote,
            &sub.digest.clone().unwrap_or_default(),
            &p,
            depth + 1,
        )?;
    }
    if !tree.symlinks.is_empty() {
        return Err(Fetch::Bad(
            "the input root holds symbolic links; compile actions take files and directories only"
                .into(),
        ));
    }
    Ok(())
}

/// The memory estimate of the compile `args` (`compile <model> ...`) laid out in `dir`: the
/// cache's estimate for its plan (recorded, similar, or the formula), as the daemon makes it.
fn estimate_of(w: &Worker, dir: &Path, args: &[String]) -> u64 {
    let engine = match &w.with {
        With::Compiler(p) => Engine::external(p),
        With::Toolchain(_) => Engine::Pipeline,
    };
    let mut argv: Vec<String> = args.to_vec();
    if let With::Toolchain(t) = &w.with {
        argv.push("--toolchain".into());
        argv.push(t.clone());
    }
    let planned = match crate::cli::parse(PROGRAM, &argv) {
        Ok(crate::cli::Command::Compile(c)) => {
            crate::plan::build(&c, &crate::plan::SystemProbe::at(dir)).ok()
        }
        _ => None,
    };
    let size = std::fs::metadata(dir.join(&args[1]))
        .map(|m| m.len())
        .unwrap_or(0);
    let key = planned
        .as_ref()
        .and_then(|p| crate::cache::Key::compute(p, &engine).ok());
    match key {
        Some(k) => crate::cache::estimate(None, &k).bytes,
        None => crate::cache::estimate::formula_estimate(
            &crate::cache::features::Features::of_size(size),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_plain_compile_arguments_are_run() {
        assert!(check_compile_args(&v(&[
            "m.pb",
            "--target=trn2",
            "-O1",
            "--output",
            "model.neff"
        ]))
        .is_ok());
        for bad in [
            &["m.pb", "--logfile=/etc/x", "--output", "model.neff"][..],
            &["m.pb", "--timings", "/tmp/t.html", "--output", "model.neff"],
            &["m.pb", "--cache_dir=/x", "--output", "model.neff"],
            &["m.pb", "--output", "/tmp/elsewhere.neff"],
            &["m.pb", "--temp-dir", "/tmp/w", "--output", "model.neff"],
            &["../m.pb", "--output", "model.neff"],
            &["a.pb", "b.pb", "--output", "model.neff"],
            &["m.pb", "--toolchain", "/opt/x", "--output", "model.neff"],
        ] {
            assert!(check_compile_args(&v(bad)).is_err(), "{bad:?}");
        }
    }
}
