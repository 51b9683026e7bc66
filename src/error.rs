//! The original's error line: `[ERROR] [NCC_<CAT><nnn>] <cause> - <resolution>`, and the compile
//! failure type every layer returns. A compile failure exits with status 70 (`EX_SOFTWARE`).

use std::fmt;

/// Exit status of a compile that failed after parsing.
pub const EXIT_COMPILE_FAILED: i32 = 70;

/// One error in the original's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NccError {
    /// `EARG001`, `DRV068`, ... (`None` for the original's uncoded texts).
    pub code: Option<&'static str>,
    pub cause: String,
    /// What the user can do; empty when the original gives none.
    pub resolution: String,
}

impl NccError {
    pub fn new(
        code: &'static str,
        cause: impl Into<String>,
        resolution: impl Into<String>,
    ) -> NccError {
        NccError {
            code: Some(code),
            cause: cause.into(),
            resolution: resolution.into(),
        }
    }

    /// An error the original prints without a code.
    pub fn plain(cause: impl Into<String>) -> NccError {
        NccError {
            code: None,
            cause: cause.into(),
            resolution: String::new(),
        }
    }
}

impl fmt::Display for NccError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "[ERROR] [NCC_{code}] {}", self.cause)?,
            None => write!(f, "[ERROR] {}", self.cause)?,
        }
        if !self.resolution.is_empty() {
            write!(f, " - {}", self.resolution)?;
        }
        Ok(())
    }
}

impl std::error::Error for NccError {}
