//! The usage line and the three help surfaces of `compile` (WIKI): `--help` (public options),
//! `--help-hidden` (public, hidden and experimental), `--help-hidden-list` (internal options with
//! their defaults, one per line); and the top-level banner. Formatted as argparse formats them
//! (80 columns, help text at column 24).

use super::argparse::{ArgParser, Nargs};
use super::flags::{Action, Choices, Default, Flag, Kind, Visibility, FLAGS};
use super::{NXCC_SUBCOMMANDS, ORIGINAL_SUBCOMMANDS};

const WIDTH: usize = 78;
const HELP_COLUMN: usize = 24;

/// Which options a help surface lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// What `--help` lists: the public options.
    Public,
    /// What `--help-hidden` lists: public, hidden and experimental options.
    Hidden,
}

fn shown(flag: &Flag, surface: Surface) -> bool {
    match surface {
        Surface::Public => flag.visibility == Visibility::Public,
        Surface::Hidden => matches!(
            flag.visibility,
            Visibility::Public | Visibility::Hidden | Visibility::Experimental
        ),
    }
}

/// argparse's metavar: `{a,b}` for choices, the upper-cased dest otherwise.
fn metavar(flag: &Flag) -> String {
    match flag.choices {
        Choices::OneOf(c) | Choices::OneOfIgnoreCase(c) => format!("{{{}}}", c.join(",")),
        _ => flag.dest.to_ascii_uppercase(),
    }
}

/// How one option string is shown with its value placeholder.
fn invocation_part(option: &str, flag: &Flag) -> String {
    let m = metavar(flag);
    match flag.action {
        Action::Store | Action::ExtendStr | Action::Append | Action::DeprecatedStore { .. } => {
            format!("{option} {m}")
        }
        Action::OneOrMore => format!("{option} {m} [{m} ...]"),
        // nxcc's own take a value only after `=`: GNU's notation says so.
        Action::StoreOptional { .. } if flag.is_nxcc_own() => {
            format!("{option}[={}]", optional_metavar(flag))
        }
        Action::StoreOptional { .. } => format!("{option} [{m}]"),
        _ => option.to_string(),
    }
}

/// The placeholder of one of nxcc's own optional values: its choices, else what it names.
fn optional_metavar(flag: &Flag) -> String {
    match (flag.choices, flag.kind) {
        (Choices::OneOf(_) | Choices::OneOfIgnoreCase(_), _) => metavar(flag),
        (_, Kind::Path) if flag.dest.ends_with("cache") => "DIR".to_string(),
        (_, Kind::Path) => "FILE".to_string(),
        _ => metavar(flag),
    }
}

fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Lay out usage parts after `usage: PROG`, wrapping as argparse does.
fn usage_lines(prog: &str, parts: &[String]) -> String {
    let prefix = format!("usage: {prog}");
    let one = format!("{prefix} {}", parts.join(" "));
    if one.len() <= WIDTH {
        return one;
    }
    let indent = " ".repeat(prefix.len() + 1);
    let mut out = prefix.clone();
    let mut line_len = prefix.len();
    for p in parts {
        if line_len + 1 + p.len() > WIDTH && line_len > indent.len() {
            out.push('\n');
            out.push_str(&indent);
            out.push_str(p);
            line_len = indent.len() + p.len();
        } else {
            out.push(' ');
            out.push_str(p);
            line_len += 1 + p.len();
        }
    }
    out
}

/// The `usage:` text of a parser: its public options, then its positionals.
pub fn usage(parser: &ArgParser) -> String {
    let mut parts = Vec::new();
    let mut seen: Vec<*const Flag> = Vec::new();
    for e in parser.entries.iter() {
        let ptr = e.flag as *const Flag;
        if e.negated || seen.contains(&ptr) || e.flag.visibility != Visibility::Public {
            continue;
        }
        seen.push(ptr);
        let first = e
            .flag
            .option_strings()
            .find(|s| s.len() == 2)
            .unwrap_or(e.flag.spelling);
        parts.push(format!("[{}]", invocation_part(first, e.flag)));
    }
    for p in &parser.positionals {
        parts.push(match p.nargs {
            Nargs::One | Nargs::OneOrMore => p.metavar.to_string(),
            Nargs::Optional => format!("[{}]", p.metavar),
            Nargs::ZeroOrMore => format!("[{} ...]", p.metavar),
        });
    }
    usage_lines(&parser.prog, &parts)
}

/// The one-line usage the NCC_EARG002 error ends with.
pub(crate) fn short_usage(prog: &str) -> String {
    format!("usage: {prog} compile <model_file> --target {{inf1,inf2,trn1,trn1n,trn2,trn2n,trn3,sunda}} [options] (see {prog} compile --help)")
}

/// The top-level usage.
pub(crate) fn top_usage(prog: &str) -> String {
    // The original's subcommands first, as it lists them; nxcc's own after them.
    let names: Vec<&str> = ORIGINAL_SUBCOMMANDS
        .iter()
        .chain(NXCC_SUBCOMMANDS)
        .map(|(n, _)| *n)
        .collect();
    let parts: Vec<String> = [
        "[-h]",
        "[--verbose VERBOSE]",
        "[--logfile LOGFILE]",
        "[--logfile-verbose LOGFILE_VERBOSE]",
        "[--version]",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("{{{}}}", names.join(",")), "...".to_string()])
    .collect();
    usage_lines(prog, &parts)
}

fn entry(invocation: &str, help: &str) -> String {
    let mut out = String::new();
    let help_lines = wrap(help, WIDTH - HELP_COLUMN);
    let head = format!("  {invocation}");
    if head.len() + 2 <= HELP_COLUMN {
        out.push_str(&format!("{head:<HELP_COLUMN$}"));
        match help_lines.first() {
            Some(first) => out.push_str(first),
            None => {
                let trimmed = out.trim_end().len();
                out.truncate(trimmed);
            }
        }
        out.push('\n');
    } else {
        out.push_str(&head);
        out.push('\n');
        if let Some(first) = help_lines.first() {
            out.push_str(&" ".repeat(HELP_COLUMN));
            out.push_str(first);
            out.push('\n');
        }
    }
    for l in help_lines.iter().skip(1) {
        out.push_str(&" ".repeat(HELP_COLUMN));
        out.push_str(l);
        out.push('\n');
    }
    out
}

fn default_text(flag: &Flag) -> Option<String> {
    match flag.default {
        Default::None | Default::Required => None,
        Default::Bool(b) => Some(if b { "True" } else { "False" }.to_string()),
        Default::Int(i) => Some(i.to_string()),
        Default::Float(f) => Some(format!("{f:?}")),
        Default::Str(s) | Default::Level(s) => Some(s.to_string()),
        Default::List(l) => Some(format!("[{}]", l.join(", "))),
        Default::Derived(d) => Some(d.to_string()),
    }
}

fn flag_help(flag: &Flag) -> String {
    let mut h = flag.help.to_string();
    if flag.kind != Kind::Bool {
        if let Some(d) = default_text(flag) {
            if !h.is_empty() {
                h.push(' ');
            }
            h.push_str(&format!("(default: {d})"));
        }
    }
    if flag.visibility == Visibility::Experimental {
        h = format!("[experimental] {h}");
    }
    h
}

/// `compile --help` / `compile --help-hidden`.
pub(crate) fn compile_help(parser: &ArgParser, surface: Surface) -> String {
    let mut out = usage(parser);
    out.push('\n');
    if !parser.positionals.is_empty() {
        out.push_str("\npositional arguments:\n");
        for p in &parser.positionals {
            out.push_str(&entry(p.metavar, p.help));
        }
    }
    out.push_str("\noptions:\n");
    out.push_str(&option_entries(parser, surface, false));
    out.push_str(&format!("\n{NXCC_OWN_HEADING}\n"));
    out.push_str(&option_entries(parser, surface, true));
    if surface == Surface::Public {
        out.push_str("\nHidden and experimental options: --help-hidden; internal options: --help-hidden-list.\n");
    }
    out
}

/// The heading of nxcc's own options in `compile --help`, after the original's.
pub(crate) const NXCC_OWN_HEADING: &str = "nxcc's own options (not the original neuronx-cc's):";

/// The entries of the options `surface` shows, the original's (`own`: false, in its order) or
/// nxcc's own.
fn option_entries(parser: &ArgParser, surface: Surface, own: bool) -> String {
    let mut out = String::new();
    let mut seen: Vec<*const Flag> = Vec::new();
    for e in parser.entries.iter() {
        let ptr = e.flag as *const Flag;
        if seen.contains(&ptr) || !shown(e.flag, surface) || e.flag.is_nxcc_own() != own {
            continue;
        }
        seen.push(ptr);
        let mut strings: Vec<String> = e
            .flag
            .option_strings()
            .map(|s| invocation_part(s, e.flag))
            .collect();
        if let Some(neg) = e.flag.negation() {
            strings.push(neg);
        }
        // argparse lists the short form first when it was declared first; `-h` is.
        if e.flag.action == Action::Help {
            strings.reverse();
        }
        out.push_str(&entry(&strings.join(", "), &flag_help(e.flag)));
    }
    out
}

/// `compile --help-hidden-list`: internal options, one per line, with their defaults.
pub(crate) fn hidden_list() -> String {
    let mut out = String::new();
    for f in FLAGS
        .iter()
        .filter(|f| f.visibility == Visibility::Internal)
    {
        let d = default_text(f).unwrap_or_else(|| "None".to_string());
        out.push_str(&format!("{} (default: {})\n", f.spelling, d));
        if let Some(neg) = f.negation() {
            out.push_str(&format!("{neg}\n"));
        }
    }
    out
}

/// `nxcc --help`.
pub(crate) fn top_help(prog: &str) -> String {
    let mut out = top_usage(prog);
    // The original's subcommands first, as it lists them; nxcc's own after them.
    let names: Vec<&str> = ORIGINAL_SUBCOMMANDS
        .iter()
        .chain(NXCC_SUBCOMMANDS)
        .map(|(n, _)| *n)
        .collect();
    out.push_str(&format!(
        "\n\npositional arguments:\n  {{{}}}\n",
        names.join(",")
    ));
    for (n, h) in ORIGINAL_SUBCOMMANDS {
        out.push_str(&entry(&format!("  {n}"), h));
    }
    out.push_str(&format!("\n{prog}'s own commands:\n"));
    for (n, h) in NXCC_SUBCOMMANDS {
        out.push_str(&entry(&format!("  {n}"), h));
    }
    out.push_str("\noptions:\n");
    out.push_str(&entry("-h, --help", "Show this help message and exit."));
    for f in FLAGS
        .iter()
        .filter(|f| f.scope == super::flags::Scope::Driver && f.visibility == Visibility::Public)
    {
        let strings: Vec<String> = f.option_strings().map(|s| invocation_part(s, f)).collect();
        out.push_str(&entry(&strings.join(", "), &flag_help(f)));
    }
    out.push_str(&entry(
        &format!("{} {{{}}}", super::color::OPTION, super::color::CHOICES.join(",")),
        "When to colour errors, warnings and headings: auto colours a terminal unless NO_COLOR is set (default: auto).",
    ));
    out.push_str(&format!(
        "\nRun '{prog} <command> --help' for a command's options.\n"
    ));
    out.push_str("\nEnvironment:\n");
    for v in super::environment::for_users() {
        out.push_str(&entry(v.name, v.what));
    }
    out
}
