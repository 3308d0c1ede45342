//! The guide: the chapters under `docs/` in the repository, one module
//! each, in reading order. Their examples are compiled and run as this
//! crate's doc-tests, like the README's.
//!
//! 1. [`consumers`]: a member and its streams, offsets and commits, topic
//!    patterns, codecs and transactional topics, the configuration.
//! 2. [`parallel`]: more than one message of a partition in flight, by
//!    key or in any order.
//! 3. [`static_membership`]: deploys without rebalances.
//! 4. [`exactly_once`]: output and offsets in one transaction, fenced by
//!    the claim's token.
//! 5. [`stores`]: ZooKeeper, etcd and the embedded store, and secured
//!    stores and brokers.
//! 6. [`observability`]: tracing and metrics.
//! 7. [`command`]: the `tenure` command, for operators.
//! 8. [`operating`]: groups judged from outside, served as metrics, JSON
//!    and a live page.
//! 9. [`migrating`]: from wvanbergen/kafka and Kafka 0.8's consumer, and how
//!    tenure compares.
//! 10. [`examples`]: the examples, the real servers and the simulator.
//! 11. [`driving_the_core`]: the state machine without tokio.
//! 12. [`architecture`]: the crates and how a member runs.
//! 13. [`benchmarks`]: every figure, and how to measure it again.

// The chapters link to each other by file name, as a reader of the
// repository follows them (`[Stores and security][stores.md]`, with
// `[stores.md]: stores.md` at the chapter's end). These definitions come
// first in each module's documentation, and the first definition of a
// label wins, so here the same links lead to the chapters' modules.
macro_rules! chapter_links {
    () => {
        "[consumers.md]: crate::guide::consumers\n\
         [parallel.md]: crate::guide::parallel\n\
         [static-membership.md]: crate::guide::static_membership\n\
         [exactly-once.md]: crate::guide::exactly_once\n\
         [stores.md]: crate::guide::stores\n\
         [observability.md]: crate::guide::observability\n\
         [command.md]: crate::guide::command\n\
         [operating.md]: crate::guide::operating\n\
         [migrating.md]: crate::guide::migrating\n\
         [examples.md]: crate::guide::examples\n\
         [driving-the-core.md]: crate::guide::driving_the_core\n\
         [architecture.md]: crate::guide::architecture\n\
         [benchmarks.md]: crate::guide::benchmarks\n"
    };
}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/consumers.md")]
pub mod consumers {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/parallel.md")]
pub mod parallel {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/static-membership.md")]
pub mod static_membership {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/exactly-once.md")]
pub mod exactly_once {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/stores.md")]
pub mod stores {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/observability.md")]
pub mod observability {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/command.md")]
pub mod command {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/operating.md")]
pub mod operating {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/migrating.md")]
pub mod migrating {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/examples.md")]
pub mod examples {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/driving-the-core.md")]
pub mod driving_the_core {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/architecture.md")]
pub mod architecture {}

#[doc = chapter_links!()]
#[doc = include_str!("../docs/benchmarks.md")]
pub mod benchmarks {}

// The README, the repository's front page: not shown here (the crate's own
// documentation is the front page of these docs), but its examples are
// compiled and run as doc-tests all the same.
#[doc = include_str!("../README.md")]
#[doc(hidden)]
pub mod readme {}
