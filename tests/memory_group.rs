//! The group scenarios on the embedded in-memory store.

mod common;

use std::time::Duration;

use async_trait::async_trait;
use common::Stores;
use tenure::core::{Offset, TopicPartition};
use tenure::tokio::{Backend, MemoryStore};

struct Memory(MemoryStore);

#[async_trait]
impl Stores for Memory {
    fn backend(&self, session_timeout: Duration) -> Box<dyn Backend> {
        Box::new(self.0.backend(session_timeout))
    }

    async fn doomed(
        &self,
        session_timeout: Duration,
    ) -> (Box<dyn Backend>, Box<dyn FnOnce() + Send>) {
        // A dropped in-memory backend stops keeping its session alive: it
        // expires after its timeout, as a crashed process's would.
        (self.backend(session_timeout), Box::new(|| {}))
    }

    async fn owner(&self, group: &str, partition: &TopicPartition) -> Option<String> {
        self.0.owner(group, partition)
    }

    async fn committed(&self, group: &str, partition: &TopicPartition) -> Option<Offset> {
        self.0.committed(group, partition)
    }
}

fn stores() -> Memory {
    Memory(MemoryStore::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_share_twelve_partitions() {
    common::three_members_share_twelve_partitions(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fourth_member_moves_only_what_it_takes() {
    common::a_fourth_member_moves_only_what_it_takes(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closing_member_hands_over_with_its_final_offsets() {
    common::a_closing_member_hands_over_with_its_final_offsets(&stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_within_the_session_timeout() {
    common::a_dead_member_is_replaced_within_the_session_timeout(&stores()).await;
}
