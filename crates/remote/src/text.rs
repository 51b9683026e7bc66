//! Text a server (or an action) chose — status messages, a remote stderr, a worker's name, an
//! argument list — made safe to print: control characters (ANSI escapes, carriage returns,
//! bidirectional overrides, C1 controls) escaped as `\u{1b}`, and each line cut to a bound with
//! what was left out counted, so a hostile peer can neither drive the terminal nor flood it.

/// The longest line printed of server text (characters).
pub const LINE_MAX: usize = 1000;

/// The longest one-line message printed (a status message; characters).
pub const MESSAGE_MAX: usize = 2000;

/// Whether `c` is printed escaped: C0 and C1 controls, DEL, and the invisible characters that
/// reorder or hide text (bidirectional embeddings, overrides and isolates; zero-width marks).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
    }
}

/// One line of server text: unsafe characters escaped (a newline too), at most `max` characters
/// kept, and `... (N more bytes)` saying what was cut.
pub fn line(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 32));
    for (kept, (i, c)) in s.char_indices().enumerate() {
        if kept >= max {
            out.push_str(&format!("... ({} more bytes)", s.len() - i));
            return out;
        }
        if is_unsafe(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// A status message or other one-line text from a server, within [`MESSAGE_MAX`].
pub fn message(s: &str) -> String {
    line(s, MESSAGE_MAX)
}

/// Bytes of a remote stream (stdout, stderr) as lines: read as UTF-8 (invalid sequences
/// replaced), split at newlines, each line made safe and cut to [`LINE_MAX`].
pub fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| line(l, LINE_MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(line("\x1b[31mred\x1b[0m", 100), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(line("a\rb\tc\nd", 100), "a\\rb\\tc\\nd");
        assert_eq!(line("x\u{202e}y\u{9b}z", 100), "x\\u{202e}y\\u{9b}z");
        assert_eq!(line("plain ünïcode ✓", 100), "plain ünïcode ✓");
    }

    #[test]
    fn long_text_is_cut_and_counted() {
        let s = "x".repeat(3 << 20);
        let l = line(&s, LINE_MAX);
        assert!(l.starts_with(&"x".repeat(LINE_MAX)));
        assert!(
            l.ends_with(&format!("... ({} more bytes)", (3 << 20) - LINE_MAX)),
            "{}",
            &l[LINE_MAX..]
        );
        assert!(l.len() < LINE_MAX + 40);
        let ls = lines(b"one\n\x1b[2Jtwo\xff\n");
        assert_eq!(
            ls,
            vec!["one".to_string(), "\\u{1b}[2Jtwo\u{fffd}".to_string()]
        );
    }
}
