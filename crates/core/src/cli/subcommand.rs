//! The command lines of nxcc's own subcommands (`neff-info`, `hlo-info`, `toolchain`, `cache`,
//! `parallel-compile`, `daemon`, `shim`, `worker`): each one typed struct per action, defined
//! beside its command with clap's derive and parsed here ([`parse`]) with nxcc's settings — an
//! abbreviated long option is taken as argparse takes it, the last of a repeated option wins, the
//! driver's options given before the subcommand are accepted ([`DriverOptions`]), `-h/--help`
//! prints the action's own help, and a usage error is clap's, with exit status 2. The original's
//! `compile` keeps its argparse-compatible parser (`super::argparse`). Also the console writes
//! every command uses.

use std::io::Write;

use super::CliError;

/// Write to stdout, ignoring a closed pipe (`nxcc ... | head`).
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// Write to stderr, ignoring errors; the marks of error and warning lines coloured when stderr
/// is ([`super::color`]).
pub fn err(text: &str) {
    let painted;
    let text = if super::color::enabled(true) {
        painted = super::color::paint_marks(text);
        painted.as_str()
    } else {
        text
    };
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// Why parsing stopped without a command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `-h/--help`: print this, exit 0.
    Help(String),
    /// A usage error, as clap words it (exit 2).
    Refused(String),
}

impl Stop {
    /// Print it; the exit status.
    pub fn report(&self) -> i32 {
        match self {
            Stop::Help(text) => {
                out(text);
                0
            }
            Stop::Refused(text) => {
                err(text);
                CliError::EXIT_STATUS
            }
        }
    }
}

/// The driver's options (`--verbose`, `--logfile`, `--logfile-verbose`, `--fork-subcommand`), as
/// every subcommand accepts them — given before its name (`nxcc --verbose info neff-info ...`)
/// or after it — and as given; not shown in the help. `parallel-compile` passes them to every
/// compile; the other subcommands have no use for them.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct DriverOptions {
    /// `--verbose LEVEL`.
    #[arg(long, global = true, hide = true, value_parser = level)]
    pub verbose: Option<String>,
    /// `--logfile FILE`.
    #[arg(long, global = true, hide = true)]
    pub logfile: Option<String>,
    /// `--logfile-verbose LEVEL`.
    #[arg(long = "logfile-verbose", global = true, hide = true, value_parser = level)]
    pub logfile_verbose: Option<String>,
    /// `--fork-subcommand`.
    #[arg(long = "fork-subcommand", global = true, hide = true)]
    pub fork_subcommand: bool,
}

impl DriverOptions {
    /// The options as compile arguments, each as it was given.
    pub fn words(&self) -> Vec<String> {
        let mut w = Vec::new();
        for (flag, value) in [
            ("--verbose", &self.verbose),
            ("--logfile", &self.logfile),
            ("--logfile-verbose", &self.logfile_verbose),
        ] {
            if let Some(v) = value {
                w.extend([flag.to_string(), v.clone()]);
            }
        }
        if self.fork_subcommand {
            w.push("--fork-subcommand".into());
        }
        w
    }
}

/// The Remote Execution API options of a command that runs compiles (`parallel-compile`,
/// `daemon`): a compile's own `--remote`, `--remote-cache` and `--remote-instance`, set for every
/// compile it runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct RemoteOptions {
    /// Send every compile the cache does not serve to a Remote Execution API service
    /// (grpc://HOST:PORT), whose workers run it (more may run at once than this host has CPUs).
    #[arg(long, value_name = "URL")]
    pub remote: Option<String>,
    /// Share the compiles through a Remote Execution API action cache (grpc://HOST:PORT); compile
    /// here on a miss.
    #[arg(long = "remote-cache", value_name = "URL")]
    pub remote_cache: Option<String>,
    /// The instance name on the remote server.
    #[arg(long = "remote-instance", value_name = "NAME")]
    pub remote_instance: Option<String>,
}

/// A log level as `--verbose` takes it: a name in any case, or an integer.
fn level(text: &str) -> Result<String, String> {
    match super::level::parse(text) {
        Some(_) => Ok(text.to_string()),
        None => Err(format!(
            "invalid level value: {}",
            super::argparse::py_repr(text)
        )),
    }
}

/// The clap command of a subcommand `name` of `prog`, with nxcc's settings throughout: usage
/// and errors name it `prog name`, a long option may be abbreviated (as argparse lets it be),
/// the last of a repeated option wins, a negative number is a value, and no `--version` (the
/// driver answers it).
pub fn clap_command<T: clap::CommandFactory>(prog: &str, name: &str) -> clap::Command {
    let bin = format!("{prog} {name}");
    settings(T::command().name(bin.clone()).bin_name(bin))
}

fn settings(cmd: clap::Command) -> clap::Command {
    cmd.infer_long_args(true)
        .args_override_self(true)
        .allow_negative_numbers(true)
        .disable_version_flag(true)
        .disable_help_subcommand(true)
        .mut_subcommands(settings)
}

/// Parse a subcommand's arguments into its typed command `T`: `-h/--help` (or no action where
/// one is needed) is [`Stop::Help`], an error [`Stop::Refused`] in clap's words.
pub fn parse<T: clap::Parser>(prog: &str, name: &str, args: &[String]) -> Result<T, Stop> {
    let bin = format!("{prog} {name}");
    let words = std::iter::once(bin).chain(args.iter().cloned());
    let matches = clap_command::<T>(prog, name).try_get_matches_from(words);
    matches.and_then(|m| T::from_arg_matches(&m)).map_err(|e| {
        let text = e.render().to_string();
        match e.kind() {
            clap::error::ErrorKind::DisplayHelp => Stop::Help(text),
            _ => Stop::Refused(text),
        }
    })
}

/// A usage error found after parsing (a combination the types cannot say), in clap's words
/// with the usage of `T`'s action `action` (`None`: the command itself).
pub fn usage_error<T: clap::CommandFactory>(
    prog: &str,
    name: &str,
    action: Option<&str>,
    message: impl std::fmt::Display,
) -> Stop {
    let mut cmd = clap_command::<T>(prog, name);
    cmd.build();
    let mut cmd = match action.and_then(|a| cmd.find_subcommand(a)) {
        Some(sub) => sub.clone(),
        None => cmd,
    };
    Stop::Refused(
        cmd.error(clap::error::ErrorKind::ArgumentConflict, message)
            .render()
            .to_string(),
    )
}

/// The word given after `option` — one of nxcc's own options whose value is taken only after
/// `=` — that was therefore not its value: `DIR: did you mean `--opt=DIR`? (...)`.
pub fn separated_value_hint(args: &[String], option: &str) -> Option<String> {
    let at = args.iter().position(|a| a == option)?;
    let word = args.get(at + 1).filter(|w| !w.starts_with('-'))?;
    Some(format!(
        "{word}: did you mean `{option}={word}`? ({option} takes its value only after `=`)"
    ))
}

/// Value parsers of nxcc's own options (clap's `value_parser`): each says what is wrong in the
/// words the options' errors have always used.
pub mod values {
    /// A count of at least 1 (`--jobs`, `--max-concurrent`).
    pub fn at_least_one(text: &str) -> Result<usize, String> {
        match crate::cli::numbers::parse_python_int(text) {
            Some(n) if n >= 1 => Ok(n as usize),
            Some(n) => Err(format!("must be at least 1, got {n}")),
            None => Err(format!(
                "invalid int value: {}",
                super::super::argparse::py_repr(text)
            )),
        }
    }

    /// A count of at least 0 (`--retries`).
    pub fn at_least_zero(text: &str) -> Result<u32, String> {
        match crate::cli::numbers::parse_python_int(text) {
            Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => Ok(n as u32),
            Some(n) => Err(format!("must be at least 0, got {n}")),
            None => Err(format!(
                "invalid int value: {}",
                super::super::argparse::py_repr(text)
            )),
        }
    }

    /// A size in bytes (`512M`, `16G`, `auto`: 80% of MemAvailable).
    pub fn size(text: &str) -> Result<u64, String> {
        crate::cli::numbers::parse_size(text)
    }

    /// A memory budget (`--memory-budget`): a size of at least 64M, or `auto`; a number without
    /// its unit is refused, not read as bytes.
    pub fn budget(text: &str) -> Result<u64, String> {
        crate::cli::numbers::parse_budget(text)
    }

    /// A number of seconds from 0 to the longest duration nxcc waits
    /// ([`crate::cli::flags::SECONDS_RANGE`]'s end).
    pub fn seconds(text: &str) -> Result<f64, String> {
        let max = crate::cli::flags::SECONDS_RANGE.1;
        match crate::cli::numbers::parse_python_float(text) {
            Some(v) if (0.0..=max).contains(&v) => Ok(v),
            Some(v) => Err(format!(
                "must be a number of seconds from 0 to {max}, not {v}"
            )),
            None => Err(format!(
                "invalid float value: {}",
                super::super::argparse::py_repr(text)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Does a thing.
    #[derive(Debug, clap::Parser)]
    struct Thing {
        /// A file.
        #[arg(value_name = "FILE")]
        file: String,
        /// JSON.
        #[arg(long)]
        json: bool,
        /// A count.
        #[arg(long = "max-count", value_parser = values::at_least_one)]
        max_count: Option<usize>,
        #[command(flatten)]
        driver: DriverOptions,
    }

    fn args(s: &str) -> Vec<String> {
        shell_words::split(s).unwrap()
    }

    #[test]
    fn parses_own_and_driver_options() {
        let t: Thing = parse("nxcc", "thing", &args("--verbose info f --js --max 2")).unwrap();
        assert_eq!((t.file.as_str(), t.json, t.max_count), ("f", true, Some(2)));
        assert_eq!(t.driver.words(), ["--verbose", "info"]);
        let t: Thing = parse("nxcc", "thing", &args("f --max-count 2 --max-count=3")).unwrap();
        assert_eq!(t.max_count, Some(3), "the last one wins");
    }

    #[test]
    fn help_and_errors() {
        let Err(Stop::Help(text)) = parse::<Thing>("nxcc", "thing", &args("f -h")) else {
            panic!()
        };
        assert!(text.starts_with("Does a thing"), "{text}");
        assert!(
            text.contains("Usage: nxcc thing [OPTIONS] <FILE>"),
            "{text}"
        );
        assert!(
            !text.contains("--verbose"),
            "driver options are accepted, not advertised"
        );
        let refused = |a: &str| match parse::<Thing>("nxcc", "thing", &args(a)) {
            Err(Stop::Refused(t)) => t,
            other => panic!("{a}: {other:?}"),
        };
        assert!(refused("f --bogus").contains("unexpected argument '--bogus'"));
        assert!(refused("").contains("<FILE>"));
        assert!(refused("f --max-count 0").contains("must be at least 1, got 0"));
        assert!(refused("f --verbose loud").contains("invalid level value: 'loud'"));
        let Stop::Refused(t) = usage_error::<Thing>("nxcc", "thing", None, "what went wrong")
        else {
            panic!()
        };
        assert!(t.starts_with("error: what went wrong\n"), "{t}");
        assert!(t.contains("Usage: nxcc thing"), "{t}");
    }

    #[test]
    fn a_separated_value_is_pointed_to_its_equals_form() {
        assert_eq!(
            separated_value_hint(&args("--neuron-cache dir x.pb"), "--neuron-cache").as_deref(),
            Some("dir: did you mean `--neuron-cache=dir`? (--neuron-cache takes its value only after `=`)")
        );
        assert_eq!(
            separated_value_hint(&args("--neuron-cache=dir"), "--neuron-cache"),
            None
        );
    }
}
