//! tenure-tokio: drives one tenure member per group on tokio.
//!
//! The runtime owns the member's state machine (from `tenure-core`), its
//! timer and a [`Backend`] that talks to the coordination store; it feeds
//! events in, carries commands out, and gives the application a stream of
//! assignment changes and errors.

#![deny(missing_docs)]

mod backend;

pub use backend::{Backend, BackendError, EventSender};
