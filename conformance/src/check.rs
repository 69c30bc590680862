//! How a case reports a broken rule.

use std::fmt;

/// A rule of the contract that the backend broke, in words that name the outcome it gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<lock_core::Error> for Failure {
    fn from(e: lock_core::Error) -> Self {
        Failure(format!("unexpected error: {e}"))
    }
}

/// What every case returns.
pub type CaseResult = Result<(), Failure>;

/// Fails the case with a formatted message unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::Failure(format!($($msg)+)));
        }
    };
}

/// Writes a line to the test process's real stderr, past libtest's capture: what a case
/// skipped and what it measured belong in the CI log.
pub(crate) fn report(line: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}
