//! Just enough of HLO text for the simulated frontend: the ENTRY computation's parameters
//! (`p0 = f32[8,16]{1,0} parameter(0)`), its ROOT instruction's name and shape, and the module's
//! `input_output_alias={ {0}: (1, {}, must-alias) }` attribute.

/// An array value: name, element type and dimensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub dtype: String,
    /// `None` for a shape this reader does not take apart (a tuple, a dynamic dimension).
    pub shape: Option<Vec<u64>>,
}

/// One `input_output_alias` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The first index of the output shape index (`{}` → 0).
    pub output_index: usize,
    pub parameter: usize,
    pub must_alias: bool,
}

/// What the frontend needs of an HLO text module.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EntrySignature {
    /// Parameters in parameter-number order.
    pub parameters: Vec<Tensor>,
    pub root: Option<Tensor>,
    pub aliases: Vec<Alias>,
}

/// Parse `dtype[d0,d1,...]` (an optional `{layout}` after it is ignored).
fn parse_shape(text: &str) -> Option<(String, Option<Vec<u64>>)> {
    let text = text.trim();
    let open = text.find('[')?;
    let close = text[open..].find(']')? + open;
    let dtype = &text[..open];
    if dtype.is_empty() || !dtype.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let inner = text[open + 1..close].trim();
    let dims = if inner.is_empty() {
        Some(Vec::new())
    } else {
        inner
            .split(',')
            .map(|d| d.trim().parse::<u64>().ok())
            .collect::<Option<Vec<u64>>>()
    };
    Some((dtype.to_string(), dims))
}

/// The lines of the ENTRY computation's body.
fn entry_body(text: &str) -> Vec<&str> {
    let mut body = Vec::new();
    let mut depth: i64 = 0;
    let mut inside = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if !inside {
            if trimmed.starts_with("ENTRY ") || trimmed.starts_with("ENTRY\t") {
                inside = true;
                depth = brace_delta(line);
                if depth <= 0 && line.contains('{') {
                    // The whole computation on one line: nothing to collect.
                    return body;
                }
            }
            continue;
        }
        depth += brace_delta(line);
        if depth <= 0 {
            break;
        }
        body.push(trimmed);
    }
    body
}

/// Braces opened minus closed outside string literals.
fn brace_delta(line: &str) -> i64 {
    let mut d = 0;
    let mut in_str = false;
    let mut prev = '\0';
    for c in line.chars() {
        match c {
            '"' if prev != '\\' => in_str = !in_str,
            '{' if !in_str => d += 1,
            '}' if !in_str => d -= 1,
            _ => {}
        }
        prev = c;
    }
    d
}

/// `name = shape rest` of one instruction line (`ROOT ` and `%` dropped from the name).
fn instruction(line: &str) -> Option<(bool, String, &str)> {
    let (lhs, rhs) = line.split_once(" = ")?;
    let lhs = lhs.trim();
    let (root, name) = match lhs.strip_prefix("ROOT ") {
        Some(n) => (true, n.trim()),
        None => (false, lhs),
    };
    let name = name.trim_start_matches('%');
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    Some((root, name.to_string(), rhs.trim()))
}

/// The opcode and its first operand text: `f32[8]{0} parameter(1), x=y` → `("parameter", "1")`.
fn opcode(rhs: &str) -> Option<(&str, &str)> {
    // Skip the shape (which may hold braces, brackets and parentheses for tuples).
    let mut depth = 0i32;
    let mut end = None;
    for (i, c) in rhs.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ' ' if depth == 0 => {
                end = Some(i);
                break;
            }
            _ => {}
        }
    }
    let rest = rhs[end?..].trim_start();
    let open = rest.find('(')?;
    let close = rest[open..].find(')')? + open;
    Some((&rest[..open], &rest[open + 1..close]))
}

fn shape_text(rhs: &str) -> &str {
    rhs.split_once(' ').map(|(s, _)| s).unwrap_or(rhs)
}

/// Parse the module's `input_output_alias={ {out}: (param, {...}, kind), ... }`.
fn parse_aliases(text: &str) -> Vec<Alias> {
    let Some(header) = text
        .lines()
        .find(|l| l.trim_start().starts_with("HloModule"))
    else {
        return Vec::new();
    };
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

/// Read the ENTRY computation's signature from HLO text.
pub fn entry_signature(text: &str) -> EntrySignature {
    let mut params: Vec<(u64, Tensor)> = Vec::new();
    let mut root = None;
    for line in entry_body(text) {
        let Some((is_root, name, rhs)) = instruction(line) else {
            continue;
        };
        let tensor = match parse_shape(shape_text(rhs)) {
            Some((dtype, shape)) => Tensor { name, dtype, shape },
            None => Tensor {
                name,
                dtype: "tuple".into(),
                shape: None,
            },
        };
        if let Some(("parameter", n)) = opcode(rhs) {
            if let Ok(n) = n.trim().parse::<u64>() {
                params.push((n, tensor.clone()));
            }
        }
        if is_root {
            root = Some(tensor);
        }
    }
    params.sort_by_key(|(n, _)| *n);
    EntrySignature {
        parameters: params.into_iter().map(|(_, t)| t).collect(),
        root,
        aliases: parse_aliases(text),
    }
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
  p1 = f32[8]{0} parameter(1), metadata={op_name=\"y\"}
  t = (f32[2]{0}, f32[3]{0}) parameter(3)
  c = f32[] constant(0)
  ROOT r = f32[8]{0} reduce(p0, c), dimensions={1}, to_apply=add_f32
}
";

    #[test]
    fn entry_parameters_in_number_order() {
        let sig = entry_signature(TEXT);
        let names: Vec<&str> = sig.parameters.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["p0", "p1", "p2", "t"]);
        assert_eq!(sig.parameters[0].shape, Some(vec![8, 16]));
        assert_eq!(sig.parameters[1].shape, Some(vec![8]));
        assert_eq!(sig.parameters[2].dtype, "s32");
        assert_eq!(sig.parameters[2].shape, Some(vec![2, 3, 4]));
        assert_eq!(sig.parameters[3].dtype, "tuple");
        assert_eq!(sig.parameters[3].shape, None);
        // Not the `add_f32` computation's parameters.
        assert!(sig.parameters.iter().all(|t| t.name != "a"));
    }

    #[test]
    fn root_and_aliases() {
        let sig = entry_signature(TEXT);
        let root = sig.root.unwrap();
        assert_eq!(root.name, "r");
        assert_eq!(root.shape, Some(vec![8]));
        assert_eq!(
            sig.aliases,
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
    fn scalars_and_no_entry() {
        let sig = entry_signature(
            "HloModule s\n\nENTRY e {\n  x = f32[] parameter(0)\n  ROOT y = f32[] negate(x)\n}\n",
        );
        assert_eq!(sig.parameters.len(), 1);
        assert_eq!(sig.parameters[0].shape, Some(vec![]));
        assert!(entry_signature("HloModule none\n").parameters.is_empty());
        assert!(entry_signature("HloModule none\n").aliases.is_empty());
        let empty = "HloModule e, input_output_alias={}, entry_computation_layout={(f32[2]{0})->f32[2]{0}}\n";
        assert!(entry_signature(empty).aliases.is_empty());
    }
}
