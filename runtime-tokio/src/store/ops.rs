//! What a store does under one session: the core's store commands, each
//! as one method, and the batches of them a store can send together.

use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use tenure_core::{
    ClaimOutcome, Committed, FencingToken, MemberInfo, Operation, RegisterOutcome, StoreError,
    TopicPartition,
};

#[cfg(doc)]
use super::{Wire, OPS_PER_BATCH};

/// The member list a read found: the members, and what the read found
/// wrong on the way (a registration that does not decode), for the member
/// to hear of beside the list.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct MemberList {
    /// Every registered member whose registration decoded.
    pub members: Vec<MemberInfo>,
    /// Problems the read found, each with the operation it was part of.
    pub problems: Vec<(Operation, StoreError)>,
}

impl MemberList {
    /// A list of `members` with no problem found.
    pub fn new(members: Vec<MemberInfo>) -> MemberList {
        MemberList {
            members,
            problems: Vec::new(),
        }
    }
}

/// The same failure for each of `count` requests sent together: what a
/// batch whose request failed as a whole answers for each of its requests.
pub fn each_failed<T>(count: usize, error: StoreError) -> Vec<Result<T, StoreError>> {
    (0..count).map(|_| Err(error.clone())).collect()
}

/// A watch left behind by a request: resolves to `true` when what it
/// watches changed, `false` when it ended without a change (the session
/// ended, say). It must not keep the session open.
pub type Watch = Pin<Box<dyn Future<Output = bool> + Send + 'static>>;

/// The core's store commands, carried out by one store under one session:
/// each method is one command's work, with the semantics of the reference
/// adapter (`tenure_core::model::adapter`). The session loop turns a
/// command into a call of one of these and its result into the member's
/// event; each request a method sends takes its turn on the [`Wire`] the
/// store's client was given with the session
/// ([`StoreClient::ops`](super::StoreClient::ops)).
#[async_trait]
pub trait StoreOps: Send + Sync + Sized + 'static {
    /// Creates the member's registration under this session, or says
    /// whose session holds it.
    async fn register(&self, member: &MemberInfo) -> Result<RegisterOutcome, StoreError>;

    /// Deletes this member's registration if this session holds it.
    async fn deregister(&self) -> Result<(), StoreError>;

    /// Confirms the session is alive on the server.
    async fn heartbeat(&self) -> Result<(), StoreError>;

    /// Reads the registered members and watches their list.
    async fn watch_members(&self) -> Result<(MemberList, Watch), StoreError>;

    /// Creates the owner record of `partition`, or reads the one there is;
    /// with `read_offset`, a claim that creates it also reads the committed
    /// offset from a state that has it (`ClaimOutcome::Created`'s
    /// `committed`), in the same request or one sent right behind it.
    async fn claim(
        &self,
        partition: &TopicPartition,
        read_offset: bool,
    ) -> Result<ClaimOutcome, StoreError>;

    /// Claims every one of `partitions` (at most [`OPS_PER_BATCH`]),
    /// each with its own outcome, in their order, as [`StoreOps::claim`]
    /// would: a store that can do many writes in one request does them
    /// together, and falls back to one claim per partition where the batch
    /// fails as a whole (one partition held must not fail the others). By
    /// default, [`StoreOps::claim_each`].
    async fn claim_many(
        &self,
        partitions: &[TopicPartition],
        read_offset: bool,
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        self.claim_each(partitions, read_offset).await
    }

    /// Claims each of `partitions` on its own, all at once: what a batch
    /// falls back to.
    async fn claim_each(
        &self,
        partitions: &[TopicPartition],
        read_offset: bool,
    ) -> Vec<Result<ClaimOutcome, StoreError>> {
        let each = partitions.iter().map(|p| self.claim(p, read_offset));
        futures_util::future::join_all(each).await
    }

    /// Reads the committed offsets of every one of `partitions` (at most
    /// [`OPS_PER_BATCH`]), each with its own outcome, in their order, as
    /// [`StoreOps::read_offset`] would: in one request where the store can.
    /// By default, [`StoreOps::read_offset_each`].
    async fn read_offset_many(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Committed>, StoreError>> {
        self.read_offset_each(partitions).await
    }

    /// Reads the offset of each of `partitions` on its own, all at once.
    async fn read_offset_each(
        &self,
        partitions: &[TopicPartition],
    ) -> Vec<Result<Option<Committed>, StoreError>> {
        futures_util::future::join_all(partitions.iter().map(|p| self.read_offset(p))).await
    }

    /// Writes each of `commits` (partition, offset, claim token; at most
    /// [`OPS_PER_BATCH`]) as [`StoreOps::commit`] would, each with its own
    /// outcome, in their order: in one request where the store can, and
    /// one commit per partition where the batch fails as a whole (one
    /// partition no longer ours must not fail the others). By default,
    /// [`StoreOps::commit_each`].
    async fn commit_many(
        &self,
        commits: &[(TopicPartition, Committed, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        self.commit_each(commits).await
    }

    /// Commits each of `commits` on its own, all at once.
    async fn commit_each(
        &self,
        commits: &[(TopicPartition, Committed, FencingToken)],
    ) -> Vec<Result<(), StoreError>> {
        let each = commits.iter().map(|(p, c, t)| self.commit(p, c, *t));
        futures_util::future::join_all(each).await
    }

    /// Releases each of `releases` (partition, claim token if known, final
    /// commit if any; at most [`OPS_PER_BATCH`]) as [`StoreOps::release`]
    /// would, each with its own outcome, in their order: in one request
    /// where the store can, and one release per partition where the batch
    /// fails as a whole. By default, [`StoreOps::release_each`].
    async fn release_many(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>, Option<Committed>)],
    ) -> Vec<Result<(), StoreError>> {
        self.release_each(releases).await
    }

    /// Releases each of `releases` on its own, all at once.
    async fn release_each(
        &self,
        releases: &[(TopicPartition, Option<FencingToken>, Option<Committed>)],
    ) -> Vec<Result<(), StoreError>> {
        let each = releases
            .iter()
            .map(|(p, t, c)| self.release(p, *t, c.as_ref()));
        futures_util::future::join_all(each).await
    }

    /// Whether the owner record of `partition` exists, and a watch on it:
    /// a store may leave none when the record is absent, or one that fires
    /// when it is created.
    async fn watch_owner(
        &self,
        partition: &TopicPartition,
    ) -> Result<(bool, Option<Watch>), StoreError>;

    /// Deletes the owner record of `partition` if it is this session's
    /// claim (with `token`, when given): `Ok` too when it is gone or not
    /// ours. With `commit`, writes it as [`StoreOps::commit`] does, in the
    /// same atomic step, under the same condition, and says why nothing was
    /// written: [`StoreError::NoNode`] (the record is gone) or
    /// [`StoreError::NotOwner`] (it is another claim's).
    async fn release(
        &self,
        partition: &TopicPartition,
        token: Option<FencingToken>,
        commit: Option<&Committed>,
    ) -> Result<(), StoreError>;

    /// Reads the committed offset of `partition` and, from the same
    /// state, its progress record: the record's progress when it was
    /// written beside this offset ([`tenure_core::Progress::decode`]),
    /// else none.
    async fn read_offset(
        &self,
        partition: &TopicPartition,
    ) -> Result<Option<Committed>, StoreError>;

    /// Writes `commit`'s offset as the committed offset of `partition`,
    /// and in the same atomic write its progress record
    /// ([`tenure_core::Progress::encode`]; deleted when the progress is
    /// empty), only while its owner record is the claim `token` of this
    /// session.
    async fn commit(
        &self,
        partition: &TopicPartition,
        commit: &Committed,
        token: FencingToken,
    ) -> Result<(), StoreError>;
}
