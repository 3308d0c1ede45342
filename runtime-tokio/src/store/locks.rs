//! One lock per partition, so that a partition's claims, releases and
//! commits reach the store one at a time, in the order they were
//! submitted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tenure_core::TopicPartition;
use tokio::sync::OwnedMutexGuard;

/// One lock per partition, for claims, releases and commits of one
/// partition that must reach the store in the order they were submitted
/// and must not interleave. Locks nobody holds or waits for are forgotten.
#[derive(Debug, Default)]
pub(crate) struct PartitionLocks {
    locks: Mutex<HashMap<TopicPartition, Arc<tokio::sync::Mutex<()>>>>,
}

/// The fewest locks kept before the unused ones are forgotten.
const PARTITION_LOCKS_KEPT: usize = 64;

impl PartitionLocks {
    /// Waits for the lock of `partition`; it is released when the guard is
    /// dropped.
    pub(crate) async fn lock(&self, partition: &TopicPartition) -> OwnedMutexGuard<()> {
        let lock = {
            // A panic while holding the map leaves it consistent: entries
            // are only added or removed whole.
            let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            // Unused locks are forgotten once the map has doubled since,
            // so that a burst of thousands of partitions costs each lock
            // a constant share of the sweeps, not a sweep of its own.
            if locks.len() >= PARTITION_LOCKS_KEPT && locks.len() == locks.capacity() {
                locks.retain(|_, lock| Arc::strong_count(lock) > 1);
            }
            locks.entry(partition.clone()).or_default().clone()
        };
        lock.lock_owned().await
    }
}
