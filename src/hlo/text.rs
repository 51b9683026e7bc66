//! HLO text, as XLA prints it, read into the same summary as the binary form: the module header
//! (`HloModule name, entry_computation_layout={...}, input_output_alias={ {0}: (1, {},
//! must-alias) }`), computations (`[ENTRY] name [(signature) -> shape] {` ... `}`) and one
//! instruction per line (`[ROOT] name = shape opcode(operands)[, attributes]`, `%` sigils and
//! `/*index=5*/` comments allowed). Attributes are not interpreted.
//!
//! Text that does not parse is refused with its line: a first line that is not the header, a
//! line inside a computation that is not an instruction, a shape that cannot be read, a
//! computation never closed; a module without exactly one `ENTRY` computation, or whose entry
//! parameters are not numbered 0 to n-1 once each, is refused too. Without a `ROOT`, the last
//! instruction is the root (as XLA's parser has it).

use super::shape::{Dtype, Shape};
use super::summary::{Alias, Computation, Module, Tally, Tensor};
use super::ReadError;

/// How deep tuple shapes may nest.
const SHAPE_DEPTH: usize = 100;

fn err(line: usize, message: impl Into<String>) -> ReadError {
    ReadError::Text {
        line,
        message: message.into(),
    }
}

/// A cursor over one line's bytes.
struct Cursor<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// Skip spaces and `/* ... */` comments.
    fn blank(&mut self) {
        loop {
            while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
                self.pos += 1;
            }
            if self.s[self.pos..].starts_with(b"/*") {
                match find(&self.s[self.pos + 2..], b"*/") {
                    Some(e) => self.pos += 2 + e + 2,
                    None => self.pos = self.s.len(),
                }
            } else {
                return;
            }
        }
    }

    fn eat(&mut self, c: u8) -> bool {
        self.blank();
        if self.s.get(self.pos) == Some(&c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn word(&mut self) -> &str {
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || b"_-.".contains(&self.s[self.pos]))
        {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("")
    }

    /// Skip a balanced `{...}` (a layout), the opening brace already seen.
    fn skip_braces(&mut self) -> Result<(), String> {
        let mut depth = 1usize;
        while self.pos < self.s.len() {
            match self.s[self.pos] {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos += 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        Err("a layout `{` is not closed".into())
    }

    /// `dtype[dims]{layout}` or `(shape, ...)`.
    fn shape(&mut self, depth: usize) -> Result<Shape, String> {
        self.blank();
        if self.eat(b'(') {
            if depth >= SHAPE_DEPTH {
                return Err("a tuple shape nests too deeply".into());
            }
            let mut parts = Vec::new();
            if self.eat(b')') {
                return Ok(Shape::Tuple(parts));
            }
            loop {
                parts.push(self.shape(depth + 1)?);
                if self.eat(b')') {
                    return Ok(Shape::Tuple(parts));
                }
                if !self.eat(b',') {
                    return Err("a tuple shape lacks a `,` or `)`".into());
                }
            }
        }
        let name = self.word().to_string();
        let dtype = Dtype::from_name(&name).ok_or_else(|| {
            if name.is_empty() {
                "expected a shape".to_string()
            } else {
                format!("unknown element type {name:?}")
            }
        })?;
        let mut dims = Vec::new();
        if !self.eat(b'[') {
            return Err(format!("expected `[` after {name}"));
        }
        if !self.eat(b']') {
            loop {
                self.blank();
                if self.s[self.pos..].starts_with(b"<=") {
                    self.pos += 2;
                }
                self.blank();
                if self.eat(b'?') {
                    dims.push(0);
                } else {
                    let d = self.word();
                    dims.push(
                        d.parse::<u64>()
                            .map_err(|_| format!("{d:?} is not a dimension"))?,
                    );
                }
                if self.eat(b']') {
                    break;
                }
                if !self.eat(b',') {
                    return Err("a dimension list lacks a `,` or `]`".into());
                }
            }
        }
        if self.s.get(self.pos) == Some(&b'{') {
            self.pos += 1;
            self.skip_braces()?;
        }
        Ok(Shape::Array { dtype, dims })
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// One instruction line, taken apart.
struct Instruction {
    root: bool,
    name: String,
    shape: Shape,
    opcode: String,
    /// The operand text between the opcode's parentheses.
    operands: String,
    /// `op_name` of the `metadata={...}` attribute (empty when none).
    op_name: String,
}

/// The `op_name="..."` of an attribute list's `metadata={...}` (escapes kept as written).
fn metadata_op_name(attributes: &str) -> String {
    let Some(m) = attributes.find("metadata={") else {
        return String::new();
    };
    let rest = &attributes[m..];
    let Some(o) = rest.find("op_name=\"") else {
        return String::new();
    };
    let value = &rest[o + "op_name=\"".len()..];
    let mut end = None;
    let mut escaped = false;
    for (i, c) in value.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => {
                end = Some(i);
                break;
            }
            _ => escaped = false,
        }
    }
    end.map(|e| value[..e].to_string()).unwrap_or_default()
}

/// `[ROOT] name = shape opcode(operands)...`.
fn instruction(line: &str) -> Result<Instruction, String> {
    let (lhs, rhs) = line
        .split_once('=')
        .ok_or("expected an instruction (`name = shape opcode(operands)`)")?;
    let lhs = lhs.trim();
    let (root, name) = match lhs.strip_prefix("ROOT ") {
        Some(n) => (true, n.trim()),
        None => (false, lhs),
    };
    let name = name.trim_start_matches('%');
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!("{lhs:?} is not an instruction name"));
    }
    let mut c = Cursor {
        s: rhs.as_bytes(),
        pos: 0,
    };
    let shape = c.shape(0).map_err(|e| format!("instruction {name}: {e}"))?;
    c.blank();
    let opcode = c.word().to_string();
    if opcode.is_empty() || !c.eat(b'(') {
        return Err(format!("instruction {name}: expected an opcode and `(`"));
    }
    let start = c.pos;
    let mut depth = 1usize;
    let mut in_str = false;
    let bytes = rhs.as_bytes();
    while c.pos < bytes.len() {
        match bytes[c.pos] {
            b'"' if c.pos == 0 || bytes[c.pos - 1] != b'\\' => in_str = !in_str,
            b'(' | b'{' | b'[' if !in_str => depth += 1,
            b')' | b'}' | b']' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            _ => {}
        }
        c.pos += 1;
    }
    if depth != 0 {
        return Err(format!(
            "instruction {name}: the operand list is not closed"
        ));
    }
    Ok(Instruction {
        root,
        name: name.to_string(),
        shape,
        opcode,
        operands: rhs[start..c.pos].to_string(),
        op_name: metadata_op_name(&rhs[c.pos..]),
    })
}

/// The operand names of an operand list (`a, %b` or the old `f32[2]{0} %a, f32[] b`).
fn operand_names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let b = text.as_bytes();
    let mut push = |s: &str| {
        if let Some(last) = s.split_whitespace().last() {
            out.push(last.trim_start_matches('%').to_string());
        }
    };
    for (i, &ch) in b.iter().enumerate() {
        match ch {
            b'(' | b'{' | b'[' => depth += 1,
            b')' | b'}' | b']' => depth -= 1,
            b',' if depth == 0 => {
                push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    push(&text[start..]);
    out
}

/// The module header's `input_output_alias={ {out}: (param, {...}, kind), ... }`.
fn parse_aliases(header: &str) -> Vec<Alias> {
    let Some(start) = header.find("input_output_alias={") else {
        return Vec::new();
    };
    let mut rest = &header[start + "input_output_alias={".len()..];
    let mut out = Vec::new();
    // Each entry: `{<indices>}: (<param>, {<indices>}, <kind>)`, until the closing brace.
    while !rest.trim_start().starts_with('}') {
        let Some(open) = rest.find('{') else { break };
        let Some(close) = rest[open..].find('}').map(|c| c + open) else {
            break;
        };
        let out_index = rest[open + 1..close]
            .split(',')
            .next()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let after = &rest[close + 1..];
        let Some(after) = after.trim_start().strip_prefix(':') else {
            break;
        };
        let Some(paren) = after.find('(') else { break };
        let Some(end) = after[paren..].find(')').map(|e| e + paren) else {
            break;
        };
        let inner = &after[paren + 1..end];
        let param = inner
            .split(',')
            .next()
            .and_then(|s| s.trim().parse::<usize>().ok());
        if let Some(parameter) = param {
            out.push(Alias {
                output_index: out_index,
                parameter,
                must_alias: inner.contains("must-alias"),
            });
        }
        rest = after[end + 1..].trim_start().trim_start_matches(',');
    }
    out
}

/// The computation being read.
struct Open {
    name: String,
    line: usize,
    is_entry: bool,
    instructions: usize,
}

/// The entry computation's own instructions, as the summary needs them.
#[derive(Default)]
struct Entry {
    /// (parameter number, line, tensor).
    params: Vec<(u64, usize, Tensor)>,
    /// The `ROOT` instruction.
    root: Option<Instruction>,
    /// The last instruction (the root when none is marked).
    last: Option<Instruction>,
}

/// Read HLO text into its summary.
pub fn parse(text: &str) -> Result<Module, ReadError> {
    let mut name = None;
    let mut aliases = Vec::new();
    let mut computations: Vec<Computation> = Vec::new();
    let mut open: Option<Open> = None;
    let mut tally = Tally::default();
    let mut entry = Entry::default();
    let mut entries = 0usize;
    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        if name.is_none() {
            let Some(rest) = line.strip_prefix("HloModule") else {
                return Err(err(line_no, "expected the `HloModule name` header"));
            };
            let n = rest
                .trim_start()
                .split(|c: char| c == ',' || c.is_whitespace())
                .next()
                .unwrap_or("");
            if n.is_empty() || !rest.starts_with(char::is_whitespace) {
                return Err(err(line_no, "the HloModule header has no module name"));
            }
            name = Some(n.to_string());
            aliases = parse_aliases(line);
            continue;
        }
        match &mut open {
            None => {
                let Some(head) = line.strip_suffix('{') else {
                    return Err(err(
                        line_no,
                        "expected a computation (`name {` or `ENTRY name {`)",
                    ));
                };
                let (is_entry, head) = match head.strip_prefix("ENTRY") {
                    Some(h) if h.starts_with(char::is_whitespace) => (true, h.trim_start()),
                    _ => (false, head),
                };
                let cname: String = head
                    .trim_start_matches('%')
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '(')
                    .collect();
                if cname.is_empty() || head.contains(" = ") {
                    return Err(err(
                        line_no,
                        "expected a computation (`name {` or `ENTRY name {`)",
                    ));
                }
                if is_entry {
                    entries += 1;
                    if entries > 1 {
                        return Err(err(line_no, "a second ENTRY computation"));
                    }
                }
                open = Some(Open {
                    name: cname,
                    line: line_no,
                    is_entry,
                    instructions: 0,
                });
            }
            Some(c) => {
                if line.starts_with('}') {
                    computations.push(Computation {
                        name: std::mem::take(&mut c.name),
                        instructions: c.instructions,
                        is_entry: c.is_entry,
                    });
                    open = None;
                    continue;
                }
                let ins = instruction(line).map_err(|m| err(line_no, m))?;
                c.instructions += 1;
                tally.add_lazy(&ins.name, &ins.opcode, ins.shape.bytes(), || {
                    (ins.shape.clone(), ins.op_name.clone())
                });
                if !c.is_entry {
                    continue;
                }
                if ins.opcode == "parameter" {
                    let n = ins.operands.trim().parse::<u64>().map_err(|_| {
                        err(
                            line_no,
                            format!(
                                "parameter {}: {:?} is not a parameter number",
                                ins.name, ins.operands
                            ),
                        )
                    })?;
                    entry.params.push((
                        n,
                        line_no,
                        Tensor {
                            number: n as usize,
                            name: ins.name.clone(),
                            shape: ins.shape.clone(),
                        },
                    ));
                }
                if ins.root {
                    if entry.root.is_some() {
                        return Err(err(line_no, "a second ROOT in the entry computation"));
                    }
                    entry.root = Some(ins);
                } else {
                    entry.last = Some(ins);
                }
            }
        }
    }
    let Some(name) = name else {
        return Err(err(1, "expected the `HloModule name` header"));
    };
    if let Some(c) = open {
        return Err(err(
            c.line,
            format!("the computation {} is not closed", c.name),
        ));
    }
    let Some(entry_c) = computations.iter().find(|c| c.is_entry) else {
        return Err(ReadError::Invalid("no ENTRY computation".into()));
    };
    let entry_name = entry_c.name.clone();
    entry.params.sort_by_key(|p| p.0);
    let count = entry.params.len();
    for (k, (n, line, t)) in entry.params.iter().enumerate() {
        if *n != k as u64 {
            return Err(err(
                *line,
                format!(
                    "the entry computation's parameter numbers are not 0 to {} once each: parameter {} has number {n}",
                    count.saturating_sub(1),
                    t.name
                ),
            ));
        }
    }
    let Some(root) = entry.root.or(entry.last) else {
        return Err(ReadError::Invalid(format!(
            "the entry computation {entry_name} has no instructions"
        )));
    };
    let results = match &root.shape {
        Shape::Tuple(parts) => {
            let names = if root.opcode == "tuple" {
                operand_names(&root.operands)
            } else {
                Vec::new()
            };
            parts
                .iter()
                .enumerate()
                .map(|(k, p)| Tensor {
                    number: k,
                    name: names
                        .get(k)
                        .cloned()
                        .unwrap_or_else(|| format!("{}.{k}", root.name)),
                    shape: p.clone(),
                })
                .collect()
        }
        s => vec![Tensor {
            number: 0,
            name: root.name.clone(),
            shape: s.clone(),
        }],
    };
    Ok(Module {
        format: "text",
        name,
        id: 0,
        entry: entry_name,
        parameters: entry.params.into_iter().map(|(_, _, t)| t).collect(),
        results,
        computations,
        instruction_count: tally.instructions,
        opcodes: tally.opcodes,
        largest: tally.largest,
        aliases,
    })
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

    #[test]
    fn operands_old_and_new_style() {
        assert_eq!(operand_names("a, %b"), ["a", "b"]);
        assert_eq!(operand_names("f32[2]{0} %a, (f32[], s32[]) b"), ["a", "b"]);
    }
}
