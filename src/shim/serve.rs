//! nxcc acting as an installed shim's `neuronx-cc`: a compile goes to the shim's daemon, anything
//! else is the real compiler.
//!
//! nxcc is the shim when it was invoked as `neuronx-cc` (the file name of `argv[0]`) and the
//! `neuronx-cc` it was run as — `argv[0]` itself when it names a path, else the first executable
//! of that name on PATH, as the shell found it — has a [`super::CONFIG_NAME`] beside it.
//!
//! - Before anything, the shim's directory and configuration pass nxcc's trust rule (a
//!   configuration another user could have written is refused: exit 70), and the real compiler
//!   must not be nxcc itself (a loop: refused, exit 70), nor reached through more than
//!   [`super::MAX_HOPS`] shims ([`super::HOPS_ENV`]).
//! - A command line nxcc parses as a compile (not a `--dry-run`) is sent to the daemon with the
//!   caller's working directory and the variables a request may carry
//!   ([`crate::daemon::client::send`]): its console lines are printed as they come, relative
//!   paths (`--output`, `--logfile`) are the caller's, and the exit status is the compile's. A
//!   daemon that cannot be reached, started or trusted, or that refuses the caller (`403`: a
//!   shared daemon that does not serve this uid; `429`), costs one warning line on stderr, and
//!   the compile runs on the real compiler instead.
//! - Everything else — `--version`, `--help`, `list-operators`, a command line nxcc cannot parse
//!   — runs the real compiler with the same arguments and environment, replacing this process
//!   (`exec`), so its output and exit status are the real compiler's; its `argv[0]` is the real
//!   compiler's path.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::{loop_of, read_config, Config, HOPS_ENV, LINK_NAME, MAX_HOPS};
use crate::cli::{self, Command};
use crate::daemon::client::{self, Sent};

/// The prefix of the shim's own messages.
const WHO: &str = "neuronx-cc (nxcc shim)";

/// The `neuronx-cc` this process was run as, when that is the name it was invoked under.
fn invoked_path(argv0: &std::ffi::OsStr) -> Option<PathBuf> {
    let path = Path::new(argv0);
    if path.file_name()? != LINK_NAME {
        return None;
    }
    if argv0.as_encoded_bytes().contains(&b'/') {
        return Some(path.to_path_buf());
    }
    // The one the shell found — if it is this executable (a caller may run nxcc under the name
    // neuronx-cc by another path).
    let found = super::which(LINK_NAME, None)?;
    let me = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .ok()?;
    (found.canonicalize().ok()? == me).then_some(found)
}

/// The shim's entry point: `None` when this process is not an installed shim (nxcc goes on as
/// itself), else the exit status.
pub fn main(argv: &[OsString]) -> Option<i32> {
    let link = invoked_path(argv.first()?)?;
    let dir = link.parent()?;
    let config = match read_config(dir) {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => return Some(refuse(&e)),
    };
    if let Some(why) = loop_of(&config.compiler, Some(&config.nxcc)) {
        return Some(refuse(&why));
    }
    let hops = std::env::var(HOPS_ENV)
        .ok()
        .and_then(|h| h.parse::<u32>().ok())
        .unwrap_or(0);
    if hops >= MAX_HOPS {
        return Some(refuse(&format!(
            "{hops} nxcc shims ran one another ({HOPS_ENV}): the real compiler {} leads back to a shim; name the real neuronx-cc",
            config.compiler.display()
        )));
    }
    Some(serve(&config, dir, argv, hops))
}

/// Refuse to run (`why`): exit 70.
fn refuse(why: &str) -> i32 {
    crate::cli::subcommand::err(&format!("[ERROR] {WHO}: {why}\n"));
    crate::error::EXIT_COMPILE_FAILED
}

/// The compile argument list nxcc sends to the daemon for `args`, or `None` when the real
/// compiler is to answer them.
pub fn served_compile(args: &[OsString]) -> Option<Vec<String>> {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.to_str().map(str::to_string))
        .collect::<Option<_>>()?;
    match cli::parse(LINK_NAME, &args) {
        Ok(Command::Compile(c)) if c.settings.dry_run.is_none() && !c.settings.daemon => {
            Some(c.argv)
        }
        _ => None,
    }
}

fn serve(config: &Config, dir: &Path, argv: &[OsString], hops: u32) -> i32 {
    let args = &argv[1..];
    if let Some(compile) = served_compile(args) {
        match client::send(&config.target(dir), &compile) {
            Sent::Finished(done) => return done.exit_status,
            Sent::Failed(e) => {
                crate::cli::subcommand::err(&format!("[ERROR] {WHO}: {e}\n"));
                return crate::error::EXIT_COMPILE_FAILED;
            }
            Sent::Unreached(e) | Sent::Refused(e) => crate::cli::subcommand::err(&format!(
                "[WARNING] {WHO}: {}; compiling with {} directly\n",
                one_line(&e),
                config.compiler.display()
            )),
        }
    }
    run_real(config, args, hops)
}

/// `text` on one line (line breaks made spaces).
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Replace this process with the real compiler, with the same arguments and environment.
/// It is told it is one shim further ([`HOPS_ENV`]).
fn run_real(config: &Config, args: &[OsString], hops: u32) -> i32 {
    let e = std::process::Command::new(&config.compiler)
        .args(args)
        .env(HOPS_ENV, (hops + 1).to_string())
        .exec();
    crate::cli::subcommand::err(&format!(
        "[ERROR] {WHO}: cannot run the real compiler {}: {e}\n",
        config.compiler.display()
    ));
    if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<OsString> {
        line.split_whitespace().map(OsString::from).collect()
    }

    #[test]
    fn what_the_daemon_serves() {
        for line in [
            "compile m.pb --target trn2 --output m.neff",
            "compile --framework=XLA m.hlo_module.pb --target=trn1 --verbose=35",
            "--verbose 35 compile m.pb --target trn1",
        ] {
            let served = served_compile(&args(line));
            assert!(served.is_some(), "{line}");
            assert!(served.unwrap().iter().any(|a| a.ends_with(".pb")), "{line}");
        }
        for line in [
            "--version",
            "--help",
            "list-operators --framework XLA",
            "compile --help",
            "compile m.pb --target trn2 --dry-run",
            "compile m.pb --target trn2 --daemon",
            "compile m.pb --no-such-flag",
            "frobnicate",
            "",
        ] {
            assert_eq!(served_compile(&args(line)), None, "{line}");
        }
        use std::os::unix::ffi::OsStringExt;
        let not_utf8 = vec![
            OsString::from("compile"),
            OsString::from_vec(vec![b'm', 0xff, b'.', b'p', b'b']),
        ];
        assert_eq!(served_compile(&not_utf8), None);
    }

    #[test]
    fn only_the_name_neuronx_cc_is_looked_at() {
        assert_eq!(invoked_path(std::ffi::OsStr::new("nxcc")), None);
        assert_eq!(invoked_path(std::ffi::OsStr::new("/usr/bin/nxcc")), None);
        assert_eq!(
            invoked_path(std::ffi::OsStr::new("/opt/shim/neuronx-cc")),
            Some(PathBuf::from("/opt/shim/neuronx-cc"))
        );
        assert_eq!(main(&[OsString::from("/nonexistent/dir/neuronx-cc")]), None);
    }
}
