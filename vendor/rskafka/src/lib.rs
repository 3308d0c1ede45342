#![doc = include_str!("../README.md")]
// The copy leaves out the crate's development dependencies, so its unit
// tests cannot build: a test build of the library is empty. Cargo builds
// one despite `test = false` when `cargo test` is given a name filter.
#![cfg(not(test))]
#![deny(
    rustdoc::broken_intra_doc_links,
    rustdoc::bare_urls,
    rustdoc::invalid_codeblock_attributes,
    rustdoc::private_intra_doc_links,
    rust_2018_idioms,
    unsafe_code
)]
#![warn(
    missing_copy_implementations,
    missing_debug_implementations,
    clippy::explicit_iter_loop,
    clippy::future_not_send,
    clippy::use_self,
    clippy::clone_on_ref_ptr,
    clippy::disallowed_methods
)]

mod backoff;

pub use backoff::{BackoffConfig, BackoffError};

pub mod build_info;

pub mod client;

mod connection;

pub use connection::Error as ConnectionError;
pub use messenger::SaslError;

#[cfg(feature = "unstable-fuzzing")]
pub mod messenger;
#[cfg(not(feature = "unstable-fuzzing"))]
mod messenger;

#[cfg(feature = "unstable-fuzzing")]
pub mod protocol;
#[cfg(not(feature = "unstable-fuzzing"))]
mod protocol;

pub mod record;

mod throttle;

pub mod topic;

// re-exports
pub use bytes;
pub use chrono;

mod validation;
