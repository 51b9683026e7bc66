//! What a `grpcs://` connection trusts and presents: the certificate authorities
//! (`NXCC_REMOTE_CA`, else the system's roots), the client's certificate and key for mutual TLS,
//! and a bearer token read from a file (`NXCC_REMOTE_TOKEN_FILE`), read again when the file
//! changes so a rotated token is picked up by a long-running worker or daemon. The files are
//! read as regular files within a bound: a FIFO or a device named there is an error, not a hang.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

use super::settings::{env, Settings};

/// The largest certificate, key or token file read.
pub const FILE_MAX: u64 = 1 << 20;

/// Read a small regular file ([`crate::fsx::regular`]: opened without waiting, so a FIFO does not
/// hang; anything but a regular file, or more than [`FILE_MAX`] bytes, refused), naming `what`.
pub fn read_small(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    crate::fsx::regular::read(path, FILE_MAX)
        .map_err(|e| format!("cannot read the {what} {}: {e}", path.display()))
}

/// The TLS configuration of a `grpcs://` server at `host`.
pub fn tls_config(settings: &Settings, host: &str) -> Result<ClientTlsConfig, String> {
    let mut tls = ClientTlsConfig::new()
        .domain_name(host.trim_start_matches('[').trim_end_matches(']'))
        .timeout(settings.connect);
    tls = match &settings.ca {
        Some(ca) => {
            let pem = read_small(ca, &format!("certificate authorities ({})", env::CA))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                return Err(format!(
                    "{} ({}) holds no PEM certificate",
                    ca.display(),
                    env::CA
                ));
            }
            tls.ca_certificate(Certificate::from_pem(pem))
        }
        None => tls.with_native_roots(),
    };
    if let Some((cert, key)) = &settings.identity {
        let c = read_small(cert, &format!("client certificate ({})", env::CLIENT_CERT))?;
        let k = read_small(key, &format!("client key ({})", env::CLIENT_KEY))?;
        tls = tls.identity(Identity::from_pem(c, k));
    }
    Ok(tls)
}

/// A bearer token read from a file, again whenever the file's size or modification time changes.
#[derive(Debug)]
pub struct Token {
    path: PathBuf,
    cached: Mutex<Option<(SystemTime, u64, String)>>,
}

impl Token {
    /// The token in `path` (read when first asked for).
    pub fn new(path: PathBuf) -> Token {
        Token {
            path,
            cached: Mutex::new(None),
        }
    }

    /// The token: the file's first line, trimmed; printable ASCII, not empty.
    pub fn get(&self) -> Result<String, String> {
        let what = format!("token file ({})", env::TOKEN_FILE);
        let m = std::fs::metadata(&self.path)
            .map_err(|e| format!("cannot read the {what} {}: {e}", self.path.display()))?;
        let stamp = (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len());
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((t, n, token)) = cached.as_ref() {
            if (*t, *n) == stamp {
                return Ok(token.clone());
            }
        }
        let bytes = read_small(&self.path, &what)?;
        let text = String::from_utf8_lossy(&bytes);
        let token = text.lines().next().unwrap_or("").trim().to_string();
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
            return Err(format!(
                "the {what} {} holds no token (one line of printable ASCII)",
                self.path.display()
            ));
        }
        *cached = Some((stamp.0, stamp.1, token.clone()));
        Ok(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let e = read_small(&fifo, "token file").unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let e = read_small(dir.path(), "token file").unwrap_err();
        assert!(
            e.contains("not a regular file") || e.contains("directory"),
            "{e}"
        );
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'a'; FILE_MAX as usize + 1]).unwrap();
        assert!(read_small(&big, "x").unwrap_err().contains("larger than"));
    }

    #[test]
    fn a_token_is_read_again_when_its_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "first-token\n").unwrap();
        let t = Token::new(p.clone());
        assert_eq!(t.get().unwrap(), "first-token");
        std::fs::write(&p, "the-second-token\n").unwrap();
        assert_eq!(t.get().unwrap(), "the-second-token");
        std::fs::write(&p, "\n").unwrap();
        assert!(t.get().unwrap_err().contains("holds no token"));
        std::fs::write(&p, "bad\x1btoken").unwrap();
        assert!(t.get().is_err());
    }
}
