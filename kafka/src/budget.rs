//! The member-wide budget for fetched messages not yet handed out.
//!
//! Every partition's fetcher reserves its fetch's size from one budget
//! before it sends the fetch, keeps what the answer's messages take while
//! they wait in the partition's buffer, and gives it back when the batch's
//! last message is handed out (or the batch is dropped). A member over
//! 10,000 partitions therefore buffers no more than one over 10: when the
//! budget is spent, fetchers wait, in the order they asked, until the
//! application takes messages.

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

/// Part of a budget, held by a fetch and then by the batch it brought
/// until the batch is done with; given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    permit: Option<OwnedSemaphorePermit>,
}

impl BufferBudget {
    /// A budget of `total` bytes (at least [`MIN_FETCH`]).
    pub(crate) fn new(total: usize) -> BufferBudget {
        let most = Semaphore::MAX_PERMITS.min(u32::MAX as usize);
        let total = total.clamp(MIN_FETCH, most);
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

    /// Waits for `bytes` of the budget (all of it at most); fetchers that
    /// wait are served in the order they asked.
    pub(crate) async fn reserve(&self, bytes: usize) -> Held {
        // At most the budget, itself at most `u32::MAX`.
        let bytes = bytes.min(self.total) as u32;
        let permit = Arc::clone(&self.permits)
            .acquire_many_owned(bytes)
            .await
            // The semaphore is never closed.
            .ok();
        Held { permit }
    }

    /// Makes `held` cover `bytes`: gives back what it holds beyond them, or,
    /// when the answer is larger than its fetch reserved (Kafka returns a
    /// partition's next batch whole when it is larger than asked for),
    /// gives everything back and waits for room for all of it (all of the
    /// budget at most). No fetcher holds part of the budget while it waits
    /// for more, so that fetchers each waiting for what the others hold
    /// cannot stop one another: the budget is never passed, but by a single
    /// batch larger than the whole budget.
    pub(crate) async fn fit(&self, held: &mut Held, bytes: usize) {
        let holds = held.bytes();
        if bytes <= holds {
            if let Some(permit) = held.permit.as_mut() {
                drop(permit.split(holds - bytes));
            }
            return;
        }
        held.permit = None;
        *held = self.reserve(bytes).await;
    }

    /// Bytes of the budget not held now.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.permits.available_permits()
    }
}

impl Held {
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
    async fn a_batch_keeps_what_its_messages_take_and_gives_back_the_rest() {
        let budget = BufferBudget::new(100 << 10);
        let mut fetch = budget.reserve(64 << 10).await;
        assert_eq!(budget.available(), 36 << 10);
        budget.fit(&mut fetch, 10 << 10).await;
        assert_eq!(fetch.bytes(), 10 << 10);
        assert_eq!(budget.available(), 90 << 10, "the rest given back");
        drop(fetch);
        assert_eq!(budget.available(), 100 << 10, "all given back");
    }

    #[tokio::test]
    async fn a_batch_larger_than_its_fetch_waits_for_room_holding_nothing() {
        let budget = BufferBudget::new(100 << 10);
        let buffered = budget.reserve(70 << 10).await;
        let mut large = budget.reserve(20 << 10).await;
        {
            let fit = budget.fit(&mut large, 50 << 10);
            let mut fit = std::pin::pin!(fit);
            assert!(
                ready_now(fit.as_mut()).is_none(),
                "a batch passed the budget"
            );
            drop(buffered);
            assert!(ready_now(fit).is_some(), "room was made");
        }
        assert_eq!(large.bytes(), 50 << 10);
        assert_eq!(budget.available(), 50 << 10);
        let mut huge = budget.reserve(16 << 10).await;
        drop(large);
        budget.fit(&mut huge, 1 << 20).await;
        assert_eq!(
            huge.bytes(),
            100 << 10,
            "a batch over the budget takes all of it"
        );
    }

    #[tokio::test]
    async fn fetchers_each_waiting_for_more_do_not_stop_one_another() {
        // Four fetches hold the whole budget and each brings more than it
        // reserved: had each kept its part while waiting, none would ever
        // get room.
        let budget = BufferBudget::new(64 << 10);
        let mut fetches = Vec::new();
        for _ in 0..4 {
            fetches.push(budget.reserve(16 << 10).await);
        }
        let mut done = 0;
        for fetch in &mut fetches {
            if ready_now(budget.fit(fetch, 30 << 10)).is_some() {
                done += 1;
            }
        }
        assert!(done >= 1, "no fetch made room for its batch");
    }

    #[tokio::test]
    async fn a_spent_budget_holds_fetches_until_batches_are_done_with() {
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
