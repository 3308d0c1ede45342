//! The member state machine (stub).
/// Stub.
pub struct Member;
/// Stub.
pub enum Event {}
/// Stub.
pub enum Command {}
/// Stub.
pub enum ClaimOutcome {}
/// Stub.
pub enum FetchFrom {}
