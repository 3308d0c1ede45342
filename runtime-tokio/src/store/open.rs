//! Why opening a session failed, in the terms every store's client shares.

use std::time::Duration;

use tenure_core::ClientError;

use crate::backend::BackendError;

/// Why opening a session failed, before it becomes a [`BackendError`]; `E`
/// is the store client's error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError<E> {
    /// No server answered within the connect timeout.
    #[error("no server answered within {0:?}")]
    Timeout(Duration),
    /// The client refused the address it was given.
    #[error("invalid address {address:?}: {source}")]
    BadAddress {
        /// The address, as given.
        address: String,
        /// What the client said.
        source: E,
    },
    /// The store is reachable but cannot be used as configured (a missing
    /// ZooKeeper chroot, say).
    #[error("{0}")]
    Unusable(String),
    /// The store granted a shorter session than asked.
    #[error("the server granted a session of {granted:?}, shorter than the {asked:?} asked")]
    ShorterSession {
        /// The member's session timeout.
        asked: Duration,
        /// What the store granted.
        granted: Duration,
    },
    /// The store refused this client: its credentials or certificates
    /// (the detail says what to fix).
    #[error("{0}")]
    Denied(String),
    /// The client failed otherwise.
    #[error("{0}")]
    Client(#[source] E),
}

impl<E: std::error::Error + Send + Sync + 'static> OpenError<E> {
    /// The error as the runtime sees it, naming `store`: configuration
    /// errors (retrying cannot help) apart from failures to connect.
    pub fn into_backend_error(self, store: String) -> BackendError {
        match self {
            OpenError::BadAddress { address, source } => BackendError::invalid_setting(
                format!("{store}: invalid address {address:?}"),
                source,
            ),
            OpenError::Unusable(_) => BackendError::Config(format!("{store}: {self}")),
            OpenError::ShorterSession { asked, granted } => BackendError::SessionTimeout {
                store,
                asked,
                granted,
            },
            OpenError::Denied(detail) => BackendError::Denied {
                store,
                detail,
                source: None,
            },
            OpenError::Timeout(_) | OpenError::Client(_) => BackendError::Connect {
                store,
                source: ClientError::new(self),
            },
        }
    }
}
