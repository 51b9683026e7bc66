//! `grpcs://` against a BuildGrid with TLS: a certificate authority, server and client
//! certificates and a JWT made fresh by the test (`tests/data/buildgrid/certs.py`, with the
//! BuildGrid environment's Python), mutual TLS and the bearer-token check on the server; the
//! worker and the client trusting the test's authority, presenting the client certificate and
//! the token.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nxcc::remote::settings::Settings;

use super::buildgrid::{self, said, text, Client, Launch, Server, Worker};

const LIMIT: Duration = Duration::from_secs(120);

/// Test credentials, in a directory of their own.
pub struct Creds {
    dir: tempfile::TempDir,
}

impl Creds {
    /// Fresh credentials for a server at 127.0.0.1 and `ips`.
    pub fn make(ips: &[&str]) -> Creds {
        let bgd = buildgrid::bgd();
        let python = bgd.with_file_name("python");
        let dir = tempfile::tempdir().unwrap();
        let o = std::process::Command::new(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/buildgrid/certs.py"))
            .arg(dir.path())
            .args(ips)
            .output()
            .unwrap();
        assert!(o.status.success(), "certs.py: {}", text(&o.stderr));
        Creds { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The tests' BuildGrid configuration with TLS (mutual) and JWT bearer tokens.
    pub fn configure(&self, config: &str) -> String {
        let p = |n: &str| self.path(n).display().to_string();
        config
            .replace(
                "    insecure-mode: true",
                &format!(
                    "    insecure-mode: false\n    credentials:\n      tls-server-key: {}\n      tls-server-cert: {}\n      tls-client-certs: {}",
                    p("server.key"),
                    p("server.pem"),
                    p("ca.pem")
                ),
            )
            .replace(
                "authorization:\n  method: none",
                &format!(
                    "authorization:\n  method: jwt\n  secret: {}\n  algorithm: hs256",
                    p("secret")
                ),
            )
    }

    /// The client's environment: the authority, the client certificate, the token.
    pub fn env(&self) -> Vec<(String, String)> {
        let p = |n: &str| self.path(n).display().to_string();
        vec![
            ("NXCC_REMOTE_CA".into(), p("ca.pem")),
            ("NXCC_REMOTE_CLIENT_CERT".into(), p("client.pem")),
            ("NXCC_REMOTE_CLIENT_KEY".into(), p("client.key")),
            ("NXCC_REMOTE_TOKEN_FILE".into(), p("token")),
        ]
    }

    /// Whether a server at `url` answers `GetCapabilities` to these credentials.
    pub fn answers(&self, url: &str) -> bool {
        let env = self.env();
        let settings =
            Settings::from_lookup(|k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
                .unwrap();
        let address = nxcc::remote::Address::parse(url, "").unwrap();
        nxcc::remote::Remote::connect_using(&address, Arc::new(settings), None)
            .and_then(|r| r.capabilities())
            .is_ok()
    }
}

fn pairs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

fn compile<'a>(out: &'a str, url: &'a str) -> Vec<&'a str> {
    super::compile_args("mlp.hlo_module.pb", out, &["--remote", url])
}

#[test]
fn tls_mutual_certificates_and_a_bearer_token_against_buildgrid() {
    let creds = Arc::new(Creds::make(&[]));
    let server = Server::launch(Launch {
        tls: Some(creds.clone()),
        ..Default::default()
    });
    let url = server.url();
    assert!(url.starts_with("grpcs://"));
    let env = creds.env();
    let w = Worker::start(&server, "tls", &[], &pairs(&env));

    let local = Client::new();
    let o = local.run(
        &super::compile_args("mlp.hlo_module.pb", "model.neff", &[]),
        &[],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));

    let c = Client::new();
    let args = compile("model.neff", &url);
    let o = c.run(&args, &pairs(&env), LIMIT);
    assert!(
        o.status.success(),
        "{}\n{}\n{}",
        text(&o.stderr),
        w.log(),
        server.log()
    );
    assert_eq!(
        std::fs::read(c.path().join("model.neff")).unwrap(),
        std::fs::read(local.path().join("model.neff")).unwrap()
    );
    assert!(
        w.log().contains("finished with exit status 0"),
        "{}",
        w.log()
    );

    let with = |changes: &[(&str, Option<String>)]| {
        let mut e = env.clone();
        for (k, v) in changes {
            e.retain(|(n, _)| n != k);
            if let Some(v) = v {
                e.push((k.to_string(), v.clone()));
            }
        }
        let o = c.run(&args, &pairs(&e), LIMIT);
        let out = said(&o);
        assert_eq!(o.status.code(), Some(70), "{out}");
        assert!(out.contains(&url), "{out}");
        out
    };
    // No token: the server refuses.
    let out = with(&[("NXCC_REMOTE_TOKEN_FILE", None)]);
    assert!(out.contains("GetCapabilities failed"), "{out}");
    // Another authority: the server's certificate is not trusted.
    let out = with(&[(
        "NXCC_REMOTE_CA",
        Some(creds.path("other-ca.pem").display().to_string()),
    )]);
    assert!(out.to_lowercase().contains("certificate"), "{out}");
    // A token file that is a FIFO: an error, not a hang.
    let fifo = c.path().join("token-fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    let out = with(&[("NXCC_REMOTE_TOKEN_FILE", Some(fifo.display().to_string()))]);
    assert!(out.contains("not a regular file"), "{out}");
    // Credentials are never sent in the clear.
    let plain = url.replace("grpcs://", "grpc://");
    let args2 = compile("model.neff", &plain);
    let o = c.run(&args2, &pairs(&env), LIMIT);
    let out = text(&o.stderr);
    assert_eq!(o.status.code(), Some(70), "{out}");
    assert!(out.contains("sent only to grpcs://"), "{out}");
}
