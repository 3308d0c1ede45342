//! The conformance suite's member: the shared backend driver
//! (`testkit/driver.rs`) over any store's boxed backend, with results
//! unpacked into the store's own answer types, negative checks, and a way
//! to end the member's session on the server.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use tenure::core::{
    ClaimOutcome, Committed, Event, FencingToken, Offset, Progress, RegisterOutcome, StoreError,
};
use tenure::tokio::Backend;

use super::driver;
pub use super::driver::{partition, GROUP};
use super::stores::EndSession;

/// How long a negative check waits for an event that must not come. Only
/// used where nothing but time can show an absence (a watch that must not
/// fire, a notification that must not repeat).
pub const QUIET: Duration = Duration::from_millis(300);

/// The answer carried by a result event of kind `$variant`; any other
/// event fails the test.
macro_rules! answer {
    ($driver:expr, $command:literal, $event:expr, $variant:ident) => {
        match $event {
            Event::$variant { result, .. } => result,
            other => panic!("{}: {} answered {other:?}", $driver.store, $command),
        }
    };
}

/// A started member of one store.
pub struct Driver {
    driver: driver::Driver<Box<dyn Backend>>,
    /// What ends this member's session on the server, for members started
    /// as mortal.
    pub ender: Option<Box<dyn EndSession>>,
}

// Scenarios reach the shared driver's fields and methods (`session`,
// `backend`, `submit`, `wait_for`, ...) through the member itself; the
// methods below take precedence where they answer in the store's types.
impl Deref for Driver {
    type Target = driver::Driver<Box<dyn Backend>>;

    fn deref(&self) -> &Self::Target {
        &self.driver
    }
}

impl DerefMut for Driver {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.driver
    }
}

impl Driver {
    /// Starts `backend` for `member` of [`GROUP`], with sessions of
    /// `session_timeout`, and waits for its first session.
    pub async fn start(
        store: &'static str,
        backend: Box<dyn Backend>,
        member: &str,
        session_timeout: Duration,
    ) -> Driver {
        let info = driver::info(member);
        Driver {
            driver: driver::Driver::start(store, backend, info, session_timeout).await,
            ender: None,
        }
    }

    /// Asserts that no event `pick` accepts arrives within [`QUIET`].
    pub async fn assert_quiet(&mut self, what: &str, mut pick: impl FnMut(&Event) -> bool) {
        if let Some(event) = self
            .wait_within(QUIET, |e| pick(e).then(|| e.clone()))
            .await
        {
            panic!("{}: unexpected {what}: {event:?}", self.store);
        }
    }

    /// Ends this member's session on the server, as if the member had
    /// gone silent (see [`EndSession`]).
    pub async fn end_session(&mut self) {
        let session = self.session;
        self.ender
            .as_mut()
            .expect("a member started as mortal")
            .end(session)
            .await;
    }

    /// Lets a member whose session was ended reach the store again.
    pub async fn restore(&mut self) {
        self.ender
            .as_mut()
            .expect("a member started as mortal")
            .restore()
            .await;
    }

    pub async fn register(&mut self) -> Result<RegisterOutcome, StoreError> {
        let event = self.driver.register().await;
        answer!(self, "Register", event, RegisterResult)
    }

    pub async fn deregister(&mut self) -> Result<(), StoreError> {
        let event = self.driver.deregister().await;
        answer!(self, "Deregister", event, DeregisterResult)
    }

    pub async fn claim(&mut self, p: u32) -> Result<ClaimOutcome, StoreError> {
        let event = self.driver.claim(p).await;
        answer!(self, "Claim", event, ClaimResult)
    }

    /// Claims `p`, reading its committed offset with the claim.
    pub async fn claim_reading(&mut self, p: u32) -> Result<ClaimOutcome, StoreError> {
        let event = self.driver.claim_reading(p, true).await;
        answer!(self, "Claim", event, ClaimResult)
    }

    /// Claims `p`, which must be free; returns the new claim's token.
    pub async fn claim_created(&mut self, p: u32) -> FencingToken {
        match self.claim(p).await {
            Ok(ClaimOutcome::Created { token, .. }) => token,
            other => panic!(
                "{}: a claim of a free partition answered {other:?}",
                self.store
            ),
        }
    }

    pub async fn watch_owner(&mut self, p: u32) -> Result<bool, StoreError> {
        let event = self.driver.watch_owner(p).await;
        answer!(self, "WatchOwner", event, OwnerWatchResult)
    }

    pub async fn release(&mut self, p: u32, token: Option<FencingToken>) -> Result<(), StoreError> {
        let event = self.driver.release(p, token).await;
        answer!(self, "Release", event, ReleaseResult)
    }

    /// Releases `p` under `token`, carrying the final commit `offset` and
    /// `progress` beside it.
    pub async fn release_progressing(
        &mut self,
        p: u32,
        token: FencingToken,
        offset: Offset,
        progress: Progress,
    ) -> Result<(), StoreError> {
        let event = self
            .driver
            .release_progressing(p, Some(token), Some(offset), progress)
            .await;
        answer!(self, "Release", event, ReleaseResult)
    }

    /// Releases `p` under `token`, carrying the final commit `offset`.
    pub async fn release_committing(
        &mut self,
        p: u32,
        token: FencingToken,
        offset: Offset,
    ) -> Result<(), StoreError> {
        let event = self
            .driver
            .release_committing(p, Some(token), Some(offset))
            .await;
        answer!(self, "Release", event, ReleaseResult)
    }

    pub async fn commit(
        &mut self,
        p: u32,
        offset: Offset,
        token: FencingToken,
    ) -> Result<(), StoreError> {
        let event = self.driver.commit(p, offset, token).await;
        answer!(self, "CommitOffset", event, CommitResult)
    }

    /// The committed offset of `p` (its progress left out).
    pub async fn read_offset(&mut self, p: u32) -> Result<Option<Offset>, StoreError> {
        let committed = self.read_committed(p).await;
        committed.map(|c| c.map(|c| c.offset))
    }

    /// The committed offset of `p` and the progress read with it.
    pub async fn read_committed(&mut self, p: u32) -> Result<Option<Committed>, StoreError> {
        let event = self.driver.read_offset(p).await;
        answer!(self, "ReadOffset", event, OffsetResult)
    }

    /// Commits `offset` of `p` under `token` with `progress` beside it.
    pub async fn commit_progress(
        &mut self,
        p: u32,
        offset: Offset,
        token: FencingToken,
        progress: Progress,
    ) -> Result<(), StoreError> {
        let event = self
            .driver
            .commit_progress(p, offset, token, progress)
            .await;
        answer!(self, "CommitOffset", event, CommitResult)
    }

    pub async fn heartbeat(&mut self) -> Result<(), StoreError> {
        let event = self.driver.heartbeat().await;
        answer!(self, "Heartbeat", event, HeartbeatResult)
    }

    /// Waits for the `OwnerDeleted` of `p`.
    pub async fn owner_deleted(&mut self, p: u32) {
        let wanted = partition(p);
        self.wait_for(&format!("OwnerDeleted of {wanted}"), |e| {
            matches!(e, Event::OwnerDeleted { partition } if *partition == wanted).then_some(())
        })
        .await
    }

    /// Waits for a `MembersChanged`.
    pub async fn members_changed(&mut self) {
        self.wait_for("MembersChanged", |e| {
            matches!(e, Event::MembersChanged).then_some(())
        })
        .await
    }

    pub async fn shutdown(mut self) {
        self.backend.shutdown().await;
        if let Some(mut ender) = self.ender.take() {
            ender.restore().await;
        }
    }
}
