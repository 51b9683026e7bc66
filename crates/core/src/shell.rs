//! Shell quoting for the command lines nxcc shows and writes (dry run, replay scripts, logs):
//! a word is left bare when it holds only characters no POSIX shell treats specially, and is
//! single-quoted otherwise.

/// Quote one word for a POSIX shell.
pub fn quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./=:,@%+".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// Quote and join words.
pub fn join<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| quote(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_a_shell_splitter() {
        for w in [
            "plain",
            "--a=b,c",
            "",
            "with space",
            "it's",
            "$HOME",
            "a\"b",
            "tab\tx",
            "*.bin",
        ] {
            let q = quote(w);
            assert_eq!(shell_words::split(&q).unwrap(), vec![w.to_string()], "{q}");
        }
        assert_eq!(quote("--target-instance=trn2"), "--target-instance=trn2");
        assert_eq!(quote("a b"), "'a b'");
    }
}
