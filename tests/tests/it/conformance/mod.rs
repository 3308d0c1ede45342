//! The cross-store conformance suite: the same scenarios, with the same
//! assertions, run through the `Backend` trait against the embedded
//! in-memory store (the simulator's model), a real ZooKeeper and a real
//! etcd. This is how we know the model is faithful and the backends agree.
//!
//! The servers' addresses come from `TENURE_ZOOKEEPER` and `TENURE_ETCD`,
//! set by `eval "$(scripts/services start)"` (`scripts/test` does it); a
//! missing or silent server fails the test.
//!
//! Where the stores differ, the scenarios branch on `stores::Quirks`, which
//! lists every difference found (and the most requests a step's batches
//! may take on each):
//! - ZooKeeper and etcd report an unreadable member registration as
//!   `Event::StoreProblem`; the in-memory adapter only leaves it out;
//! - `WatchOwner` on an absent record leaves a watch on ZooKeeper and in the
//!   model (fired as `OwnerDeleted` when the record is created), none on
//!   etcd;
//! - after an expiry the in-memory backend sends `SessionExpired` but opens
//!   no new session, and drops (does not answer) commands of the reaped
//!   session: both contrary to the `Backend` contract;
//! - fencing tokens and session ids are each store's own numbers (czxid,
//!   create_revision, the model's zxid): only their order and equality are
//!   compared;
//! - a claim that asks for the committed offset reads it on etcd (in its
//!   transaction), and in the model when claims go together; ZooKeeper's
//!   claims, and the model's alone, leave the read to the member;
//! - etcd claims in one transaction, so the NodeExists → NoNode race of a
//!   claim (ZooKeeper, the model) cannot happen there; it is not a
//!   scenario here (the ZooKeeper backend's own tests reproduce it).

mod harness;
mod scenarios;
mod stores;

use tenure_testkit::driver;
use tenure_testkit::etcd_server;
use tenure_testkit::proxy;
use tenure_testkit::zookeeper_server;

/// One test per scenario and store: `$scenario` run on a fresh store of
/// each kind.
macro_rules! conformance {
    ($scenario:ident: $memory:ident, $zookeeper:ident, $etcd:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $memory() {
            let _turn = crate::turns::shared().await;
            let store = stores::Memory::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $zookeeper() {
            let _turn = crate::turns::shared().await;
            let store = stores::ZooKeeper::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $etcd() {
            let _turn = crate::turns::shared().await;
            let store = stores::Etcd::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }
    };
}

conformance!(registration: registration_on_memory, registration_on_zookeeper, registration_on_etcd);
conformance!(claim_race: claim_race_on_memory, claim_race_on_zookeeper, claim_race_on_etcd);
conformance!(fenced_commits: fenced_commits_on_memory, fenced_commits_on_zookeeper, fenced_commits_on_etcd);
conformance!(progress_records: progress_records_on_memory, progress_records_on_zookeeper, progress_records_on_etcd);
conformance!(expiry: expiry_on_memory, expiry_on_zookeeper, expiry_on_etcd);
conformance!(watches: watches_on_memory, watches_on_zookeeper, watches_on_etcd);
conformance!(corrupt_data: corrupt_data_on_memory, corrupt_data_on_zookeeper, corrupt_data_on_etcd);
conformance!(stale_session: stale_session_on_memory, stale_session_on_zookeeper, stale_session_on_etcd);
conformance!(member_list: member_list_on_memory, member_list_on_zookeeper, member_list_on_etcd);

/// `$scenario` on each store on a current-thread runtime: the member's
/// step and the task that sends what it gathered take turns on one
/// thread, as the batches' request counts assume (on several threads that
/// task may start on another before the step has submitted everything,
/// and send the step in more requests).
macro_rules! conformance_on_one_thread {
    ($scenario:ident: $memory:ident, $zookeeper:ident, $etcd:ident) => {
        #[tokio::test]
        async fn $memory() {
            let _turn = crate::turns::shared().await;
            let store = stores::Memory::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }

        #[tokio::test]
        async fn $zookeeper() {
            let _turn = crate::turns::shared().await;
            let store = stores::ZooKeeper::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }

        #[tokio::test]
        async fn $etcd() {
            let _turn = crate::turns::shared().await;
            let store = stores::Etcd::new(stringify!($scenario)).await;
            scenarios::$scenario(&store).await;
        }
    };
}

conformance_on_one_thread!(batches: batches_on_memory, batches_on_zookeeper, batches_on_etcd);
conformance!(lost_batch: lost_batch_on_memory, lost_batch_on_zookeeper, lost_batch_on_etcd);
conformance_on_one_thread!(final_commits: final_commits_on_memory, final_commits_on_zookeeper, final_commits_on_etcd);
conformance_on_one_thread!(claims_read_offsets: claims_read_offsets_on_memory, claims_read_offsets_on_zookeeper, claims_read_offsets_on_etcd);
