//! When nxcc's console output is coloured, and what is: `--color auto|always|never` (taken out of
//! the command line before it is parsed, wherever it is given before a `--`), `NO_COLOR`, and
//! whether the stream is a terminal. Only the marks of errors (`error:`, `[ERROR]`), warnings
//! (`warning:`, `WARNING:`, `[WARNING]`) and headings are coloured; nothing else is.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color WHEN`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum When {
    /// Colour a terminal, unless `NO_COLOR` is set (and not empty) or `TERM` is `dumb`.
    #[default]
    Auto,
    /// Always colour, a pipe or a file too.
    Always,
    /// Never colour.
    Never,
}

/// The option, and the environment variable that turns colour off.
pub const OPTION: &str = "--color";
/// Set and not empty: no colour unless `--color=always` (<https://no-color.org>).
pub const NO_COLOR_ENV: &str = "NO_COLOR";
/// The choices of `--color`, as the help lists them.
pub const CHOICES: [&str; 3] = ["auto", "always", "never"];

static CHOSEN: OnceLock<When> = OnceLock::new();

impl When {
    fn parse(text: &str) -> Result<When, String> {
        match text {
            "auto" => Ok(When::Auto),
            "always" => Ok(When::Always),
            "never" => Ok(When::Never),
            _ => Err(format!(
                "argument {OPTION}: invalid choice: {} (choose from 'auto', 'always', 'never')",
                super::argparse::py_repr(text)
            )),
        }
    }

    /// Whether a stream is coloured: `terminal` says whether it is one; `no_color` whether
    /// `NO_COLOR` is set and not empty; `dumb` whether `TERM` is `dumb`.
    pub(crate) fn colours(self, terminal: bool, no_color: bool, dumb: bool) -> bool {
        match self {
            When::Always => true,
            When::Never => false,
            When::Auto => terminal && !no_color && !dumb,
        }
    }
}

/// Take every `--color WHEN` / `--color=WHEN` given before a `--` out of `args`; the last one
/// wins. An invalid or missing value is a usage error in argparse's words.
pub fn take(args: &mut Vec<String>) -> Result<When, String> {
    let mut when = When::Auto;
    let mut i = 0;
    while i < args.len() && args[i] != "--" {
        if let Some(v) = args[i].strip_prefix("--color=") {
            when = When::parse(v)?;
            args.remove(i);
        } else if args[i] == OPTION {
            let v = args
                .get(i + 1)
                .ok_or_else(|| format!("argument {OPTION}: expected one argument"))?;
            when = When::parse(v)?;
            args.drain(i..i + 2);
        } else {
            i += 1;
        }
    }
    Ok(when)
}

/// Set this process's choice (once, before anything is printed; later calls change nothing).
pub fn choose(when: When) {
    let _ = CHOSEN.set(when);
}

/// Whether stderr (`stderr`: true) or stdout is coloured in this process.
pub fn enabled(stderr: bool) -> bool {
    let terminal = if stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    let no_color = std::env::var_os(NO_COLOR_ENV).is_some_and(|v| !v.is_empty());
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    CHOSEN
        .get()
        .copied()
        .unwrap_or_default()
        .colours(terminal, no_color, dumb)
}

const RED: &str = "\x1b[1;31m";
const YELLOW: &str = "\x1b[1;33m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// The marks coloured where a line starts with them (after a `prog: ` for argparse's
/// `nxcc compile: error:`), and their colour.
const MARKS: [(&str, &str); 6] = [
    ("[ERROR]", RED),
    ("error:", RED),
    ("[WARNING]", YELLOW),
    ("WARNING:", YELLOW),
    ("warning:", YELLOW),
    ("[WARN]", YELLOW),
];

/// `text` with the mark of each error or warning line coloured.
pub(crate) fn paint_marks(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    for line in text.split_inclusive('\n') {
        out.push_str(&paint_line(line));
    }
    out
}

fn paint_line(line: &str) -> String {
    // The mark starts the line, or follows the program's name (`nxcc compile: error: ...`,
    // `parallel-compile: warning: ...`).
    let starts = std::iter::once(0).chain(line.find(": ").map(|i| i + 2));
    for at in starts {
        let rest = &line[at..];
        if let Some((mark, colour)) = MARKS.iter().find(|(m, _)| rest.starts_with(m)) {
            let end = at + mark.len();
            return format!("{}{colour}{mark}{RESET}{}", &line[..at], &line[end..]);
        }
        // Only a program name (one or two words, no spaces beyond) may come before the mark.
        if line[..at].matches(' ').count() > 2 {
            break;
        }
    }
    line.to_string()
}

/// A heading, bold when `on`.
pub fn heading(text: &str, on: bool) -> String {
    if on {
        format!("{BOLD}{text}{RESET}")
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_option_is_taken_out_wherever_it_is_before_a_double_dash() {
        let mut a = words("--color never compile m.pb --color=always --target trn2");
        assert_eq!(take(&mut a), Ok(When::Always));
        assert_eq!(a, words("compile m.pb --target trn2"));
        let mut a = words("parallel-compile d -- --color never");
        assert_eq!(take(&mut a), Ok(When::Auto), "after -- it is the compile's");
        assert_eq!(a, words("parallel-compile d -- --color never"));
        let mut a = words("compile --color=sometimes");
        assert_eq!(
            take(&mut a),
            Err("argument --color: invalid choice: 'sometimes' (choose from 'auto', 'always', 'never')".into())
        );
        assert_eq!(
            take(&mut words("compile --color")),
            Err("argument --color: expected one argument".into())
        );
    }

    #[test]
    fn no_color_wins_over_auto_and_always_over_everything() {
        assert!(When::Auto.colours(true, false, false));
        assert!(!When::Auto.colours(false, false, false), "not a terminal");
        assert!(!When::Auto.colours(true, true, false), "NO_COLOR");
        assert!(!When::Auto.colours(true, false, true), "TERM=dumb");
        assert!(When::Always.colours(false, true, true));
        assert!(!When::Never.colours(true, false, false));
    }

    #[test]
    fn only_the_marks_are_painted() {
        assert_eq!(
            paint_marks("nxcc compile: error: bad\nusage: x\n"),
            "nxcc compile: \x1b[1;31merror:\x1b[0m bad\nusage: x\n"
        );
        assert_eq!(
            paint_marks("[ERROR] [NCC_EDRV001] x\n"),
            "\x1b[1;31m[ERROR]\x1b[0m [NCC_EDRV001] x\n"
        );
        assert_eq!(
            paint_marks("parallel-compile: warning: w\n"),
            "parallel-compile: \x1b[1;33mwarning:\x1b[0m w\n"
        );
        let plain = "a compile of m.pb: it says error: here\n";
        assert_eq!(paint_marks(plain), plain, "a mark inside a sentence");
    }
}
