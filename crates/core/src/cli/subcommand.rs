//! The command lines of nxcc's own subcommands (`neff-info`, `cache`, `parallel-compile`,
//! `daemon`, `toolchain`): each a small static flag table and its positionals, parsed with
//! argparse's behaviour ([`super::argparse`]). Driver options given before the subcommand
//! (`nxcc --verbose info neff-info ...`) arrive with its arguments and are accepted; `-h/--help`
//! prints the subcommand's help; unknown arguments and bad values are argparse usage errors
//! (exit 2). Also the console writes every command uses.

use std::io::Write;

use super::argparse::{ArgParser, Parsed, Positional};
use super::flags::{flag, Action, Choices, Default, Flag, Kind, Scope, Visibility, FLAGS};
use super::{help, CliError};

/// `-h/--help` of a subcommand.
#[rustfmt::skip]
pub static HELP: Flag = flag("--help", &["-h"], "", Action::Help, Kind::Str, Default::None, Choices::Any, Visibility::Public, Scope::Driver, "nxcc",
    "Show this help message and exit.");

/// Write to stdout, ignoring a closed pipe (`nxcc ... | head`).
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// Write to stderr, ignoring errors.
pub fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// A subcommand's command line.
pub struct Subcommand {
    /// The subcommand's name (`neff-info`).
    pub name: &'static str,
    /// Its own options, `HELP` first.
    pub flags: &'static [&'static Flag],
    /// Its positional arguments, in order (possibly none).
    pub positionals: &'static [Positional],
    /// A paragraph for its help, after the usage.
    pub about: &'static str,
}

/// Why parsing stopped without a command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `-h/--help`: print this, exit 0.
    Help(String),
    /// A usage error (exit 2).
    Usage(CliError),
}

impl Stop {
    /// Print it; the exit status.
    pub fn report(&self) -> i32 {
        match self {
            Stop::Help(text) => {
                out(text);
                0
            }
            Stop::Usage(e) => {
                err(&e.render());
                CliError::EXIT_STATUS
            }
        }
    }
}

impl Subcommand {
    /// The parser whose usage and help are shown: the subcommand's own options.
    pub fn shown_parser(&self, prog: &str) -> ArgParser {
        ArgParser::new(
            format!("{prog} {}", self.name),
            self.flags,
            self.positionals,
        )
    }

    /// The parser used: the own options plus the driver options that may have preceded the
    /// subcommand (`--version` there is answered by the top-level parser).
    pub fn full_parser(&self, prog: &str) -> ArgParser {
        let mut flags: Vec<&'static Flag> = self.flags.to_vec();
        flags.extend(
            FLAGS
                .iter()
                .filter(|f| f.scope == Scope::Driver && f.action != Action::Version),
        );
        ArgParser::new(format!("{prog} {}", self.name), &flags, self.positionals)
    }

    /// A usage error in argparse's form.
    pub fn usage_error(&self, prog: &str, message: impl Into<String>) -> CliError {
        CliError::Usage {
            usage: help::usage(&self.shown_parser(prog)),
            prog: format!("{prog} {}", self.name),
            message: message.into(),
        }
    }

    /// The help text.
    pub fn help(&self, prog: &str) -> String {
        let text = help::compile_help(&self.shown_parser(prog), help::Surface::Hidden);
        if self.about.is_empty() {
            return text;
        }
        match text.split_once("\n\n") {
            Some((usage, rest)) => format!("{usage}\n\n{}\n\n{rest}", self.about),
            None => text,
        }
    }

    /// Parse the subcommand's arguments.
    pub fn parse(&self, prog: &str, args: &[String]) -> Result<Parsed, Stop> {
        let parsed = self
            .full_parser(prog)
            .parse(args)
            .map_err(|e| Stop::Usage(self.usage_error(prog, e.message)))?;
        if parsed.early_exit.is_some() {
            return Err(Stop::Help(self.help(prog)));
        }
        if !parsed.extras.is_empty() {
            let mut message = format!("unrecognized arguments: {}", parsed.extras.join(" "));
            for hint in parsed.value_hints(&parsed.extras) {
                message.push('\n');
                message.push_str(&hint);
            }
            return Err(Stop::Usage(self.usage_error(prog, message)));
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::argparse::Nargs;

    #[rustfmt::skip]
    static JSON: Flag = flag("--json", &[], "json", Action::StoreTrue, Kind::Bool, Default::Bool(false), Choices::Any, Visibility::Public, Scope::Driver, "nxcc", "JSON.");
    static FLAGS_: [&Flag; 2] = [&HELP, &JSON];
    const POS: [Positional; 1] = [Positional {
        metavar: "FILE",
        nargs: Nargs::One,
        help: "A file.",
    }];
    static CMD: Subcommand = Subcommand {
        name: "thing",
        flags: &FLAGS_,
        positionals: &POS,
        about: "Does a thing.",
    };

    fn args(s: &str) -> Vec<String> {
        shell_words::split(s).unwrap()
    }

    #[test]
    fn parses_own_and_driver_options() {
        let p = CMD.parse("nxcc", &args("--verbose info f --json")).unwrap();
        assert!(p.flag("json"));
        assert_eq!(p.positionals[0], ["f"]);
    }

    #[test]
    fn help_and_errors() {
        let Err(Stop::Help(text)) = CMD.parse("nxcc", &args("f -h")) else {
            panic!()
        };
        assert!(
            text.starts_with("usage: nxcc thing [-h] [--json] FILE\n\nDoes a thing.\n\n"),
            "{text}"
        );
        assert!(
            !text.contains("--verbose"),
            "driver options are accepted, not advertised"
        );
        let Err(Stop::Usage(e)) = CMD.parse("nxcc", &args("f --bogus")) else {
            panic!()
        };
        assert!(
            e.render()
                .ends_with("nxcc thing: error: unrecognized arguments: --bogus\n"),
            "{}",
            e.render()
        );
        let Err(Stop::Usage(e)) = CMD.parse("nxcc", &args("")) else {
            panic!()
        };
        assert!(e
            .render()
            .contains("the following arguments are required: FILE"));
    }
}
