//! What every client's credentials share, whichever server they are for: a
//! password that stays out of logs, and the causes of a refused
//! connection.

use std::fmt;

/// A password: it is shown as `***` in `Debug` output, so that a settings
/// struct holding one can be logged whole.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// `password`, kept.
    pub fn new(password: &str) -> Password {
        Password(password.to_owned())
    }

    /// The password itself, for the client that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// `error` and each of its sources, joined with `: `: the cause of a
/// refused connection (a SASL refusal, an unknown certificate issuer)
/// usually sits in a source, not in the top error's message.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut current = error.source();
    while let Some(source) = current {
        parts.push(source.to_string());
        current = source.source();
    }
    parts.join(": ")
}
