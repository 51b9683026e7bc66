//! How connections are served and ended: a client that half-closes after its request (the end of
//! its stream is not its going away) gets its answer and its compile runs to the end; the
//! connections of one uid are limited, the one over the limit answered `429` and closed; every
//! refused client reads its whole answer, however many come at once.

use std::io::{BufReader, Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use serde_json::json;

use crate::common::*;

/// Send `request`, shut the writing side, read the answer.
fn half_closed(daemon: &Daemon, request: &[u8]) -> Response {
    let s = daemon.connect();
    (&s).write_all(request).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    read_response(&mut BufReader::new(&s))
}

#[test]
fn a_half_closed_request_is_answered_and_its_compile_runs_to_the_end() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &[], &[]);
    let wd = world.mkdir("w");
    let model = example_model();
    for i in 0..30 {
        let r = half_closed(
            &daemon,
            b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        );
        assert_eq!(r.status, 200, "try {i}: {}", r.text());
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&r.body).unwrap()["pid"],
            daemon.pid()
        );
    }
    // The original client's protocol (keep-alive), then the end of its stream.
    for i in 0..3 {
        let out = format!("o{i}.neff");
        let body = shell_join(&sim_argv(model.to_str().unwrap(), &out, &["--no_cache"]));
        let r = half_closed(&daemon, &original_request(&wd, &body, daemon.pid()));
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(neff_first_input(&wd.join(&out)), "x.1");
    }
    // A streamed compile: not cancelled, its last event is a success.
    let r = half_closed(
        &daemon,
        &v1_request(&json!({
            "argv": [model, "--target", "trn2", "--toolchain", "sim", "--output", "v.neff", "--no_cache"],
            "working_directory": wd,
        })),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let events = r.events();
    let done = events.last().unwrap();
    assert_eq!(done["event"], "done", "{events:?}");
    assert_eq!(done["exit_status"], 0, "{done}");
    assert_eq!(neff_first_input(&wd.join("v.neff")), "x.1");
    assert_eq!(daemon.status()["compiles"]["cancelled"], 0);
    assert!(
        !daemon.log_text().contains("went away"),
        "{}",
        daemon.log_text()
    );
}

#[test]
fn connections_over_the_per_uid_limit_are_answered_429_and_closed() {
    let world = World::new();
    let daemon = Daemon::start(&world, "d", &["--max-connections-per-uid", "3"], &[]);
    let status_of = |d: &Daemon| {
        let r = d.raw(b"GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        (r.status == 200).then(|| serde_json::from_slice::<serde_json::Value>(&r.body).unwrap())
    };
    // Three connections held open, each known to be admitted: it answered a keep-alive request.
    // (A connection closed just before, such as the one that saw the daemon listen, may still
    // hold its slot for a moment: such a refusal is tried again.)
    let admitted = |d: &Daemon| {
        let s = d.connect();
        (&s).write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = read_response(&mut BufReader::new(&s));
        (r.status == 200).then_some(s)
    };
    let mut idle = Vec::new();
    while idle.len() < 3 {
        wait_until(
            Duration::from_secs(30),
            "a connection admitted",
            || match admitted(&daemon) {
                Some(s) => {
                    idle.push(s);
                    true
                }
                None => false,
            },
        );
    }
    let over = |d: &Daemon| {
        let mut s = d.connect();
        let mut answer = String::new();
        // Nothing is sent: the answer comes once the wait for a request head is over, and the
        // daemon closes the connection.
        let _ = s.read_to_string(&mut answer);
        answer
    };
    let answer = {
        let mut a = String::new();
        wait_until(
            Duration::from_secs(30),
            "the fourth connection refused",
            || {
                a = over(&daemon);
                a.starts_with("HTTP/1.1 429 ")
            },
        );
        a
    };
    assert!(
        answer.contains(
            "already has 3 connections open to this nxcc daemon (--max-connections-per-uid)"
        ),
        "{answer}"
    );
    // One closed: the next one is served, and counted.
    drop(idle.remove(0));
    let mut status = None;
    wait_until(Duration::from_secs(30), "a connection served again", || {
        status = status_of(&daemon);
        status.is_some()
    });
    let status = status.unwrap();
    // The two idle ones and the status request itself.
    assert_eq!(status["connections"]["open"], 3, "{status}");
    assert_eq!(status["connections"]["max_per_uid"], 3);
    drop(idle);
    assert!(daemon.log_text().contains("refused a connection from uid"));
}

/// Hold `n` connections, each known to be admitted (it answered a keep-alive request).
fn hold_admitted(daemon: &Daemon, n: usize) -> Vec<std::os::unix::net::UnixStream> {
    let mut idle = Vec::new();
    while idle.len() < n {
        wait_until(hang_guard(), "a connection admitted", || {
            let s = daemon.connect();
            (&s).write_all(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let r = read_response(&mut BufReader::new(&s));
            if r.status == 200 {
                idle.push(s);
            }
            r.status == 200
        });
    }
    idle
}

/// What one client of a burst got: its answer's status, or the error it saw.
fn burst(daemon: &Daemon, n: usize) -> Vec<Result<u16, String>> {
    let barrier = std::sync::Barrier::new(n);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let barrier = &barrier;
                scope.spawn(move || {
                    let body = "x".repeat(if i % 2 == 0 { 0 } else { 2048 });
                    let request = format!(
                        "POST /v1/compile HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let request = if i % 2 == 0 {
                        "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_string()
                    } else {
                        request
                    };
                    barrier.wait();
                    let mut s = daemon.connect();
                    s.write_all(request.as_bytes())
                        .map_err(|e| format!("write: {e}"))?;
                    let mut answer = Vec::new();
                    s.read_to_end(&mut answer)
                        .map_err(|e| format!("read: {e}"))?;
                    let r = read_response(&mut BufReader::new(&answer[..]));
                    Ok(r.status)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// 200 clients at once against a daemon whose connections are all taken: every one writes its
/// request (a head, or a head and a body) and reads a whole `429` to the end of the stream —
/// none has its connection reset or its write refused. Then 200 more while the connections are
/// free: each reads a `429` or is served.
#[test]
fn two_hundred_clients_at_once_each_read_their_429_or_are_served() {
    const N: usize = 200;
    let world = World::new();
    let daemon = Daemon::start(
        &world,
        "d",
        &["--max-connections", "4", "--max-connections-per-uid", "4"],
        &[],
    );
    let idle = hold_admitted(&daemon, 4);
    let results = burst(&daemon, N);
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {N} clients: {failed:?}",
        failed.len()
    );
    assert!(results.iter().all(|r| r == &Ok(429)), "{results:?}");
    drop(idle);
    let results = burst(&daemon, N);
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of {N} clients: {failed:?}",
        failed.len()
    );
    // Served: a status (200) or a compile request whose body is no JSON (400).
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Ok(200) | Ok(400) | Ok(429))),
        "{results:?}"
    );
}
