//! Member names: what a NEFF member may be called. A name is a relative `/`-separated path with no
//! `..` component, no control character and no NUL; the reader normalises away `.` components,
//! repeated and trailing slashes, and refuses everything else that could reach outside the
//! directory it is unpacked into.

/// Why a member name is refused; each message shows the name as [`shown`] renders it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("a member has an empty name")]
    Empty,
    /// It starts with `/`.
    #[error("member '{0}' has an absolute name")]
    Absolute(String),
    /// It holds a control character (NUL, newline, ...).
    #[error("member '{0}' has a control character in its name")]
    Control(String),
    /// One of its components is `..`.
    #[error("member '{0}' has a '..' component in its name")]
    ParentComponent(String),
    /// Only `.` components and slashes.
    #[error("member '{0}' names no file")]
    NoFile(String),
    /// A name given to the packer that is not already in normal form.
    #[error("member '{name}' is not in normal form (expected '{expected}')")]
    NotNormal {
        /// The name as given (shown).
        name: String,
        /// Its normal form.
        expected: String,
    },
}

/// The normal form of a member name read from an archive, or why it is refused.
pub(crate) fn normalise(raw: &str) -> Result<String, NameError> {
    if raw.is_empty() {
        return Err(NameError::Empty);
    }
    if raw.starts_with('/') {
        return Err(NameError::Absolute(shown(raw)));
    }
    if raw.chars().any(|c| c.is_control()) {
        return Err(NameError::Control(shown(raw)));
    }
    let mut parts = Vec::new();
    for part in raw.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(NameError::ParentComponent(shown(raw))),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(NameError::NoFile(shown(raw)));
    }
    Ok(parts.join("/"))
}

/// Check a name given to the packer: it must already be in normal form.
pub(crate) fn check_for_pack(name: &str) -> Result<(), NameError> {
    let normal = normalise(name)?;
    if normal != name {
        return Err(NameError::NotNormal {
            name: shown(name),
            expected: normal,
        });
    }
    Ok(())
}

/// A name as it may be shown in a message: control characters escaped, long names shortened.
pub fn shown(raw: &str) -> String {
    const MAX: usize = 200;
    let mut out = String::new();
    for (count, c) in raw.chars().enumerate() {
        if count == MAX {
            out.push_str("...");
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_names_are_normalised() {
        assert_eq!(normalise("info.json").unwrap(), "info.json");
        assert_eq!(normalise("./sg00//def.json").unwrap(), "sg00/def.json");
        assert_eq!(normalise("sg00/").unwrap(), "sg00");
        assert_eq!(normalise("a/./b").unwrap(), "a/b");
    }

    #[test]
    fn hostile_names_are_refused() {
        for bad in [
            "",
            "/tmp/x",
            "../evil",
            "a/../../b",
            "a/..",
            ".",
            "./",
            "a\0b",
            "a\nb",
            "//x",
        ] {
            assert!(normalise(bad).is_err(), "{bad:?} accepted");
        }
        assert!(normalise("../evil")
            .unwrap_err()
            .to_string()
            .contains("'..'"));
        assert!(normalise("/tmp/x")
            .unwrap_err()
            .to_string()
            .contains("absolute"));
    }

    #[test]
    fn pack_names_must_be_normal() {
        assert!(check_for_pack("sg00/PE.bin").is_ok());
        assert!(check_for_pack("./sg00/PE.bin").is_err());
        assert!(check_for_pack("sg00/").is_err());
        assert!(check_for_pack("../x").is_err());
    }

    #[test]
    fn shown_escapes_and_shortens() {
        assert_eq!(shown("a\nb"), "a\\nb");
        assert_eq!(shown(&"x".repeat(500)).len(), 203);
    }
}
