//! "Did you mean": the known word nearest a mistyped one (a subcommand, an option of
//! `compile`), by edit distance with a swap of two neighbours counting as one edit
//! (`--traget` → `--target`, `compil` → `compile`). The original's own messages are kept
//! exactly; the suggestion is a line of its own after them.

/// The known word nearest `word`, when it is near enough to be what was meant: at most one edit
/// for words of up to 4 characters, else at most a third of the word's length. The first of
/// equally near words wins.
pub(crate) fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    known
        .into_iter()
        .filter(|k| *k != word)
        .map(|k| (distance(word, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// The line that follows a refusal of `word`: ``word: did you mean `known`?``.
pub(crate) fn line(word: &str, known: &str) -> String {
    format!("{word}: did you mean `{known}`?")
}

/// The optimal-string-alignment distance: insertions, deletions, substitutions and swaps of two
/// adjacent characters, each one edit.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut v = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                v = v.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = v;
        }
    }
    d[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_and_single_edits_are_one_edit() {
        assert_eq!(distance("--traget", "--target"), 1);
        assert_eq!(distance("compil", "compile"), 1);
        assert_eq!(distance("hlo-inf", "hlo-info"), 1);
        assert_eq!(distance("abc", "abc"), 0);
        assert_eq!(distance("", "ab"), 2);
    }

    #[test]
    fn only_a_near_word_is_suggested() {
        let subs = ["compile", "cache", "daemon", "hlo-info", "neff-info"];
        assert_eq!(nearest("compil", subs), Some("compile"));
        assert_eq!(nearest("hlo-inf", subs), Some("hlo-info"));
        assert_eq!(nearest("deamon", subs), Some("daemon"));
        assert_eq!(nearest("frobnicate", subs), None);
        // A short word: one edit at most.
        assert_eq!(nearest("cach", subs), Some("cache"));
        assert_eq!(nearest("cc", subs), None);
        // The word itself is not a suggestion.
        assert_eq!(nearest("cache", ["cache"]), None);
        assert_eq!(
            line("--traget", "--target"),
            "--traget: did you mean `--target`?"
        );
    }
}
