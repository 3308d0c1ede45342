//! The claims, offset reads, commits and releases one step of the member
//! decided, gathered and sent together: in batches of one kind, each at
//! most [`OPS_PER_BATCH`] requests.

use std::sync::{Arc, Mutex};

use tenure_core::{StoreError, StoreOp, StoreRequest};

use super::execute::execute_batch;
use super::shared::Shared;
use super::{StoreClient, OPS_PER_BATCH};

/// The requests submitted and not taken yet by the task that sends them
/// as batches.
#[derive(Debug, Default)]
pub(crate) struct Gathered(Arc<Mutex<Vec<StoreRequest>>>);

impl Gathered {
    /// Gathers `command`; whether it is the first since the last batches
    /// left, so that the caller starts the task that sends them
    /// ([`Gathered::send`]).
    pub(crate) fn add(&self, command: StoreRequest) -> bool {
        let mut gathered = self.0.lock().unwrap_or_else(|e| e.into_inner());
        gathered.push(command);
        gathered.len() == 1
    }

    /// Takes the requests gathered once the member's step is over, and
    /// carries them out in batches of one kind, all at once, under the
    /// session they were issued under (failed with
    /// [`StoreError::SessionExpired`] if it ended since).
    pub(crate) fn send<C: StoreClient>(
        &self,
        shared: Arc<Shared<C>>,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let gathered = self.0.clone();
        async move {
            // The member's task submits a step's requests without
            // yielding: they are all gathered when this task runs after it.
            tokio::task::yield_now().await;
            let gathered = std::mem::take(&mut *gathered.lock().unwrap_or_else(|e| e.into_inner()));
            let current = shared.current();
            let mut kinds: [Vec<Vec<StoreRequest>>; StoreOp::BATCH_KINDS] = Default::default();
            for command in gathered {
                let issued_under_current =
                    current.as_ref().map(C::session_id) == Some(command.session);
                match command.op.batch_kind() {
                    Some(kind) if issued_under_current => {
                        let batches = &mut kinds[kind];
                        match batches.last_mut() {
                            Some(batch) if batch.len() < OPS_PER_BATCH => batch.push(command),
                            _ => batches.push(vec![command]),
                        }
                    }
                    _ => shared.send(command.failed(StoreError::SessionExpired)),
                }
            }
            let Some(current) = current else {
                return;
            };
            let sends = kinds
                .into_iter()
                .flatten()
                .map(|batch| execute_batch(shared.clone(), current.clone(), batch));
            futures_util::future::join_all(sends).await;
        }
    }
}
