//! An HLO text instruction in its plain form, read in one pass over the bytes: what XLA prints —
//! `[ROOT] name = dtype[dims]{layout} opcode(operands), attribute=value, ...` — without a tuple
//! shape, a comment or anything else unusual. Nothing is allocated and no token is made: the
//! name, the opcode, the byte ranges of the shape, the operands and the `metadata` value, and the
//! output's size are taken from the bytes as they are passed.
//!
//! Anything not plain is `None`, and the token reader ([`super::text`], [`super::lexer`]) reads
//! the same instruction from the same place: it is the reference, and this is only a speed-up —
//! both read the same instructions the same way (tested on every example model, laid out every
//! way, and on generated text). In particular every error is the token reader's.

use super::shape::Dtype;

/// One plain instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plain<'a> {
    /// Marked `ROOT`.
    pub root: bool,
    /// Its name (without a `%`).
    pub name: &'a str,
    /// Its opcode.
    pub opcode: &'a str,
    /// The byte range of its shape (layout included).
    pub shape: (usize, usize),
    /// Its output's size ([`super::shape::Shape::bytes`]).
    pub bytes: u64,
    /// The byte range of its operand list, between the parentheses.
    pub operands: (usize, usize),
    /// The byte range of its `metadata` attribute's value, if any.
    pub metadata: Option<(usize, usize)>,
    /// The line it starts on.
    pub line: usize,
    /// Where reading goes on, and on which line.
    pub end: (usize, usize),
}

/// A cursor over the bytes: a position and its line.
struct At<'a> {
    b: &'a [u8],
    i: usize,
    line: usize,
}

#[inline(always)]
fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-' | b'?')
}

impl<'a> At<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skip spaces and line breaks; `None` at a comment (not plain).
    #[inline(always)]
    fn blank(&mut self) -> Option<()> {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\r' => self.i += 1,
                b'\n' => {
                    self.line += 1;
                    self.i += 1;
                }
                b'/' if matches!(self.b.get(self.i + 1), Some(b'*' | b'/')) => return None,
                _ => return Some(()),
            }
        }
        Some(())
    }

    /// The run of word bytes from here (a `->` ends it), taken.
    #[inline(always)]
    fn word(&mut self) -> (usize, usize) {
        let start = self.i;
        while let Some(&c) = self.b.get(self.i) {
            if !is_word_byte(c) || (c == b'-' && self.b.get(self.i + 1) == Some(&b'>')) {
                break;
            }
            self.i += 1;
        }
        (start, self.i)
    }

    /// A word or a `%name` (its range without the `%`), not empty.
    #[inline(always)]
    fn name(&mut self) -> Option<(usize, usize)> {
        if self.peek() == Some(b'%') {
            self.i += 1;
        }
        let w = self.word();
        (w.1 > w.0).then_some(w)
    }

    /// Take `c`, after blanks.
    #[inline(always)]
    fn expect(&mut self, c: u8) -> Option<()> {
        self.blank()?;
        (self.peek() == Some(c)).then(|| self.i += 1)
    }

    /// A bracketed group whose opening byte is here, to its closing byte (taken): brackets
    /// counted, strings passed over; a comment is not plain.
    fn group(&mut self) -> Option<usize> {
        let mut depth = 0usize;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.i += 1;
                        return Some(self.i);
                    }
                }
                b'"' | b'\'' => {
                    self.string()?;
                    continue;
                }
                b'\n' => self.line += 1,
                b'/' if matches!(self.b.get(self.i + 1), Some(b'*' | b'/')) => return None,
                _ => {}
            }
            self.i += 1;
        }
        None
    }

    /// A string from its quote here to the same quote not escaped (taken).
    fn string(&mut self) -> Option<usize> {
        let quote = self.b[self.i];
        self.i += 1;
        while let Some(&c) = self.b.get(self.i) {
            match c {
                b'\\' => self.i += 1,
                b'\n' => self.line += 1,
                c if c == quote => {
                    self.i += 1;
                    return Some(self.i);
                }
                _ => {}
            }
            self.i += 1;
        }
        None
    }
}

/// The plain instruction at byte `at` (line `line`) of `text`, if it is one (see the module
/// documentation). Blanks before it are skipped.
pub fn read<'a>(text: &'a str, at: usize, line: usize, dtypes: &mut Dtypes) -> Option<Plain<'a>> {
    let mut a = At {
        b: text.as_bytes(),
        i: at,
        line,
    };
    a.blank()?;
    let first = a.line;
    let root = is_root(&mut a)?;
    let name = a.name()?;
    a.expect(b'=')?;
    a.blank()?;
    let (shape, bytes) = shape(&mut a, text, dtypes)?;
    a.blank()?;
    let opcode = a.word();
    if opcode.1 == opcode.0 {
        return None;
    }
    a.blank()?;
    if a.peek() != Some(b'(') {
        return None;
    }
    let open = a.i + 1;
    let close = a.group()? - 1;
    let metadata = attributes(&mut a, text)?;
    Some(Plain {
        root,
        name: &text[name.0..name.1],
        opcode: &text[opcode.0..opcode.1],
        shape,
        bytes,
        operands: (open, close),
        metadata,
        line: first,
        end: (a.i, a.line),
    })
}

/// `ROOT` before a name, taken; `false` when the word here is not that `ROOT`.
fn is_root(a: &mut At) -> Option<bool> {
    if !a.b[a.i..].starts_with(b"ROOT") || a.b.get(a.i + 4).is_some_and(|&c| is_word_byte(c)) {
        return Some(false);
    }
    let mut after = At {
        b: a.b,
        i: a.i + 4,
        line: a.line,
    };
    after.blank()?;
    let starts_name = match after.peek() {
        Some(b'%') => after.b.get(after.i + 1).is_some_and(|&c| is_word_byte(c)),
        Some(c) => is_word_byte(c) && !(c == b'-' && after.b.get(after.i + 1) == Some(&b'>')),
        None => false,
    };
    if starts_name {
        *a = after;
    }
    Some(starts_name)
}

/// The element types met so far, by name: a module uses a few, over and over.
#[derive(Debug, Default)]
pub struct Dtypes {
    last: Option<(Vec<u8>, u64)>,
}

impl Dtypes {
    /// The bits per element of the type named `name`.
    #[inline(always)]
    fn bits(&mut self, name: &[u8]) -> Option<u64> {
        if let Some((n, bits)) = &self.last {
            if n.as_slice() == name {
                return Some(*bits);
            }
        }
        let bits = Dtype::from_name(std::str::from_utf8(name).ok()?)?.bits();
        self.last = Some((name.to_vec(), bits));
        Some(bits)
    }
}

/// `dtype[dims]` with an optional layout: its byte range and its size, the dimensions read as
/// digits and commas (anything else is not plain).
fn shape(a: &mut At, text: &str, dtypes: &mut Dtypes) -> Option<((usize, usize), u64)> {
    let start = a.i;
    let dtype = a.word();
    let bits = dtypes.bits(&text.as_bytes()[dtype.0..dtype.1])?;
    a.expect(b'[')?;
    let mut elements = 1u64;
    let (mut n, mut digits) = (0u64, 0usize);
    loop {
        let c = a.peek()?;
        a.i += 1;
        match c {
            b'0'..=b'9' => {
                n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                digits += 1;
            }
            b',' | b']' if digits > 0 => {
                elements = elements.saturating_mul(n);
                (n, digits) = (0, 0);
                if c == b']' {
                    break;
                }
            }
            b']' if elements == 1 && a.b[a.i - 2] == b'[' => break,
            _ => return None,
        }
    }
    let mut end = a.i;
    let mut look = At {
        b: a.b,
        i: a.i,
        line: a.line,
    };
    look.blank()?;
    if look.peek() == Some(b'{') {
        let mut inside = At {
            b: a.b,
            i: look.i + 1,
            line: look.line,
        };
        inside.blank()?;
        if matches!(inside.peek(), Some(b'0'..=b'9' | b'}' | b':')) {
            end = look.group()?;
            *a = look;
        }
    }
    Some(((start, end), elements.saturating_mul(bits).div_ceil(8)))
}

/// The `, name=value` attributes after the operands; the byte range of `metadata`'s value.
fn attributes(a: &mut At, text: &str) -> Option<Option<(usize, usize)>> {
    let mut metadata = None;
    loop {
        let mut look = At {
            b: a.b,
            i: a.i,
            line: a.line,
        };
        look.blank()?;
        if look.peek() != Some(b',') {
            return Some(metadata);
        }
        look.i += 1;
        *a = look;
        a.blank()?;
        let attr = a.name()?;
        a.expect(b'=')?;
        a.blank()?;
        let first = a.i;
        let mut end = item(a)?;
        while !value_ends(a)? {
            end = item(a)?;
        }
        if &text[attr.0..attr.1] == "metadata" {
            metadata = Some((first, end));
        }
    }
}

/// One token of a value, or a whole bracketed group, from here (after blanks); the byte after
/// it.
fn item(a: &mut At) -> Option<usize> {
    a.blank()?;
    let c = a.peek()?;
    let next = a.b.get(a.i + 1).copied();
    match c {
        b'(' | b'{' | b'[' => a.group(),
        b'"' | b'\'' => a.string(),
        b'-' if next == Some(b'>') => {
            a.i += 2;
            Some(a.i)
        }
        b'<' if next == Some(b'=') => {
            a.i += 2;
            Some(a.i)
        }
        b'%' => a.name().map(|w| w.1),
        c if is_word_byte(c) => Some(a.word().1),
        b'=' | b':' | b'*' | b'#' | b'+' | b'~' => {
            a.i += 1;
            Some(a.i)
        }
        _ => None,
    }
}

/// Whether a value ends before what comes next: a `,`, the end of the computation or of the text,
/// `ROOT`, or a name followed by `=` (the next instruction). Nothing is taken.
fn value_ends(a: &At) -> Option<bool> {
    let mut look = At {
        b: a.b,
        i: a.i,
        line: a.line,
    };
    look.blank()?;
    match look.peek() {
        None | Some(b',' | b'}') => return Some(true),
        _ => {}
    }
    let start = look.i;
    let Some(w) = look.name() else {
        return Some(false);
    };
    if look.b[start] != b'%' && &look.b[w.0..w.1] == b"ROOT" {
        return Some(true);
    }
    look.blank()?;
    Some(look.peek() == Some(b'='))
}
