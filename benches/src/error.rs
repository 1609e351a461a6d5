//! The one error type of the library and the report: a message that says what failed and
//! why, with the child's output where a child process misbehaved.

use std::fmt;

/// A failure of a measurement step, with a human explanation.
#[derive(Debug, Clone)]
pub struct Error(String);

impl Error {
    /// An error with the given explanation.
    pub fn new(message: impl Into<String>) -> Self {
        Error(message.into())
    }

    /// The same error, preceded by what was being done (`context: error`).
    pub fn context(self, context: impl fmt::Display) -> Self {
        Error(format!("{context}: {}", self.0))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(e.to_string())
    }
}

/// The library's result type.
pub type Result<T> = std::result::Result<T, Error>;
