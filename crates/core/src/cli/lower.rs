//! The one place a parsed namespace is read: lowered, once, into the typed [`CompileInputs`]
//! (what can change the NEFF) and [`Settings`] (how this machine runs the compile), as ripgrep
//! lowers its parsed flags into the arguments the program uses; and the two written back as the
//! dry run's `args` (every dest of the flag table, in the table's order).
//!
//! Each dest of the table is a field of exactly one of the two, under the dest's own name, so the
//! namespace's values go into their fields by name and come back out the same way; a dest that
//! is in neither, or in both, fails the unit tests below.

use serde::Deserialize;
use serde_json::{Map, Value as Json};

use super::inputs::CompileInputs;
use super::namespace::{Dest, Namespace};
use super::settings::Settings;

/// Beside the values, what the user gave: the two `<dest>_Used` marks normalisation reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Given {
    /// `-O`/`--optlevel` was given (`--enable-experimental-O1` acts as `-O1` only without it).
    pub optlevel: bool,
    /// `--layer-unroll-factor` was given (`fsdp` unrolls by 4 only without it).
    pub layer_unroll_factor: bool,
}

/// The namespace as the typed parts; an error only when a field's type does not fit its dest's
/// values (a fault of this build, which the tests below rule out).
pub fn lower(ns: &Namespace) -> Result<(CompileInputs, Settings, Given), String> {
    let values = Json::Object(
        ns.iter()
            .map(|(dest, v)| {
                (
                    dest.to_string(),
                    serde_json::to_value(v).unwrap_or(Json::Null),
                )
            })
            .collect(),
    );
    let inputs = CompileInputs::deserialize(&values).map_err(|e| format!("the inputs: {e}"))?;
    let settings = Settings::deserialize(&values).map_err(|e| format!("the settings: {e}"))?;
    let given = Given {
        optlevel: ns.used(Dest::Optlevel),
        layer_unroll_factor: ns.used(Dest::LayerUnrollFactor),
    };
    Ok((inputs, settings, given))
}

/// The dry run's `args`: every dest of the flag table with its value, in the table's order.
pub fn args(inputs: &CompileInputs, settings: &Settings) -> Map<String, Json> {
    let mut parts = object(inputs);
    parts.extend(object(settings));
    Dest::ALL
        .iter()
        .map(|d| {
            let v = parts.remove(d.name()).unwrap_or(Json::Null);
            (d.name().to_string(), v)
        })
        .collect()
}

/// The dests whose fields live in [`Settings`]: what a compile's key and a remote action leave
/// out, because it lives there.
pub fn settings_dests() -> &'static [String] {
    static DESTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    DESTS.get_or_init(|| match lower(&Namespace::new()) {
        Ok((_, settings, _)) => object(&settings).into_iter().map(|(k, _)| k).collect(),
        Err(_) => Vec::new(),
    })
}

/// A part's fields by name.
fn object<T: serde::Serialize>(part: &T) -> Map<String, Json> {
    match serde_json::to_value(part) {
        Ok(Json::Object(m)) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::flags::{Action, Choices, Kind, FLAGS};
    use crate::cli::{parse, Command};

    fn compile(args: &[&str]) -> crate::cli::CompileArgs {
        let argv: Vec<String> = ["compile", "m.pb", "--target", "trn2"]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect();
        match parse("nxcc", &argv) {
            Ok(Command::Compile(c)) => *c,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn every_dest_is_a_field_of_one_part() {
        let (inputs, settings, _) = lower(&Namespace::new()).unwrap();
        let (i, s) = (object(&inputs), object(&settings));
        for d in Dest::ALL {
            let places = [i.contains_key(d.name()), s.contains_key(d.name())];
            assert_eq!(
                places.iter().filter(|p| **p).count(),
                1,
                "{}: a field of {places:?} (inputs, settings)",
                d.name()
            );
        }
        assert_eq!(
            i.len() + s.len(),
            Dest::ALL.len(),
            "a field that is no dest"
        );
        assert_eq!(settings_dests().len(), s.len());
    }

    /// A value for every flag of the table lowers, and comes back in `args` as the namespace had
    /// it.
    #[test]
    fn every_flag_lowers_and_comes_back() {
        for f in FLAGS.iter().filter(|f| !f.dest.is_empty()) {
            let value = match (f.kind, f.action, f.choices) {
                (Kind::Bool, ..) | (_, Action::StoreOptional { .. }, _) => None,
                (_, _, Choices::OneOf(c) | Choices::OneOfIgnoreCase(c)) => Some(c[c.len() - 1]),
                (_, _, Choices::IntegerDowncast) => Some("all"),
                (Kind::Int | Kind::Level, ..) => Some("1"),
                (Kind::Float | Kind::Seconds, ..) => Some("2.5"),
                (Kind::Endpoint, ..) => Some("grpc://host:1"),
                _ => Some("a-value"),
            };
            let mut args = vec![f.spelling];
            args.extend(value);
            let c = compile(&args);
            let back = Json::Object(args_of(&c));
            let mut ns = Namespace::new();
            let parsed = crate::cli::compile_parser("nxcc")
                .parse(
                    &["m.pb", "--target", "trn2"]
                        .iter()
                        .chain(&args)
                        .map(|s| s.to_string())
                        .collect::<Vec<_>>(),
                )
                .unwrap();
            for occ in &parsed.occurrences {
                crate::cli::apply(&mut ns, occ, &mut Vec::new());
            }
            let expected: Map<String, Json> = ns
                .iter()
                .map(|(d, v)| (d.to_string(), serde_json::to_value(v).unwrap()))
                .collect();
            assert_eq!(back, Json::Object(expected), "{args:?}");
        }
    }

    fn args_of(c: &crate::cli::CompileArgs) -> Map<String, Json> {
        args(&c.inputs, &c.settings)
    }

    #[test]
    fn a_float_that_is_not_a_number_stays_one() {
        let c = compile(&["--softmax-epsilon", "nan", "--rtol", "inf"]);
        assert!(c.inputs.softmax_epsilon.is_nan());
        let a = args_of(&c);
        assert_eq!(a["softmax_epsilon"], Json::Null);
        assert_eq!(a["rtol"], Json::Null);
    }

    #[test]
    fn what_was_given_is_known() {
        assert_eq!(compile(&[]).given, Given::default());
        let c = compile(&["-O2", "--layer-unroll-factor", "1"]);
        assert!(c.given.optlevel && c.given.layer_unroll_factor);
    }
}
