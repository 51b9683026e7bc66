//! The daemon's HTTP/1.1 surface (hyper): routes, limits and answers (06-daemon.md).
//!
//! | request | answer |
//! |---|---|
//! | `POST /compile?working_directory=<abs dir>`, body = shell-quoted compile arguments | `200`, empty body, or `400` + the error lines; `X-Nxcc-Exit-Status` on both |
//! | `POST /v1/compile`, JSON `{"argv", "working_directory", "env"?}` | `200`, newline-delimited JSON events, ending with `done` |
//! | `POST /v1/explain`, the same JSON | JSON: whether the compile would hit the cache ([`super::explain`]) |
//! | `GET /v1/status` | JSON |
//! | `POST /exit` | `200`, then the daemon stops |
//! | another path | `404`, `Unrecognized command <path>` |
//! | another method on a known path | `405` |
//!
//! A peer whose uid is not served never gets here: [`super::peer`] refuses it at `accept`. A
//! request head over
//! [`HEAD_LIMIT`] or a body over [`BODY_LIMIT`] gets `413` (a head over [`HARD_HEAD_LIMIT`] is not
//! read at all: hyper answers `431`); a malformed request, bad JSON, a body that does not split
//! into arguments, invalid UTF-8, an argument holding a NUL byte, a relative `working_directory`
//! or an `env` name a request may not set ([`super::environ`]) gets `400` with the reason; a body
//! that does not arrive within the head timeout (`--head-timeout`, default [`HEAD_TIMEOUT`]) gets
//! `408` (a head: see [`super::conn`]); a compile request that reaches a stopping daemon gets
//! `503`.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;

use super::events::{self, CancelOnDrop};
use super::job;
use super::state::{Daemon, Peer};

/// The largest request head served (request line and headers), bytes.
pub const HEAD_LIMIT: usize = 16 << 10;
/// The largest head hyper reads at all; a larger one gets hyper's `431` and the connection closes.
pub const HARD_HEAD_LIMIT: usize = 64 << 10;
/// The largest request body, bytes.
pub const BODY_LIMIT: usize = 1 << 20;
/// How long a request head or body may take to arrive by default (also how long an idle
/// connection is kept); `--head-timeout` changes it, for tests.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// The exit-status header of `/compile` answers.
pub const EXIT_STATUS_HEADER: &str = "x-nxcc-exit-status";

/// A response body: a whole text, or a stream of events.
pub type Body = BoxBody<Bytes, Infallible>;

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed()
}

/// A `text/plain` answer.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A `400`-family answer that also closes the connection (the rest of the request may be unread).
fn refuse(status: StatusCode, reason: &str) -> Response<Body> {
    let mut r = text(status, format!("{reason}\n"));
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

fn json_response(status: StatusCode, v: &impl serde::Serialize) -> Response<Body> {
    let mut body = serde_json::to_vec_pretty(v).unwrap_or_default();
    body.push(b'\n');
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

/// The size of a request head as sent: request line, headers, blank line.
pub fn head_size<B>(req: &Request<B>) -> usize {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().len())
        .unwrap_or(1);
    let line = req.method().as_str().len() + 1 + target + 1 + "HTTP/1.1".len() + 2;
    let headers: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + 2 + v.len() + 2)
        .sum();
    line + headers + 2
}

/// Decode one `application/x-www-form-urlencoded` component (`+` is a space, `%XX` a byte).
pub fn form_decode(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| format!("invalid percent-encoding in the query: {s:?}"))?;
                out.push(hex);
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| "the query is not valid UTF-8".to_string())
}

/// A query parameter (the last occurrence wins, as the original's `dict(parse_qsl(...))`).
pub fn query_param(query: Option<&str>, name: &str) -> Result<Option<String>, String> {
    let mut found = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if form_decode(k)? == name {
            found = Some(form_decode(v)?);
        }
    }
    Ok(found)
}

/// A `working_directory` as the daemon accepts it: absolute, without NUL bytes.
pub fn working_directory(raw: &str) -> Result<PathBuf, String> {
    if raw.contains('\0') {
        return Err("working_directory holds a NUL byte".to_string());
    }
    let p = PathBuf::from(raw);
    if !p.is_absolute() {
        return Err(format!(
            "working_directory must be an absolute path, not {raw:?}"
        ));
    }
    Ok(p)
}

/// Read the whole body: at most [`BODY_LIMIT`] bytes of UTF-8, within `timeout`.
async fn read_body(req: Request<Incoming>, timeout: Duration) -> Result<String, Response<Body>> {
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request body is larger than {BODY_LIMIT} bytes"),
        )
    };
    if let Some(len) = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        if len > BODY_LIMIT as u64 {
            return Err(too_large());
        }
    }
    let body = Limited::new(req.into_body(), BODY_LIMIT);
    let collected = match tokio::time::timeout(timeout, body.collect()).await {
        Err(_) => {
            return Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            ))
        }
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => return Err(too_large()),
        Ok(Err(e)) => {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                &format!("cannot read the request body: {e}"),
            ))
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    String::from_utf8(collected.to_vec()).map_err(|e| {
        refuse(
            StatusCode::BAD_REQUEST,
            &format!(
                "the request body is not valid UTF-8 (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut r = text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("use {allow} for this path\n"),
    );
    r.headers_mut()
        .insert(ALLOW, HeaderValue::from_static(allow));
    r
}

/// Answer one request.
pub async fn handle(
    daemon: Arc<Daemon>,
    peer: Peer,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let _activity = daemon.activity();
    if head_size(&req) > HEAD_LIMIT {
        return Ok(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("the request head is larger than {HEAD_LIMIT} bytes"),
        ));
    }
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let answer = match (path.as_str(), method) {
        ("/compile", Method::POST) => compile(daemon.clone(), peer, req).await,
        ("/compile", _) => method_not_allowed("POST"),
        ("/v1/compile", Method::POST) => compile_v1(daemon.clone(), peer, req).await,
        ("/v1/compile", _) => method_not_allowed("POST"),
        ("/v1/explain", Method::POST) => explain_v1(daemon.clone(), req).await,
        ("/v1/explain", _) => method_not_allowed("POST"),
        ("/v1/status", Method::GET) => json_response(StatusCode::OK, &daemon.status()),
        ("/v1/status", _) => method_not_allowed("GET"),
        ("/exit", Method::POST) => {
            daemon.request_stop(&format!(
                "POST /exit from uid {} (pid {})",
                peer.uid,
                peer.pid_text()
            ));
            text(StatusCode::OK, "")
        }
        ("/exit", _) => method_not_allowed("POST"),
        (other, _) => text(
            StatusCode::NOT_FOUND,
            format!("Unrecognized command {other}"),
        ),
    };
    Ok(answer)
}

/// Why a request that reaches a stopping daemon is refused (`503`).
pub const STOPPING: &str = "the nxcc daemon is stopping; send the compile again to start a new one";

fn stopping() -> Response<Body> {
    refuse(StatusCode::SERVICE_UNAVAILABLE, STOPPING)
}

/// `POST /compile?working_directory=...`: the original's protocol.
async fn compile(daemon: Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Response<Body> {
    let wd = match query_param(req.uri().query(), "working_directory") {
        Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
        Ok(None) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "missing the working_directory query parameter (POST /compile?working_directory=<absolute dir>)",
            )
        }
        Ok(Some(raw)) => match working_directory(&raw) {
            Ok(p) => p,
            Err(e) => return refuse(StatusCode::BAD_REQUEST, &e),
        },
    };
    let body = match read_body(req, daemon.config.head_timeout).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let argv = match shell_words::split(&body) {
        Ok(a) => a,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                &format!("cannot split the request body into arguments: {e}"),
            )
        }
    };
    if let Some(e) = crate::cli::nul_argument(&argv) {
        return refuse(StatusCode::BAD_REQUEST, &e);
    }
    if daemon.stopping() {
        return stopping();
    }
    let request = job::Request {
        argv,
        working_directory: wd,
        env: Vec::new(),
    };
    let Some((id, control, handle)) =
        daemon.spawn_compile(request, Arc::new(job::Discard), &peer, "/compile")
    else {
        return stopping();
    };
    let mut guard = CancelOnDrop::new(daemon.clone(), id, control);
    let ended = Daemon::join(handle).await;
    guard.disarm();
    let (status, body) = if ended.exit_status() == 0 {
        (StatusCode::OK, String::new())
    } else {
        let mut t = ended.error_lines.join("\n");
        if t.is_empty() {
            t = format!(
                "the compile failed with exit status {}",
                ended.exit_status()
            );
        }
        t.push('\n');
        (StatusCode::BAD_REQUEST, t)
    };
    let mut r = text(status, body);
    r.headers_mut()
        .insert(EXIT_STATUS_HEADER, HeaderValue::from(ended.exit_status()));
    r
}

/// Check the request's environment: names a request may set ([`super::environ::check`];
/// `allow_test_env`: the daemon's `--allow-test-env`), string values without NUL.
pub fn request_env(
    env: Option<serde_json::Map<String, Value>>,
    allow_test_env: bool,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for (k, v) in env.unwrap_or_default() {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(format!("invalid environment variable name {k:?}"));
        }
        let Value::String(v) = v else {
            return Err(format!(
                "the value of the environment variable {k} is not a string"
            ));
        };
        if v.contains('\0') {
            return Err(format!(
                "the value of the environment variable {k} holds a NUL byte"
            ));
        }
        super::environ::check(&k, allow_test_env)?;
        out.push((k, v));
    }
    Ok(out)
}

/// How long `/v1/compile` holds its answer's head back for the first line, to send both at once.
const FIRST_LINE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The compile request of a `/v1/compile` or `/v1/explain` body, or the answer refusing it.
async fn v1_request(
    daemon: &Daemon,
    req: Request<Incoming>,
) -> Result<job::Request, Response<Body>> {
    let body = read_body(req, daemon.config.head_timeout).await?;
    let bad = |e: &str| refuse(StatusCode::BAD_REQUEST, e);
    let parsed: super::wire::CompileRequest =
        serde_json::from_str(&body).map_err(|e| bad(&format!("invalid JSON request: {e}")))?;
    let wd = working_directory(&parsed.working_directory).map_err(|e| bad(&e))?;
    let env = request_env(parsed.env, daemon.config.allow_test_env).map_err(|e| bad(&e))?;
    if let Some(e) = crate::cli::nul_argument(&parsed.argv) {
        return Err(bad(&e));
    }
    Ok(job::Request {
        argv: parsed.argv,
        working_directory: wd,
        env,
    })
}

/// `POST /v1/explain`: whether the compile would hit the cache ([`super::explain`]).
async fn explain_v1(daemon: Arc<Daemon>, req: Request<Incoming>) -> Response<Body> {
    let request = match v1_request(&daemon, req).await {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    let d2 = daemon.clone();
    match tokio::task::spawn_blocking(move || super::explain::answer(&d2, &request)).await {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the explanation failed: {e}\n"),
        ),
    }
}

/// `POST /v1/compile`: the compile's events, streamed as it runs.
async fn compile_v1(daemon: Arc<Daemon>, peer: Peer, req: Request<Incoming>) -> Response<Body> {
    let request = match v1_request(&daemon, req).await {
        Ok(r) => r,
        Err(answer) => return answer,
    };
    if daemon.stopping() {
        return stopping();
    }
    let Some((id, mut stream)) = events::stream_compile(&daemon, request, &peer) else {
        return stopping();
    };
    stream.wait_first(FIRST_LINE_WAIT).await;
    let mut r = Response::new(stream.boxed());
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r.headers_mut()
        .insert("x-nxcc-compile-id", HeaderValue::from(id));
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn queries_decode_like_parse_qsl() {
        assert_eq!(
            query_param(
                Some("working_directory=%2Fwork%2Fjob-7"),
                "working_directory"
            )
            .unwrap(),
            Some("/work/job-7".to_string())
        );
        assert_eq!(
            query_param(
                Some("a=1&working_directory=/x+y&working_directory=/z%20w"),
                "working_directory"
            )
            .unwrap(),
            Some("/z w".to_string())
        );
        assert_eq!(query_param(Some("a=1"), "working_directory").unwrap(), None);
        assert_eq!(query_param(None, "working_directory").unwrap(), None);
        assert!(query_param(Some("working_directory=%zz"), "working_directory").is_err());
        assert!(query_param(Some("working_directory=%ff"), "working_directory").is_err());
        assert_eq!(
            query_param(Some("working_directory=%E2%82%AC"), "working_directory").unwrap(),
            Some("€".to_string())
        );
    }

    #[test]
    fn working_directories_must_be_absolute() {
        assert_eq!(working_directory("/a/b").unwrap(), PathBuf::from("/a/b"));
        assert!(working_directory("a/b").unwrap_err().contains("absolute"));
        assert!(working_directory("/a\0b").is_err());
    }

    #[test]
    fn environments() {
        let m = |v: Value| v.as_object().cloned();
        let target = "NEURON_PLATFORM_TARGET_OVERRIDE";
        assert_eq!(
            request_env(m(json!({target: "trn2", "NXCC_SIM_FAULT": "x"})), true).unwrap(),
            vec![
                (target.into(), "trn2".into()),
                ("NXCC_SIM_FAULT".into(), "x".into())
            ]
        );
        let e = request_env(m(json!({"NXCC_SIM_FAULT": "x"})), false).unwrap_err();
        assert!(e.contains("--allow-test-env"), "{e}");
        assert!(request_env(m(json!({"A=B": "1"})), true).is_err());
        assert!(request_env(m(json!({target: 1})), true).is_err());
        assert!(request_env(m(json!({target: "a\u{0}b"})), true).is_err());
        for name in ["NXCC_WORKER_ARGV", "LD_PRELOAD", "PATH"] {
            let e = request_env(m(json!({name: "x"})), true).unwrap_err();
            assert!(e.contains(name) && e.contains("may not be set"), "{e}");
        }
        assert_eq!(request_env(None, false).unwrap(), vec![]);
    }

    #[test]
    fn head_size_counts_the_request_line_and_headers() {
        let req = Request::post("/compile?working_directory=/x")
            .header("host", "h")
            .header("content-length", "3")
            .body(())
            .unwrap();
        let expected =
            "POST /compile?working_directory=/x HTTP/1.1\r\nhost: h\r\ncontent-length: 3\r\n\r\n"
                .len();
        assert_eq!(head_size(&req), expected);
    }
}
