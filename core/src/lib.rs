//! tenure-core: the synchronous, sans-IO state machine of one member of a
//! tenure consumer group.
//!
//! The member speaks to each party around it in that party's own words, and
//! everything it says leaves through one ordered queue,
//! [`Member::poll_output`]:
//!
//! | party | to the member | from the member ([`Output`]) |
//! |---|---|---|
//! | the store (a backend) | [`Member::handle_event`] with an [`Event`]: a request's result, a watch notification, a session change | [`Output::Store`]: a [`StoreRequest`] for the store |
//! | the fetcher | — | [`Output::Fetch`]: [`FetchCommand::Start`], [`FetchCommand::Stop`] (the partition leaves: drain), [`FetchCommand::Suspend`] and [`FetchCommand::Resume`] (the session may be lapsing: hold, then go on where it stood) |
//! | the application | [`Member::processed`], [`Member::drained`], [`Member::set_partition_counts`], [`Member::shutdown`] | [`Output::App`]: an [`AppEvent`] (claimed, committed, released or lost, problems) |
//! | the clock | [`Member::handle_timeout`] | [`Output::Timeout`], once nothing else is queued ([`Member::poll_timeout`] reads it without taking anything) |
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
//! - After every call into the member, take [`Member::poll_output`] until
//!   it says [`Output::Timeout`], and carry each output out in the order it
//!   came: a partition's stop comes before the release that follows it, so
//!   the fetcher hears of it before the store does. Outputs not taken pile
//!   up.
//! - Answer every store request with its result event, even a failure: a
//!   backend that cannot carry it out answers [`StoreRequest::failed`]. A
//!   request issued under a session that has ended must fail with
//!   [`StoreError::SessionExpired`], never run under the next session.
//! - Say when the store's leader renewed the session
//!   ([`Event::SessionRenewed`]: the session opened, a write or a sync
//!   answered, a keep-alive answered), and how late the leader may count
//!   it. The member hands out messages only on the strength of these: an
//!   answer alone renews nothing, since a follower answers reads its leader
//!   never hears of.
//! - Call [`Member::handle_timeout`] once the moment of [`Output::Timeout`]
//!   has come.
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
//! use tenure_core::{AppEvent, Config, Event, FetchCommand, Member, Output};
//!
//! let start = Instant::now();
//! let (mut store, layout) = (Store::new(), Layout::new("", "orders"));
//! let config = Config::new("orders", "worker-1", ["payments"])?;
//! let session = store.open_session(start, config.session_timeout());
//! let mut member = Member::new(config, 7, start)?;
//! member.set_partition_counts(start, [("payments".to_owned(), 4)].into());
//!
//! // The session opened at `start`: the store counted it then.
//! let opened = Event::SessionRenewed { sent: start, counted_after: Duration::ZERO };
//! let (mut now, mut inbox, mut claimed) = (start, vec![Event::SessionEstablished { session }, opened], 0);
//! while now < start + Duration::from_secs(1) {
//!     for event in inbox.drain(..) {
//!         member.handle_event(now, event);
//!     }
//!     // Every output, in the order the member decided it.
//!     let mut fired = Vec::new();
//!     loop {
//!         match member.poll_output() {
//!             // The fetcher. This application holds nothing, so a stop drains at once.
//!             Output::Fetch(FetchCommand::Stop { partition, token }) => member.drained(now, &partition, token),
//!             Output::Fetch(_) => {}
//!             // The store: every request answered, watches delivered.
//!             Output::Store(request) => {
//!                 let info = member.info().clone();
//!                 let reply = match adapter::execute(&mut store, &layout, session, &info, request, 0, &mut fired) {
//!                     Execution::Done(reply) => reply,
//!                     Execution::ReadOwner { id, partition } => adapter::claim_read_owner(&store, &layout, id, &partition),
//!                 };
//!                 // The lease counts only from what the store vouches for.
//!                 inbox.extend(adapter::renewal(now, &reply));
//!                 inbox.push(reply);
//!             }
//!             // The application.
//!             Output::App(AppEvent::Claimed { .. }) => claimed += 1,
//!             Output::App(_) => {}
//!             // The clock: a timer that is due fires, and its outputs follow.
//!             Output::Timeout(Some(at)) if at <= now => member.handle_timeout(now),
//!             Output::Timeout(_) => break,
//!             _ => {}
//!         }
//!     }
//!     inbox.extend(fired.iter().filter_map(|watch| adapter::watch_event(&layout, watch)));
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
//! - [`rng`]: the seeded generator behind every random choice;
//! - `canon` (feature `sim`, hidden): the canonical fingerprints the
//!   explorer of `tenure-sim` keeps its visited states by.

#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod assignment;
mod backoff;
#[cfg(feature = "sim")]
#[doc(hidden)]
pub mod canon;
pub mod config;
pub mod credentials;
pub mod error;
pub mod model;
pub mod progress;
pub mod protocol;
pub mod records;
pub mod rng;
pub mod subscription;
pub mod types;

pub use config::{Config, InitialOffset};
pub use error::{ClientError, ConfigError, Error, NameError, Operation, StoreError};
pub use progress::{Committed, Progress};
pub use protocol::{
    AppEvent, ClaimOutcome, Event, FetchCommand, FetchFrom, Member, MemberStats, Output,
    RegisterOutcome, StoreOp, StoreRequest,
};
pub use subscription::{MemberInfo, Subscription, TopicPattern};
pub use types::{FencingToken, MemberId, Offset, RequestId, SessionId, TopicPartition};
