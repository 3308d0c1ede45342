//! The member-wide budget for fetched messages not yet handed out.
//!
//! Every partition's fetcher reserves its fetch's size from one budget
//! before it sends the fetch, keeps what the answer's messages take for as
//! long as their batch lives (the last message of it handed out and
//! dropped), and gives the rest back at once. A member over 10,000
//! partitions therefore buffers no more than one over 10: when the budget
//! is spent, fetchers wait, in the order they asked, until the application
//! takes messages.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The smallest fetch a fetcher asks for, however many share the budget:
/// smaller fetches would cost a request for a few messages each. Below
/// this share, fetchers take turns instead.
pub(crate) const MIN_FETCH: usize = 16 << 10;

/// Bytes of fetched messages a member buffers at most, shared by its
/// partitions' fetchers. Clones share the budget.
#[derive(Clone, Debug)]
pub(crate) struct BufferBudget {
    permits: Arc<Semaphore>,
    total: usize,
    /// Fetchers sharing the budget, for each one's fair share.
    fetchers: Arc<AtomicUsize>,
}

/// A fetcher's place among those sharing a budget, given up when dropped.
#[derive(Debug)]
pub(crate) struct Sharer {
    fetchers: Arc<AtomicUsize>,
}

impl Drop for Sharer {
    fn drop(&mut self) {
        self.fetchers.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Part of a budget, held by a fetch and then by the batch it brought;
/// given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
    permits: Arc<Semaphore>,
}

impl BufferBudget {
    /// A budget of `total` bytes (at least [`MIN_FETCH`]).
    pub(crate) fn new(total: usize) -> BufferBudget {
        let total = total.clamp(MIN_FETCH, Semaphore::MAX_PERMITS);
        BufferBudget {
            permits: Arc::new(Semaphore::new(total)),
            total,
            fetchers: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Counts a fetcher among those sharing the budget while the returned
    /// place lives.
    pub(crate) fn join(&self) -> Sharer {
        self.fetchers.fetch_add(1, Ordering::Relaxed);
        Sharer {
            fetchers: Arc::clone(&self.fetchers),
        }
    }

    /// How many bytes a fetch may ask for now: `fetch_max_bytes`, or the
    /// fair share of the budget among the fetchers sharing it when that is
    /// smaller, never below [`MIN_FETCH`] nor above the budget.
    pub(crate) fn ask(&self, fetch_max_bytes: usize) -> usize {
        let fetchers = self.fetchers.load(Ordering::Relaxed).max(1);
        let share = (self.total / fetchers).max(MIN_FETCH);
        fetch_max_bytes.max(1).min(share).min(self.total)
    }

    /// Waits for `bytes` of the budget (at most all of it); fetchers that
    /// wait are served in the order they asked.
    pub(crate) async fn reserve(&self, bytes: usize) -> Held {
        let bytes = bytes.min(self.total).min(u32::MAX as usize) as u32;
        let permit = Arc::clone(&self.permits)
            .acquire_many_owned(bytes)
            .await
            // The semaphore is never closed.
            .ok();
        Held {
            permit,
            permits: Arc::clone(&self.permits),
        }
    }

    /// Bytes of the budget not held now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl Held {
    /// Keeps `bytes` of what was reserved and gives the rest back. More
    /// than was reserved (Kafka returns a partition's first batch whole,
    /// even when it is larger than the fetch asked for) is taken from what
    /// is free now, without waiting: the application may need this very
    /// batch to free the rest, so the budget is exceeded by what was not
    /// free, at most one batch per partition.
    pub(crate) fn settle(&mut self, bytes: usize) {
        let held = self.bytes();
        if bytes < held {
            if let Some(permit) = self.permit.as_mut() {
                drop(permit.split(held - bytes));
            }
        } else if bytes > held {
            let free = self.permits.available_permits().min(bytes - held);
            let more = u32::try_from(free).unwrap_or(u32::MAX);
            if let Ok(extra) = Arc::clone(&self.permits).try_acquire_many_owned(more) {
                match self.permit.as_mut() {
                    Some(permit) => permit.merge(extra),
                    None => self.permit = Some(extra),
                }
            }
        }
    }

    /// Bytes of the budget held.
    pub(crate) fn bytes(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, OwnedSemaphorePermit::num_permits)
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// What `future` gives when polled once, if it is ready.
    fn ready_now<F: Future>(future: F) -> Option<F::Output> {
        let mut future = std::pin::pin!(future);
        match future
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(output) => Some(output),
            Poll::Pending => None,
        }
    }

    #[test]
    fn a_fetch_asks_for_its_share_of_the_budget() {
        let budget = BufferBudget::new(1 << 20);
        assert_eq!(budget.ask(256 << 10), 256 << 10, "alone: the fetch size");
        let sharers: Vec<Sharer> = (0..16).map(|_| budget.join()).collect();
        assert_eq!(budget.ask(256 << 10), 64 << 10, "a sixteenth each");
        let more: Vec<Sharer> = (0..1000).map(|_| budget.join()).collect();
        assert_eq!(budget.ask(256 << 10), MIN_FETCH, "never below the floor");
        drop((sharers, more));
        assert_eq!(budget.ask(4 << 20), 1 << 20, "never above the budget");
    }

    #[tokio::test]
    async fn a_batch_keeps_what_its_messages_take_until_it_is_dropped() {
        let budget = BufferBudget::new(100 << 10);
        let mut fetch = budget.reserve(64 << 10).await;
        assert_eq!(budget.available(), 36 << 10);
        fetch.settle(10 << 10);
        assert_eq!(fetch.bytes(), 10 << 10);
        assert_eq!(budget.available(), 90 << 10, "the rest given back");
        let mut large = budget.reserve(20 << 10).await;
        large.settle(120 << 10);
        assert_eq!(
            budget.available(),
            0,
            "a first batch larger than asked takes what is free"
        );
        assert_eq!(large.bytes(), 90 << 10);
        drop(fetch);
        assert_eq!(budget.available(), 10 << 10);
        drop(large);
        assert_eq!(budget.available(), 100 << 10, "all given back");
    }

    #[tokio::test]
    async fn a_spent_budget_holds_fetches_until_batches_are_dropped() {
        let budget = BufferBudget::new(32 << 10);
        let first = budget.reserve(32 << 10).await;
        assert!(
            ready_now(budget.reserve(16 << 10)).is_none(),
            "a fetch was let through a spent budget"
        );
        drop(first);
        let second = ready_now(budget.reserve(16 << 10)).expect("the budget was given back");
        assert_eq!(second.bytes(), 16 << 10);
        assert_eq!(budget.available(), 16 << 10);
    }
}
