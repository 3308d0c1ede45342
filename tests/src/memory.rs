//! The embedded in-memory store as a store under test.

use async_trait::async_trait;
use tenure::core::{Offset, TopicPartition};
use tenure::tokio::{Backend, MemoryStore};

use super::Stores;

/// A fresh in-memory store; members of one test share it.
pub struct Memory(pub MemoryStore);

impl Default for Memory {
    fn default() -> Memory {
        Memory::new()
    }
}

impl Memory {
    pub fn new() -> Memory {
        Memory(MemoryStore::new())
    }
}

#[async_trait]
impl Stores for Memory {
    fn backend(&self) -> Box<dyn Backend> {
        Box::new(self.0.backend())
    }

    async fn doomed(&self) -> (Box<dyn Backend>, Box<dyn FnOnce() + Send>) {
        // A dropped in-memory backend stops keeping its session alive: it
        // expires after its timeout, as a crashed process's would.
        (self.backend(), Box::new(|| {}))
    }

    async fn owner(&self, group: &str, partition: &TopicPartition) -> Option<String> {
        self.0.owner(group, partition)
    }

    async fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Offset> {
        self.0.committed(group, partition)
    }
}
