//! `nxcc compile --remote` against a scripted hostile server ([`super::hostile`]): a result that
//! is not a NEFF, a server that never answers, a stream that never ends, text meant for the
//! terminal; and what a fleet's client needs: retries, `Execute` run again, ByteStream resumed,
//! the server's batch limit, `RequestMetadata`, signals.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nxcc::remote::{digest, re};

use super::buildgrid::{self, model_variant, said, text, Client};
use super::common::cache_entries;
use super::hostile::{Answer, Hostile, ReadMode};

const LIMIT: Duration = Duration::from_secs(120);

fn compile_args<'a>(out: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    super::compile_args("mlp.hlo_module.pb", out, extra)
}

/// A compile into `model.neff` from `c` against the hostile server `h`, with `env`.
fn against(c: &Client, h: &Hostile, env: &[(&str, &str)]) -> std::process::Output {
    c.run(
        &compile_args("model.neff", &["--remote", &h.url()]),
        env,
        LIMIT,
    )
}

/// How many calls of `rpc` the hostile server `h` has seen.
fn calls(h: &Hostile, rpc: &str) -> usize {
    h.state.seen().calls.iter().filter(|c| *c == rpc).count()
}

/// A valid NEFF: the example compiled here once.
fn valid_neff() -> &'static [u8] {
    static NEFF: OnceLock<Vec<u8>> = OnceLock::new();
    NEFF.get_or_init(|| {
        let c = Client::new();
        let o = c.run(&compile_args("model.neff", &[]), &[], LIMIT);
        assert!(o.status.success(), "{}", text(&o.stderr));
        std::fs::read(c.path().join("model.neff")).unwrap()
    })
}

/// A successful result whose `model.neff` is `neff`.
fn result_naming(neff: &re::Digest) -> re::ActionResult {
    re::ActionResult {
        output_files: vec![re::OutputFile {
            path: "model.neff".into(),
            digest: Some(neff.clone()),
            ..Default::default()
        }],
        exit_code: 0,
        ..Default::default()
    }
}

fn executed(r: re::ActionResult) -> re::ExecuteResponse {
    re::ExecuteResponse {
        result: Some(r),
        ..Default::default()
    }
}

/// Files in `dir` whose names hold `part` (leftover partial downloads).
fn files_named(dir: &Path, part: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(part))
        .collect()
}

fn verify_neff(path: &Path) -> bool {
    std::process::Command::new(buildgrid::NXCC)
        .args(["neff-info", "--verify"])
        .arg(path)
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn a_remote_result_that_is_not_a_neff_reaches_neither_output_nor_cache() {
    let h = Hostile::start();
    let script = b"#!/bin/sh\necho owned > /tmp/owned\n";
    let d = h.state.put(script);
    h.state.script().action_result = Answer::With(result_naming(&d));
    h.state.script().execute = Answer::With(executed(result_naming(&d)));
    let c = Client::new();
    let o = c.run(
        &compile_args(
            "model.neff",
            &["--remote", &h.url(), "--cache_dir", "cache-dir"],
        ),
        &[],
        LIMIT,
    );
    let out = text(&o.stdout) + &text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("is not a valid NEFF"), "{out}");
    assert!(!out.contains("Compiler status PASS"), "{out}");
    assert!(
        !c.path().join("model.neff").exists(),
        "a script reached --output"
    );
    assert!(files_named(c.path(), "partial").is_empty());
    // The bad cached answer was not trusted again: the action was executed past the cache.
    assert_eq!(h.state.seen().skip_cache_lookup, vec![true]);
    // Nothing in the local cache: a later compile without the server does not serve it.
    let stats = c.run(&["cache", "stats", "--cache_dir", "cache-dir"], &[], LIMIT);
    assert!(
        text(&stats.stdout).contains("entries: 0"),
        "{}",
        text(&stats.stdout)
    );

    // With --remote-cache the lie is a miss: the compile runs here and its own (valid) NEFF
    // replaces the server's answer.
    let c = Client::new();
    let o = c.run(
        &compile_args("model.neff", &["--remote-cache", &h.url()]),
        &[],
        LIMIT,
    );
    let out = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("is not a valid NEFF") && out.contains("compiling here"),
        "{out}"
    );
    assert!(verify_neff(&c.path().join("model.neff")));
    let updated = h.state.seen().updated.clone();
    assert_eq!(updated.len(), 1);
    assert_ne!(updated[0].output_files[0].digest.as_ref(), Some(&d));
}

#[test]
fn cache_verify_finds_a_neff_that_is_not_one() {
    let c = Client::new();
    let o = c.run(
        &compile_args("model.neff", &["--cache_dir", "cache-dir"]),
        &[],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v = c.run(&["cache", "verify", "--cache_dir", "cache-dir"], &[], LIMIT);
    assert!(v.status.success(), "{}", text(&v.stdout));
    // An entry whose NEFF was replaced by a script, its record made to match (as an entry an
    // older nxcc stored from a lying server looks).
    let entry = find_entry(&c.path().join("cache-dir"));
    let script = b"#!/bin/sh\necho owned\n";
    std::fs::write(entry.join("model.neff"), script).unwrap();
    let meta_path = entry.join("meta.json");
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&meta_path).unwrap()).unwrap();
    meta["neff"]["blake3"] = blake3::hash(script).to_hex().to_string().into();
    meta["neff"]["size"] = (script.len() as u64).into();
    std::fs::write(&meta_path, serde_json::to_vec_pretty(&meta).unwrap()).unwrap();
    let v = c.run(&["cache", "verify", "--cache_dir", "cache-dir"], &[], LIMIT);
    let out = text(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{out}");
    assert!(
        out.contains("not a valid NEFF") && out.contains("1 corrupt"),
        "{out}"
    );
    assert!(!entry.exists(), "the entry was not evicted");
}

fn find_entry(cache: &Path) -> std::path::PathBuf {
    cache_entries(cache)
        .into_iter()
        .find(|e| e.join("meta.json").is_file())
        .unwrap_or_else(|| panic!("no entry in {}", cache.display()))
}

#[test]
fn a_checked_remote_neff_is_cached_with_its_origin() {
    let h = Hostile::start();
    let d = h.state.put(valid_neff());
    let mut r = result_naming(&d);
    r.execution_metadata = Some(re::ExecutedActionMetadata {
        worker: "worker-7".into(),
        ..Default::default()
    });
    h.state.script().action_result = Answer::With(r);
    let c = Client::new();
    let o = c.run(
        &compile_args(
            "model.neff",
            &["--remote", &h.url(), "--cache_dir", "cache-dir"],
        ),
        &[],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read(c.path().join("model.neff")).unwrap(),
        valid_neff()
    );
    let entry = find_entry(&c.path().join("cache-dir"));
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(entry.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["origin"]["remote"], h.url(), "{meta}");
    assert_eq!(meta["origin"]["worker"], "worker-7", "{meta}");
    assert!(meta["origin"]["action"].as_str().unwrap().contains('/'));
    assert!(!entry.join("origin.json").exists());
    // A local compile later is served from the entry.
    let o = c.run(
        &compile_args("again.neff", &["--cache_dir", "cache-dir"]),
        &[],
        LIMIT,
    );
    assert!(
        text(&o.stdout).contains("Using a cached neff"),
        "{}",
        text(&o.stdout)
    );
}

/// A loopback port where something accepts connections and never says a word.
fn silent_listener() -> (u16, std::thread::JoinHandle<()>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let t = std::thread::spawn(move || {
        let mut held = Vec::new();
        l.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while Instant::now() < until {
            match l.accept() {
                Ok((s, _)) => held.push(s),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
            if held.len() > 4 {
                return;
            }
        }
    });
    (port, t)
}

#[test]
fn a_server_that_never_answers_is_given_up_on_by_each_deadline() {
    let short = [
        ("NXCC_REMOTE_CONNECT_TIMEOUT", "1"),
        ("NXCC_REMOTE_CALL_TIMEOUT", "1"),
        ("NXCC_REMOTE_IDLE_TIMEOUT", "1"),
        ("NXCC_REMOTE_RETRY_TIMEOUT", "1.5"),
    ];
    // A TCP peer that never speaks HTTP/2: the connect deadline.
    let (port, _t) = silent_listener();
    let c = Client::new();
    let url = format!("grpc://127.0.0.1:{port}");
    let o = c.run(
        &compile_args("model.neff", &["--remote", &url]),
        &short,
        LIMIT,
    );
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains("no answer to GetCapabilities within 1 s") && out.contains(&url),
        "{out}"
    );

    // A lookup that hangs: the call deadline, tried again within the retry budget.
    let h = Hostile::start();
    h.state.script().action_result = Answer::Hang;
    let o = against(&c, &h, &short);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains("GetActionResult failed: DeadlineExceeded: no answer within 1 s"),
        "{out}"
    );
    assert!(calls(&h, "GetActionResult") >= 2);

    // An execution that is accepted and never answered: the stream's idle deadline, then
    // Execute again, within the budget.
    let h = Hostile::start();
    h.state.script().execute = Answer::Hang;
    let o = against(&c, &h, &short);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains("Execute failed: DeadlineExceeded: no news of the operation for 1 s"),
        "{out}"
    );
    assert!(calls(&h, "Execute") >= 2);
    assert!(!c.path().join("model.neff").exists());
}

#[test]
fn a_signal_ends_a_remote_compile_at_once_and_cancels_its_operation() {
    for (sig, status) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        // The operation is accepted, its stream ends; the client follows it by name
        // (`WaitExecution`: proof that it has read the operation's name) and hears nothing more.
        let h = Hostile::start();
        h.state.script().execute_breaks = 1;
        h.state.script().wait_execution = Answer::Hang;
        let c = Client::new();
        let child = c.spawn(&compile_args("model.neff", &["--remote", &h.url()]));
        let t = Instant::now();
        while calls(&h, "WaitExecution") == 0 {
            assert!(
                t.elapsed() < LIMIT,
                "the compile never followed its operation"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: kill takes no pointers: a signal to a process (or group) this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let o = buildgrid::wait_limited(child, LIMIT);
        let out = said(&o);
        assert_eq!(o.status.code(), Some(status), "{out}");
        assert!(out.contains("Compilation interrupted by"), "{out}");
        assert_eq!(
            h.state.seen().cancelled,
            vec!["operations/op-0".to_string()]
        );
    }
}

#[test]
fn downloads_stop_at_the_size_their_digest_declares() {
    // A NEFF declared as 1,000 bytes, streamed forever.
    let h = Hostile::start();
    let declared = re::Digest {
        hash: "ab".repeat(32),
        size_bytes: 1000,
    };
    h.state.script().action_result = Answer::With(result_naming(&declared));
    h.state.script().execute = Answer::With(executed(result_naming(&declared)));
    h.state.script().read = ReadMode::Endless;
    let c = Client::new();
    let o = against(&c, &h, &[]);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("byte 1001 is one too many"), "{out}");
    assert!(!c.path().join("model.neff").exists());
    assert!(files_named(c.path(), "partial").is_empty());
    let sent = h.state.read_bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        sent < 64 << 20,
        "the client read {sent} bytes of a 1000-byte blob"
    );

    // A failed compile's stderr declared as 100 bytes, streamed forever.
    let h = Hostile::start();
    let stderr = re::Digest {
        hash: "cd".repeat(32),
        size_bytes: 100,
    };
    h.state.script().execute = Answer::With(executed(re::ActionResult {
        exit_code: 1,
        stderr_digest: Some(stderr),
        ..Default::default()
    }));
    h.state.script().read = ReadMode::Endless;
    let o = against(&c, &h, &[]);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains("the remote stderr could not be read") && out.contains("byte 101"),
        "{out}"
    );
    let sent = h.state.read_bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        sent < 64 << 20,
        "the client read {sent} bytes of a 100-byte stderr"
    );
}

/// A small file system of its own at a directory (unmounted when dropped).
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .status()
            .unwrap();
        assert!(
            mounted.success(),
            "this test needs root (a tmpfs of {size})"
        );
        Tmpfs(at.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A server that executes the action (its cache misses) into a result whose NEFF is `declared`,
/// read as `mode`; it holds no such blob.
fn lying_about(declared: &re::Digest, mode: ReadMode) -> Hostile {
    let h = Hostile::start();
    h.state.script().execute = Answer::With(executed(result_naming(declared)));
    h.state.script().read = mode;
    h
}

#[test]
fn a_declared_size_past_the_maximum_or_the_free_space_is_refused_before_a_byte_is_written() {
    // 2^62 bytes, from a server that sends 4 MiB per read whatever the offset.
    let huge = re::Digest {
        hash: "ab".repeat(32),
        size_bytes: 1 << 62,
    };
    let h = lying_about(&huge, ReadMode::IgnoreOffset(4 << 20));
    let c = Client::new();
    let o = against(&c, &h, &[]);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains("declares 4611686018427387904 bytes, more than the largest accepted"),
        "{out}"
    );
    assert_eq!(calls(&h, "Read"), 0, "{out}");
    assert!(!c.path().join("model.neff").exists());
    assert!(files_named(c.path(), "partial").is_empty());

    // 64 MiB, under the maximum, into a file system with 8 MiB free.
    let small = Tmpfs::mount(&c.path().join("small"), "8m");
    let claim = re::Digest {
        hash: "cd".repeat(32),
        size_bytes: 64 << 20,
    };
    let h = lying_about(&claim, ReadMode::IgnoreOffset(4 << 20));
    let o = c.run(
        &compile_args("small/model.neff", &["--remote", &h.url()]),
        &[],
        LIMIT,
    );
    let out = said(&o);
    drop(small);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("bytes free on the file system of"), "{out}");
    assert_eq!(calls(&h, "Read"), 0, "{out}");
}

#[test]
fn a_server_that_ignores_read_offset_is_caught_at_the_first_resumed_read() {
    // 32 MiB declared; each read sends the blob's first 4 MiB and ends.
    let claim = re::Digest {
        hash: "ef".repeat(32),
        size_bytes: 32 << 20,
    };
    let h = lying_about(&claim, ReadMode::IgnoreOffset(4 << 20));
    let c = Client::new();
    let o = against(&c, &h, &[]);
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("does not honour read_offset"), "{out}");
    let sent = h.state.read_bytes.load(std::sync::atomic::Ordering::SeqCst);
    assert!(sent <= 8 << 20, "the client took {sent} bytes");
    assert!(!c.path().join("model.neff").exists());
    assert!(files_named(c.path(), "partial").is_empty());
}

#[test]
fn a_trickling_server_is_given_up_on_within_the_retry_budget() {
    // 10 bytes per read, then silence: never the minimum rate, so never progress. Each attempt
    // costs an idle timeout (2 s) of the 3 s budget: two attempts, then the client gives up.
    let claim = re::Digest {
        hash: "12".repeat(32),
        size_bytes: 10_000,
    };
    let h = lying_about(&claim, ReadMode::Trickle(10));
    let c = Client::new();
    let o = against(
        &c,
        &h,
        &[
            ("NXCC_REMOTE_IDLE_TIMEOUT", "2"),
            ("NXCC_REMOTE_RETRY_TIMEOUT", "3"),
        ],
    );
    let out = said(&o);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(
        out.contains(
            "ByteStream.Read failed: DeadlineExceeded: 10 bytes in 2 s, less than the minimum rate"
        ),
        "{out}"
    );
    assert!(
        out.contains("(tried 2 times over ") && out.contains("; the retry budget is 3 s)"),
        "{out}"
    );
    assert_eq!(calls(&h, "Read"), 2, "{out}");
    assert!(!c.path().join("model.neff").exists());
}

#[test]
fn server_text_is_escaped_and_cut_before_it_is_printed() {
    let long = "y".repeat(3 << 20);
    let h = Hostile::start();
    h.state.script().execute = Answer::With(executed(re::ActionResult {
        exit_code: 1,
        stderr_raw: format!("\x1b[31mEVIL\x1b[0m\n{long}\n\x1b[31mEVIL again\x1b[0m\n")
            .into_bytes(),
        execution_metadata: Some(re::ExecutedActionMetadata {
            worker: "\x1b]0;pwned\x07worker".into(),
            ..Default::default()
        }),
        ..Default::default()
    }));
    let c = Client::new();
    let o = against(&c, &h, &[]);
    let check = |o: &std::process::Output| {
        let out = said(o);
        assert_eq!(o.status.code(), Some(70), "{}", &out[..out.len().min(4000)]);
        assert!(!out.contains('\x1b'), "an escape sequence was printed raw");
        assert!(!out.contains('\x07'));
        let longest = out.lines().map(str::len).max().unwrap_or(0);
        assert!(longest < 4000, "a line of {longest} bytes was printed");
        out
    };
    let out = check(&o);
    assert!(
        out.contains("\\u{1b}[31mEVIL again") && out.contains("more bytes)"),
        "{}",
        &out[..out.len().min(4000)]
    );
    let log = std::fs::read_to_string(c.path().join("log-neuron-cc.txt")).unwrap();
    assert!(!log.contains('\x1b') && log.lines().all(|l| l.len() < 4000));

    // A refusal whose status message is the attack.
    let h = Hostile::start();
    h.state.script().execute = Answer::With(re::ExecuteResponse {
        status: Some(bazel_remote_apis::google::rpc::Status {
            code: 3,
            message: format!("\x1b[2J\x1b[Hrefused {long}"),
            details: Vec::new(),
        }),
        ..Default::default()
    });
    let o = against(&c, &h, &[]);
    let out = check(&o);
    assert!(
        out.contains("InvalidArgument: \\u{1b}[2J"),
        "{}",
        &out[..out.len().min(4000)]
    );
}

#[test]
fn retries_carry_a_compile_through_a_server_that_is_unavailable_for_now() {
    let h = Hostile::start();
    let d = h.state.put(valid_neff());
    // The codes Bazel tries again (each once), then an answer.
    h.state.script().action_result_failures = vec![
        tonic::Code::Unavailable,
        tonic::Code::ResourceExhausted,
        tonic::Code::DeadlineExceeded,
        tonic::Code::Aborted,
        tonic::Code::Internal,
        tonic::Code::Unknown,
    ];
    h.state.script().action_result = Answer::With(result_naming(&d));
    let c = Client::new();
    let o = against(&c, &h, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls = h.state.seen().calls.clone();
    assert_eq!(
        calls.iter().filter(|c| *c == "GetActionResult").count(),
        7,
        "{calls:?}"
    );

    // A refusal is not tried again.
    let h = Hostile::start();
    h.state.script().action_result =
        Answer::Fail(tonic::Code::PermissionDenied, "not for you".into());
    let o = against(&c, &h, &[]);
    let out = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("PermissionDenied: not for you"), "{out}");
    let calls = h.state.seen().calls.clone();
    assert_eq!(
        calls.iter().filter(|c| *c == "GetActionResult").count(),
        1,
        "{calls:?}"
    );
}

#[test]
fn execute_runs_again_when_the_server_lost_the_operation() {
    let h = Hostile::start();
    let d = h.state.put(valid_neff());
    // The first Execute's stream ends after its first answer; WaitExecution: NOT_FOUND.
    h.state.script().execute_breaks = 1;
    h.state.script().execute = Answer::With(executed(result_naming(&d)));
    let c = Client::new();
    let o = against(&c, &h, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let calls: Vec<String> = h
        .state
        .seen()
        .calls
        .iter()
        .filter(|c| c.contains("Execut"))
        .cloned()
        .collect();
    assert_eq!(calls, ["Execute", "WaitExecution", "Execute"]);
    assert_eq!(
        std::fs::read(c.path().join("model.neff")).unwrap(),
        valid_neff()
    );
}

#[test]
fn bytestream_reads_resume_from_the_bytes_received() {
    let h = Hostile::start();
    let neff = valid_neff();
    let d = h.state.put(neff);
    h.state.script().action_result = Answer::With(result_naming(&d));
    h.state.script().read = ReadMode::StallAfter(neff.len() / 2);
    let c = Client::new();
    let o = against(&c, &h, &[("NXCC_REMOTE_IDLE_TIMEOUT", "1")]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(std::fs::read(c.path().join("model.neff")).unwrap(), neff);
    // Resumed where it stopped, asking again for its last bytes (at most 4 KiB) to check them.
    let offsets = h.state.seen().read_offsets.clone();
    let half = neff.len() / 2;
    assert_eq!(offsets, [0, (half - half.min(4096)) as i64]);
}

#[test]
fn uploads_keep_to_the_server_s_batch_limit_and_resume_from_the_committed_size() {
    let h = Hostile::start();
    h.state.script().capabilities = Answer::With(re::ServerCapabilities {
        cache_capabilities: Some(re::CacheCapabilities {
            max_batch_total_size_bytes: 64 << 10,
            ..Default::default()
        }),
        ..Default::default()
    });
    let d = h.state.put(valid_neff());
    h.state.script().execute = Answer::With(executed(result_naming(&d)));
    // The connection breaks after the second of the three 1 MiB chunks.
    h.state.script().write_breaks_after = Some(3 << 19);
    let c = Client::new();
    let model = model_variant("upload", 5 << 19);
    std::fs::write(c.path().join("big.pb"), &model).unwrap();
    let url = h.url();
    let mut args = compile_args("model.neff", &["--remote", &url]);
    args[1] = "big.pb";
    let o = c.run(&args, &[], LIMIT);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let seen = h.state.seen();
    assert!(
        seen.batch_sizes.iter().all(|n| *n <= 64 << 10),
        "{:?}",
        seen.batch_sizes
    );
    assert_eq!(
        seen.write_offsets,
        [0, 2 << 20],
        "resumed from the committed size"
    );
    drop(seen);
    let m = digest::of_bytes(&model);
    assert_eq!(
        h.state.blobs.lock().unwrap().get(&m.hash).map(Vec::len),
        Some(model.len()),
        "the model did not arrive whole"
    );
}

#[test]
fn request_metadata_names_the_tool_the_action_and_the_run() {
    let h = Hostile::start();
    let d = h.state.put(valid_neff());
    h.state.script().action_result = Answer::With(result_naming(&d));
    let c = Client::new();
    let graphs = c.path().join("graphs");
    std::fs::create_dir(&graphs).unwrap();
    for i in 0..3 {
        std::fs::write(
            graphs.join(format!("g{i}.pb")),
            model_variant(&format!("md-{i}"), 8),
        )
        .unwrap();
    }
    let run = |out: &str| {
        let o = c.run(
            &[
                "parallel-compile",
                "graphs",
                "--output-dir",
                out,
                "--jobs",
                "3",
                "--no_cache",
                "--remote",
                &h.url(),
                "--",
                "--target",
                "trn2",
                "--toolchain",
                "sim",
            ],
            &[],
            LIMIT,
        );
        assert!(
            o.status.success(),
            "{}\n{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        let seen = std::mem::take(&mut h.state.seen().metadata);
        seen.into_iter()
            .filter(|(m, _)| m == "GetActionResult")
            .map(|(_, md)| md)
            .collect::<Vec<_>>()
    };
    let first = run("out1");
    assert_eq!(first.len(), 3);
    let ids = |f: fn(&re::RequestMetadata) -> String, v: &[re::RequestMetadata]| {
        v.iter()
            .map(f)
            .collect::<std::collections::BTreeSet<String>>()
    };
    assert_eq!(ids(|m| m.action_id.clone(), &first).len(), 3);
    assert_eq!(ids(|m| m.tool_invocation_id.clone(), &first).len(), 3);
    let correlated = ids(|m| m.correlated_invocations_id.clone(), &first);
    assert_eq!(correlated.len(), 1);
    let tool = first[0].tool_details.clone().unwrap();
    assert_eq!(tool.tool_name, "nxcc");
    assert_eq!(tool.tool_version, env!("CARGO_PKG_VERSION"));
    let second = run("out2");
    let again = ids(|m| m.correlated_invocations_id.clone(), &second);
    assert_eq!(again.len(), 1);
    assert_ne!(again, correlated, "two runs shared an invocation id");
}
