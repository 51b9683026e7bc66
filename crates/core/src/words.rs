//! Counts in messages: a number with its noun in the number it calls for (`1 compile`,
//! `2 compiles`, `1 entry`, `0 entries`).

/// `n` followed by `one` when `n` is 1, else by `many`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_is_singular_every_other_number_plural() {
        assert_eq!(count(1, "compile", "compiles"), "1 compile");
        assert_eq!(count(0, "entry", "entries"), "0 entries");
        assert_eq!(count(2, "entry", "entries"), "2 entries");
    }
}
