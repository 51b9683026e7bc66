//! nxcc's command line described whole as one clap command ([`command`]): nxcc's own
//! subcommands as they parse, `compile` from the flag table, the driver's options and the
//! environment table; and what is generated from it — shell completions (`nxcc completions
//! SHELL`) and the manual pages (`nxcc man [COMMAND]`, roff).

use clap::{Arg, ArgAction};

use crate::cli::flags::{Action, Choices, Flag, Visibility, FLAGS};
use crate::cli::subcommand::{err, out, parse, DriverOptions, Stop};
use crate::cli::{color, environment, NXCC_SUBCOMMANDS, ORIGINAL_SUBCOMMANDS};

/// Print a shell's completion script for nxcc: `source <(nxcc completions bash)`, or save it
/// where the shell loads completions from (bash: /usr/share/bash-completion/completions/nxcc;
/// zsh: a directory of $fpath, as _nxcc; fish: ~/.config/fish/completions/nxcc.fish).
#[derive(Debug, clap::Parser)]
struct Completions {
    /// The shell.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
    #[command(flatten)]
    #[allow(missing_docs)]
    driver: DriverOptions,
}

/// Print nxcc's manual page (roff), or a command's (`nxcc man compile`): `nxcc man | man -l -`,
/// or save it as nxcc.1 (nxcc-COMMAND.1) in a directory of MANPATH.
#[derive(Debug, clap::Parser)]
struct Manual {
    /// The command whose page to print (default: nxcc's own page).
    #[arg(value_name = "COMMAND")]
    command: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    driver: DriverOptions,
}

/// `nxcc completions SHELL`.
pub fn completions(prog: &str, args: &[String]) -> i32 {
    let cmd: Completions = match parse(prog, "completions", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let mut script = Vec::new();
    clap_complete::generate(cmd.shell, &mut command(prog), prog, &mut script);
    out(&String::from_utf8_lossy(&script));
    0
}

/// `nxcc man [COMMAND]`.
pub fn man(prog: &str, args: &[String]) -> i32 {
    let cmd: Manual = match parse(prog, "man", args) {
        Ok(c) => c,
        Err(stop) => return stop.report(),
    };
    let mut root = command(prog);
    root.build();
    let page = match cmd.command.as_deref() {
        None => root.clone(),
        Some(name) => match root.find_subcommand(name) {
            Some(sub) => sub.clone().name(format!("{prog}-{name}")),
            None => {
                let known: Vec<&str> = root.get_subcommands().map(|s| s.get_name()).collect();
                return Stop::Refused(format!(
                    "{prog} man: error: no command {name:?} (one of: {})\n",
                    known.join(", ")
                ))
                .report();
            }
        },
    };
    let mut roff = Vec::new();
    if let Err(e) = clap_mangen::Man::new(page).render(&mut roff) {
        err(&format!("{prog} man: error: {e}\n"));
        return crate::error::EXIT_COMPILE_FAILED;
    }
    out(&String::from_utf8_lossy(&roff));
    if cmd.command.is_none() {
        out(&environment_roff());
    }
    0
}

/// The whole command line of `prog` (`nxcc` or `neuronx-cc`).
pub fn command(prog: &str) -> clap::Command {
    let mut root = clap::Command::new(prog.to_string())
        .bin_name(prog.to_string())
        .version(crate::VERSION)
        .about(format!(
            "A compile driver for the AWS Neuron compiler: the {} command line, a cache, parallel compiles, a daemon",
            crate::ORIGINAL_VERSION
        ))
        .subcommand_required(true)
        .disable_help_subcommand(true)
        .args(driver_args())
        .subcommand(compile(prog));
    for (name, about) in &ORIGINAL_SUBCOMMANDS[1..] {
        root = root.subcommand(clap::Command::new(*name).about(*about));
    }
    for (name, about) in NXCC_SUBCOMMANDS {
        if let Some(sub) = own_subcommand(prog, name) {
            root = root.subcommand(
                sub.name(*name)
                    .bin_name(format!("{prog} {name}"))
                    .about(*about),
            );
        }
    }
    root
}

/// One of nxcc's own subcommands, as it parses.
fn own_subcommand(prog: &str, name: &str) -> Option<clap::Command> {
    use crate::cli::subcommand::clap_command;
    Some(match name {
        "neff-info" => crate::neff::info::clap_command(prog),
        "hlo-info" => crate::hlo::command::clap_command(prog),
        "parallel-compile" => crate::parallel::command::clap_command(prog),
        "reproduce" => crate::reproducer::replay::clap_command(prog),
        "cache" => crate::cache::command::clap_command(prog),
        "daemon" => crate::daemon::config::clap_command(prog),
        "toolchain" => crate::toolchain::command::clap_command(prog),
        "shim" => crate::shim::clap_command(prog),
        "worker" => crate::remote::worker::clap_command(prog),
        "completions" => clap_command::<Completions>(prog, name),
        "man" => clap_command::<Manual>(prog, name),
        _ => return None,
    })
}

/// The manual page's ENVIRONMENT section (roff): the table of the variables nxcc reads.
fn environment_roff() -> String {
    let mut t = String::from(".SH ENVIRONMENT\n");
    for v in environment::for_users() {
        t.push_str(&format!(
            ".TP\n\\fB{}\\fR\n{}\n",
            roff_text(v.name),
            roff_text(v.what)
        ));
    }
    t
}

/// Text as roff prints it: backslashes and dashes escaped, no line taken for a request.
fn roff_text(text: &str) -> String {
    let t = text.replace('\\', "\\e").replace('-', "\\-");
    if t.starts_with(['.', '\'']) {
        format!("\\&{t}")
    } else {
        t
    }
}

/// The driver's options, as they are accepted before any subcommand.
fn driver_args() -> Vec<Arg> {
    let mut args: Vec<Arg> = FLAGS
        .iter()
        .filter(|f| {
            f.scope == crate::cli::flags::Scope::Driver && f.visibility == Visibility::Public
        })
        .filter_map(flag_arg)
        .collect();
    args.push(
        Arg::new("color")
            .long("color")
            .value_name("WHEN")
            .value_parser(color::CHOICES)
            .help("When to colour errors, warnings and headings (NO_COLOR turns auto off)"),
    );
    args
}

/// `compile`, from the flag table: its public options (the original's and nxcc's own).
fn compile(prog: &str) -> clap::Command {
    let mut cmd = clap::Command::new("compile")
        .bin_name(format!("{prog} compile"))
        .about(ORIGINAL_SUBCOMMANDS[0].1)
        .disable_version_flag(true)
        .arg(
            Arg::new("model_file")
                .value_name("MODEL_FILE")
                .num_args(1..)
                .required(true)
                .value_hint(clap::ValueHint::AnyPath)
                .help(crate::cli::COMPILE_POSITIONALS[0].help),
        );
    let mut longs: Vec<String> = Vec::new();
    for flag in FLAGS.iter().filter(|f| f.visibility == Visibility::Public) {
        let Some(arg) = flag_arg(flag) else { continue };
        let long = arg.get_long().map(str::to_string);
        if long.as_ref().is_some_and(|l| longs.contains(l)) {
            continue;
        }
        longs.extend(long);
        cmd = cmd.arg(arg);
        if let Some(neg) = flag.negation() {
            let name = neg.trim_start_matches('-').to_string();
            cmd = cmd.arg(
                Arg::new(name.clone())
                    .long(name)
                    .action(ArgAction::SetTrue)
                    .help(format!("The opposite of {}.", flag.spelling)),
            );
        }
    }
    cmd
}

/// One row of the flag table as a clap argument (`None`: help, version, or no `--` spelling).
fn flag_arg(flag: &Flag) -> Option<Arg> {
    if matches!(
        flag.action,
        Action::Help | Action::HelpHidden | Action::HelpHiddenList | Action::Version
    ) {
        return None;
    }
    let long = flag.option_strings().find_map(|s| s.strip_prefix("--"))?;
    let mut arg = Arg::new(long.to_string()).long(long).help(flag.help);
    for s in flag.option_strings() {
        match (s.strip_prefix("--"), s.strip_prefix('-')) {
            (Some(l), _) if l != long => arg = arg.visible_alias(l),
            (None, Some(c)) if c.chars().count() == 1 => arg = arg.short(c.chars().next()?),
            _ => {}
        }
    }
    arg = match flag.action {
        Action::OneOrMore => arg.num_args(1..).action(ArgAction::Append),
        Action::StoreOptional { .. } => arg.num_args(0..=1).require_equals(true),
        _ if flag.takes_value() => arg.num_args(1).action(ArgAction::Set),
        _ => arg.action(ArgAction::SetTrue),
    };
    Some(match flag.choices {
        Choices::OneOf(c) | Choices::OneOfIgnoreCase(c) if flag.takes_value() => {
            arg.value_parser(c.to_vec())
        }
        _ => arg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_description_is_consistent_and_has_every_command() {
        command("nxcc").debug_assert();
        let mut cmd = command("nxcc");
        cmd.build();
        let names: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
        let listed: Vec<&str> = ORIGINAL_SUBCOMMANDS
            .iter()
            .chain(NXCC_SUBCOMMANDS)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(names, listed);
        let compile = cmd.find_subcommand("compile").unwrap();
        let target = compile
            .get_arguments()
            .find(|a| a.get_long() == Some("target"))
            .unwrap();
        let values: Vec<String> = target
            .get_possible_values()
            .iter()
            .map(|v| v.get_name().to_string())
            .collect();
        assert!(values.contains(&"trn2".to_string()), "{values:?}");
        assert!(compile
            .get_arguments()
            .any(|a| a.get_long() == Some("disable-dge")));
    }
}
