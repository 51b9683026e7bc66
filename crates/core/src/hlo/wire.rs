//! Locating why bytes are not an `HloModuleProto`: a walk of the protobuf wire format over the
//! same fields [`super::proto`] decodes, with the same rules `prost` applies (varints of at most
//! ten bytes, field keys within `u32` with wire types 0–5 and a field number above 0, lengths
//! within the enclosing message, UTF-8 strings, packed integers that fill their length exactly,
//! unknown fields skipped by their wire type, nesting at most [`RECURSION_LIMIT`] deep). `prost`'s
//! own errors say what but not where; this walk, run only when decoding failed, says which field
//! at which byte offset of the file.

use std::fmt::Write as _;

/// How deep messages (and groups) may nest: `prost`'s default recursion limit.
pub const RECURSION_LIMIT: usize = 100;

/// How a known field is decoded.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A UTF-8 string (wire type 2).
    Str,
    /// A varint integer or enum (wire type 0).
    Int,
    /// A repeated varint integer (wire type 0, or 2 when packed).
    Ints,
    /// Bytes of any content (wire type 2).
    Bytes,
    /// A nested message (wire type 2).
    Msg(&'static Schema),
    /// A nested message decoded apart from its parent, so with its own nesting budget.
    Apart(&'static Schema),
}

/// The fields of one message that the decoder knows; any other field is skipped.
#[derive(Debug)]
pub struct Schema {
    /// The message's schema name (`xla.HloModuleProto`), for error messages.
    pub name: &'static str,
    /// (field number, field name, kind).
    pub fields: &'static [(u32, &'static str, Kind)],
}

impl Schema {
    fn field(&self, tag: u32) -> Option<(&'static str, Kind)> {
        self.fields
            .iter()
            .find(|f| f.0 == tag)
            .map(|&(_, name, kind)| (name, kind))
    }
}

/// Where and why the bytes stop being the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Byte offset (in the whole input) of the field's key, or of the bad byte when no field
    /// has started.
    pub at: usize,
    /// The field number (`None`: the key itself is bad).
    pub field: Option<u32>,
    /// The field's place, `computations[0].instructions[3].shape` (empty at the top level when
    /// there is no field).
    pub path: String,
    /// What is wrong there (`runs past the end`), shown after the field and offset.
    pub what: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field {
            Some(n) => write!(f, "field {n} at byte {} {}", self.at, self.what)?,
            None => write!(f, "byte {}: {}", self.at, self.what)?,
        }
        if !self.path.is_empty() {
            write!(f, " ({})", self.path)?;
        }
        Ok(())
    }
}

struct Walker<'a> {
    buf: &'a [u8],
}

/// A varint at `*pos` before `end`: `Err(true)` when it runs past `end`, `Err(false)` when it is
/// longer than ten bytes or overflows 64 bits.
fn varint(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64, bool> {
    let mut value: u64 = 0;
    for i in 0..10 {
        if *pos >= end {
            return Err(true);
        }
        let b = buf[*pos];
        *pos += 1;
        if i == 9 && b > 1 {
            return Err(false);
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err(false)
}

impl Walker<'_> {
    fn problem(
        &self,
        at: usize,
        field: Option<u32>,
        path: &str,
        what: impl Into<String>,
    ) -> Problem {
        Problem {
            at,
            field,
            path: path.to_string(),
            what: what.into(),
        }
    }

    /// The length of a length-delimited field whose key is at `key_at`, checked against `end`.
    fn length(
        &self,
        pos: &mut usize,
        end: usize,
        key_at: usize,
        tag: u32,
        path: &str,
    ) -> Result<usize, Problem> {
        let len = varint(self.buf, pos, end).map_err(|past| {
            self.problem(
                key_at,
                Some(tag),
                path,
                if past {
                    "has a length that runs past the end"
                } else {
                    "has a malformed length"
                },
            )
        })?;
        if len > (end - *pos) as u64 {
            return Err(self.problem(key_at, Some(tag), path, "runs past the end"));
        }
        Ok(len as usize)
    }

    /// Skip an unknown field's value; `key` is where its key is and its field number.
    fn skip(
        &self,
        pos: &mut usize,
        end: usize,
        key: (usize, u32),
        wire: u64,
        depth: usize,
        path: &str,
    ) -> Result<(), Problem> {
        let (key_at, tag) = key;
        match wire {
            0 => {
                varint(self.buf, pos, end).map_err(|past| {
                    self.problem(
                        key_at,
                        Some(tag),
                        path,
                        if past {
                            "runs past the end"
                        } else {
                            "is a malformed varint"
                        },
                    )
                })?;
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if end - *pos < n {
                    return Err(self.problem(key_at, Some(tag), path, "runs past the end"));
                }
                *pos += n;
            }
            2 => {
                let len = self.length(pos, end, key_at, tag, path)?;
                *pos += len;
            }
            3 => {
                if depth >= RECURSION_LIMIT {
                    return Err(self.problem(key_at, Some(tag), path, "nests too deeply"));
                }
                loop {
                    let inner_at = *pos;
                    let (inner_tag, inner_wire) = self.key(pos, end, path)?;
                    if inner_wire == 4 {
                        if inner_tag != tag {
                            return Err(self.problem(
                                inner_at,
                                Some(inner_tag),
                                path,
                                format!(
                                    "ends a group that field {tag} at byte {key_at} did not start"
                                ),
                            ));
                        }
                        break;
                    }
                    self.skip(pos, end, (inner_at, inner_tag), inner_wire, depth + 1, path)?;
                }
            }
            _ => {
                return Err(self.problem(
                    key_at,
                    Some(tag),
                    path,
                    "ends a group that was not started",
                ))
            }
        }
        Ok(())
    }

    /// A field key: (field number, wire type).
    fn key(&self, pos: &mut usize, end: usize, path: &str) -> Result<(u32, u64), Problem> {
        let at = *pos;
        let key = varint(self.buf, pos, end).map_err(|past| {
            self.problem(
                at,
                None,
                path,
                if past {
                    "a field key runs past the end"
                } else {
                    "a field key is a malformed varint"
                },
            )
        })?;
        if key > u64::from(u32::MAX) {
            return Err(self.problem(at, None, path, format!("field key {key} is out of range")));
        }
        let tag = (key >> 3) as u32;
        let wire = key & 7;
        if wire > 5 {
            return Err(self.problem(
                at,
                Some(tag),
                path,
                format!("has the invalid wire type {wire}"),
            ));
        }
        if tag == 0 {
            return Err(self.problem(at, Some(0), path, "has the invalid field number 0"));
        }
        Ok((tag, wire))
    }

    fn message(
        &self,
        start: usize,
        end: usize,
        schema: &Schema,
        depth: usize,
        path: &str,
    ) -> Result<(), Problem> {
        let mut pos = start;
        let mut seen: Vec<(u32, usize)> = Vec::new();
        while pos < end {
            let key_at = pos;
            let (tag, wire) = self.key(&mut pos, end, path)?;
            let Some((name, kind)) = schema.field(tag) else {
                self.skip(&mut pos, end, (key_at, tag), wire, depth, path)?;
                continue;
            };
            let index = match seen.iter_mut().find(|s| s.0 == tag) {
                Some(s) => {
                    s.1 += 1;
                    s.1
                }
                None => {
                    seen.push((tag, 0));
                    0
                }
            };
            let mut here = String::with_capacity(path.len() + name.len() + 8);
            here.push_str(path);
            if !here.is_empty() {
                here.push('.');
            }
            here.push_str(name);
            let field = Field {
                key_at,
                tag,
                wire,
                kind,
                depth,
                index,
            };
            self.field(&mut pos, end, &field, &mut here)?;
        }
        Ok(())
    }

    /// One known field's value at `pos` (moved past it), checked against its kind; a nested
    /// message read through [`Self::message`] as `here[index]`.
    fn field(
        &self,
        pos: &mut usize,
        end: usize,
        f: &Field,
        here: &mut String,
    ) -> Result<(), Problem> {
        let (key_at, tag, wire) = (f.key_at, f.tag, f.wire);
        let expect = |here: &str, want: &str| {
            self.problem(
                key_at,
                Some(tag),
                here,
                format!("has wire type {wire}, not {want}"),
            )
        };
        match f.kind {
            Kind::Str => {
                if wire != 2 {
                    return Err(expect(here, "2 (a string)"));
                }
                let len = self.length(pos, end, key_at, tag, here)?;
                if std::str::from_utf8(&self.buf[*pos..*pos + len]).is_err() {
                    return Err(self.problem(key_at, Some(tag), here, "is not UTF-8"));
                }
                *pos += len;
            }
            Kind::Int | Kind::Ints => match wire {
                0 => {
                    varint(self.buf, pos, end).map_err(|past| {
                        self.problem(
                            key_at,
                            Some(tag),
                            here,
                            if past {
                                "runs past the end"
                            } else {
                                "is a malformed varint"
                            },
                        )
                    })?;
                }
                2 if matches!(f.kind, Kind::Ints) => {
                    let len = self.length(pos, end, key_at, tag, here)?;
                    let stop = *pos + len;
                    while *pos < stop {
                        varint(self.buf, pos, stop).map_err(|past| {
                            self.problem(
                                key_at,
                                Some(tag),
                                here,
                                if past {
                                    "holds packed integers that overrun its length"
                                } else {
                                    "holds a malformed packed integer"
                                },
                            )
                        })?;
                    }
                }
                _ if matches!(f.kind, Kind::Ints) => return Err(expect(here, "0 or 2 (integers)")),
                _ => return Err(expect(here, "0 (an integer)")),
            },
            Kind::Bytes => {
                if wire != 2 {
                    return Err(expect(here, "2 (bytes)"));
                }
                *pos += self.length(pos, end, key_at, tag, here)?;
            }
            Kind::Msg(inner) | Kind::Apart(inner) => {
                if wire != 2 {
                    return Err(expect(here, "2 (a message)"));
                }
                let len = self.length(pos, end, key_at, tag, here)?;
                let depth = match f.kind {
                    Kind::Apart(_) => 0,
                    _ => f.depth + 1,
                };
                if depth > RECURSION_LIMIT {
                    return Err(self.problem(key_at, Some(tag), here, "nests too deeply"));
                }
                let _ = write!(here, "[{}]", f.index);
                self.message(*pos, *pos + len, inner, depth, here)?;
                *pos += len;
            }
        }
        Ok(())
    }
}

/// A known field met in a message: where its key is, its number and wire type, how it is
/// decoded, the nesting depth of its message, and which occurrence of its number it is.
struct Field {
    key_at: usize,
    tag: u32,
    wire: u64,
    kind: Kind,
    depth: usize,
    index: usize,
}

/// The fields of one encoded message, in order, as (field number, wire type, value bytes: a
/// length-delimited field's contents, else its encoded value), read with the rules above; the
/// first malformed field ends it with an `Err`.
pub fn fields(buf: &[u8]) -> Fields<'_> {
    Fields {
        walker: Walker { buf },
        pos: 0,
        failed: false,
    }
}

/// See [`fields`].
pub struct Fields<'a> {
    walker: Walker<'a>,
    pos: usize,
    failed: bool,
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, u64, &'a [u8]), Problem>;

    fn next(&mut self) -> Option<Self::Item> {
        let buf = self.walker.buf;
        if self.failed || self.pos >= buf.len() {
            return None;
        }
        let step = |pos: &mut usize| -> Result<(u32, u64, &'a [u8]), Problem> {
            let at = *pos;
            let (tag, wire) = self.walker.key(pos, buf.len(), "")?;
            if wire == 2 {
                let len = self.walker.length(pos, buf.len(), at, tag, "")?;
                let value = &buf[*pos..*pos + len];
                *pos += len;
                return Ok((tag, wire, value));
            }
            let start = *pos;
            self.walker.skip(pos, buf.len(), (at, tag), wire, 0, "")?;
            Ok((tag, wire, &buf[start..*pos]))
        };
        let mut pos = self.pos;
        let item = step(&mut pos);
        self.pos = pos;
        self.failed = item.is_err();
        Some(item)
    }
}

/// The first problem that keeps `buf` from decoding as `schema`, or `None` when it decodes.
pub fn locate(buf: &[u8], schema: &Schema) -> Option<Problem> {
    Walker { buf }.message(0, buf.len(), schema, 0, "").err()
}

#[cfg(test)]
mod tests {
    use super::*;

    static INNER: Schema = Schema {
        name: "Inner",
        fields: &[
            (1, "label", Kind::Str),
            (2, "values", Kind::Ints),
            (3, "count", Kind::Int),
        ],
    };
    static OUTER: Schema = Schema {
        name: "Outer",
        fields: &[(1, "name", Kind::Str), (3, "items", Kind::Msg(&INNER))],
    };

    #[test]
    fn well_formed_bytes_have_no_problem() {
        // name "ab", unknown fixed32 field 7, items[0] { label "x", values packed [1, 300] }.
        let b = [
            0x0a, 2, b'a', b'b', 0x3d, 1, 2, 3, 4, 0x1a, 8, 0x0a, 1, b'x', 0x12, 3, 1, 0xac, 0x02,
        ];
        assert_eq!(locate(&b, &OUTER), None);
    }

    #[test]
    fn each_problem_says_where() {
        let p = locate(&[0x0a, 2, b'a', b'b', 0x1a, 50, 0], &OUTER).unwrap();
        assert_eq!(p.to_string(), "field 3 at byte 4 runs past the end (items)");
        let p = locate(&[0x1a, 3, 0x0a, 5, b'x'], &OUTER).unwrap();
        assert_eq!(
            p.to_string(),
            "field 1 at byte 2 runs past the end (items[0].label)"
        );
        let p = locate(&[0x1a, 3, 0x0a, 1, 0xff], &OUTER).unwrap();
        assert_eq!(
            p.to_string(),
            "field 1 at byte 2 is not UTF-8 (items[0].label)"
        );
        let p = locate(&[0x1f], &OUTER).unwrap();
        assert_eq!(
            p.to_string(),
            "field 3 at byte 0 has the invalid wire type 7"
        );
        let p = locate(&[0x18, 1], &OUTER).unwrap();
        assert!(
            p.to_string()
                .starts_with("field 3 at byte 0 has wire type 0, not 2"),
            "{p}"
        );
        let p = locate(&[0x0a, 0, 0x80], &OUTER).unwrap();
        assert_eq!(p.to_string(), "byte 2: a field key runs past the end");
        let p = locate(&[0x2c], &OUTER).unwrap();
        assert_eq!(
            p.to_string(),
            "field 5 at byte 0 ends a group that was not started"
        );
        // An unknown group is skipped whole; a mismatched end is refused.
        assert_eq!(locate(&[0x2b, 0x08, 1, 0x2c], &OUTER), None);
        let p = locate(&[0x2b, 0x34], &OUTER).unwrap();
        assert!(p.to_string().contains("did not start"), "{p}");
        assert_eq!(locate(&[0x00], &OUTER).unwrap().field, Some(0));
        // A singular integer is never packed.
        let p = locate(&[0x1a, 3, 0x1a, 1, 5], &OUTER).unwrap();
        assert_eq!(
            p.to_string(),
            "field 3 at byte 2 has wire type 2, not 0 (an integer) (items[0].count)"
        );
        // A second item is items[1].
        let p = locate(&[0x1a, 0, 0x1a, 2, 0x0a, 9], &OUTER).unwrap();
        assert_eq!(p.path, "items[1].label");
    }
}
