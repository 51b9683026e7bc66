//! A command-line parser that behaves like Python 3.10's `argparse`, driven by a flag table.
//!
//! Why not `clap`: the original driver is an argparse program and its clients depend on
//! argparse's exact behaviour — single-dash long options (`-lnc 2`), unique-prefix abbreviation
//! across ~175 long options with argparse's `ambiguous option: ... could match ...` error (which
//! also fires when two spellings of one option share the prefix, as `--cache_dir`/`--cache-dir`
//! do), `-O1` short options with attached values next to `-o`, `nargs='+'` greediness, the
//! "a token with a space is a value" rule, negative numbers as values, `--enable-X`/`--disable-X`
//! and `--X`/`--no-X` companions, and argparse's error wording (`invalid choice: 'x' (choose from
//! 'a', 'b')`, `ignored explicit argument '1'`, `expected one argument`). `clap` has no
//! abbreviation errors in this form, no single-dash long options mixed with attached short values
//! in argparse's precedence, and different messages. This module reproduces `_parse_optional`,
//! `_get_option_tuples`, `consume_optional` and `consume_positionals` of argparse 3.10 (the
//! version the original runs on), for the subset of nargs forms the tables use.

use super::flags::{Action, Choices, Flag, Kind, Visibility};
use super::namespace::Value;
pub(crate) use super::numbers::{parse_python_float, parse_python_int};

/// How many values a positional takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nargs {
    /// Exactly one value.
    One,
    /// Zero or one value (`nargs='?'`).
    Optional,
    /// Any number of values (`nargs='*'`).
    ZeroOrMore,
    /// At least one value (`nargs='+'`).
    OneOrMore,
}

impl Nargs {
    fn min(self) -> usize {
        match self {
            Nargs::One | Nargs::OneOrMore => 1,
            Nargs::Optional | Nargs::ZeroOrMore => 0,
        }
    }
    fn max(self) -> usize {
        match self {
            Nargs::One | Nargs::Optional => 1,
            Nargs::ZeroOrMore | Nargs::OneOrMore => usize::MAX,
        }
    }
}

/// A positional argument.
#[derive(Debug, Clone, Copy)]
pub struct Positional {
    /// The name shown in usage and help (`<model_file>`).
    pub metavar: &'static str,
    /// How many values it takes.
    pub nargs: Nargs,
    /// Its help text.
    pub help: &'static str,
}

/// One option string the parser recognises, and what it means.
#[derive(Debug, Clone)]
pub struct OptionEntry {
    /// The option string as typed (`--target`, `-O`).
    pub text: String,
    /// The flag it belongs to.
    pub flag: &'static Flag,
    /// `--disable-X` / `--no-X`: sets the dest to `false`.
    pub negated: bool,
}

/// A parser: a program name, its option strings (in declaration order) and its positionals.
#[derive(Debug, Clone)]
pub struct ArgParser {
    /// The program name usage lines start with (`nxcc compile`).
    pub prog: String,
    /// Shared: a parser for a fixed table is built once per process and cloned cheaply.
    pub entries: std::sync::Arc<Vec<OptionEntry>>,
    /// The positionals, in the order they are filled.
    pub positionals: Vec<Positional>,
}

/// One option as it occurred on the command line, with its converted value(s).
#[derive(Debug, Clone)]
pub struct Occurrence {
    /// The flag that occurred.
    pub flag: &'static Flag,
    /// The option string used (after prefix matching: the full spelling).
    pub option_string: String,
    /// It was the flag's negative form (`--disable-X`, `--no-X`).
    pub negated: bool,
    /// The converted value: `Bool` for flags, a scalar for `store`, `List` for `nargs='+'`.
    pub value: Value,
}

/// What a parse produced.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// Every option given, in command-line order.
    pub occurrences: Vec<Occurrence>,
    /// The values of each positional, in declaration order (empty when not given).
    pub positionals: Vec<Vec<String>>,
    /// Arguments nobody recognised (`parse_known_args`'s extras), in command-line order.
    pub extras: Vec<String>,
    /// A help or version action was reached: parsing stopped there.
    pub early_exit: Option<Action>,
    /// Words that followed one of nxcc's own optional-value options without `=` and so were not
    /// its value (`--timings t1.html`), in command-line order.
    pub unattached: Vec<Unattached>,
}

impl Parsed {
    /// The last occurrence for a dest.
    pub fn last(&self, dest: &str) -> Option<&Occurrence> {
        self.occurrences.iter().rev().find(|o| o.flag.dest == dest)
    }
    /// The string value of the last occurrence of a dest.
    pub fn str(&self, dest: &str) -> Option<&str> {
        self.last(dest).and_then(|o| o.value.as_str())
    }
    /// Whether the last occurrence of a dest is a true flag.
    pub fn flag(&self, dest: &str) -> bool {
        self.last(dest).is_some_and(|o| o.value.as_bool())
    }
    /// What to tell about each of `words` (unrecognised arguments, extra model files) that was
    /// meant as the value of one of nxcc's own optional-value options: `t1.html: did you mean
    /// `--timings=t1.html`?`.
    pub(crate) fn value_hints(&self, words: &[String]) -> Vec<String> {
        self.unattached
            .iter()
            .filter(|u| words.contains(&u.word))
            .map(Unattached::hint)
            .collect()
    }

    /// Every value given for a dest, in order (for `append` and repeated options).
    pub fn all(&self, dest: &str) -> Vec<String> {
        self.occurrences
            .iter()
            .filter(|o| o.flag.dest == dest)
            .flat_map(|o| match &o.value {
                Value::List(l) => l.clone(),
                Value::Str(s) => vec![s.clone()],
                v => vec![value_text(v)],
            })
            .collect()
    }
}

/// A word after one of nxcc's own optional-value options that is not its value: those options
/// take a value only after `=` (or, for `--dry-run`, an exact choice).
#[derive(Debug, Clone)]
pub struct Unattached {
    /// The option.
    pub flag: &'static Flag,
    /// The option string as given (after prefix matching: the full spelling).
    pub option_string: String,
    /// The word that followed it.
    pub word: String,
}

impl Unattached {
    /// `t1.html: did you mean `--timings=t1.html`?`; for an option with choices, which it takes.
    pub fn hint(&self) -> String {
        let (opt, word) = (&self.option_string, &self.word);
        match self.flag.choices {
            Choices::OneOf(c) if !c.contains(&word.as_str()) => format!(
                "{word}: not a value of {opt}, which takes only {} (`{opt}={}`)",
                c.join(" or "),
                c.last().unwrap_or(&"")
            ),
            _ => format!(
                "{word}: did you mean `{opt}={word}`? ({opt} takes its value only after `=`)"
            ),
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::None => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.clone(),
        Value::List(l) => l.join(" "),
    }
}

/// A usage error in argparse's form: `argument --x: message`, or a bare message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// The whole message, as argparse prints it after `error: `.
    pub message: String,
}

impl ArgError {
    fn argument(names: &str, message: impl std::fmt::Display) -> ArgError {
        ArgError {
            message: format!("argument {names}: {message}"),
        }
    }
    /// An error whose message is printed as it is.
    pub fn plain(message: impl Into<String>) -> ArgError {
        ArgError {
            message: message.into(),
        }
    }
}

/// Python's `repr()` of a string, as argparse prints values in errors.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c == quote => {
                out.push('\\');
                out.push(c)
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// argparse's `_negative_number_matcher`: `^-\d+$|^-\d*\.\d+$`.
fn looks_like_negative_number(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('-') else {
        return false;
    };
    if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match rest.split_once('.') {
        Some((a, b)) => {
            a.bytes().all(|c| c.is_ascii_digit())
                && !b.is_empty()
                && b.bytes().all(|c| c.is_ascii_digit())
        }
        None => false,
    }
}

/// How a token is classified (argparse's pattern letters 'O' and 'A').
#[derive(Debug, Clone)]
enum Token {
    /// A known option: entry index, the option string matched, and an attached value.
    Option {
        entry: usize,
        option_string: String,
        explicit: Option<String>,
    },
    /// Looks like an option but matches none: goes to the extras.
    Unknown,
    /// A value.
    Arg,
}

/// The argument list with each token's kind.
struct Words<'a> {
    args: &'a [String],
    kinds: Vec<Token>,
    /// Where the first `--` is (itself never a value).
    dashdash: Option<usize>,
}

impl Words<'_> {
    /// Whether the token at `i` exists and is a value an option may take.
    fn is_value(&self, i: usize) -> bool {
        i < self.args.len() && matches!(self.kinds[i], Token::Arg) && Some(i) != self.dashdash
    }
}

/// An option as met in the argument list.
struct At<'a> {
    entry: &'a OptionEntry,
    /// The option string matched (after prefix matching: the full spelling).
    option_string: &'a str,
    /// The value attached with `=`.
    explicit: Option<&'a str>,
}

/// An option that takes no value given one with `=`.
fn refuse_explicit(name: &str, explicit: Option<&str>) -> Result<(), ArgError> {
    match explicit {
        Some(x) => Err(ArgError::argument(
            name,
            format!("ignored explicit argument {}", py_repr(x)),
        )),
        None => Ok(()),
    }
}

impl ArgParser {
    /// A parser over flags, with each flag's companion spelling added right after it.
    pub fn new(
        prog: impl Into<String>,
        flags: &[&'static Flag],
        positionals: &[Positional],
    ) -> ArgParser {
        let mut entries = Vec::with_capacity(flags.len() * 2);
        for flag in flags {
            for s in flag.option_strings() {
                entries.push(OptionEntry {
                    text: s.to_string(),
                    flag,
                    negated: false,
                });
            }
            if let Some(neg) = flag.negation() {
                entries.push(OptionEntry {
                    text: neg,
                    flag,
                    negated: true,
                });
            }
        }
        ArgParser {
            prog: prog.into(),
            entries: std::sync::Arc::new(entries),
            positionals: positionals.to_vec(),
        }
    }

    fn exact(&self, s: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.text == s)
    }

    /// argparse's `_get_option_tuples`: every option string the token could abbreviate.
    fn option_tuples(&self, token: &str) -> Vec<(usize, String, Option<String>)> {
        let b = token.as_bytes();
        let mut result = Vec::new();
        if b.len() >= 2 && b[0] == b'-' && b[1] == b'-' {
            let (prefix, explicit) = match token.split_once('=') {
                Some((p, e)) => (p, Some(e.to_string())),
                None => (token, None),
            };
            for (i, e) in self.entries.iter().enumerate() {
                if e.text.starts_with(prefix) {
                    result.push((i, e.text.clone(), explicit.clone()));
                }
            }
        } else if b.len() >= 2 && b[0] == b'-' {
            let short_prefix =
                &token[..token.char_indices().nth(2).map_or(token.len(), |(i, _)| i)];
            let short_explicit = &token[short_prefix.len()..];
            for (i, e) in self.entries.iter().enumerate() {
                if e.text == short_prefix {
                    result.push((i, e.text.clone(), Some(short_explicit.to_string())));
                } else if e.text.starts_with(token) {
                    result.push((i, e.text.clone(), None));
                }
            }
        }
        result
    }

    /// argparse's `_parse_optional`.
    fn classify(&self, token: &str) -> Result<Token, ArgError> {
        if !token.starts_with('-') || token.len() == 1 {
            return Ok(Token::Arg);
        }
        if let Some(i) = self.exact(token) {
            return Ok(Token::Option {
                entry: i,
                option_string: token.to_string(),
                explicit: None,
            });
        }
        if let Some((opt, explicit)) = token.split_once('=') {
            if let Some(i) = self.exact(opt) {
                return Ok(Token::Option {
                    entry: i,
                    option_string: opt.to_string(),
                    explicit: Some(explicit.to_string()),
                });
            }
        }
        let tuples = self.option_tuples(token);
        if tuples.len() > 1 {
            let matches: Vec<&str> = tuples.iter().map(|t| t.1.as_str()).collect();
            return Err(ArgError::plain(format!(
                "ambiguous option: {} could match {}",
                token,
                matches.join(", ")
            )));
        }
        if let Some((entry, option_string, explicit)) = tuples.into_iter().next() {
            return Ok(Token::Option {
                entry,
                option_string,
                explicit,
            });
        }
        // No option looks like a negative number, so negative numbers are values.
        if looks_like_negative_number(token) {
            return Ok(Token::Arg);
        }
        if token.contains(' ') {
            return Ok(Token::Arg);
        }
        Ok(Token::Unknown)
    }

    /// Whether a token is a known option that takes its value from the next token (no `=VALUE`
    /// attached).
    pub(crate) fn needs_separate_value(&self, token: &str) -> bool {
        match self.classify(token) {
            Ok(Token::Option {
                entry,
                explicit: None,
                ..
            }) => self.entries[entry].flag.takes_value(),
            _ => false,
        }
    }

    /// Whether a token is one of this parser's options (a full spelling, a unique prefix, or
    /// either with `=VALUE`).
    pub fn recognises(&self, token: &str) -> bool {
        matches!(self.classify(token), Ok(Token::Option { .. }))
    }

    /// For each unrecognised argument that looks like a mistyped option of this parser, the
    /// option it probably is: `--traget: did you mean `--target`?` (with its `=VALUE` kept).
    /// Options no help lists (deprecated ones) are never suggested; public ones win ties.
    pub(crate) fn option_hints(&self, extras: &[String]) -> Vec<String> {
        let listed = |public: bool| {
            self.entries
                .iter()
                .filter(move |e| match e.flag.visibility {
                    Visibility::Public => public,
                    Visibility::Deprecated => false,
                    _ => !public,
                })
                .map(|e| e.text.as_str())
        };
        extras
            .iter()
            .filter(|a| a.starts_with('-') && a.trim_start_matches('-').len() >= 3)
            .filter_map(|a| {
                let (name, value) = a
                    .split_once('=')
                    .map_or((a.as_str(), None), |(n, v)| (n, Some(v)));
                let known = super::suggest::nearest(name, listed(true).chain(listed(false)))?;
                let known = match value {
                    Some(v) => format!("{known}={v}"),
                    None => known.to_string(),
                };
                Some(super::suggest::line(a, &known))
            })
            .collect()
    }

    /// The name argparse uses for an option in errors: its option strings joined by `/`.
    pub fn action_name(&self, flag: &Flag) -> String {
        flag.option_strings().collect::<Vec<_>>().join("/")
    }

    /// Parse a complete argument list (`parse_known_args`: unknown options land in `extras`).
    pub fn parse(&self, args: &[String]) -> Result<Parsed, ArgError> {
        let words = Words {
            args,
            kinds: self.classify_all(args)?,
            dashdash: args.iter().position(|a| a == "--"),
        };
        let mut out = Parsed {
            positionals: vec![Vec::new(); self.positionals.len()],
            ..Parsed::default()
        };
        let mut next_positional = 0usize;
        let mut i = 0usize;
        while i < args.len() {
            match &words.kinds[i] {
                Token::Arg => {
                    // A chunk of consecutive values (argparse's consume_positionals).
                    let end = (i..args.len())
                        .find(|&j| !matches!(words.kinds[j], Token::Arg))
                        .unwrap_or(args.len());
                    let chunk: Vec<String> = (i..end)
                        .filter(|&j| Some(j) != words.dashdash)
                        .map(|j| args[j].clone())
                        .collect();
                    let taken = self.consume_positionals(
                        &chunk,
                        &mut next_positional,
                        &mut out,
                        end == args.len(),
                    );
                    out.extras.extend(chunk[taken..].iter().cloned());
                    i = end;
                }
                Token::Unknown => {
                    out.extras.push(args[i].clone());
                    i += 1;
                }
                Token::Option {
                    entry,
                    option_string,
                    explicit,
                } => {
                    let at = At {
                        entry: &self.entries[*entry],
                        option_string,
                        explicit: explicit.as_deref(),
                    };
                    match self.option(&words, i, &at, &mut out)? {
                        Some(next) => i = next,
                        None => return Ok(out),
                    }
                }
            }
        }
        self.required_reached(next_positional)?;
        Ok(out)
    }

    /// Classify every token up front, as argparse builds its pattern string (all after `--` are
    /// values).
    fn classify_all(&self, args: &[String]) -> Result<Vec<Token>, ArgError> {
        let mut kinds = Vec::with_capacity(args.len());
        let mut after_dashdash = false;
        for a in args {
            if after_dashdash {
                kinds.push(Token::Arg);
            } else if a == "--" {
                after_dashdash = true;
                kinds.push(Token::Arg);
            } else {
                kinds.push(self.classify(a)?);
            }
        }
        Ok(kinds)
    }

    /// One option at `i`: its occurrence recorded; the index of the next token, or `None` when
    /// the option ends the parse (`--help`, `--version`).
    fn option(
        &self,
        words: &Words,
        i: usize,
        at: &At,
        out: &mut Parsed,
    ) -> Result<Option<usize>, ArgError> {
        let flag = at.entry.flag;
        let name = self.action_name(flag);
        let occurrence = |value| Occurrence {
            flag,
            option_string: at.option_string.to_string(),
            negated: at.entry.negated,
            value,
        };
        match flag.action {
            Action::Help | Action::HelpHidden | Action::HelpHiddenList | Action::Version => {
                refuse_explicit(&name, at.explicit)?;
                out.early_exit = Some(flag.action);
                Ok(None)
            }
            Action::StoreTrue
            | Action::DeprecatedStoreTrue { .. }
            | Action::EnableDisable
            | Action::Noable => {
                refuse_explicit(&name, at.explicit)?;
                out.occurrences
                    .push(occurrence(Value::Bool(!at.entry.negated)));
                Ok(Some(i + 1))
            }
            Action::StoreOptional { constant } => {
                let (raw, next) = self.optional_value(words, i, at, constant, out);
                let value = convert(flag, &name, &raw)?;
                out.occurrences.push(occurrence(value));
                Ok(Some(next))
            }
            Action::Store | Action::ExtendStr | Action::Append | Action::DeprecatedStore { .. } => {
                let (raw, next) = match at.explicit {
                    Some(x) => (x.to_string(), i + 1),
                    None if words.is_value(i + 1) => (words.args[i + 1].clone(), i + 2),
                    None => return Err(ArgError::argument(&name, "expected one argument")),
                };
                let value = convert(flag, &name, &raw)?;
                out.occurrences.push(occurrence(value));
                Ok(Some(next))
            }
            Action::OneOrMore => {
                let (raws, next) = match at.explicit {
                    Some(x) => (vec![x.to_string()], i + 1),
                    None => {
                        let end = (i + 1..words.args.len())
                            .find(|&j| !words.is_value(j))
                            .unwrap_or(words.args.len());
                        if end == i + 1 {
                            return Err(ArgError::argument(
                                &name,
                                "expected at least one argument",
                            ));
                        }
                        (words.args[i + 1..end].to_vec(), end)
                    }
                };
                let mut items = Vec::with_capacity(raws.len());
                for r in &raws {
                    match convert(flag, &name, r)? {
                        Value::Str(s) => items.push(s),
                        other => items.push(value_text(&other)),
                    }
                }
                out.occurrences.push(occurrence(Value::List(items)));
                Ok(Some(next))
            }
        }
    }

    /// The value of an option whose value is optional: attached, the next word when the option
    /// takes it, else the constant (a word it did not take is noted, for a hint); with the
    /// index of the next token.
    fn optional_value(
        &self,
        words: &Words,
        i: usize,
        at: &At,
        constant: &str,
        out: &mut Parsed,
    ) -> (String, usize) {
        let flag = at.entry.flag;
        if let Some(x) = at.explicit {
            return (x.to_string(), i + 1);
        }
        if words.is_value(i + 1) {
            let word = &words.args[i + 1];
            if self.optional_takes(flag, word) {
                return (word.clone(), i + 2);
            }
            out.unattached.push(Unattached {
                flag,
                option_string: at.option_string.to_string(),
                word: word.clone(),
            });
        }
        (constant.to_string(), i + 1)
    }

    /// Positionals never reached get an empty match if they allow it; else the error naming
    /// those required.
    fn required_reached(&self, next_positional: usize) -> Result<(), ArgError> {
        let missing: Vec<&str> = self.positionals[next_positional..]
            .iter()
            .filter(|p| p.nargs.min() > 0)
            .map(|p| p.metavar)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(ArgError::plain(format!(
            "the following arguments are required: {}",
            missing.join(", ")
        )))
    }

    /// Whether an `nargs='?'` option takes the next value token. argparse takes any value; nxcc's
    /// own optional-value options (`--dry-run`, `--timings`, `--neuron-cache`) take only an
    /// attached `=VALUE` or, for `--dry-run`, a following exact choice — so `--dry-run model.pb`
    /// keeps the model positional. Their help says so (`--timings[=FILE]`), and a word that was
    /// meant as their value is pointed out ([`Parsed::value_hints`]).
    fn optional_takes(&self, flag: &Flag, next: &str) -> bool {
        if !flag.is_nxcc_own() {
            return true;
        }
        match flag.choices {
            Choices::OneOf(c) => c.contains(&next),
            _ => false,
        }
    }

    /// Hand a chunk of values to the positionals still waiting, as argparse's `match_partial`
    /// does: as many positionals as can match, each greedy. Returns how many values were taken.
    fn consume_positionals(
        &self,
        chunk: &[String],
        next: &mut usize,
        out: &mut Parsed,
        at_end: bool,
    ) -> usize {
        let remaining = &self.positionals[*next..];
        // The longest prefix of the remaining positionals whose minimums fit in the chunk.
        let mut count = remaining.len();
        while count > 0
            && remaining[..count]
                .iter()
                .map(|p| p.nargs.min())
                .sum::<usize>()
                > chunk.len()
        {
            count -= 1;
        }
        if count == 0 || (chunk.is_empty() && !at_end) {
            return 0;
        }
        let mut taken = 0usize;
        for (k, p) in remaining[..count].iter().enumerate() {
            let rest_min: usize = remaining[k + 1..count].iter().map(|q| q.nargs.min()).sum();
            let avail = chunk.len() - taken - rest_min;
            let n = avail.min(p.nargs.max()).max(p.nargs.min());
            out.positionals[*next + k] = chunk[taken..taken + n].to_vec();
            taken += n;
        }
        *next += count;
        taken
    }
}

/// Convert and check one raw value for a flag (argparse's `_get_values` + `_check_value`).
pub fn convert(flag: &Flag, name: &str, raw: &str) -> Result<Value, ArgError> {
    let value = match flag.kind {
        Kind::Int => match parse_python_int(raw) {
            Some(v) => Value::Int(v),
            None => {
                return Err(ArgError::argument(
                    name,
                    format!("invalid int value: {}", py_repr(raw)),
                ))
            }
        },
        Kind::Float => match parse_python_float(raw) {
            Some(v) => Value::Float(v),
            None => {
                return Err(ArgError::argument(
                    name,
                    format!("invalid float value: {}", py_repr(raw)),
                ))
            }
        },
        Kind::Seconds => {
            let (min, max) = super::flags::SECONDS_RANGE;
            match parse_python_float(raw) {
                Some(v) if (min..=max).contains(&v) => Value::Float(v),
                _ => {
                    return Err(ArgError::argument(
                        name,
                        format!(
                            "invalid seconds value: {} (a number of seconds from {min} to {max})",
                            py_repr(raw)
                        ),
                    ))
                }
            }
        }
        Kind::Endpoint => match super::endpoint::parse(raw) {
            Ok(_) => Value::Str(raw.to_string()),
            Err(e) => {
                return Err(ArgError::argument(
                    name,
                    format!("invalid address: {}: {e}", py_repr(raw)),
                ))
            }
        },
        Kind::Level => match super::level::parse(raw) {
            Some(v) => Value::Int(v),
            None => {
                return Err(ArgError::argument(
                    name,
                    format!("invalid level value: {}", py_repr(raw)),
                ))
            }
        },
        Kind::Bool | Kind::Str | Kind::Path | Kind::Choice | Kind::List => {
            Value::Str(raw.to_string())
        }
    };
    check_choice(flag, name, value)
}

fn check_choice(flag: &Flag, name: &str, value: Value) -> Result<Value, ArgError> {
    let invalid = |shown: &str, choices: &[&str]| {
        let list: Vec<String> = choices.iter().map(|c| py_repr(c)).collect();
        ArgError::argument(
            name,
            format!(
                "invalid choice: {} (choose from {})",
                py_repr(shown),
                list.join(", ")
            ),
        )
    };
    match (&flag.choices, value) {
        (Choices::OneOf(c), Value::Str(s)) => {
            if c.contains(&s.as_str()) {
                Ok(Value::Str(s))
            } else {
                Err(invalid(&s, c))
            }
        }
        (Choices::OneOfIgnoreCase(c), Value::Str(s)) => {
            let lower = s.to_lowercase();
            if c.contains(&lower.as_str()) {
                Ok(Value::Str(lower))
            } else {
                Err(invalid(&lower, c))
            }
        }
        (Choices::IntegerDowncast, Value::Str(s)) => {
            const OPS: &[&str] = &["dot", "scatter", "all_reduce", "reduce_scatter", "pow"];
            let ok = matches!(s.as_str(), "default" | "all" | "none")
                || (!s.is_empty() && s.split(',').all(|op| OPS.contains(&op.trim())));
            if ok {
                Ok(Value::Str(s))
            } else {
                Err(ArgError::argument(
                    name,
                    format!(
                        "invalid value: {} (choose from 'default', 'all', 'none', or a comma list of {})",
                        py_repr(&s),
                        OPS.join(",")
                    ),
                ))
            }
        }
        (_, v) => Ok(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_int_rules() {
        assert_eq!(parse_python_int(" 12 "), Some(12));
        assert_eq!(parse_python_int("-3"), Some(-3));
        assert_eq!(parse_python_int("+3"), Some(3));
        assert_eq!(parse_python_int("1_000"), Some(1000));
        assert_eq!(parse_python_int("1__0"), None);
        assert_eq!(parse_python_int("x"), None);
        assert_eq!(parse_python_int(""), None);
        assert_eq!(parse_python_int("1.5"), None);
    }

    #[test]
    fn python_float_rules() {
        assert_eq!(parse_python_float("-100000000.0"), Some(-1e8));
        assert_eq!(parse_python_float("1e-3"), Some(1e-3));
        assert!(parse_python_float("inf").unwrap().is_infinite());
        assert_eq!(parse_python_float("x"), None);
    }

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(py_repr("fp8"), "'fp8'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b"), "'a\\'\"b'");
    }

    #[test]
    fn negative_numbers() {
        assert!(looks_like_negative_number("-3"));
        assert!(looks_like_negative_number("-0.5"));
        assert!(looks_like_negative_number("-.5"));
        assert!(!looks_like_negative_number("-O1"));
        assert!(!looks_like_negative_number("-"));
        assert!(!looks_like_negative_number("-1e5"));
    }
}
