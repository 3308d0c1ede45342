//! Delays injected into command execution, for reproducing races in tests.

use std::time::Duration;

/// Delays injected into command execution, for reproducing races in tests
/// (a backend's `hooks` builder method, feature `testing`).
///
/// Both default to zero (no delay). Production code has no reason to set
/// them, and without the feature no backend takes them.
#[cfg_attr(not(feature = "testing"), doc(hidden))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Sleep before a claim that met an existing owner record reads it.
    ///
    /// On ZooKeeper this delay sits between a failed create and the separate
    /// read of the owner, where the original system's NodeExists → NoNode
    /// race lives: it widens the window in which the owner can release, so
    /// that the read fails with NoNode. On etcd a claim is a single
    /// transaction ("create the key if its create_revision is 0, else read
    /// it"), evaluated atomically by the server: the owner cannot vanish
    /// between the failed compare and the read, so that race cannot happen
    /// at all. There the delay comes before the transaction and only widens
    /// the window between the claim's submission and its evaluation.
    pub delay_owner_read: Duration,
    /// Sleep before a release deletes the owner record (ZooKeeper: between
    /// its read of the record and the delete; etcd: before its
    /// transaction).
    pub delay_release: Duration,
}

impl Hooks {
    /// Waits [`Hooks::delay_owner_read`].
    pub async fn before_owner_read(&self) {
        pause(self.delay_owner_read).await;
    }

    /// Waits [`Hooks::delay_release`].
    pub async fn before_release(&self) {
        pause(self.delay_release).await;
    }
}

async fn pause(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}
