//! Hostile and broken requests: each gets its 4xx with the reason, nothing is compiled, and the
//! daemon goes on serving.

use std::io::{BufReader, Write};
use std::net::Shutdown;

use serde_json::json;

use crate::common::*;

/// Send `request` from another thread (it may be refused before it is all written), shut the
/// writing side if `eof`, and read the answer.
fn send(daemon: &Daemon, request: Vec<u8>, eof: bool) -> Response {
    let s = daemon.connect();
    let w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        let _ = (&w).write_all(&request);
        if eof {
            let _ = w.shutdown(Shutdown::Write);
        }
    });
    let r = read_response(&mut BufReader::new(&s));
    let _ = writer.join();
    r
}

fn post(path: &str, body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// A bad request, whether its writer then ends the stream, the status and a part of the reason
/// the daemon answers.
type Case = (&'static str, Vec<u8>, bool, u16, &'static str);

/// Requests broken at the HTTP level: cut off, not HTTP, bodies and heads too large.
fn broken_http(wd_q: &str) -> Vec<Case> {
    let big_body = vec![b'x'; 2 << 20];
    let mut chunked = b"POST /v1/compile HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    for part in big_body.chunks(64 << 10) {
        chunked.extend(format!("{:x}\r\n", part.len()).bytes());
        chunked.extend_from_slice(part);
        chunked.extend(b"\r\n");
    }
    chunked.extend(b"0\r\n\r\n");
    let big_head = format!(
        "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Filler: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(20 << 10)
    );
    vec![
        (
            "head cut off by the end of stream",
            b"POST /compile HTTP/1.1\r\nHost: x\r\nContent-Le".to_vec(),
            true,
            400,
            "before its head was complete",
        ),
        (
            "request line only, then end of stream",
            b"POST /compile?working_directory=/tmp HTTP/1.1\r\n".to_vec(),
            true,
            400,
            "before its head was complete",
        ),
        ("not HTTP", b"hello there\r\n\r\n".to_vec(), false, 400, ""),
        (
            "2 MiB body with Content-Length",
            post(&format!("/compile?working_directory={wd_q}"), &big_body),
            false,
            413,
            "larger than 1048576 bytes",
        ),
        (
            "2 MiB chunked body",
            chunked,
            false,
            413,
            "larger than 1048576 bytes",
        ),
        (
            "20 KiB head",
            big_head.into_bytes(),
            false,
            413,
            "request head is larger than 16384 bytes",
        ),
    ]
}

/// Requests well framed whose content is refused: bad JSON, bad UTF-8 or quoting, a bad working
/// directory.
fn refused_content(wd_q: &str) -> Vec<Case> {
    vec![
        (
            "invalid JSON",
            post("/v1/compile", b"{\"argv\": [\"m.pb\""),
            false,
            400,
            "invalid JSON request",
        ),
        (
            "JSON of the wrong shape",
            post(
                "/v1/compile",
                br#"{"argv": "m.pb", "working_directory": "/tmp"}"#,
            ),
            false,
            400,
            "invalid JSON request",
        ),
        (
            "unknown JSON field",
            post("/v1/compile", br#"{"argv": [], "working_dir": "/tmp"}"#),
            false,
            400,
            "unknown field `working_dir`",
        ),
        (
            "invalid UTF-8 (/compile)",
            post(
                &format!("/compile?working_directory={wd_q}"),
                b"compile m\xff.pb",
            ),
            false,
            400,
            "not valid UTF-8",
        ),
        (
            "invalid UTF-8 (/v1/compile)",
            post(
                "/v1/compile",
                b"{\"argv\": [\"\xc3\x28\"], \"working_directory\": \"/tmp\"}",
            ),
            false,
            400,
            "not valid UTF-8",
        ),
        (
            "unbalanced quote",
            post(
                &format!("/compile?working_directory={wd_q}"),
                b"compile 'm.pb --target trn2",
            ),
            false,
            400,
            "missing closing quote",
        ),
        (
            "relative working_directory (/compile)",
            post("/compile?working_directory=rel/dir", b"compile m.pb"),
            false,
            400,
            "working_directory must be an absolute path, not \"rel/dir\"",
        ),
        (
            "relative working_directory (/v1/compile)",
            post(
                "/v1/compile",
                br#"{"argv": ["m.pb"], "working_directory": "rel"}"#,
            ),
            false,
            400,
            "must be an absolute path",
        ),
        (
            "no working_directory",
            post("/compile", b"compile m.pb"),
            false,
            400,
            "missing the working_directory",
        ),
        (
            "bad percent-encoding",
            post("/compile?working_directory=%2", b"compile m.pb"),
            false,
            400,
            "invalid percent-encoding",
        ),
    ]
}

/// Requests whose environment sets what a request may not; and a body shorter than announced.
fn refused_env() -> Vec<Case> {
    vec![
        (
            "an environment that sets the worker's own variables",
            post(
                "/v1/compile",
                br#"{"argv": [], "working_directory": "/tmp", "env": {"NXCC_WORKER_ARGV": "[]"}}"#,
            ),
            false,
            400,
            "NXCC_WORKER_ARGV may not be set by a request",
        ),
        (
            "LD_PRELOAD in env",
            post(
                "/v1/compile",
                br#"{"argv": [], "working_directory": "/tmp", "env": {"LD_PRELOAD": "/tmp/evil.so"}}"#,
            ),
            false,
            400,
            "the environment variable LD_PRELOAD may not be set by a request (a compile runs as the daemon's user)",
        ),
        (
            "PATH in env",
            post(
                "/v1/compile",
                br#"{"argv": [], "working_directory": "/tmp", "env": {"NXCC_TOOLCHAIN": "sim", "PATH": "/tmp/evil"}}"#,
            ),
            false,
            400,
            "the environment variable PATH may not be set",
        ),
        (
            "a test variable on a daemon without --allow-test-env",
            post(
                "/v1/compile",
                br#"{"argv": [], "working_directory": "/tmp", "env": {"NXCC_SIM_FAULT": "walrus_driver:exit=3"}}"#,
            ),
            false,
            400,
            "NXCC_SIM_FAULT is a test variable of the simulated toolchain; this daemon takes it only when started with --allow-test-env",
        ),
        (
            "body shorter than announced, then end of stream",
            b"POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"argv\""
                .to_vec(),
            true,
            400,
            "cannot read the request body",
        ),
    ]
}

#[test]
fn every_bad_request_gets_its_4xx_and_the_daemon_keeps_serving() {
    let world = World::new();
    // A short header timeout, so the slow head below is answered without a long wait (the
    // default is 10 s; the figure is the daemon's, whatever it is).
    let daemon = Daemon::start(&world, "d", &["--head-timeout", "0.5"], &[]);
    let wd = world.mkdir("w");
    let wd_q = wd.display().to_string();
    let model = example_model();

    // A head cut off with no end of stream: answered when the header timeout expires (checked
    // last; it runs meanwhile).
    let slow = {
        let s = daemon.connect();
        (&s).write_all(b"POST /compile HTTP/1.1\r\nHost: x\r\nContent-Le")
            .unwrap();
        std::thread::spawn(move || read_response(&mut BufReader::new(&s)))
    };

    let mut cases = broken_http(&wd_q);
    cases.extend(refused_content(&wd_q));
    cases.extend(refused_env());
    for (what, request, eof, status, reason) in cases {
        let r = send(&daemon, request, eof);
        assert_eq!(r.status, status, "{what}: {}", r.text());
        assert!(r.text().contains(reason), "{what}: {:?}", r.text());
        // The daemon still serves.
        assert_eq!(daemon.status()["running"], 0, "after: {what}");
    }

    let r = slow.join().unwrap();
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(
        r.text().contains("did not arrive within 0.5 s"),
        "{}",
        r.text()
    );

    // Nothing was compiled, and a good compile still works.
    assert!(world.records().is_empty(), "no tool ran");
    let r = daemon.compile(
        &wd,
        &shell_join(&sim_argv(model.to_str().unwrap(), "ok.neff", &[])),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(neff_first_input(&wd.join("ok.neff")), "x.1");
    let (_, events) = daemon.v1(&json!({
        "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "ok2.neff"],
        "working_directory": wd,
    }));
    assert_eq!(events.last().unwrap()["exit_status"], 0);
}
