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
    /// Its name (without a `%`), bytes of the text.
    pub name: &'a [u8],
    /// Its opcode, bytes of the text.
    pub opcode: &'a [u8],
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

/// A word's byte (`A-Z a-z 0-9 _ . - ?`).
const WORD: u8 = 1;
/// A byte a bracketed group's scan stops at: a bracket, a quote, a line break, a `/`.
const GROUP: u8 = 2;
/// Any other byte: what a group's scan passes over.
const INSIDE: u8 = 4;

/// What each byte is, for the loops that pass over runs of bytes.
static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'?') {
            t[c] |= WORD;
        }
        if matches!(
            b,
            b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'"' | b'\'' | b'\n' | b'/'
        ) {
            t[c] |= GROUP;
        } else {
            t[c] |= INSIDE;
        }
        c += 1;
    }
    t
};

#[inline(always)]
fn is_word_byte(c: u8) -> bool {
    CLASS[c as usize] & WORD != 0
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
        let rest = self.b.get(start..).unwrap_or_default();
        let mut end = start
            + rest
                .iter()
                .position(|&c| !is_word_byte(c))
                .unwrap_or(rest.len());
        // `-` is a word's byte, but `->` is an arrow: it ends the word before it.
        if end > start && self.b[end - 1] == b'-' && self.b.get(end) == Some(&b'>') {
            end -= 1;
        }
        self.i = end;
        (start, end)
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
        loop {
            // Up to the next byte that matters.
            self.i = run(self.b, self.i, INSIDE);
            let c = *self.b.get(self.i)?;
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
    usual(text, at, line, dtypes).or_else(|| general(text, at, line, dtypes))
}

/// The layout XLA prints, in the fewest steps: line breaks and indentation, `[ROOT ]name = `, a
/// dtype, `[dims]` and an optional `{layout}` of digits and commas, one space, the opcode and
/// operands that nest nothing (`(a, b)`), then what [`general`] reads after the operands.
/// Anything else is `None`, and [`general`] reads it (the same way: only faster here).
#[inline(always)]
fn usual<'a>(text: &'a str, at: usize, line: usize, dtypes: &mut Dtypes) -> Option<Plain<'a>> {
    let b = text.as_bytes();
    let (mut i, lines) = indent(b, at);
    let line = line + lines;
    let root = b[i..].starts_with(b"ROOT ");
    if root {
        i += 5;
    }
    if b.get(i) == Some(&b'%') {
        i += 1;
    }
    let name = (i, run(b, i, WORD));
    i = name.1;
    if name.1 == name.0 || b.get(i..i + 3)? != b" = " {
        return None;
    }
    let dtype = (i + 3, run(b, i + 3, WORD));
    i = dtype.1;
    if b.get(i) != Some(&b'[') {
        return None;
    }
    let bits = dtypes.bits(&b[dtype.0..dtype.1], b.get(dtype.0..dtype.0 + 8))?;
    let (end, elements) = dims(b, i + 1)?;
    let shape = (dtype.0, end);
    i = end;
    if b.get(i) != Some(&b' ') {
        return None;
    }
    let opcode = (i + 1, run(b, i + 1, WORD));
    i = opcode.1;
    if opcode.1 == opcode.0 || b.get(i) != Some(&b'(') {
        return None;
    }
    let open = i + 1;
    // Operands that nest nothing: the first byte a group would stop at is their `)`.
    let close = run(b, open, INSIDE);
    if b.get(close) != Some(&b')') {
        return None;
    }
    // No attributes, the next line starting with a name or a `}`: the reading goes on from
    // there (its indentation passed once); else what follows is read as [`general`] reads it.
    let (next, lines) = indent(b, close + 1);
    let (metadata, end) = if lines > 0 && starts_token(b, next) {
        (None, (next, line + lines))
    } else {
        let mut a = At {
            b,
            i: close + 1,
            line,
        };
        let metadata = attributes(&mut a, text)?;
        next_lexes(&a)?;
        (metadata, (a.i, a.line))
    };
    Some(Plain {
        root,
        name: &b[name.0..name.1],
        opcode: &b[opcode.0..opcode.1],
        shape,
        bytes: elements.saturating_mul(bits).div_ceil(8),
        operands: (open, close),
        metadata,
        line,
        end,
    })
}

/// Whether a token that lexes and is no `,` starts at `i`: a word, a `%name`, a `}`, or the
/// end of the text.
#[inline(always)]
fn starts_token(b: &[u8], i: usize) -> bool {
    match b.get(i) {
        None | Some(b'}') => true,
        Some(b'%') => run(b, i + 1, WORD) > i + 1 && !b[i + 1..].starts_with(b"->"),
        Some(&c) => is_word_byte(c),
    }
}

/// Past the spaces and line breaks at `i`: where they end, and how many line breaks.
#[inline(never)]
fn indent(b: &[u8], mut i: usize) -> (usize, usize) {
    let mut lines = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b' ' => {}
            b'\n' => lines += 1,
            _ => break,
        }
        i += 1;
    }
    (i, lines)
}

/// Where the run of bytes of `class` from `i` ends. Not inlined: its loop keeps its index in a
/// register (inlined in the reader, it would go through memory at every byte).
#[inline(never)]
fn run(b: &[u8], i: usize, class: u8) -> usize {
    let rest = b.get(i..).unwrap_or_default();
    i + rest
        .iter()
        .position(|&c| CLASS[c as usize] & class == 0)
        .unwrap_or(rest.len())
}

/// Dimensions after `[` (at `i`), digits and commas through `]`: where they end (after the
/// `]`), and the elements' count (saturating). Inlined into both readers of a shape.
#[inline(always)]
fn dim_list(b: &[u8], mut i: usize) -> Option<(usize, u64)> {
    let (mut elements, mut n, mut digits) = (1u64, 0u64, 0usize);
    let open = i;
    loop {
        let c = *b.get(i)?;
        i += 1;
        match c {
            b'0'..=b'9' => {
                n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                digits += 1;
            }
            b',' | b']' if digits > 0 => {
                elements = elements.saturating_mul(n);
                (n, digits) = (0, 0);
                if c == b']' {
                    return Some((i, elements));
                }
            }
            b']' if i == open + 1 => return Some((i, elements)),
            _ => return None,
        }
    }
}

/// Plain dimensions after `[`, through `]`, and an optional layout of digits and commas: where
/// they end, and the elements' count (saturating).
#[inline(never)]
fn dims(b: &[u8], i: usize) -> Option<(usize, u64)> {
    let (mut i, elements) = dim_list(b, i)?;
    if b.get(i) == Some(&b'{') {
        i += 1;
        while matches!(b.get(i), Some(b'0'..=b'9' | b',')) {
            i += 1;
        }
        if b.get(i) != Some(&b'}') {
            return None;
        }
        i += 1;
    }
    Some((i, elements))
}

/// Any plain instruction (see the module documentation), step by step.
fn general<'a>(text: &'a str, at: usize, line: usize, dtypes: &mut Dtypes) -> Option<Plain<'a>> {
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
    next_lexes(&a)?;
    Some(Plain {
        root,
        name: &a.b[name.0..name.1],
        opcode: &a.b[opcode.0..opcode.1],
        shape,
        bytes,
        operands: (open, close),
        metadata,
        line: first,
        end: (a.i, a.line),
    })
}

/// Whether what follows the instruction starts a token that lexes — a name, a word, a `}` — or
/// the text ends: the token reader looks at that token before it is done with the instruction,
/// so one that does not lex (a `%` alone, a stray character) is its error, not this
/// instruction's.
#[inline(always)]
fn next_lexes(a: &At) -> Option<()> {
    let mut look = At {
        b: a.b,
        i: a.i,
        line: a.line,
    };
    look.blank()?;
    let ok = match look.peek() {
        None | Some(b'}') => true,
        Some(b'%') => {
            look.i += 1;
            look.name().is_some()
        }
        Some(c) => is_word_byte(c),
    };
    ok.then_some(())
}

/// `ROOT` before a name, taken; `false` when the word here is not that `ROOT`.
#[inline(always)]
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

/// The element type met last, by name: a module uses a few, over and over.
#[derive(Debug, Default)]
pub struct Dtypes {
    /// Its name as one number ([`name_key`]) and its bits per element.
    last: Option<(u64, u64)>,
}

/// A name of at most 7 bytes as one number (its bytes and its length); `None` for a longer one
/// (`f32`, `bf16`, `pred`, `f8e5m2` fit). `window`: the 8 bytes from the name's first, when
/// there are 8 (one load instead of a loop).
#[inline(always)]
fn name_key(name: &[u8], window: Option<&[u8]>) -> Option<u64> {
    let len = name.len();
    if len > 7 {
        return None;
    }
    if let Some(w) = window.and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        let bytes = u64::from_le_bytes(w) & ((1u64 << (8 * len)) - 1);
        return Some(bytes | (len as u64) << 56);
    }
    let mut key = (len as u64) << 56;
    for (i, b) in name.iter().enumerate() {
        key |= u64::from(*b) << (8 * i);
    }
    Some(key)
}

impl Dtypes {
    /// The bits per element of the type named `name` (`window`: see [`name_key`]).
    #[inline(always)]
    fn bits(&mut self, name: &[u8], window: Option<&[u8]>) -> Option<u64> {
        let key = name_key(name, window);
        if let (Some((k, bits)), Some(key)) = (self.last, key) {
            if k == key {
                return Some(bits);
            }
        }
        let bits = Dtype::from_name(std::str::from_utf8(name).ok()?)?.bits();
        self.last = key.map(|k| (k, bits));
        Some(bits)
    }
}

/// `dtype[dims]` with an optional layout: its byte range and its size, the dimensions read as
/// digits and commas (anything else is not plain). Inlined: a result returned through memory
/// costs a store-forwarding stall per instruction.
#[inline(always)]
fn shape(a: &mut At, text: &str, dtypes: &mut Dtypes) -> Option<((usize, usize), u64)> {
    let start = a.i;
    let dtype = a.word();
    let bits = dtypes.bits(&text.as_bytes()[dtype.0..dtype.1], None)?;
    a.expect(b'[')?;
    let elements;
    (a.i, elements) = dim_list(a.b, a.i)?;
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
#[inline(always)]
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
