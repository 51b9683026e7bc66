//! Numbers as Python reads them from text (`int()`, `float()`): what argparse's `type=int` and
//! `type=float` accept, for the flag values and the log levels; and sizes as nxcc's own options
//! take them (`512M`, `auto`), a memory budget among them.

/// Python's `int()` on a string: surrounding whitespace, a sign, digits with single underscores
/// between them.
pub(crate) fn parse_python_int(text: &str) -> Option<i64> {
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
pub(crate) fn parse_python_float(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() || t.contains("__") || t.starts_with('_') || t.ends_with('_') {
        return None;
    }
    let clean: String = t.chars().filter(|c| *c != '_').collect();
    clean.parse::<f64>().ok()
}

/// Parse a size: `512M`, `1G`, `1.5GiB`, `2048` (bytes), `auto` → 80 % of `MemAvailable`.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("auto") {
        return mem_available()
            .map(|m| m / 5 * 4)
            .ok_or_else(|| "cannot read MemAvailable from /proc/meminfo".to_string());
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("invalid size: {text:?}"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("invalid size unit in {text:?} (use K, M, G or T)")),
    };
    if !n.is_finite() || n < 0.0 {
        return Err(format!("invalid size: {text:?}"));
    }
    Ok((n * mult as f64) as u64)
}

/// The smallest memory budget taken: 64 MiB, a fifth of what the estimate gives the smallest
/// compile. A smaller one is a size written without its unit (`--memory-budget 100` meant as
/// 100 G, say), refused rather than read as bytes.
pub(crate) const MIN_BUDGET: u64 = 64 << 20;

/// Parse a memory budget (`16G`, `512M`, `auto`): [`parse_size`], refused below [`MIN_BUDGET`]
/// with a message that names the units.
pub(crate) fn parse_budget(text: &str) -> Result<u64, String> {
    let n = parse_size(text)?;
    if n < MIN_BUDGET {
        return Err(format!(
            "{text:?} is {n} bytes, below the smallest budget (64M): give a unit (K, M, G or T: \
             16G, 512M) or auto (80 % of the memory available)"
        ));
    }
    Ok(n)
}

/// `MemAvailable` in bytes.
pub(crate) fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GiB").unwrap(), 3 << 29);
        assert_eq!(parse_size("2048").unwrap(), 2048);
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("auto").unwrap() > 0);
    }

    #[test]
    fn budgets_below_the_smallest_are_refused_with_their_units() {
        assert_eq!(parse_budget("16G").unwrap(), 16 << 30);
        assert_eq!(parse_budget("64M").unwrap(), MIN_BUDGET);
        assert!(parse_budget("auto").unwrap() >= MIN_BUDGET || parse_budget("auto").is_err());
        for small in ["100", "0", "63M", "1K"] {
            let e = parse_budget(small).unwrap_err();
            assert!(
                e.contains("below the smallest budget (64M)"),
                "{small}: {e}"
            );
            assert!(e.contains("K, M, G or T"), "{small}: {e}");
        }
    }
}
