//! HLO text, as XLA prints it, read into the same summary as the binary form, token by token as
//! XLA's parser reads it ([`super::lexer`]): line breaks and spaces are not significant, so a
//! module reads the same laid out one instruction per line, several per line, or all on one
//! line.
//!
//! The grammar read: the header `HloModule name` with its `, attribute=value` list
//! (`input_output_alias={ {0}: (1, {}, must-alias) }` is read, the rest skipped); then
//! computations `[ENTRY] name [(signature)] [-> shape] { instruction... }` (with an optional
//! `, execution_thread="..."`); each instruction `[ROOT] name = shape opcode(operands)` followed
//! by `, attribute=value` items. `%` sigils are allowed, a layout `{...}` after a shape is
//! skipped, attributes are not interpreted (but for a `metadata` `op_name`), and an attribute's
//! value runs to the next `,`, the end of its computation, or the start of the next instruction
//! (`[ROOT] name =`).
//!
//! Text that does not parse is refused with the line of the first token that does not fit: a
//! first token that is not the header, something inside a computation that is not an instruction,
//! a shape that cannot be read, a computation never closed (its first line). A module without
//! exactly one `ENTRY` computation, or whose entry parameters are not numbered 0 to n-1 once each,
//! is refused too. Without a `ROOT`, the last instruction is the root (as XLA's parser has it).

use super::lexer::{error, Lexer, Tok, Token};
use super::plain::{self, Dtypes, Plain};
use super::scan::Opcodes;
use super::shape::{Dtype, Shape};
use super::summary::{Alias, Computation, Module, Tally, Tensor};
use super::ReadError;

/// How deep tuple shapes may nest.
const SHAPE_DEPTH: usize = 100;

const NOT_AN_INSTRUCTION: &str = "expected an instruction (`name = shape opcode(operands)`)";
const NOT_A_COMPUTATION: &str = "expected a computation (`name {` or `ENTRY name {`)";

/// One instruction, taken apart (slices and byte ranges of the text: nothing allocated).
#[derive(Clone, Copy)]
struct Instruction<'a> {
    line: usize,
    root: bool,
    /// Its name and opcode, bytes of the text (UTF-8, as the text is).
    name: &'a [u8],
    opcode: &'a [u8],
    /// The byte range of its shape (read again, [`shape_at`], only where the summary shows it).
    shape: (usize, usize),
    /// Its output's size.
    bytes: u64,
    /// The byte range of the operand list, between its parentheses.
    operands: (usize, usize),
    /// The byte range of the `metadata` attribute's value, if any.
    metadata: Option<(usize, usize)>,
}

impl<'a> From<Plain<'a>> for Instruction<'a> {
    fn from(p: Plain<'a>) -> Instruction<'a> {
        Instruction {
            line: p.line,
            root: p.root,
            name: p.name,
            opcode: p.opcode,
            shape: p.shape,
            bytes: p.bytes,
            operands: p.operands,
            metadata: p.metadata,
        }
    }
}

/// The entry computation's own instructions, as the summary needs them.
#[derive(Default)]
struct Entry<'a> {
    /// (parameter number, line, tensor).
    params: Vec<(u64, usize, Tensor)>,
    /// The `ROOT` instruction.
    root: Option<Instruction<'a>>,
    /// Where the last instruction starts, a byte and its line (the root when none is marked:
    /// read again then, rather than kept at every instruction).
    last: Option<(usize, usize)>,
}

/// What the reader has gathered so far.
#[derive(Default)]
struct Gathered<'a> {
    computations: Vec<Computation>,
    tally: Tally,
    opcodes: Opcodes<'a>,
    dtypes: Dtypes,
    entry: Entry<'a>,
}

/// Read HLO text into its summary.
pub fn parse(text: &str) -> Result<Module, ReadError> {
    parse_with(text, true)
}

/// [`parse`]; `plain`: read plain instructions in one pass over the bytes ([`super::plain`]),
/// else every instruction token by token (the reference the fast reading is tested against).
fn parse_with(text: &str, plain: bool) -> Result<Module, ReadError> {
    let mut lx = Lexer::new(text);
    let (name, aliases) = header(&mut lx)?;
    let mut g = Gathered::default();
    while lx.peek()?.tok != Tok::Eof {
        computation(&mut lx, &mut g, plain)?;
    }
    std::mem::take(&mut g.opcodes).add_to(&mut g.tally);
    let Some(entry_c) = g.computations.iter().find(|c| c.is_entry) else {
        return Err(ReadError::Invalid("no ENTRY computation".into()));
    };
    let entry_name = entry_c.name.clone();
    let parameters = numbered(std::mem::take(&mut g.entry.params))?;
    let root = match (g.entry.root.take(), g.entry.last) {
        (Some(root), _) => root,
        (None, Some(at)) => instruction_at(text, at)?,
        (None, None) => {
            return Err(ReadError::Invalid(format!(
                "the entry computation {entry_name} has no instructions"
            )))
        }
    };
    let results = results(text, &root, shape_at(text, root.shape));
    Ok(Module {
        format: "text",
        name,
        id: 0,
        entry: entry_name,
        parameters,
        results,
        computations: g.computations,
        instruction_count: g.tally.instructions,
        opcodes: g.tally.opcodes,
        largest: g.tally.largest,
        aliases,
    })
}

/// `HloModule name[, attribute=value]...`: the name and the aliases.
fn header(lx: &mut Lexer) -> Result<(String, Vec<Alias>), ReadError> {
    let first = lx.next_token()?;
    if !first.is_word("HloModule") {
        return Err(error(first.line, "expected the `HloModule name` header"));
    }
    let Some(name) = lx.peek()?.name() else {
        return Err(error(first.line, "the HloModule header has no module name"));
    };
    lx.next_token()?;
    let mut aliases = Vec::new();
    while lx.eat(b',')? {
        let (attr, value) = attribute(lx, true)?;
        if attr == "input_output_alias" {
            aliases = parse_aliases(&lx.text()[value.0..value.1]);
        }
    }
    Ok((name.to_string(), aliases))
}

/// `name=value` after a `,`: the name and the value's byte range. A header's values are one
/// item each; an instruction's run on (see the module documentation).
fn attribute<'a>(
    lx: &mut Lexer<'a>,
    one_item: bool,
) -> Result<(&'a str, (usize, usize)), ReadError> {
    let t = lx.next_token()?;
    let (Some(attr), true) = (t.name(), lx.eat(b'=')?) else {
        return Err(error(
            t.line,
            "expected an attribute (`name=value`) after `,`",
        ));
    };
    let first = lx.peek()?;
    let mut end = item(lx)?;
    while !one_item && !value_ends(lx)? {
        end = item(lx)?;
    }
    Ok((attr, (first.start, end)))
}

/// Whether an instruction attribute's value ends before the next token: at a `,`, the end of
/// the computation or of the text, or the next instruction (`ROOT`, or a name followed by `=`).
fn value_ends(lx: &mut Lexer) -> Result<bool, ReadError> {
    let t = lx.peek()?;
    Ok(t.is(b',')
        || t.is(b'}')
        || t.tok == Tok::Eof
        || t.is_word("ROOT")
        || (t.name().is_some() && lx.peek2()?.is(b'=')))
}

/// One token, or a whole bracketed group (`(...)`, `{...}`, `[...]`); the byte after it.
fn item(lx: &mut Lexer) -> Result<usize, ReadError> {
    let t = lx.next_token()?;
    if t.is(b'(') || t.is(b'{') || t.is(b'[') {
        group(lx, t).map(|close| close.end)
    } else if t.tok == Tok::Eof {
        Err(error(t.line, "the text ends where a value should be"))
    } else {
        Ok(t.end)
    }
}

/// The rest of a bracketed group whose opening token was `open`: its closing token.
fn group<'a>(lx: &mut Lexer<'a>, open: Token) -> Result<Token<'a>, ReadError> {
    lx.skip_group(&open)
}

/// `[ENTRY] name [(signature)] [-> shape] { instruction... } [, execution_thread="..."]`
/// (`plain`: see [`parse_with`]).
fn computation<'a>(lx: &mut Lexer<'a>, g: &mut Gathered<'a>, plain: bool) -> Result<(), ReadError> {
    let first = lx.peek()?;
    let is_entry = first.is_word("ENTRY") && lx.peek2()?.name().is_some();
    if is_entry {
        lx.next_token()?;
    }
    let t = lx.next_token()?;
    let Some(name) = t.name() else {
        return Err(error(first.line, NOT_A_COMPUTATION));
    };
    if lx.peek()?.is(b'(') {
        let open = lx.next_token()?;
        group(lx, open)?;
    }
    if lx.peek()?.tok == Tok::Arrow {
        lx.next_token()?;
        shape(lx, 0).map_err(|e| within(e, first.line, &format!("computation {name}")))?;
    }
    if !lx.eat(b'{')? {
        return Err(error(first.line, NOT_A_COMPUTATION));
    }
    if is_entry && g.computations.iter().any(|c| c.is_entry) {
        return Err(error(first.line, "a second ENTRY computation"));
    }
    let mut instructions = 0usize;
    let text = lx.text();
    loop {
        let at = lx.position();
        let fast = match at {
            Some((at, line)) if plain => plain::read(text, at, line, &mut g.dtypes),
            _ => None,
        };
        let (ins, start) = match fast {
            Some(p) => {
                lx.resume(p.end);
                (Instruction::from(p), at)
            }
            None => {
                let t = lx.peek()?;
                if t.is(b'}') {
                    lx.next_token()?;
                    break;
                }
                if t.tok == Tok::Eof {
                    return Err(error(
                        first.line,
                        format!("the computation {name} is not closed"),
                    ));
                }
                (instruction(lx)?, Some((t.start, t.line)))
            }
        };
        instructions += 1;
        g.opcodes.count(ins.opcode, &mut g.tally);
        g.tally.add_output(ins.name, ins.bytes, || {
            (shape_at(text, ins.shape), op_name(text, ins.metadata))
        });
        if is_entry {
            g.entry.last = start;
            entry_instruction(text, &mut g.entry, ins)?;
        }
    }
    while lx.eat(b',')? {
        attribute(lx, true)?;
    }
    g.computations.push(Computation {
        name: name.to_string(),
        instructions,
        is_entry,
    });
    Ok(())
}

/// `[ROOT] name = shape opcode(operands)[, attribute=value]...`, token by token.
fn instruction<'a>(lx: &mut Lexer<'a>) -> Result<Instruction<'a>, ReadError> {
    let first = lx.peek()?;
    let line = first.line;
    let root = first.is_word("ROOT") && lx.peek2()?.name().is_some();
    if root {
        lx.next_token()?;
    }
    let t = lx.next_token()?;
    let (Some(name), true) = (t.name(), lx.eat(b'=')?) else {
        return Err(error(line, NOT_AN_INSTRUCTION));
    };
    let shape_start = lx.peek()?.start;
    let shape = shape(lx, 0).map_err(|e| within(e, line, &format!("instruction {name}")))?;
    let shape_end = lx.taken_to();
    let t = lx.next_token()?;
    let (Tok::Word(opcode), true) = (t.tok, lx.peek()?.is(b'(')) else {
        return Err(error(
            line,
            format!("instruction {name}: expected an opcode and `(`"),
        ));
    };
    let open = lx.next_token()?;
    let close = group(lx, open).map_err(|_| {
        error(
            line,
            format!("instruction {name}: the operand list is not closed"),
        )
    })?;
    let mut metadata = None;
    while lx.eat(b',')? {
        let (attr, value) = attribute(lx, false)?;
        if attr == "metadata" {
            metadata = Some(value);
        }
    }
    Ok(Instruction {
        line,
        root,
        name: name.as_bytes(),
        opcode: opcode.as_bytes(),
        shape: (shape_start, shape_end),
        bytes: shape.bytes(),
        operands: (open.end, close.start),
        metadata,
    })
}

/// A name of the text (UTF-8, as the text is).
fn text_of(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// The shape at byte range `at` of `text`, which read as one before.
fn shape_at(text: &str, at: (usize, usize)) -> Shape {
    let mut lx = Lexer::new(&text[at.0..at.1]);
    // It read before (as a plain shape or token by token): it reads again.
    shape(&mut lx, 0).unwrap_or(Shape::Tuple(Vec::new()))
}

/// Keep what the summary needs of an entry computation's instruction.
fn entry_instruction<'a>(
    text: &str,
    entry: &mut Entry<'a>,
    ins: Instruction<'a>,
) -> Result<(), ReadError> {
    if ins.opcode == b"parameter" {
        let operands = text[ins.operands.0..ins.operands.1].trim();
        let n = operands.parse::<u64>().map_err(|_| {
            error(
                ins.line,
                format!(
                    "parameter {}: {operands:?} is not a parameter number",
                    text_of(ins.name)
                ),
            )
        })?;
        entry.params.push((
            n,
            ins.line,
            Tensor {
                number: n as usize,
                name: text_of(ins.name),
                shape: shape_at(text, ins.shape),
            },
        ));
    }
    if ins.root {
        if entry.root.is_some() {
            return Err(error(ins.line, "a second ROOT in the entry computation"));
        }
        entry.root = Some(ins);
    }
    Ok(())
}

/// The instruction that starts at `at` (a byte of `text` and its line), which read before.
fn instruction_at(text: &str, at: (usize, usize)) -> Result<Instruction<'_>, ReadError> {
    let mut lx = Lexer::new(text);
    lx.resume(at);
    instruction(&mut lx)
}

/// `dtype[dims]{layout}` or `(shape, ...)`; a layout is skipped. An error says what is wrong
/// (its line is the caller's to give: see [`within`]).
fn shape(lx: &mut Lexer, depth: usize) -> Result<Shape, ReadError> {
    let t = lx.next_token()?;
    if t.is(b'(') {
        if depth >= SHAPE_DEPTH {
            return Err(error(t.line, "a tuple shape nests too deeply"));
        }
        let mut parts = Vec::new();
        if lx.eat(b')')? {
            return Ok(Shape::Tuple(parts));
        }
        loop {
            parts.push(shape(lx, depth + 1)?);
            if lx.eat(b')')? {
                return Ok(Shape::Tuple(parts));
            }
            if !lx.eat(b',')? {
                return Err(error(t.line, "a tuple shape lacks a `,` or `)`"));
            }
        }
    }
    let Tok::Word(name) = t.tok else {
        return Err(error(t.line, "expected a shape"));
    };
    let dtype = Dtype::from_name(name)
        .ok_or_else(|| error(t.line, format!("unknown element type {name:?}")))?;
    if !lx.eat(b'[')? {
        return Err(error(t.line, format!("expected `[` after {name}")));
    }
    let dims = dimensions(lx)?;
    // A layout — `{1,0}`, `{}`, `{1,0:T(8,128)}` —, not the `{` of a computation's body.
    if lx.peek()?.is(b'{') {
        let after = lx.peek2()?;
        let digit =
            matches!(after.tok, Tok::Word(w) if w.starts_with(|c: char| c.is_ascii_digit()));
        if digit || after.is(b'}') || after.is(b':') {
            let open = lx.next_token()?;
            group(lx, open)?;
        }
    }
    Ok(Shape::Array { dtype, dims })
}

/// The dimension list after `[`, through its `]` (a dynamic size, `?` or `<=N`, counts as 0 or
/// N).
fn dimensions(lx: &mut Lexer) -> Result<Vec<u64>, ReadError> {
    if let Some(dims) = lx.plain_dims() {
        return Ok(dims);
    }
    let mut dims = Vec::new();
    if lx.eat(b']')? {
        return Ok(dims);
    }
    loop {
        if lx.peek()?.tok == Tok::Leq {
            lx.next_token()?;
        }
        let t = lx.next_token()?;
        match t.tok {
            Tok::Word("?") => dims.push(0),
            Tok::Word(d) => dims.push(
                d.parse::<u64>()
                    .map_err(|_| error(t.line, format!("{d:?} is not a dimension")))?,
            ),
            _ => return Err(error(t.line, "a dimension list lacks a `,` or `]`")),
        }
        if lx.eat(b']')? {
            return Ok(dims);
        }
        if !lx.eat(b',')? {
            return Err(error(t.line, "a dimension list lacks a `,` or `]`"));
        }
    }
}

/// An error inside what began on `line` (an instruction, a computation): on that line, its
/// message after `what: `.
fn within(e: ReadError, line: usize, what: &str) -> ReadError {
    match e {
        ReadError::Text { message, .. } => error(line, format!("{what}: {message}")),
        e => e,
    }
}

/// The entry parameters in number order, refused unless numbered 0 to n-1 once each.
fn numbered(mut params: Vec<(u64, usize, Tensor)>) -> Result<Vec<Tensor>, ReadError> {
    params.sort_by_key(|p| p.0);
    let count = params.len();
    for (k, (n, line, t)) in params.iter().enumerate() {
        if *n != k as u64 {
            return Err(error(
                *line,
                format!(
                    "the entry computation's parameter numbers are not 0 to {} once each: parameter {} has number {n}",
                    count.saturating_sub(1),
                    t.name
                ),
            ));
        }
    }
    Ok(params.into_iter().map(|(_, _, t)| t).collect())
}

/// The module's results: a root tuple's elements (named after its operands), else the root.
fn results(text: &str, root: &Instruction, shape: Shape) -> Vec<Tensor> {
    match shape {
        Shape::Tuple(parts) => {
            let names = if root.opcode == b"tuple" {
                operand_names(&text[root.operands.0..root.operands.1])
            } else {
                Vec::new()
            };
            parts
                .into_iter()
                .enumerate()
                .map(|(k, p)| Tensor {
                    number: k,
                    name: names
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| format!("{}.{k}", text_of(root.name))),
                    shape: p,
                })
                .collect()
        }
        s => vec![Tensor {
            number: 0,
            name: text_of(root.name),
            shape: s,
        }],
    }
}

/// The operand names of an operand list (`a, %b`, or the old `f32[2]{0} %a, f32[] b`): the last
/// name of each `,`-separated operand, outside brackets.
fn operand_names(operands: &str) -> Vec<String> {
    let mut lx = Lexer::new(operands);
    let mut out = Vec::new();
    let (mut depth, mut last) = (0usize, None);
    while let Ok(t) = lx.next_token() {
        match t.tok {
            Tok::Eof => break,
            Tok::Punct(b'(' | b'{' | b'[') => depth += 1,
            Tok::Punct(b')' | b'}' | b']') => depth = depth.saturating_sub(1),
            Tok::Punct(b',') if depth == 0 => out.extend(last.take()),
            Tok::Word(w) | Tok::Name(w) if depth == 0 => last = Some(w.to_string()),
            _ => {}
        }
    }
    out.extend(last);
    out
}

/// The `op_name` of a `metadata={...}` value (escapes kept as written; empty when none).
fn op_name(text: &str, metadata: Option<(usize, usize)>) -> String {
    let Some((a, b)) = metadata else {
        return String::new();
    };
    let mut lx = Lexer::new(&text[a..b]);
    let mut window = [Tok::Eof; 3];
    while let Ok(t) = lx.next_token() {
        if t.tok == Tok::Eof {
            break;
        }
        window = [window[1], window[2], t.tok];
        if let [Tok::Word("op_name"), Tok::Punct(b'='), Tok::Str(s)] = window {
            return s.to_string();
        }
    }
    String::new()
}

/// The header's `input_output_alias` value, `{ {out}: (param, {index}, kind), ... }`; what does
/// not read so ends the list.
fn parse_aliases(value: &str) -> Vec<Alias> {
    let mut lx = Lexer::new(value);
    let mut out = Vec::new();
    let Ok(true) = lx.eat(b'{') else {
        return out;
    };
    while let Ok(Some(alias)) = one_alias(&mut lx) {
        out.push(alias);
        if !matches!(lx.eat(b','), Ok(true)) {
            break;
        }
    }
    out
}

/// `{out, ...}: (param, {index, ...}[, kind])`, or `None` at the end of the list.
fn one_alias(lx: &mut Lexer) -> Result<Option<Alias>, ReadError> {
    let number = |t: Token| match t.tok {
        Tok::Word(w) => w.parse::<usize>().ok(),
        _ => None,
    };
    if !lx.eat(b'{')? {
        return Ok(None);
    }
    let open = Token {
        tok: Tok::Punct(b'{'),
        line: 0,
        start: 0,
        end: 0,
    };
    let first = lx.peek()?;
    let output_index = if first.is(b'}') {
        0
    } else {
        number(first).unwrap_or(0)
    };
    group(lx, open)?;
    if !lx.eat(b':')? || !lx.eat(b'(')? {
        return Ok(None);
    }
    let Some(parameter) = number(lx.next_token()?) else {
        return Ok(None);
    };
    let paren = Token {
        tok: Tok::Punct(b'('),
        ..open
    };
    let mut must_alias = false;
    let mut depth = 1usize;
    while depth > 0 {
        let t = lx.next_token()?;
        match t.tok {
            Tok::Punct(b'(' | b'{' | b'[') => depth += 1,
            Tok::Punct(b')' | b'}' | b']') => depth -= 1,
            Tok::Word("must-alias") => must_alias = true,
            Tok::Eof => return Err(error(paren.line, "an alias is not closed")),
            _ => {}
        }
    }
    Ok(Some(Alias {
        output_index,
        parameter,
        must_alias,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "HloModule m, input_output_alias={ {0}: (1, {}, must-alias), {1}: (0, {}, may-alias) }, entry_computation_layout={(f32[8,16]{1,0})->f32[8]{0}}

add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY %main.9 (x: f32[8,16], y: f32[8]) -> f32[8] {
  %p2 = s32[2,3,4]{2,1,0} parameter(2), sharding={replicated}
  %p0 = f32[8,16]{1,0} parameter(0)
  p1 = f32[8]{0} parameter(1), metadata={op_name=\"y(\"}
  t = (f32[2]{0}, /*index=1*/f32[3]{0}) parameter(3)
  c = f32[] constant(0)
  r = f32[8]{0} reduce(f32[8,16]{1,0} %p0, c), dimensions={1}, to_apply=add_f32
  ROOT out = (f32[8]{0}, s32[2,3,4]{2,1,0}) tuple(r, %p2)
}
";

    fn text_err(t: &str) -> (usize, String) {
        match parse(t) {
            Err(ReadError::Text { line, message }) => (line, message),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn entry_parameters_results_and_counts() {
        let m = parse(TEXT).unwrap();
        assert_eq!(m.name, "m");
        assert_eq!(m.entry, "main.9");
        let names: Vec<&str> = m.parameters.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["p0", "p1", "p2", "t"]);
        assert_eq!(m.parameters[0].shape.dims(), [8, 16]);
        assert_eq!(m.parameters[0].bytes(), 512);
        assert_eq!(m.parameters[2].shape.dtype_name(), "s32");
        assert_eq!(m.parameters[3].shape.to_string(), "(f32[2], f32[3])");
        assert_eq!(m.parameters[3].bytes(), 20);
        let results: Vec<(&str, String)> = m
            .results
            .iter()
            .map(|t| (t.name.as_str(), t.shape.to_string()))
            .collect();
        assert_eq!(
            results,
            [
                ("r", "f32[8]".to_string()),
                ("p2", "s32[2,3,4]".to_string())
            ]
        );
        assert_eq!(m.instruction_count, 10);
        assert_eq!(m.opcodes["parameter"], 6);
        assert_eq!(m.computations.len(), 2);
        assert!(m.computations[1].is_entry && !m.computations[0].is_entry);
        assert_eq!(m.largest[0].tensor.name, "p0");
        let p1 = m.largest.iter().find(|l| l.tensor.name == "p1").unwrap();
        assert_eq!(p1.op_name, "y(");
        assert_eq!(
            m.aliases,
            vec![
                Alias {
                    output_index: 0,
                    parameter: 1,
                    must_alias: true
                },
                Alias {
                    output_index: 1,
                    parameter: 0,
                    must_alias: false
                }
            ]
        );
    }

    #[test]
    fn scalars_and_a_root_by_position() {
        let m =
            parse("HloModule s\n\nENTRY e {\n  x = f32[] parameter(0)\n  y = f32[] negate(x)\n}\n")
                .unwrap();
        assert_eq!(m.parameters.len(), 1);
        assert!(m.parameters[0].shape.dims().is_empty());
        assert_eq!(m.results[0].name, "y");
        assert!(m.aliases.is_empty());
    }

    #[test]
    fn text_that_does_not_parse_is_refused_with_its_line() {
        assert_eq!(text_err("HloModulex\n").0, 1);
        assert_eq!(
            text_err("HloModule m\n\nENTRY e {\n  x = f32[] parameter(0)\n  garbage here\n}\n"),
            (
                5,
                "expected an instruction (`name = shape opcode(operands)`)".to_string()
            )
        );
        let (line, m) = text_err("HloModule m\nENTRY e {\n  x = f99[2] parameter(0)\n}\n");
        assert_eq!(line, 3);
        assert!(m.contains("unknown element type \"f99\""), "{m}");
        let (line, m) = text_err("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n");
        assert_eq!((line, m.as_str()), (2, "the computation e is not closed"));
        let (line, m) = text_err("HloModule m\nENTRY e {\n  x = f32[2] parameter(1)\n}\n");
        assert_eq!(line, 3);
        assert!(m.contains("not 0 to 0 once each"), "{m}");
        assert_eq!(text_err("HloModule m\nwhat\n").0, 2);
        assert!(matches!(
            parse("HloModule m\nc {\n  ROOT x = f32[] constant(1)\n}\n"),
            Err(ReadError::Invalid(_))
        ));
        let deep = format!(
            "HloModule m\nENTRY e {{\n  x = {}f32[]{} parameter(0)\n}}\n",
            "(".repeat(500),
            ")".repeat(500)
        );
        assert!(text_err(&deep).1.contains("nests too deeply"));
    }

    /// Both ways of reading instructions give the same summary, or the same error.
    fn agree(text: &str) {
        assert_eq!(parse_with(text, true), parse_with(text, false), "{text}");
    }

    /// The example models' HLO text, as XLA printed it.
    fn zoo() -> Vec<String> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/models");
        let mut out: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
            .map(|p| std::fs::read_to_string(p).unwrap())
            .collect();
        assert!(out.len() >= 5, "{}", out.len());
        out.push(TEXT.to_string());
        out
    }

    #[test]
    fn plain_and_token_reading_agree_on_the_zoo_however_laid_out() {
        for text in zoo() {
            agree(&text);
            agree(&text.replace('\n', " "));
            agree(&text.replace(", ", " ,\n  "));
            agree(&text.replace('=', " = "));
            agree(&text.replace(')', ") /* c */"));
            agree(&text.replace(" = ", "=").replace("  ", "\t"));
            // Cut short anywhere: the same error.
            for cut in (0..text.len()).step_by(97) {
                if text.is_char_boundary(cut) {
                    agree(&text[..cut]);
                }
            }
        }
    }

    #[test]
    fn most_of_the_zoo_is_read_plainly() {
        let (mut plain, mut all) = (0, 0);
        for text in zoo() {
            let mut dtypes = Dtypes::default();
            for (k, line) in text.lines().enumerate() {
                let t = line.trim_start();
                if t.contains(" = ") && !t.starts_with("HloModule") && !t.ends_with('{') {
                    all += 1;
                    if let Some(p) = plain::read(line, 0, k + 1, &mut dtypes) {
                        plain += 1;
                        assert!(line[p.shape.0..p.shape.1].contains('['), "{line}");
                        assert_eq!(p.line, k + 1);
                    }
                }
            }
        }
        assert!(plain * 10 >= all * 8, "{plain} of {all}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// Instructions made of plain and unusual pieces — comments, tuples, strings with escapes,
        /// dynamic dimensions, layouts with tiles, arrows, `%` names, odd spacing, errors — read
        /// the same both ways.
        #[test]
        fn plain_and_token_reading_agree_on_generated_text(
            lines in proptest::collection::vec(instruction_text(), 0..12),
            entry in proptest::bool::ANY,
        ) {
            let body = lines.join("");
            let head = if entry { "ENTRY e {" } else { "c {" };
            let text = format!("HloModule m\n{head}\n{body}}}\nENTRY f {{ x = f32[] parameter(0) }}\n");
            agree(&text);
        }
    }

    fn instruction_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let pick = |v: &'static [&'static str]| proptest::sample::select(v);
        let root = pick(&["", "ROOT ", "ROOT\n", "ROOT%"]);
        let name = pick(&["a", "%b.1", "p", "ROOT", "x_2", "%", "-", "3"]);
        let eq = pick(&[" = ", "=", " =\n ", " /*c*/ = ", " "]);
        let shape = pick(&[
            "f32[2,3]{1,0}",
            "f32[]",
            "bf16[8]{0}",
            "s32[2, 3]",
            "f32[<=4,?]",
            "(f32[2], s32[])",
            "f32[2]{0:T(8,128)}",
            "f32[2] {0}",
            "f32 [2]",
            "f99[2]",
            "f32[2",
            "pred[1,1,1]{2,1,0}",
            "u4[3]",
            "f32[99999999999999999999]",
            "f32[4294967296,4294967296,16]",
            "token[]",
        ]);
        let op = pick(&[
            " add",
            " parameter",
            "\nnegate",
            " tuple",
            " ",
            " %x",
            " ->",
        ]);
        let operands = pick(&[
            "(a, b)",
            "(0)",
            "(1)",
            "()",
            "(f32[2]{0} %a, (f32[], s32[]) b)",
            "(a /* x */)",
            "(\"s(\")",
            "(a",
        ]);
        let attrs = proptest::collection::vec(
            pick(&[
                ", dimensions={1}",
                ", metadata={op_name=\"jit(f)/x\" source_line=3}",
                ", metadata={op_name=\"a\\\"b\"}",
                ", dim_labels=b01f_01io->b01f",
                ", window={size=3x3 pad=0_1x1_0}",
                ", to_apply=add",
                ", sharding={replicated}",
                " ,\n  backend_config='x'",
                ", x=<=3",
                ", slice={[0:2], [1:3]}",
                ", a=b c d",
                ", a=",
                ", =3",
                ", k=%v",
                ", k=v // comment\n",
                ", k=,",
                ", k=)",
            ]),
            0..4,
        );
        (root, name, eq, shape, op, operands, attrs)
            .prop_map(|(r, n, e, s, o, ops, at)| format!("  {r}{n}{e}{s}{o}{ops}{}\n", at.concat()))
    }

    #[test]
    fn operands_old_and_new_style() {
        assert_eq!(operand_names("a, %b"), ["a", "b"]);
        assert_eq!(operand_names("f32[2]{0} %a, (f32[], s32[]) b"), ["a", "b"]);
    }
}
