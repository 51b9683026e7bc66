//! Generates the typed dests of the flag table (as clang's TableGen generates its `OPT_*` ids):
//! one `Dest` variant per distinct dest of `FLAGS` in `src/cli/flags.rs`, in the table's order,
//! with its name, so a dest the table does not have does not build. The table stays the one
//! source: a row added there is a dest here at the next build.

use std::fmt::Write;

const TABLE: &str = "src/cli/flags.rs";

fn main() {
    println!("cargo:rerun-if-changed={TABLE}");
    let text = std::fs::read_to_string(TABLE).expect("the flag table");
    let table = text
        .split("pub static FLAGS: &[Flag] = &[")
        .nth(1)
        .and_then(|t| t.split("\n];").next())
        .expect("the FLAGS table in src/cli/flags.rs");
    let mut dests: Vec<String> = Vec::new();
    for row in table.split("\n    flag(").skip(1) {
        let dest = dest_of(row).unwrap_or_else(|| panic!("a row of FLAGS without a dest: {row}"));
        if !dest.is_empty() && !dests.contains(&dest) {
            dests.push(dest);
        }
    }
    assert!(
        dests.len() > 100,
        "only {} dests found in FLAGS",
        dests.len()
    );
    let variants: Vec<String> = dests.iter().map(|d| camel(d)).collect();
    for (i, v) in variants.iter().enumerate() {
        assert!(!variants[..i].contains(v), "two dests make the variant {v}");
    }
    let out = std::path::Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("dests.rs");
    std::fs::write(out, generate(&dests, &variants)).expect("write dests.rs");
}

/// The dest of a row `"--spelling", &[aliases], "dest", ...`: the string after the aliases.
fn dest_of(row: &str) -> Option<String> {
    let after_aliases = &row[row.find("&[")?..];
    let after_aliases = &after_aliases[after_aliases.find(']')? + 1..];
    let start = after_aliases.find('"')? + 1;
    let len = after_aliases[start..].find('"')?;
    Some(after_aliases[start..start + len].to_string())
}

/// `enable_experimental_O1` → `EnableExperimentalO1`.
fn camel(dest: &str) -> String {
    dest.split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn generate(dests: &[String], variants: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "/// Every dest of the flag table, an identifier the compiler checks (generated from\n\
         /// `src/cli/flags.rs` by `build.rs`, in the table's order).\n\
         #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]\n\
         pub enum Dest {{"
    );
    for (d, v) in dests.iter().zip(variants) {
        let _ = writeln!(s, "    /// `{d}`\n    {v},");
    }
    let _ = writeln!(s, "}}\n\nimpl Dest {{");
    let _ = writeln!(
        s,
        "    /// Every dest, in the table's order.\n    pub const ALL: [Dest; {}] = [",
        dests.len()
    );
    for v in variants {
        let _ = writeln!(s, "        Dest::{v},");
    }
    let _ = writeln!(
        s,
        "    ];\n\n    /// Its name in the table (`dry_run`).\n    #[allow(clippy::too_many_lines, reason = \"one arm per row of the flags table\")]\n    pub const fn name(self) -> &'static str {{\n        match self {{"
    );
    for (d, v) in dests.iter().zip(variants) {
        let _ = writeln!(s, "            Dest::{v} => \"{d}\",");
    }
    let _ = writeln!(
        s,
        "        }}\n    }}\n\n    /// The dest named `name`, if the table has one.\n    #[allow(clippy::too_many_lines, reason = \"one arm per row of the flags table\")]\n    pub fn named(name: &str) -> Option<Dest> {{\n        Some(match name {{"
    );
    for (d, v) in dests.iter().zip(variants) {
        let _ = writeln!(s, "            \"{d}\" => Dest::{v},");
    }
    let _ = writeln!(s, "            _ => return None,\n        }})\n    }}\n}}");
    s
}
