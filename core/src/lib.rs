//! tenure-core: the synchronous, sans-IO state machine of one member of a
//! tenure consumer group.
//!
//! The member speaks to each party around it in that party's own words:
//!
//! | party | to the member | from the member |
//! |---|---|---|
//! | the store (a backend) | [`Member::handle_event`] with an [`Event`]: a request's result, a watch notification, a session change | [`Member::poll_store_request`]: a [`StoreRequest`] for the store |
//! | the fetcher | — | [`Member::poll_fetch`]: [`FetchCommand::Start`], [`FetchCommand::Stop`] (the partition leaves: drain), [`FetchCommand::Suspend`] and [`FetchCommand::Resume`] (the session may be lapsing: hold, then go on where it stood) |
//! | the application | [`Member::processed`], [`Member::drained`], [`Member::set_partition_counts`], [`Member::shutdown`] | [`Member::poll_app_event`]: an [`AppEvent`] (claimed, committed, released or lost, problems) |
//! | the clock | [`Member::handle_timeout`] | [`Member::poll_timeout`] |
//! | tools, dashboards | — | [`Member::stats`]: counts of claims, releases, losses, commits, requests |
//!
//! The core has no I/O, no clocks, no threads and no async runtime.
//! Randomness (retry jitter) comes only from the seed given to
//! [`Member::new`], so a run replays exactly from its inputs.
//!
//! # The contract
//!
//! - Time only moves forward: every call takes `now`, and an earlier `now`
//!   than one seen before counts as the later one.
//! - After every call into the member, take everything it has queued:
//!   first [`Member::poll_fetch`], then [`Member::poll_store_request`], then
//!   [`Member::poll_app_event`]. A stop must reach the fetcher before the
//!   release that follows it reaches the store; queues not taken grow.
//! - Answer every store request with its result event, even a failure: a
//!   backend that cannot carry it out answers [`StoreRequest::failed`]. A
//!   request issued under a session that has ended must fail with
//!   [`StoreError::SessionExpired`], never run under the next session.
//! - Call [`Member::handle_timeout`] once the moment from
//!   [`Member::poll_timeout`] has come.
//!
//! # The drive loop
//!
//! One member on the in-memory [`model`] store, driven by hand; a real
//! runtime does the same with a backend, a Kafka fetcher and a timer.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use tenure_core::model::adapter::{self, Execution};
//! use tenure_core::model::store::Store;
//! use tenure_core::records::Layout;
//! use tenure_core::{AppEvent, Config, Event, FetchCommand, Member};
//!
//! let start = Instant::now();
//! let (mut store, layout) = (Store::new(), Layout::new("", "orders"));
//! let config = Config::new("orders", "worker-1", ["payments"])?;
//! let session = store.open_session(start, config.session_timeout);
//! let mut member = Member::new(config, 7, start)?;
//! member.set_partition_counts(start, [("payments".to_owned(), 4)].into());
//!
//! let (mut now, mut inbox, mut claimed) = (start, vec![Event::SessionEstablished { session }], 0);
//! while now < start + Duration::from_secs(1) {
//!     for event in inbox.drain(..) {
//!         member.handle_event(now, event);
//!     }
//!     if member.poll_timeout().is_some_and(|at| at <= now) {
//!         member.handle_timeout(now);
//!     }
//!     // 1. The fetcher. This application holds nothing, so a stop drains at once.
//!     while let Some(fetch) = member.poll_fetch() {
//!         if let FetchCommand::Stop { partition, token } = fetch {
//!             member.drained(now, &partition, token);
//!         }
//!     }
//!     // 2. The store: every command answered, watches delivered.
//!     let mut fired = Vec::new();
//!     while let Some(command) = member.poll_store_request() {
//!         let info = member.info().clone();
//!         inbox.push(match adapter::execute(&mut store, &layout, session, &info, command, 0, &mut fired) {
//!             Execution::Done(reply) => reply,
//!             Execution::ReadOwner { id, partition } => adapter::claim_read_owner(&store, &layout, id, &partition),
//!         });
//!     }
//!     inbox.extend(fired.iter().filter_map(|watch| adapter::watch_event(&layout, watch)));
//!     // 3. The application.
//!     while let Some(event) = member.poll_app_event() {
//!         if let AppEvent::Claimed { .. } = event {
//!             claimed += 1;
//!         }
//!     }
//!     store.touch(session, now)?;
//!     now += Duration::from_millis(10);
//! }
//! assert_eq!((member.fetching().count(), claimed), (4, 4));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules, one job each:
//! - [`types`], [`config`], [`error`]: the nouns, the settings, the errors;
//! - [`assignment`]: which member should own which partition;
//! - [`protocol`]: the member state machine (claims, releases, offsets,
//!   sessions);
//! - [`records`]: the records a group keeps in its store (paths, the
//!   registration JSON, the offset codec), shared by every backend;
//! - [`model`]: an in-memory store with ZooKeeper's semantics and the
//!   adapter that carries commands to it (the runtime's embedded store);
//! - `sim` (feature `sim`): a deterministic simulator of whole groups on
//!   that model, with faults.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod assignment;
mod backoff;
pub mod config;
pub mod error;
pub mod model;
pub mod protocol;
pub mod records;
mod rng;
#[cfg(feature = "sim")]
pub mod sim;
pub mod subscription;
pub mod types;

pub use config::{Config, InitialOffset};
pub use error::{ClientError, ConfigError, Error, NameError, Operation, StoreError};
pub use protocol::{
    AppEvent, ClaimOutcome, Event, FetchCommand, FetchFrom, Member, MemberStats, RegisterOutcome,
    StoreOp, StoreRequest,
};
pub use subscription::{Subscription, TopicPattern};
pub use types::{FencingToken, MemberId, MemberInfo, Offset, RequestId, SessionId, TopicPartition};
