//! A small fault-injecting HTTP proxy between nxcc and the server, on loopback: each request is
//! read whole and sent on to the server on a connection of its own, the answer sent back —
//! unless the proxy is told to answer `500 InternalError` instead (the first N requests), to
//! answer late (a delay), to cut the connection in the middle of a PUT whose path contains a
//! string (as a server that dies mid-upload), or to claim a size for a GET's answer whose path
//! contains given strings (as a server that lies). It records what it saw (the method, the path and a
//! conditional write's `If-None-Match`). It stops when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the proxy does to the traffic.
#[derive(Default, Clone)]
pub struct Faults {
    /// Answer this many requests with a 500 before passing any on.
    pub fail_first: usize,
    /// Hold every answer this long.
    pub delay: Option<Duration>,
    /// Cut the connection halfway through the body of a PUT whose path contains this.
    pub cut_put: Option<String>,
    /// Answer a GET whose path contains each of these with this `Content-Length` (the head,
    /// then the connection closed).
    pub claim_size: Option<(Vec<String>, u64)>,
}

pub struct Proxy {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Requests seen, as `METHOD path` (and ` If-None-Match: V` when the request has one).
    pub seen: Arc<Mutex<Vec<String>>>,
    pub failed: Arc<AtomicUsize>,
    pub cut: Arc<AtomicUsize>,
}

impl Proxy {
    pub fn start(upstream: u16, faults: Faults) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let p = Proxy {
            port,
            stop: Arc::new(AtomicBool::new(false)),
            seen: Arc::default(),
            failed: Arc::default(),
            cut: Arc::default(),
        };
        let (stop, seen, failed, cut) = (
            p.stop.clone(),
            p.seen.clone(),
            p.failed.clone(),
            p.cut.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((c, _)) => {
                        let (f, seen, failed, cut) =
                            (faults.clone(), seen.clone(), failed.clone(), cut.clone());
                        std::thread::spawn(move || {
                            let _ = serve(c, upstream, &f, &seen, &failed, &cut);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        p
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// One request: its head's lines and its body.
fn read_request(r: &mut BufReader<TcpStream>) -> std::io::Result<Option<(Vec<String>, Vec<u8>)>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let len = lines
        .iter()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Some((lines, body)))
}

fn serve(
    client: TcpStream,
    upstream: u16,
    f: &Faults,
    seen: &Mutex<Vec<String>>,
    failed: &AtomicUsize,
    cut: &AtomicUsize,
) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let mut reader = BufReader::new(client.try_clone()?);
    let mut client = client;
    while let Some((lines, body)) = read_request(&mut reader)? {
        let first: Vec<&str> = lines[0].split(' ').collect();
        let (method, path) = (first[0].to_string(), first.get(1).copied().unwrap_or(""));
        let condition = lines.iter().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("if-none-match")
                .then(|| format!(" If-None-Match: {}", v.trim()))
        });
        seen.lock()
            .unwrap()
            .push(format!("{method} {path}{}", condition.unwrap_or_default()));
        if method == "PUT" && f.cut_put.as_deref().is_some_and(|c| path.contains(c)) {
            cut.fetch_add(1, Ordering::SeqCst);
            return Ok(()); // the connection closes with the body half read
        }
        if failed.load(Ordering::SeqCst) < f.fail_first {
            failed.fetch_add(1, Ordering::SeqCst);
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>InternalError</Code><Message>injected</Message></Error>";
            write!(
                client,
                "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )?;
            continue;
        }
        let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
        for l in &lines {
            let name = l.split(':').next().unwrap_or("");
            if !name.eq_ignore_ascii_case("connection") {
                write!(up, "{l}\r\n")?;
            }
        }
        write!(up, "Connection: close\r\n\r\n")?;
        up.write_all(&body)?;
        let mut answer = Vec::new();
        up.read_to_end(&mut answer)?;
        if let Some(d) = f.delay {
            std::thread::sleep(d);
        }
        if let Some((_, size)) = f
            .claim_size
            .as_ref()
            .filter(|(parts, _)| method == "GET" && parts.iter().all(|p| path.contains(p)))
        {
            return client.write_all(&claiming(&answer, *size));
        }
        client.write_all(&answer)?;
    }
    Ok(())
}

/// The head of `answer` with its `Content-Length` made `size`.
fn claiming(answer: &[u8], size: u64) -> Vec<u8> {
    let text = String::from_utf8_lossy(answer);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let mut out = String::new();
    for l in head.split("\r\n") {
        let name = l.split(':').next().unwrap_or("");
        if name.eq_ignore_ascii_case("content-length") {
            out.push_str(&format!("Content-Length: {size}\r\n"));
        } else {
            out.push_str(l);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    out.into_bytes()
}
