//! Which tests run beside the others, and which alone: every test takes a
//! turn before it starts. A test that only uses the servers (under a
//! group, chroot or prefix of its own) shares its turn with every other
//! such test; one that restarts a server, kills or cuts off a node of a
//! 3-node cluster, or sets an environment variable the process reads,
//! takes its turn alone, once the tests running have finished and before
//! the next starts. The turns are fair: a test waiting to be alone is not
//! overtaken by tests that asked after it.
//!
//! A turn also makes sure the process's metrics recorder is installed
//! before the test builds anything: a metric registers and describes
//! itself once per process, with the recorder installed then, and the
//! suites that read metrics back share this process with every other.

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static TURNS: RwLock<()> = RwLock::const_new(());

/// A turn beside the other sharing tests, held until dropped.
pub async fn shared() -> RwLockReadGuard<'static, ()> {
    tenure_tests::recorder::installed();
    TURNS.read().await
}

/// A turn alone, held until dropped.
pub async fn alone() -> RwLockWriteGuard<'static, ()> {
    tenure_tests::recorder::installed();
    TURNS.write().await
}

/// [`shared`], for a test that is not async (it must not run inside a
/// tokio runtime).
pub fn shared_blocking() -> RwLockReadGuard<'static, ()> {
    tenure_tests::recorder::installed();
    TURNS.blocking_read()
}
