//! The flag table in `src/cli/flags.rs` mirrors the specification's `flags.tsv` row for row.

use nxcc::cli::flags::{Action, Choices, Default, Kind, Scope, Visibility, FLAGS};

fn action_name(a: &Action, kind: Kind) -> &'static str {
    match a {
        Action::Store => "store",
        Action::StoreTrue => "store_true",
        Action::StoreOptional { .. } => "store_optional",
        Action::EnableDisable => "enable_disable",
        Action::Noable => "noable",
        Action::ExtendStr => "extend_str",
        Action::Append => "append",
        Action::OneOrMore => {
            assert_eq!(kind, Kind::List);
            "store"
        }
        Action::DeprecatedStoreTrue { .. } => "deprecated_store_true",
        Action::DeprecatedStore { .. } => "deprecated_store",
        Action::Help => "help",
        Action::HelpHidden => "help_hidden",
        Action::HelpHiddenList => "help_hidden_list",
        Action::Version => "version",
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Bool => "bool",
        Kind::Int => "int",
        Kind::Float | Kind::Seconds => "float",
        Kind::Str | Kind::Endpoint => "str",
        Kind::Path => "path",
        Kind::Choice => "choice",
        Kind::Level => "level",
        Kind::List => "list",
    }
}

#[test]
fn flags_table_matches_the_specification() {
    let tsv = include_str!("data/flags.tsv");
    let rows: Vec<Vec<&str>> = tsv
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split('\t').collect())
        .collect();
    assert_eq!(rows.len(), FLAGS.len(), "row count");
    for (row, flag) in rows.iter().zip(FLAGS) {
        let ctx = row[0];
        assert_eq!(flag.spelling, row[0], "{ctx}: spelling");
        let aliases: Vec<&str> = row[1].split(',').filter(|s| !s.is_empty()).collect();
        let mut ours: Vec<&str> = flag.aliases.to_vec();
        ours.retain(|a| *a != "-h"); // argparse's own short help option
        assert_eq!(ours, aliases, "{ctx}: aliases");
        let dest = if row[2] == "—" { "" } else { row[2] };
        assert_eq!(flag.dest, dest, "{ctx}: dest");
        assert_eq!(
            action_name(&flag.action, flag.kind),
            row[3],
            "{ctx}: action"
        );
        assert_eq!(kind_name(flag.kind), row[4], "{ctx}: type");
        let default_ok = match flag.default {
            Default::None => row[5].is_empty() || row[5] == "n/a",
            Default::Bool(b) => row[5] == if b { "true" } else { "false" },
            Default::Int(i) => row[5] == i.to_string(),
            Default::Float(f) => row[5].parse::<f64>().ok() == Some(f),
            Default::Str(s) | Default::Level(s) => row[5] == s,
            Default::List(l) => row[5] == format!("[{}]", l.join(",")),
            Default::Derived(d) => row[5] == format!("({d})"),
            Default::Required => row[5].starts_with("(required"),
        };
        assert!(
            default_ok,
            "{ctx}: default {:?} vs {:?}",
            flag.default, row[5]
        );
        match flag.choices {
            Choices::OneOf(c) => assert_eq!(c.join(","), row[6], "{ctx}: choices"),
            Choices::OneOfIgnoreCase(c) => assert!(
                row[6].starts_with(&c.join(",")) && row[6].contains("case-insensitive"),
                "{ctx}"
            ),
            Choices::Level => assert!(row[6].starts_with("trace,debug,info"), "{ctx}"),
            Choices::IntegerDowncast => assert!(row[6].starts_with("default,all,none"), "{ctx}"),
            Choices::Any => assert!(
                row[6].is_empty() || flag.spelling == "--toolchain",
                "{ctx}: choices {:?}",
                row[6]
            ),
        }
        let vis = match flag.visibility {
            Visibility::Public => "public",
            Visibility::Hidden => "hidden",
            Visibility::Internal => "internal",
            Visibility::Experimental => "experimental",
            Visibility::Deprecated => "deprecated",
        };
        assert_eq!(vis, row[7], "{ctx}: visibility");
        assert_eq!(
            if flag.scope == Scope::Driver {
                "driver"
            } else {
                "compile"
            },
            row[8],
            "{ctx}: scope"
        );
        assert_eq!(flag.source, row[9], "{ctx}: source");
    }
}

#[test]
fn every_option_string_is_unique() {
    let mut seen = std::collections::HashSet::new();
    for f in FLAGS {
        for s in f.option_strings().map(str::to_string).chain(f.negation()) {
            assert!(seen.insert(s.clone()), "duplicate option string {s}");
        }
    }
}
