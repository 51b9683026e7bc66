//! Strict command-line parsing for the simulated tools: each tool declares exactly the options
//! 03-jobs.md lists for it, in the form the driver writes them (`--name VALUE`, `--name=VALUE`,
//! or a bare switch). Anything else is an error, so a wrong driver command line fails the test
//! that produced it.
//!
//! Extra options: `hlo2penguin` and `walrus_driver` receive the user's
//! `--internal-hlo2tensorizer-options` / `--internal-backend-options`, shell-split and appended
//! after the driver's own options. For those two tools only, tokens that are not declared options
//! are accepted when they are `--flag` or `--flag=value` and come after every option the driver
//! always passes; they are recorded verbatim (the tools write them into their outputs) and not
//! interpreted. Declared options marked `everywhere` (walrus_driver's `--optlevel` and
//! `--allocator`) are recognised among the extra options too, so that they are rejected there
//! as the native tool rejects them.

/// How an option takes its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// No value.
    Switch,
    /// `--name VALUE` only.
    Sep,
    /// `--name=VALUE` only.
    Eq,
    /// Either form.
    Either,
}

/// A value check: `Err` holds the reason.
pub type Check = fn(&str) -> Result<(), String>;

/// One declared option.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// The option as written, dashes included (`--pass`).
    pub name: &'static str,
    /// How its value is attached.
    pub form: Form,
    /// Missing from the command line is a usage error.
    pub required: bool,
    /// May be given more than once (else a second one is a usage error).
    pub repeat: bool,
    /// Also recognised among the extra options.
    pub everywhere: bool,
    /// Checks each value given.
    pub check: Check,
}

/// An option with the common defaults.
pub const fn opt(name: &'static str, form: Form, check: Check) -> Opt {
    Opt {
        name,
        form,
        required: false,
        repeat: false,
        everywhere: false,
        check,
    }
}

impl Opt {
    /// The option must be given.
    pub const fn required(mut self) -> Opt {
        self.required = true;
        self
    }
    /// The option may be given more than once.
    pub const fn repeat(mut self) -> Opt {
        self.repeat = true;
        self
    }
    /// The option is recognised among the extra options too.
    pub const fn everywhere(mut self) -> Opt {
        self.everywhere = true;
        self
    }
}

/// A tool's command line.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The metavar of a positional input that must be the first argument, if the tool has one.
    pub input_first: Option<&'static str>,
    /// The declared options.
    pub opts: &'static [Opt],
    /// Extra `--flag[=value]` options accepted after the required ones (and what they are).
    pub extra: Option<&'static str>,
}

/// A parsed command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Args {
    /// The positional input (`None`: the tool takes none).
    pub input: Option<String>,
    /// Declared options in command-line order (`None` for switches).
    pub opts: Vec<(&'static str, Option<String>)>,
    /// Extra options, verbatim.
    pub extra: Vec<String>,
}

impl Args {
    /// The last value of an option.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// A required option's value (the parser has checked it is there).
    pub fn value(&self, name: &str) -> &str {
        self.get(name).unwrap_or_default()
    }

    /// Every value of a repeatable option, in order.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|(n, _)| *n == name)
            .filter_map(|(_, v)| v.as_deref())
            .collect()
    }

    /// Whether an option (a switch or one with a value) was given.
    pub fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|(n, _)| *n == name)
    }
}

/// Parse `args` (without `argv[0]`) against `spec`. The error is the message to print.
pub fn parse(spec: &Spec, args: &[String]) -> Result<Args, String> {
    let mut out = Args::default();
    let mut i = 0;
    if let Some(meta) = spec.input_first {
        match args.first() {
            Some(a) if !a.starts_with('-') && !a.is_empty() => {
                out.input = Some(a.clone());
                i = 1;
            }
            _ => {
                return Err(format!(
                    "the input file ({meta}) must be the first argument"
                ))
            }
        }
    }
    let mut in_extra = false;
    while i < args.len() {
        let tok = &args[i];
        let (name, attached) = match tok.split_once('=') {
            Some((n, v)) if tok.starts_with("--") => (n, Some(v)),
            _ => (tok.as_str(), None),
        };
        let declared = spec
            .opts
            .iter()
            .find(|o| o.name == name && (!in_extra || o.everywhere));
        let Some(o) = declared else {
            extra_option(spec, &out, tok, name)?;
            in_extra = true;
            out.extra.push(tok.clone());
            i += 1;
            continue;
        };
        if !o.repeat && !in_extra && out.has(o.name) {
            return Err(format!("option {} given more than once", o.name));
        }
        let (value, taken) = value_of(o, tok, attached, args.get(i + 1))?;
        i += taken;
        if let Some(v) = &value {
            (o.check)(v).map_err(|e| format!("argument {}: {e}", o.name))?;
        }
        out.opts.push((o.name, value));
        i += 1;
    }
    let missing = missing_required(spec, &out);
    if !missing.is_empty() {
        return Err(format!(
            "the following arguments are required: {}",
            missing.join(", ")
        ));
    }
    Ok(out)
}

/// A token no declared option matches: an extra option (`--flag` or `--flag=value`) where the
/// spec takes them, after every required option; else the error.
fn extra_option(spec: &Spec, out: &Args, tok: &str, name: &str) -> Result<(), String> {
    let Some(what) = spec.extra else {
        return Err(if tok.starts_with('-') {
            format!("unrecognized option {tok:?}")
        } else {
            format!("unexpected argument {tok:?}")
        });
    };
    if !tok.starts_with("--") || name.len() <= 2 {
        return Err(format!(
            "unexpected argument {tok:?}: only --flag or --flag=value tokens ({what}) may follow the known options"
        ));
    }
    let missing = missing_required(spec, out);
    if !missing.is_empty() {
        return Err(format!(
            "unrecognized option {tok:?} before {}: extra options ({what}) must follow every required option",
            missing.join(", ")
        ));
    }
    Ok(())
}

/// The value of option `o` given as `tok` (with `attached` after `=`; `next` the argument after
/// it), in the form it takes; with how many arguments after `tok` it took.
fn value_of(
    o: &Opt,
    tok: &str,
    attached: Option<&str>,
    next: Option<&String>,
) -> Result<(Option<String>, usize), String> {
    match (o.form, attached) {
        (Form::Switch, None) => Ok((None, 0)),
        (Form::Switch, Some(_)) => Err(format!("option {} takes no value (got {tok:?})", o.name)),
        (Form::Eq | Form::Either, Some(v)) => Ok((Some(v.to_string()), 0)),
        (Form::Sep, Some(_)) => Err(format!(
            "option {0} takes its value as the next argument ({0} VALUE), got {tok:?}",
            o.name
        )),
        (Form::Eq, None) => Err(format!(
            "option {0} takes its value attached ({0}=VALUE), got {tok:?}",
            o.name
        )),
        (Form::Sep | Form::Either, None) => match next {
            Some(v) if !v.starts_with("--") => Ok((Some(v.clone()), 1)),
            _ => Err(format!("argument {}: expected one argument", o.name)),
        },
    }
}

fn missing_required(spec: &Spec, args: &Args) -> Vec<&'static str> {
    spec.opts
        .iter()
        .filter(|o| o.required && !args.has(o.name))
        .map(|o| o.name)
        .collect()
}

/// Value checks shared by the tools.
pub mod checks {
    /// Any non-empty value.
    pub fn nonempty(v: &str) -> Result<(), String> {
        if v.is_empty() {
            Err("empty value".into())
        } else {
            Ok(())
        }
    }

    /// An absolute path (the driver makes every command-line path absolute).
    pub fn absolute(v: &str) -> Result<(), String> {
        if std::path::Path::new(v).is_absolute() {
            Ok(())
        } else {
            Err(format!("{v:?} is not an absolute path"))
        }
    }

    /// An integer.
    pub fn int(v: &str) -> Result<(), String> {
        v.parse::<i64>()
            .map(|_| ())
            .map_err(|_| format!("invalid int value: {v:?}"))
    }

    /// An integer ≥ 1.
    pub fn positive(v: &str) -> Result<(), String> {
        match v.parse::<i64>() {
            Ok(n) if n >= 1 => Ok(()),
            _ => Err(format!("expected an integer >= 1, got {v:?}")),
        }
    }

    /// An integer ≥ 0.
    pub fn non_negative(v: &str) -> Result<(), String> {
        match v.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(()),
            _ => Err(format!("expected an integer >= 0, got {v:?}")),
        }
    }

    /// A log level: a name or an integer (what `--verbose` of the driver accepts).
    pub fn level(v: &str) -> Result<(), String> {
        crate::cli::level::parse(v)
            .map(|_| ())
            .ok_or_else(|| format!("invalid level {v:?}"))
    }

    /// A `--target` value of the driver.
    pub fn target(v: &str) -> Result<(), String> {
        let flag = crate::cli::flags::by_dest("target").ok_or("no target table")?;
        match flag.choices {
            crate::cli::flags::Choices::OneOf(list) if !list.contains(&v) => Err(format!(
                "invalid choice: {v:?} (choose from {})",
                list.join(", ")
            )),
            _ => Ok(()),
        }
    }

    /// A comma list of non-empty, sorted, distinct items.
    pub fn sorted_list(v: &str) -> Result<(), String> {
        let items: Vec<&str> = v.split(',').collect();
        if items.iter().any(|s| s.is_empty()) {
            return Err(format!("empty item in {v:?}"));
        }
        if items.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!("items of {v:?} are not sorted and distinct"));
        }
        Ok(())
    }

    /// One of `choices`.
    pub fn one_of(v: &str, choices: &[&str]) -> Result<(), String> {
        if choices.contains(&v) {
            Ok(())
        } else {
            Err(format!(
                "invalid choice: {v:?} (choose from {})",
                choices.join(", ")
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::checks::*;
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    static OPTS: &[Opt] = &[
        opt("--in", Form::Sep, absolute).required(),
        opt("--lnc", Form::Eq, positive).required(),
        opt("--fast", Form::Switch, nonempty),
        opt("--x", Form::Sep, nonempty).repeat(),
        opt("--optlevel", Form::Either, nonempty).everywhere(),
    ];
    const STRICT: Spec = Spec {
        input_first: None,
        opts: OPTS,
        extra: None,
    };
    const TAIL: Spec = Spec {
        input_first: Some("bir.json"),
        opts: OPTS,
        extra: Some("<options>"),
    };

    #[test]
    fn accepts_the_declared_forms() {
        let a = parse(
            &STRICT,
            &s(&["--in", "/m", "--lnc=2", "--fast", "--x", "a", "--x", "b"]),
        )
        .unwrap();
        assert_eq!(a.get("--in"), Some("/m"));
        assert_eq!(a.get("--lnc"), Some("2"));
        assert!(a.has("--fast"));
        assert_eq!(a.all("--x"), vec!["a", "b"]);
        assert!(a.extra.is_empty());
    }

    #[test]
    fn rejects_wrong_forms_unknowns_and_missing_values() {
        for (argv, needle) in [
            (vec!["--in=/m", "--lnc=1"], "as the next argument"),
            (vec!["--in", "/m", "--lnc", "1"], "attached"),
            (vec!["--in", "/m", "--lnc=1", "--fast=1"], "takes no value"),
            (
                vec!["--in", "/m", "--lnc=1", "--bogus"],
                "unrecognized option",
            ),
            (
                vec!["--in", "/m", "--lnc=1", "stray"],
                "unexpected argument",
            ),
            (vec!["--lnc=1", "--in"], "expected one argument"),
            (vec!["--in", "--lnc=1"], "expected one argument"),
            (vec!["--in", "rel", "--lnc=1"], "not an absolute path"),
            (vec!["--in", "/m", "--lnc=0"], "integer >= 1"),
            (vec!["--in", "/m"], "required: --lnc"),
            (
                vec!["--in", "/m", "--in", "/n", "--lnc=1"],
                "more than once",
            ),
        ] {
            let e = parse(&STRICT, &s(&argv)).unwrap_err();
            assert!(e.contains(needle), "{argv:?}: {e}");
        }
    }

    #[test]
    fn extra_options_only_after_required_ones() {
        let a = parse(
            &TAIL,
            &s(&[
                "bir.json", "--in", "/m", "--lnc=1", "--foo", "--bar=1", "--fast",
            ]),
        )
        .unwrap();
        assert_eq!(a.input.as_deref(), Some("bir.json"));
        // A declared switch after an extra option is recorded as extra, not interpreted.
        assert_eq!(a.extra, s(&["--foo", "--bar=1", "--fast"]));
        assert!(!a.has("--fast"));
        let early = parse(&TAIL, &s(&["bir.json", "--foo", "--in", "/m", "--lnc=1"])).unwrap_err();
        assert!(early.contains("before --in, --lnc"), "{early}");
        let bare = parse(
            &TAIL,
            &s(&["bir.json", "--in", "/m", "--lnc=1", "--foo", "v"]),
        )
        .unwrap_err();
        assert!(bare.contains("only --flag or --flag=value"), "{bare}");
    }

    #[test]
    fn everywhere_options_are_recognised_among_extras() {
        let a = parse(
            &TAIL,
            &s(&["bir.json", "--in", "/m", "--lnc=1", "--foo", "--optlevel=2"]),
        )
        .unwrap();
        assert_eq!(a.get("--optlevel"), Some("2"));
        assert_eq!(a.extra, s(&["--foo"]));
    }

    #[test]
    fn input_must_come_first() {
        let e = parse(&TAIL, &s(&["--in", "/m", "bir.json", "--lnc=1"])).unwrap_err();
        assert!(e.contains("must be the first argument"), "{e}");
    }

    #[test]
    fn list_checks() {
        assert!(sorted_list("io,scalar_dynamic_offset").is_ok());
        assert!(sorted_list("scalar_dynamic_offset,io").is_err());
        assert!(sorted_list("io,io").is_err());
        assert!(sorted_list("io,").is_err());
        assert!(target("trn1").is_ok());
        assert!(target("trn9").is_err());
        assert!(level("info").is_ok() && level("15").is_ok() && level("loud").is_err());
    }
}
