//! The tokens of HLO text, as XLA's lexer (`xla/hlo/parser/hlo_lexer.cc`) cuts them: spaces,
//! tabs and line breaks only separate tokens, `/* ... */` and `// ...` comments are skipped, so a
//! module reads the same however it is laid out — one instruction per line or all on one line.
//!
//! A token is a word (an identifier, a keyword, a number or a pattern such as `3x3`, `0_1x1_0`
//! or `-inf`: a run of `A-Z a-z 0-9 _ . - ?`), a `%name`, a string (`"..."` or `'...'`, escapes
//! kept as written), `->`, `<=`, or one punctuation character (`= , : ( ) { } [ ] * # + ~`).
//! Anything else is refused with its line. Each token keeps its line (for messages) and its byte
//! range (for the text of an attribute). Tokens are slices of the text: reading allocates
//! nothing per token.

use super::ReadError;

/// What a token is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tok<'a> {
    /// An identifier, keyword, number or pattern (`f32`, `ROOT`, `42`, `b01f_01io`).
    Word(&'a str),
    /// A `%name`, without its `%`.
    Name(&'a str),
    /// A quoted string's contents, as written.
    Str(&'a str),
    /// One punctuation character.
    Punct(u8),
    /// `->`.
    Arrow,
    /// `<=`.
    Leq,
    /// The end of the text.
    Eof,
}

/// A token where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token<'a> {
    /// What it is.
    pub tok: Tok<'a>,
    /// Its 1-based line.
    pub line: usize,
    /// Its first byte.
    pub start: usize,
    /// The byte after its last.
    pub end: usize,
}

impl<'a> Token<'a> {
    /// A word or a `%name`: what names a computation or an instruction.
    pub fn name(&self) -> Option<&'a str> {
        match self.tok {
            Tok::Word(w) | Tok::Name(w) => Some(w),
            _ => None,
        }
    }

    /// Whether it is the punctuation character `c`.
    pub fn is(&self, c: u8) -> bool {
        self.tok == Tok::Punct(c)
    }

    /// Whether it is the word `w`.
    pub(crate) fn is_word(&self, w: &str) -> bool {
        self.tok == Tok::Word(w)
    }
}

/// The error for a token that is not where it may be, or not a token at all.
pub fn error(line: usize, message: impl Into<String>) -> ReadError {
    ReadError::Text {
        line,
        message: message.into(),
    }
}

fn unclosed(open: &Token) -> ReadError {
    let c = match open.tok {
        Tok::Punct(c) => c as char,
        _ => '(',
    };
    error(open.line, format!("a `{c}` is not closed"))
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'?')
}

/// The tokens of a text, one at a time, with two of look-ahead.
pub struct Lexer<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
    ahead: [Option<Token<'a>>; 2],
    /// The byte after the last token taken (or group skipped).
    taken_to: usize,
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `text`.
    pub fn new(text: &'a str) -> Lexer<'a> {
        Lexer {
            text,
            pos: 0,
            line: 1,
            ahead: [None, None],
            taken_to: 0,
        }
    }

    /// Where the next token would be read from (its byte and line), when no token has been
    /// looked at ahead: where a reader of its own may start (`hlo::plain`).
    pub fn position(&self) -> Option<(usize, usize)> {
        self.ahead[0].is_none().then_some((self.pos, self.line))
    }

    /// Go on from `at` (a byte and its line) after a reader of its own read up to it.
    pub(crate) fn resume(&mut self, at: (usize, usize)) {
        self.ahead = [None, None];
        (self.pos, self.line) = at;
        self.taken_to = at.0;
    }

    /// The byte after the last token taken (or group skipped).
    pub(crate) fn taken_to(&self) -> usize {
        self.taken_to
    }

    /// The text the tokens' byte ranges are in.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The next token, consumed.
    pub fn next_token(&mut self) -> Result<Token<'a>, ReadError> {
        let t = match self.ahead[0].take() {
            Some(t) => {
                self.ahead[0] = self.ahead[1].take();
                t
            }
            None => self.lex()?,
        };
        self.taken_to = t.end;
        Ok(t)
    }

    /// The next token, left in place.
    pub(crate) fn peek(&mut self) -> Result<Token<'a>, ReadError> {
        match self.ahead[0] {
            Some(t) => Ok(t),
            None => self.peek_at(0),
        }
    }

    /// The token after the next one, left in place.
    pub(crate) fn peek2(&mut self) -> Result<Token<'a>, ReadError> {
        self.peek_at(1)
    }

    fn peek_at(&mut self, k: usize) -> Result<Token<'a>, ReadError> {
        for i in 0..=k {
            if self.ahead[i].is_none() {
                self.ahead[i] = Some(self.lex()?);
            }
        }
        Ok(self.ahead[k].expect("filled above"))
    }

    /// Consume the next token if it is the punctuation character `c`.
    #[inline]
    pub(crate) fn eat(&mut self, c: u8) -> Result<bool, ReadError> {
        let is = self.peek()?.is(c);
        if is {
            self.next_token()?;
        }
        Ok(is)
    }

    /// The rest of a bracketed group whose opening token (`(`, `{` or `[`) was just taken: its
    /// closing token. The group's inside is scanned, not cut into tokens — brackets are counted,
    /// strings and comments passed over —, since nothing in it is read (a layout, operands, an
    /// attribute's value).
    pub(crate) fn skip_group(&mut self, open: &Token) -> Result<Token<'a>, ReadError> {
        let mut depth = 1usize;
        while let Some(t) = self.ahead[0].take() {
            self.ahead[0] = self.ahead[1].take();
            match t.tok {
                Tok::Punct(b'(' | b'{' | b'[') => depth += 1,
                Tok::Punct(b')' | b'}' | b']') => {
                    depth -= 1;
                    if depth == 0 {
                        self.taken_to = t.end;
                        return Ok(t);
                    }
                }
                Tok::Eof => return Err(unclosed(open)),
                _ => {}
            }
        }
        let b = self.text.as_bytes();
        while let Some(&c) = b.get(self.pos) {
            match c {
                b'\n' => self.line += 1,
                b'"' | b'\'' => {
                    let (_, end) = self.string(c)?;
                    self.pos = end;
                    continue;
                }
                b'/' if matches!(b.get(self.pos + 1), Some(b'*' | b'/')) => {
                    self.blank()?;
                    continue;
                }
                b'(' | b'{' | b'[' => depth += 1,
                b')' | b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        let (start, line) = (self.pos, self.line);
                        self.pos += 1;
                        self.taken_to = self.pos;
                        return Ok(Token {
                            tok: Tok::Punct(c),
                            line,
                            start,
                            end: start + 1,
                        });
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        Err(unclosed(open))
    }

    /// A dimension list's plain form right here — digits and commas up to `]`, no space, comment
    /// or dynamic size (`128,256]`) —, read at once, its `]` taken; `None` (nothing taken) for
    /// any other form, which the caller reads token by token. Only a speed-up: both ways read the
    /// same.
    pub(crate) fn plain_dims(&mut self) -> Option<Vec<u64>> {
        if self.ahead[0].is_some() {
            return None;
        }
        let b = self.text.as_bytes();
        let mut dims = Vec::new();
        let (mut at, mut n, mut digits) = (self.pos, 0u64, 0usize);
        loop {
            match *b.get(at)? {
                c @ b'0'..=b'9' => {
                    n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                    digits += 1;
                }
                b',' | b']' if digits > 0 => {
                    dims.push(n);
                    (n, digits) = (0, 0);
                    if b[at] == b']' {
                        self.pos = at + 1;
                        self.taken_to = self.pos;
                        return Some(dims);
                    }
                }
                _ => return None,
            }
            at += 1;
        }
    }

    /// Skip spaces, line breaks and comments.
    fn blank(&mut self) -> Result<(), ReadError> {
        let b = self.text.as_bytes();
        loop {
            match b.get(self.pos) {
                Some(b'\n') => {
                    self.line += 1;
                    self.pos += 1;
                }
                Some(b' ' | b'\t' | b'\r') => self.pos += 1,
                Some(b'/') if b.get(self.pos + 1) == Some(&b'*') => {
                    let (start, line) = (self.pos, self.line);
                    let Some(len) = self.text[start + 2..].find("*/") else {
                        return Err(error(line, "a `/*` comment is not closed"));
                    };
                    let comment = &self.text[start..start + 2 + len];
                    self.line += comment.bytes().filter(|&c| c == b'\n').count();
                    self.pos = start + 2 + len + 2;
                }
                Some(b'/') if b.get(self.pos + 1) == Some(&b'/') => {
                    self.pos = self.text[self.pos..]
                        .find('\n')
                        .map_or(b.len(), |n| self.pos + n);
                }
                _ => return Ok(()),
            }
        }
    }

    fn lex(&mut self) -> Result<Token<'a>, ReadError> {
        self.blank()?;
        let (start, line) = (self.pos, self.line);
        let b = self.text.as_bytes();
        let token = |tok, end| Token {
            tok,
            line,
            start,
            end,
        };
        let Some(&c) = b.get(start) else {
            return Ok(token(Tok::Eof, start));
        };
        let next = b.get(start + 1).copied();
        let (tok, end) = match c {
            b'-' if next == Some(b'>') => (Tok::Arrow, start + 2),
            b'<' if next == Some(b'=') => (Tok::Leq, start + 2),
            b'%' => {
                let end = self.word_end(start + 1);
                if end == start + 1 {
                    return Err(error(line, "a `%` without a name"));
                }
                (Tok::Name(&self.text[start + 1..end]), end)
            }
            b'"' | b'\'' => self.string(c)?,
            c if is_word_byte(c) => {
                let end = self.word_end(start);
                (Tok::Word(&self.text[start..end]), end)
            }
            b'=' | b',' | b':' | b'(' | b')' | b'{' | b'}' | b'[' | b']' | b'*' | b'#' | b'+'
            | b'~' => (Tok::Punct(c), start + 1),
            _ => {
                let ch = self.text[start..].chars().next().unwrap_or('?');
                return Err(error(line, format!("unexpected character {ch:?}")));
            }
        };
        self.pos = end;
        Ok(token(tok, end))
    }

    /// Where the run of word bytes from `from` ends (`->` ends it: `b01f_01io->b01f` is two
    /// words and an arrow).
    fn word_end(&self, from: usize) -> usize {
        let b = self.text.as_bytes();
        let mut end = from;
        while end < b.len()
            && is_word_byte(b[end])
            && !(b[end] == b'-' && b.get(end + 1) == Some(&b'>'))
        {
            end += 1;
        }
        end
    }

    /// A string from its opening quote at `self.pos` to the same quote not escaped.
    fn string(&mut self, quote: u8) -> Result<(Tok<'a>, usize), ReadError> {
        let b = self.text.as_bytes();
        let (start, line) = (self.pos, self.line);
        let mut i = start + 1;
        while i < b.len() {
            match b[i] {
                b'\\' => i += 1,
                b'\n' => self.line += 1,
                c if c == quote => return Ok((Tok::Str(&self.text[start + 1..i]), i + 1)),
                _ => {}
            }
            i += 1;
        }
        Err(error(line, "a string is not closed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(text: &str) -> Vec<Tok<'_>> {
        let mut lx = Lexer::new(text);
        let mut v = Vec::new();
        loop {
            let t = lx.next_token().unwrap();
            if t.tok == Tok::Eof {
                return v;
            }
            v.push(t.tok);
        }
    }

    #[test]
    fn layout_does_not_matter() {
        let one = toks("ROOT %x.1 = f32[2,3]{1,0} add(a, b), metadata={op_name=\"f(x)\"}");
        let many = toks(
            "ROOT\n  %x.1 =\tf32[2, 3] {1,0} // the sum\n add( a,\r\n b ) , /* a\nnote */ metadata={op_name=\"f(x)\"}",
        );
        assert_eq!(one, many);
        assert_eq!(one[0], Tok::Word("ROOT"));
        assert_eq!(one[1], Tok::Name("x.1"));
        assert!(one.contains(&Tok::Str("f(x)")));
    }

    #[test]
    fn patterns_arrows_and_numbers() {
        assert_eq!(
            toks("dim_labels=b01f_01io->b01f, size=3x3 pad=0_1x-1_0 s32[<=4,?] -inf"),
            [
                Tok::Word("dim_labels"),
                Tok::Punct(b'='),
                Tok::Word("b01f_01io"),
                Tok::Arrow,
                Tok::Word("b01f"),
                Tok::Punct(b','),
                Tok::Word("size"),
                Tok::Punct(b'='),
                Tok::Word("3x3"),
                Tok::Word("pad"),
                Tok::Punct(b'='),
                Tok::Word("0_1x-1_0"),
                Tok::Word("s32"),
                Tok::Punct(b'['),
                Tok::Leq,
                Tok::Word("4"),
                Tok::Punct(b','),
                Tok::Word("?"),
                Tok::Punct(b']'),
                Tok::Word("-inf"),
            ]
        );
        assert_eq!(toks("(x)->f32[]"), toks("( x ) -> f32 [ ]"));
    }

    #[test]
    fn strings_keep_their_escapes_and_lines_are_counted() {
        let mut lx = Lexer::new("a\n\"x\\\"y\\n\" 'q'\n/* 1\n2 */ b");
        assert_eq!(lx.next_token().unwrap().line, 1);
        let s = lx.next_token().unwrap();
        assert_eq!((s.tok, s.line), (Tok::Str("x\\\"y\\n"), 2));
        assert_eq!(lx.peek2().unwrap().tok, Tok::Word("b"));
        assert_eq!(lx.next_token().unwrap().tok, Tok::Str("q"));
        let b = lx.next_token().unwrap();
        assert_eq!((b.tok, b.line), (Tok::Word("b"), 4));
        assert_eq!(lx.next_token().unwrap().tok, Tok::Eof);
    }

    #[test]
    fn what_is_not_a_token_is_refused_with_its_line() {
        let line_of = |t: &str| {
            let mut lx = Lexer::new(t);
            loop {
                match lx.next_token() {
                    Ok(tok) if tok.tok == Tok::Eof => panic!("{t:?} lexed"),
                    Ok(_) => continue,
                    Err(ReadError::Text { line, message }) => return (line, message),
                    Err(e) => panic!("{e:?}"),
                }
            }
        };
        assert_eq!(
            line_of("a\nb @"),
            (2, "unexpected character '@'".to_string())
        );
        assert_eq!(
            line_of("a /* b\n"),
            (1, "a `/*` comment is not closed".to_string())
        );
        assert_eq!(
            line_of("\n\"abc"),
            (2, "a string is not closed".to_string())
        );
        assert_eq!(line_of("% x"), (1, "a `%` without a name".to_string()));
        assert_eq!(
            line_of("x\0"),
            (1, "unexpected character '\\0'".to_string())
        );
    }
}
