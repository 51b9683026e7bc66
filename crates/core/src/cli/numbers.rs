//! Numbers as Python reads them from text (`int()`, `float()`): what argparse's `type=int` and
//! `type=float` accept, for the flag values and the log levels.

/// Python's `int()` on a string: surrounding whitespace, a sign, digits with single underscores
/// between them.
pub fn parse_python_int(text: &str) -> Option<i64> {
    let t = text.trim();
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.bytes().all(|b| b.is_ascii_digit() || b == b'_')
    {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let v: i64 = clean.parse().ok()?;
    Some(if neg { -v } else { v })
}

/// Python's `float()` on a string (decimal, exponent, `inf`, `nan`, underscores between digits).
pub fn parse_python_float(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || t.contains("__") || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    let clean: String = t.chars().filter(|c| *c != '_').collect();
    clean.parse::<f64>().ok()
}
