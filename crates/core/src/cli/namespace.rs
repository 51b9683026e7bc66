//! The parsed namespace: one value per dest of the flag table (argparse's `Namespace`), plus
//! whether the user set it (`<dest>_Used`), each dest named by a typed [`Dest`] (generated from
//! the table) so that a dest the table does not have does not build:
//!
//! ```
//! use nxcc_core::cli::namespace::{Dest, Namespace};
//! let ns = Namespace::new();
//! assert_eq!(ns.str(Dest::DryRun), None);
//! ```
//!
//! ```compile_fail
//! use nxcc_core::cli::namespace::{Dest, Namespace};
//! let ns = Namespace::new();
//! ns.str(Dest::DryRn); // misspelled: no such dest
//! ```

use serde::Serialize;

use super::flags::{self, Default};
use super::level;

/// A namespace value: what argparse would hold for the dest.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    /// Not set and no default (Python's `None`).
    None,
    /// A flag's `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list of strings (`append`, `nargs='+'`).
    List(Vec<String>),
}

impl Value {
    /// Python's truthiness of the value.
    pub fn as_bool(&self) -> bool {
        match self {
            Value::None => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.is_empty(),
        }
    }

    /// The value as an integer (a bool as 0 or 1); `None` for other kinds.
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }

    /// The value as a float (an integer converted); `None` for other kinds.
    pub(crate) fn as_float(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The string, when the value is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The list, when the value is one; else empty.
    pub(crate) fn as_list(&self) -> &[String] {
        match self {
            Value::List(l) => l,
            _ => &[],
        }
    }

    /// The initial value of a dest, from its table default.
    pub(crate) fn from_default(default: &Default) -> Value {
        match default {
            Default::None | Default::Derived(_) | Default::Required => Value::None,
            Default::Bool(b) => Value::Bool(*b),
            Default::Int(i) => Value::Int(*i),
            Default::Float(f) => Value::Float(*f),
            Default::Str(s) => Value::Str((*s).to_string()),
            Default::List(l) => Value::List(l.iter().map(|s| (*s).to_string()).collect()),
            Default::Level(name) => Value::Int(level::parse(name).expect("table level default")),
        }
    }
}

include!(concat!(env!("OUT_DIR"), "/dests.rs"));

impl std::fmt::Display for Dest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Dest {
    /// The dest's row in the flag table (the first one, for dests shared by several spellings).
    pub fn flag(self) -> &'static flags::Flag {
        flags::by_dest(self.name()).expect("every dest has a row")
    }
}

/// Every dest of the flag table with its value, and whether the user set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Namespace {
    values: Vec<Value>,
    used: Vec<bool>,
}

impl std::default::Default for Namespace {
    fn default() -> Self {
        Self::new()
    }
}

impl Namespace {
    /// A namespace holding every dest's table default.
    pub fn new() -> Namespace {
        let values = Dest::ALL
            .iter()
            .map(|d| Value::from_default(&d.flag().default))
            .collect();
        Namespace {
            values,
            used: vec![false; Dest::ALL.len()],
        }
    }

    /// The value of a dest.
    pub fn get(&self, dest: Dest) -> &Value {
        &self.values[dest as usize]
    }

    /// Set a value as normalisation does (does not mark it user-set).
    pub fn set(&mut self, dest: Dest, value: Value) {
        self.values[dest as usize] = value;
    }

    /// Set a value the user gave on the command line (marks `<dest>_Used`).
    pub(crate) fn set_by_user(&mut self, dest: Dest, value: Value) {
        let i = dest as usize;
        self.values[i] = value;
        self.used[i] = true;
    }

    /// argparse's `append`: add `item` to the list the user gives for `dest` (the first
    /// occurrence replaces the table default). Amortised O(1): the list grows in place.
    pub(crate) fn append_by_user(&mut self, dest: Dest, item: String) {
        let i = dest as usize;
        if !self.used[i] || !matches!(self.values[i], Value::List(_)) {
            self.values[i] = Value::List(Vec::new());
        }
        if let Value::List(list) = &mut self.values[i] {
            list.push(item);
        }
        self.used[i] = true;
    }

    /// A repeatable string option whose occurrences are joined with one space (the first
    /// occurrence replaces the table default). Amortised O(length of `text`): the string grows in
    /// place.
    pub(crate) fn extend_str_by_user(&mut self, dest: Dest, text: &str) {
        let i = dest as usize;
        match &mut self.values[i] {
            Value::Str(old) if self.used[i] => {
                old.push(' ');
                old.push_str(text);
            }
            v => *v = Value::Str(text.to_string()),
        }
        self.used[i] = true;
    }

    /// argparse-style `<dest>_Used`: whether the user set the dest.
    pub fn used(&self, dest: Dest) -> bool {
        self.used[dest as usize]
    }

    /// A dest's truthiness.
    pub fn bool(&self, dest: Dest) -> bool {
        self.get(dest).as_bool()
    }

    /// A dest's integer value.
    pub fn int(&self, dest: Dest) -> Option<i64> {
        self.get(dest).as_int()
    }

    /// A dest's number (an integer converted).
    pub fn float(&self, dest: Dest) -> Option<f64> {
        self.get(dest).as_float()
    }

    /// A dest's string value.
    pub fn str(&self, dest: Dest) -> Option<&str> {
        self.get(dest).as_str()
    }

    /// A dest's list value (empty when it is not a list).
    pub fn list(&self, dest: Dest) -> &[String] {
        self.get(dest).as_list()
    }

    /// Every (dest, value) pair, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &Value)> {
        Dest::ALL.iter().map(|d| d.name()).zip(self.values.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_replace_the_default_then_grow() {
        let mut ns = Namespace::new();
        ns.set(Dest::SkipPass, Value::List(vec!["from-a-default".into()]));
        ns.append_by_user(Dest::SkipPass, "a".into());
        ns.append_by_user(Dest::SkipPass, "b".into());
        assert_eq!(ns.list(Dest::SkipPass), ["a", "b"]);
        assert!(ns.used(Dest::SkipPass));

        ns.set(Dest::TensorizerOptions, Value::Str("from-a-default".into()));
        ns.extend_str_by_user(Dest::TensorizerOptions, "--a");
        ns.extend_str_by_user(Dest::TensorizerOptions, "--b --c");
        assert_eq!(ns.str(Dest::TensorizerOptions), Some("--a --b --c"));
    }

    #[test]
    fn every_dest_of_the_table_is_a_typed_dest_in_order() {
        let table: Vec<&str> = flags::dests().collect();
        let typed: Vec<&str> = Dest::ALL.iter().map(|d| d.name()).collect();
        assert_eq!(typed, table);
        for d in Dest::ALL {
            assert_eq!(Dest::named(d.name()), Some(d));
            assert_eq!(d.flag().dest, d.name());
        }
        assert_eq!(Dest::named("no_such_dest"), None);
        assert_eq!(
            Dest::EnableExperimentalO1.to_string(),
            "enable_experimental_O1"
        );
    }
}
