//! The error every kernel returns: a StreamStack error code and a message for people.
//!
//! The logic modules know nothing about napi; `lib.rs` turns a `KernelError` into a JS error whose
//! `code` property is `ErrorCode::as_str()`, the same string the TypeScript `StreamStackError` uses.

use std::fmt;

/// The subset of StreamStack's error codes that the kernels can raise. The strings are a contract
/// shared with `packages/engine/src/errors.ts`: never rename one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidArgument,
    FstKeyOrder,
    PostingsNotSorted,
    Corrupt,
    Io,
}

impl ErrorCode {
    /// The code exactly as JavaScript sees it in `error.code`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "INVALID_ARGUMENT",
            ErrorCode::FstKeyOrder => "FST_KEY_ORDER",
            ErrorCode::PostingsNotSorted => "POSTINGS_NOT_SORTED",
            ErrorCode::Corrupt => "CORRUPT",
            ErrorCode::Io => "IO",
        }
    }
}

impl AsRef<str> for ErrorCode {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// A failure of a kernel, with the code scripts branch on and a message that says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelError {
    pub code: ErrorCode,
    pub message: String,
}

impl KernelError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        KernelError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        KernelError::new(ErrorCode::InvalidArgument, message)
    }

    pub fn corrupt(message: impl Into<String>) -> Self {
        KernelError::new(ErrorCode::Corrupt, message)
    }
}

impl fmt::Display for KernelError {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for KernelError {}

/// Shorthand for the result of a kernel.
pub type KernelResult<T> = Result<T, KernelError>;

/// Largest integer a JS number holds exactly (2^53 - 1); values stored as u64 must not pass it.
pub const SAFE_INTEGER_MAX: u64 = (1 << 53) - 1;

/// Converts a JS number that must be a safe non-negative integer, naming `what` in the error.
pub fn safe_integer_from_number(value: f64, what: &str) -> KernelResult<u64> {
    // `value.fract() == 0.0` rejects NaN and the infinities as well as fractions, because their
    // fractional part is NaN.
    if value >= 0.0 && value.fract() == 0.0 && value <= SAFE_INTEGER_MAX as f64 {
        Ok(value as u64)
    } else {
        Err(KernelError::invalid_argument(format!(
            "{what} must be a non-negative safe integer, got {value}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_the_typescript_strings() {
        assert_eq!(ErrorCode::InvalidArgument.as_str(), "INVALID_ARGUMENT");
        assert_eq!(ErrorCode::FstKeyOrder.as_str(), "FST_KEY_ORDER");
        assert_eq!(ErrorCode::PostingsNotSorted.as_str(), "POSTINGS_NOT_SORTED");
        assert_eq!(ErrorCode::Corrupt.as_str(), "CORRUPT");
        assert_eq!(ErrorCode::Io.as_str(), "IO");
    }

    #[test]
    fn safe_integers_are_accepted_and_others_rejected() {
        assert_eq!(safe_integer_from_number(0.0, "v"), Ok(0));
        assert_eq!(
            safe_integer_from_number(9_007_199_254_740_991.0, "v"),
            Ok(SAFE_INTEGER_MAX)
        );
        for bad in [
            -1.0,
            0.5,
            f64::NAN,
            f64::INFINITY,
            9_007_199_254_740_992.0,
            -0.5,
        ] {
            let error = safe_integer_from_number(bad, "v").unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
