//! The command line: `nxcc [driver-args] <subcommand> [subcommand-args]`, as the original
//! `neuronx-cc` driver accepts it (01-cli.md).
//!
//! - [`flags`]: the flag table every other part is driven by;
//! - [`argparse`]: an argparse-3.10-compatible parser over a table;
//! - [`endpoint`]: the form of a remote service's address;
//! - [`namespace`]: the parsed values with `<dest>_Used` tracking;
//! - [`lower`]: the namespace lowered, once, into the typed parts of a compile's command line:
//!   [`inputs::CompileInputs`] (what can change the NEFF) and [`settings::Settings`] (how this
//!   machine runs it) — nothing outside this module reads the namespace;
//! - `help`: the usage line and the three help surfaces;
//! - [`level`]: log level names and numbers;
//! - [`color`]: when the console is coloured (`--color`, `NO_COLOR`, a terminal) and what is;
//! - [`environment`]: every environment variable nxcc reads, one table;
//! - [`semantics`]: which compile flags are compile semantics and which reach into the machine;
//! - `suggest`: the known word nearest a mistyped one ("did you mean").
//!
//! This module splits driver arguments from the subcommand, delegates compile options written
//! before the subcommand to it (`parse_known_args` semantics, as clients rely on:
//! `neuronx-cc --target=trn1 compile ...`), and parses `compile` into a [`CompileArgs`].

pub mod argparse;
pub mod color;
pub mod endpoint;
pub mod environment;
pub mod flags;
pub(crate) mod help;
pub mod inputs;
pub mod level;
pub mod lower;
pub mod namespace;
pub(crate) mod numbers;
pub mod semantics;
pub mod settings;
pub mod subcommand;
pub(crate) mod suggest;

use argparse::{ArgError, ArgParser, Nargs, Occurrence, Positional};
use flags::{Action, Flag, Scope, FLAGS};
use namespace::Namespace;

use crate::cli::namespace::Dest;

/// The subcommands, in the order the usage banner lists them.
pub const ORIGINAL_SUBCOMMANDS: &[(&str, &str)] = &[
    ("compile", "Compile a model (an HLO module) into a NEFF."),
    (
        "list-operators",
        "List the operators the compiler supports (answered by the real compiler).",
    ),
];
/// nxcc's own subcommands (a second block in the banner).
pub const NXCC_SUBCOMMANDS: &[(&str, &str)] = &[
    ("neff-info", "Inspect, verify or unpack a NEFF file."),
    (
        "hlo-info",
        "Describe an HLO module: parameters, results, instructions.",
    ),
    (
        "parallel-compile",
        "Compile many models at once, within a memory budget, through the cache.",
    ),
    (
        "reproduce",
        "Replay a reproducer bundle (compile --gen-reproducer) and say whether the failure recurs.",
    ),
    (
        "cache",
        "Inspect and maintain the compile cache (stats, verify, gc, clear; clean for the framework's cache).",
    ),
    (
        "daemon",
        "Serve compiles over a Unix socket (the original's protocol, concurrent).",
    ),
    (
        "toolchain",
        "Lay out or describe a toolchain directory (toolchain sim DIR).",
    ),
    (
        "shim",
        "Put the host's compile daemon behind every neuronx-cc on PATH (install, status, uninstall).",
    ),
    (
        "worker",
        "Run compile actions for a Remote Execution API server (a Remote Workers API bot).",
    ),
    (
        "completions",
        "Print a shell's completion script (bash, zsh, fish, elvish, powershell).",
    ),
    (
        "man",
        "Print the manual page, nxcc's or a command's (roff: nxcc man | man -l -).",
    ),
];

/// The program name users see: `neuronx-cc` when invoked under that name, else `nxcc`.
pub fn prog_name(argv0: &str) -> String {
    let base = std::path::Path::new(argv0)
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or("nxcc");
    if base.starts_with("neuronx-cc") {
        "neuronx-cc".to_string()
    } else {
        "nxcc".to_string()
    }
}

/// A usage error: printed as argparse prints it, exit status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// `usage: ...` then `<prog>: error: <message>`.
    Usage {
        /// The parser's usage text (`usage: nxcc compile [-h] ...`).
        usage: String,
        /// The program name the error line starts with (`nxcc`, `nxcc compile`).
        prog: String,
        /// What is wrong, as argparse words it.
        message: String,
        /// A line each, after it: what was probably meant (`compil: did you mean `compile`?`).
        hints: Vec<String>,
    },
    /// The original's NCC_EARG002 line naming every unrecognised argument.
    Unrecognized {
        /// The parser's usage text, quoted at the end of the line as the resolution.
        usage: String,
        /// The unrecognised arguments, in command-line order.
        args: Vec<String>,
        /// A line each, after it, for an argument meant as the value of one of nxcc's own
        /// optional-value options (`argparse::Parsed::value_hints`), and for a mistyped option
        /// (`--traget: did you mean `--target`?`).
        hints: Vec<String>,
    },
}

impl CliError {
    /// The exit status of every usage error (argparse's).
    pub const EXIT_STATUS: i32 = 2;

    /// The text to print on stderr.
    pub fn render(&self) -> String {
        match self {
            CliError::Usage {
                usage,
                prog,
                message,
                hints,
            } => format!("{usage}\n{prog}: error: {message}\n{}", lines(hints)),
            CliError::Unrecognized { usage, args, hints } => format!(
                "[ERROR] [NCC_EARG002] Illegal argument(s) - the following argument(s) are unrecognized: {}. - Check that only recognized arguments are used: {}\n{}",
                args.join(", "),
                usage.trim_end(),
                lines(hints)
            ),
        }
    }

    /// A usage error without hints.
    pub fn usage(usage: String, prog: String, message: String) -> CliError {
        CliError::Usage {
            usage,
            prog,
            message,
            hints: Vec::new(),
        }
    }
}

/// Each hint on a line of its own.
fn lines(hints: &[String]) -> String {
    hints.iter().map(|h| format!("{h}\n")).collect()
}

/// The parsed `compile` command line, lowered into its typed parts.
#[derive(Debug, Clone)]
pub struct CompileArgs {
    /// `nxcc compile` or `neuronx-cc compile`.
    pub prog: String,
    /// What can change the NEFF, as given (the plan normalises it).
    pub inputs: inputs::CompileInputs,
    /// How this machine runs the compile.
    pub settings: settings::Settings,
    /// Which of the values normalisation reads were given.
    pub given: lower::Given,
    /// The positional model files (exactly one is valid; checked by validation).
    pub model_files: Vec<String>,
    /// Deprecation warnings printed while parsing.
    pub warnings: Vec<String>,
    /// Every argument as given (after delegation), for records and the daemon.
    pub argv: Vec<String>,
    /// For each model file meant as the value of one of nxcc's own optional-value options
    /// (`--timings t1.html model.pb`), what to tell if the model files are refused.
    pub hints: Vec<String>,
}

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// Print this text on stdout and exit 0.
    Help(String),
    /// `--version` / `-V` (`json`: with `--json`, the same as one JSON object).
    Version {
        /// `--json` was given too.
        json: bool,
    },
    /// `compile` with its parsed command line.
    Compile(Box<CompileArgs>),
    /// Another subcommand with its arguments (driver arguments given before it included first).
    Other {
        /// The subcommand's name as given.
        name: String,
        /// The arguments for it: the driver arguments given before it, then those after it.
        args: Vec<String>,
    },
}

/// Every driver-scope flag, plus `-h/--help` at the driver level.
fn driver_flags() -> Vec<&'static Flag> {
    static DRIVER_HELP: Flag = Flag {
        spelling: "--help",
        aliases: &["-h"],
        dest: "",
        action: Action::Help,
        kind: flags::Kind::Str,
        default: flags::Default::None,
        choices: flags::Choices::Any,
        visibility: flags::Visibility::Public,
        scope: Scope::Driver,
        source: "wiki-catalog:CERTAIN",
        help: "Show this help message and exit.",
        reach: flags::UNLISTED,
    };
    let mut v: Vec<&'static Flag> = vec![&DRIVER_HELP];
    v.extend(FLAGS.iter().filter(|f| f.scope == Scope::Driver));
    v
}

/// The parser for `compile`: `-h/--help` first (as argparse adds it), the driver flags (which may
/// follow the subcommand), then every compile flag in table order.
pub fn compile_parser(prog: &str) -> ArgParser {
    static ENTRIES: std::sync::OnceLock<ArgParser> = std::sync::OnceLock::new();
    let template = ENTRIES.get_or_init(|| {
        let help = FLAGS
            .iter()
            .find(|f| f.action == Action::Help)
            .expect("help row");
        let mut list: Vec<&'static Flag> = vec![help];
        list.extend(FLAGS.iter().filter(|f| f.action != Action::Help));
        ArgParser::new("", &list, &COMPILE_POSITIONALS)
    });
    ArgParser {
        prog: format!("{prog} compile"),
        ..template.clone()
    }
}

/// `compile`'s positional: the model file (a file or a directory).
pub const COMPILE_POSITIONALS: [Positional; 1] = [Positional {
    metavar: "<model_file>",
    nargs: Nargs::OneOrMore,
    help: "The model: an HLO module (binary HloModuleProto or HLO text), or a directory of them.",
}];

/// No argument can hold a NUL byte (no file name and no value can): the message for the first
/// that does, refused before anything is planned or run. Only a request to the daemon can carry
/// one (argv cannot); the daemon refuses it with the same words.
pub fn nul_argument(args: &[String]) -> Option<String> {
    args.iter()
        .find(|a| a.contains('\0'))
        .map(|a| format!("argument {}: contains a NUL byte", argparse::py_repr(a)))
}

/// Parse the whole command line (without `argv[0]`).
pub fn parse(prog: &str, args: &[String]) -> Result<Command, CliError> {
    let driver = ArgParser::new(prog, &driver_flags(), &[]);
    let top_usage = help::top_usage(prog);
    let usage_err = |message: String| CliError::usage(top_usage.clone(), prog.to_string(), message);
    if let Some(message) = nul_argument(args) {
        return Err(usage_err(message));
    }

    let compile = compile_parser(prog);
    let Before {
        pre,
        delegated,
        sub,
    } = before_subcommand(&driver, &compile, args).map_err(usage_err)?;
    let parsed_pre = driver.parse(&pre).map_err(|e| usage_err(e.message))?;
    match parsed_pre.early_exit {
        Some(Action::Version) => {
            return Ok(Command::Version {
                json: wants_json(args),
            })
        }
        Some(_) => return Ok(Command::Help(help::top_help(prog))),
        None => {}
    }
    let Some(sub_index) = sub else {
        if args.is_empty() {
            // `nxcc` alone: the help, on stdout, exit 0 (as `cargo` alone answers).
            return Ok(Command::Help(help::top_help(prog)));
        }
        return Err(usage_err(
            "the following arguments are required: subcommand".to_string(),
        ));
    };
    let name = args[sub_index].as_str();
    known_subcommand(name).map_err(|message| CliError::Usage {
        usage: top_usage.clone(),
        prog: prog.to_string(),
        message,
        hints: subcommand_hint(name).into_iter().collect(),
    })?;
    let mut rest: Vec<String> = pre;
    rest.extend(delegated);
    rest.extend(args[sub_index + 1..].iter().cloned());
    if name == "compile" {
        return parse_compile(prog, &compile, rest).map(|c| match c {
            Ok(args) => Command::Compile(Box::new(args)),
            Err(cmd) => cmd,
        });
    }
    Ok(Command::Other {
        name: name.to_string(),
        args: rest,
    })
}

/// The command line up to the subcommand.
struct Before {
    /// The driver options (with their values).
    pre: Vec<String>,
    /// The compile options given before the subcommand, delegated to it.
    delegated: Vec<String>,
    /// Where the subcommand is (`None`: there is none).
    sub: Option<usize>,
}

/// Find the subcommand: the first value token that is not a driver option's value. Compile
/// options before it are delegated to it; one that takes a value and has no `=VALUE` takes the
/// next token with it (so `--target trn1 compile` works as `--target=trn1 compile` does).
fn before_subcommand(
    driver: &ArgParser,
    compile: &ArgParser,
    args: &[String],
) -> Result<Before, String> {
    let mut before = Before {
        pre: Vec::new(),
        delegated: Vec::new(),
        sub: None,
    };
    let mut i = 0;
    while let Some(tok) = args.get(i) {
        if tok == "--" || !tok.starts_with('-') || tok.len() == 1 || looks_negative(tok) {
            before.sub = Some(i);
            break;
        }
        let one = [tok.clone()];
        match driver.parse(&one) {
            Ok(p) if p.early_exit.is_some() || p.extras.is_empty() => {
                before.pre.push(tok.clone());
                i += 1;
            }
            Err(e) if !e.message.ends_with("expected one argument") => return Err(e.message),
            Err(_) => {
                // A driver option that needs its value from the next token.
                before.pre.extend(args[i..].iter().take(2).cloned());
                i += 2;
            }
            Ok(_) => {
                let n = if compile.needs_separate_value(tok) {
                    2
                } else {
                    1
                };
                before.delegated.extend(args[i..].iter().take(n).cloned());
                i += n;
            }
        }
    }
    Ok(before)
}

/// A subcommand of the original or of nxcc; else argparse's invalid choice.
fn known_subcommand(name: &str) -> Result<(), String> {
    let mut all = ORIGINAL_SUBCOMMANDS.iter().chain(NXCC_SUBCOMMANDS);
    if all.any(|(n, _)| *n == name) {
        return Ok(());
    }
    let choices: Vec<String> = ORIGINAL_SUBCOMMANDS
        .iter()
        .chain(NXCC_SUBCOMMANDS)
        .map(|(n, _)| argparse::py_repr(n))
        .collect();
    Err(format!(
        "argument subcommand: invalid choice: {} (choose from {})",
        argparse::py_repr(name),
        choices.join(", ")
    ))
}

/// The subcommand a mistyped one probably is (`compil` → `compile`).
fn subcommand_hint(name: &str) -> Option<String> {
    let known = ORIGINAL_SUBCOMMANDS.iter().chain(NXCC_SUBCOMMANDS);
    suggest::nearest(name, known.map(|(n, _)| *n)).map(|k| suggest::line(name, k))
}

/// Whether `--json` is among the words before a `--` (`nxcc --version --json`).
fn wants_json(args: &[String]) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

fn looks_negative(tok: &str) -> bool {
    tok.len() > 1 && tok[1..].chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// Parse `compile`'s arguments. `Ok(Err(cmd))` is a help or version request.
fn parse_compile(
    prog: &str,
    parser: &ArgParser,
    args: Vec<String>,
) -> Result<Result<CompileArgs, Command>, CliError> {
    let sub_prog = format!("{prog} compile");
    let usage = || help::usage(parser);
    let parsed = parser
        .parse(&args)
        .map_err(|ArgError { message }| CliError::usage(usage(), sub_prog.clone(), message))?;
    match parsed.early_exit {
        Some(Action::Help) => {
            return Ok(Err(Command::Help(help::compile_help(
                parser,
                help::Surface::Public,
            ))))
        }
        Some(Action::HelpHidden) => {
            return Ok(Err(Command::Help(help::compile_help(
                parser,
                help::Surface::Hidden,
            ))))
        }
        Some(Action::HelpHiddenList) => return Ok(Err(Command::Help(help::hidden_list()))),
        Some(_) => {
            return Ok(Err(Command::Version {
                json: wants_json(&args),
            }))
        }
        None => {}
    }
    if !parsed.extras.is_empty() {
        let mut hints = parsed.value_hints(&parsed.extras);
        hints.extend(parser.option_hints(&parsed.extras));
        return Err(CliError::Unrecognized {
            usage: help::short_usage(prog),
            hints,
            args: parsed.extras.clone(),
        });
    }
    let mut ns = Namespace::new();
    let mut warnings = Vec::new();
    for occ in &parsed.occurrences {
        apply(&mut ns, occ, &mut warnings);
    }
    let model_files = parsed.positionals.first().cloned().unwrap_or_default();
    let (inputs, settings, given) = lower::lower(&ns).map_err(|e| {
        CliError::usage(
            usage(),
            sub_prog.clone(),
            format!("cannot read the command line: {e}"),
        )
    })?;
    Ok(Ok(CompileArgs {
        prog: sub_prog,
        inputs,
        settings,
        given,
        hints: parsed.value_hints(&model_files),
        model_files,
        warnings,
        argv: args,
    }))
}

/// Apply one occurrence to the namespace, with argparse's action semantics.
pub fn apply(ns: &mut Namespace, occ: &Occurrence, warnings: &mut Vec<String>) {
    let Some(dest) = Dest::named(occ.flag.dest) else {
        // Help and version have no dest; every row that has one has a typed dest.
        return;
    };
    match occ.flag.action {
        Action::ExtendStr => {
            ns.extend_str_by_user(dest, occ.value.as_str().unwrap_or_default());
        }
        Action::Append => {
            ns.append_by_user(dest, occ.value.as_str().unwrap_or_default().to_string());
        }
        Action::DeprecatedStoreTrue { warning } | Action::DeprecatedStore { warning } => {
            if !warnings.iter().any(|w| w == warning) {
                warnings.push(warning.to_string());
            }
            ns.set_by_user(dest, occ.value.clone());
        }
        _ => ns.set_by_user(dest, occ.value.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &str) -> Vec<String> {
        shell_words::split(s).unwrap()
    }

    fn compile(s: &str) -> Result<CompileArgs, CliError> {
        match parse("nxcc", &argv(s))? {
            Command::Compile(c) => Ok(*c),
            other => panic!("not a compile: {other:?}"),
        }
    }

    fn usage_message(s: &str) -> String {
        match parse("nxcc", &argv(s)) {
            Err(CliError::Usage { message, .. }) => message,
            other => panic!("expected a usage error for {s}: {other:?}"),
        }
    }

    #[test]
    fn value_forms_are_equivalent() {
        for s in [
            "compile m.pb --target trn1 -O1",
            "compile m.pb --target=trn1 -O 1",
            "compile m.pb --target trn1 --optlevel=1",
            "compile m.pb --target trn1 --optlevel 1",
        ] {
            let c = compile(s).unwrap();
            assert_eq!(c.inputs.optlevel, inputs::OptLevel::O1, "{s}");
            assert_eq!(c.inputs.target.as_deref(), Some("trn1"), "{s}");
        }
        let c = compile("compile m.pb -o out.neff --target trn1").unwrap();
        assert_eq!(c.settings.output, "out.neff");
        let c = compile("compile m.pb -oout.neff --target trn1").unwrap();
        assert_eq!(c.settings.output, "out.neff");
    }

    #[test]
    fn single_dash_long_option() {
        for s in [
            "compile m.pb --target trn2 -lnc 2",
            "compile m.pb --target trn2 -lnc=2",
            "compile m.pb --target trn2 --lnc 2",
            "compile m.pb --target trn2 --logical-nc-config=2",
        ] {
            assert_eq!(compile(s).unwrap().inputs.logical_nc_config, Some(2), "{s}");
        }
    }

    #[test]
    fn prefixes_and_ambiguity() {
        let c = compile("compile m.pb --target trn1 --auto-cast-t fp16").unwrap();
        assert_eq!(c.inputs.auto_cast_type, "fp16");
        assert_eq!(
            usage_message("compile m.pb --target trn1 --enable-internal-m"),
            "ambiguous option: --enable-internal-m could match --enable-internal-memory-analysis, --enable-internal-micro-modular-compilation, --enable-internal-modular-compilation"
        );
        // An exact match wins over longer spellings it prefixes.
        let c = compile("compile m.pb --target trn1 --auto-cast all").unwrap();
        assert_eq!(c.inputs.auto_cast, "all");
        // `--opt-level` is not a prefix of `--optlevel`: argparse puts it in the extras, and its
        // value too (the model file positional was already consumed).
        let err = parse("nxcc", &argv("compile m.pb --target trn1 --opt-level 2")).unwrap_err();
        assert!(
            matches!(err, CliError::Unrecognized { ref args, .. } if args == &["--opt-level".to_string(), "2".to_string()]),
            "{err:?}"
        );
    }

    #[test]
    fn nargs_plus_stops_at_next_option() {
        let c = compile("compile m.pb --target trn1 --internal-enable-dge-levels vector_dynamic_offsets spill_reload io -O1").unwrap();
        assert_eq!(
            c.inputs.internal_enable_dge_levels,
            ["vector_dynamic_offsets", "spill_reload", "io"]
        );
        assert_eq!(c.inputs.optlevel, inputs::OptLevel::O1);
        assert_eq!(
            usage_message("compile m.pb --target trn1 --pipeline"),
            "argument --pipeline: expected at least one argument"
        );
    }

    #[test]
    fn values_that_look_like_options() {
        let c = compile("compile m.pb --target trn1 '--tensorizer-options=--enable-ccop-compute-overlap --vectorize-strided-dma'").unwrap();
        assert_eq!(
            c.inputs.tensorizer_options.as_deref(),
            Some("--enable-ccop-compute-overlap --vectorize-strided-dma")
        );
        let c = compile("compile m.pb --target trn1 --internal-backend-options ' --enable-output-completion-notifications '").unwrap();
        assert_eq!(
            c.inputs.internal_backend_options.as_deref(),
            Some(" --enable-output-completion-notifications ")
        );
        assert_eq!(
            usage_message("compile m.pb --target trn1 --tensorizer-options --foo"),
            "argument --tensorizer-options: expected one argument"
        );
        let c = compile("compile m.pb --target trn1 --layer-unroll-factor -1").unwrap();
        assert_eq!(c.inputs.layer_unroll_factor, -1);
        let c = compile("compile m.pb --target trn1 --softmax-epsilon -0.5").unwrap();
        assert_eq!(c.inputs.softmax_epsilon, -0.5);
    }

    #[test]
    fn store_true_rejects_a_value() {
        assert_eq!(
            usage_message("compile m.pb --target trn1 --enable-saturate-infinity=1"),
            "argument --enable-saturate-infinity: ignored explicit argument '1'"
        );
    }

    #[test]
    fn repeated_options() {
        let c = compile(
            "compile m.pb --target trn1 --model-type transformer --model-type=unet-inference",
        )
        .unwrap();
        assert_eq!(c.inputs.model_type, "unet-inference");
        let c = compile(
            "compile m.pb --target trn1 --tensorizer-options=--a --tensorizer-options '--b --c'",
        )
        .unwrap();
        assert_eq!(c.inputs.tensorizer_options.as_deref(), Some("--a --b --c"));
        let c = compile("compile m.pb --target trn1 --skip-pass a --skip-pass b").unwrap();
        assert_eq!(c.inputs.skip_pass, ["a", "b"]);
    }

    #[test]
    fn companions() {
        let c = compile("compile m.pb --target trn1 --disable-dge").unwrap();
        assert!(!c.inputs.enable_dge);
        let c = compile("compile m.pb --target trn1 --disable-dge --enable-dge").unwrap();
        assert!(c.inputs.enable_dge);
        let c = compile("compile m.pb --target trn1 --internal-hlo-remat --no-internal-hlo-remat")
            .unwrap();
        assert!(!c.inputs.internal_hlo_remat);
        let c = compile("compile m.pb --target trn1 --no-enable-tritium-loopfusion").unwrap();
        assert!(!c.inputs.enable_tritium_loopfusion);
        let c =
            compile("compile m.pb --target trn1 --disable-mixed-precision-accumulation").unwrap();
        assert!(!c.inputs.enable_mixed_precision_accumulation);
    }

    #[test]
    fn type_and_choice_errors() {
        assert_eq!(
            usage_message("compile m.pb --target trn1 --meta-module x"),
            "argument --meta-module: invalid int value: 'x'"
        );
        assert_eq!(
            usage_message("compile m.pb --target trn1 --auto-cast fp8"),
            "argument --auto-cast: invalid choice: 'fp8' (choose from 'none', 'matmult', 'all')"
        );
        assert_eq!(
            usage_message("compile m.pb --target trn1 -O4"),
            "argument --optlevel/-O: invalid choice: '4' (choose from '0', '1', '2', '3')"
        );
    }

    #[test]
    fn levels() {
        for (v, n) in [
            ("35", 35),
            ("INFO", 20),
            ("0", 30),
            ("1", 20),
            ("2", 10),
            ("user", 60),
            ("Debug", 10),
            ("7", 7),
        ] {
            let c = compile(&format!("compile m.pb --target trn1 --verbose {v}")).unwrap();
            assert_eq!(c.settings.log.verbose, n, "{v}");
        }
        assert_eq!(
            compile("compile m.pb --target trn1")
                .unwrap()
                .settings
                .log
                .verbose,
            level::USER
        );
    }

    #[test]
    fn model_file_count() {
        assert_eq!(
            usage_message("compile --target trn1"),
            "the following arguments are required: <model_file>"
        );
        assert_eq!(
            compile("compile a.pb b.pb --target trn1")
                .unwrap()
                .model_files,
            ["a.pb", "b.pb"]
        );
    }

    #[test]
    fn unrecognized_arguments_are_named_together() {
        let err = parse("nxcc", &argv("compile m.pb --target trn1 --foo --bar=1")).unwrap_err();
        let CliError::Unrecognized { ref args, .. } = err else {
            panic!("{err:?}")
        };
        assert_eq!(args, &["--foo", "--bar=1"]);
        let text = err.render();
        assert!(text.starts_with("[ERROR] [NCC_EARG002] Illegal argument(s) - the following argument(s) are unrecognized: --foo, --bar=1. - Check that only recognized arguments are used: "), "{text}");
    }

    #[test]
    fn driver_args_before_and_after_and_delegation() {
        let c = compile("--verbose=35 --target=trn1 compile --framework XLA m.pb --output m.neff")
            .unwrap();
        assert_eq!(c.settings.log.verbose, 35);
        assert_eq!(c.inputs.target.as_deref(), Some("trn1"));
        let c = compile("--target trn1 compile m.pb --logfile x.txt").unwrap();
        assert_eq!(c.inputs.target.as_deref(), Some("trn1"));
        assert_eq!(c.settings.log.logfile, "x.txt");
        // Options after the subcommand win over delegated ones.
        let c = compile("--target=trn1 compile m.pb --target trn2").unwrap();
        assert_eq!(c.inputs.target.as_deref(), Some("trn2"));
    }

    #[test]
    fn deprecated_options_warn() {
        let c = compile("compile m.pb --target trn1 --num-neuroncores 1 --enable-experimental-O1")
            .unwrap();
        assert_eq!(c.inputs.logical_nc_config, Some(1));
        assert!(c
            .warnings
            .iter()
            .any(|w| w.contains("DEPRECATED. Prefer --lnc instead.")));
        assert!(c
            .warnings
            .iter()
            .any(|w| w.contains("--enable-experimental-O1 is deprecated")));
    }

    #[test]
    fn no_response_files() {
        // argparse without fromfile_prefix_chars: `@args.txt` is just a model file name.
        let c = compile("compile @args.txt --target trn1").unwrap();
        assert_eq!(c.model_files, ["@args.txt"]);
    }

    #[test]
    fn help_and_version() {
        assert!(matches!(
            parse("nxcc", &argv("--version")).unwrap(),
            Command::Version { json: false }
        ));
        assert!(matches!(
            parse("nxcc", &argv("--version --json")).unwrap(),
            Command::Version { json: true }
        ));
        assert!(matches!(
            parse("nxcc", &argv("-V")).unwrap(),
            Command::Version { json: false }
        ));
        assert!(matches!(
            parse("nxcc", &argv("compile --help")).unwrap(),
            Command::Help(_)
        ));
        assert!(matches!(
            parse("nxcc", &argv("--help")).unwrap(),
            Command::Help(_)
        ));
        assert!(matches!(parse("nxcc", &[]).unwrap(), Command::Help(_)));
        assert_eq!(
            usage_message("--verbose info"),
            "the following arguments are required: subcommand"
        );
        assert!(usage_message("frobnicate").starts_with("argument subcommand: invalid choice: 'frobnicate' (choose from 'compile', 'list-operators',"));
    }
}
