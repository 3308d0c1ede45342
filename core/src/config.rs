//! Member configuration: validated values with documented defaults.

use std::sync::Arc;
use std::time::Duration;

use crate::assignment::{AssignmentStrategy, Sticky};
use crate::error::ConfigError;
use crate::subscription::Subscription;
use crate::types::{validate_path_element, validate_topic, MemberId};

/// Where a member starts consuming a partition that has no committed offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InitialOffset {
    /// The oldest message the broker still has: nothing is skipped.
    #[default]
    Oldest,
    /// The next message produced after the fetch starts.
    Newest,
}

/// The configuration of one member of one group.
///
/// Build it with [`Config::new`], change the public fields, and hand it to
/// [`crate::Member::new`], which validates it.
#[derive(Clone, Debug)]
pub struct Config {
    /// The group's name: one path element in the store.
    pub group: String,
    /// This member's id, unique within the group.
    pub member: MemberId,
    /// The topics this member consumes: named, or a pattern over the
    /// cluster's topics.
    pub subscription: Subscription,
    /// How partitions are shared out; every member of a group must use the
    /// same. Default: [`Sticky`].
    pub strategy: Arc<dyn AssignmentStrategy>,
    /// The store session's timeout (ZooKeeper session timeout, etcd lease
    /// TTL). Default: 10 s.
    pub session_timeout: Duration,
    /// How long a released partition may take to drain before its final
    /// offset is committed and its claim deleted anyway. Default: 60 s.
    pub processing_timeout: Duration,
    /// How often processed offsets are committed. Default: 5 s.
    pub commit_interval: Duration,
    /// The first delay before retrying a failed store request. Default: 20 ms.
    pub backoff_min: Duration,
    /// The longest delay between retries. Default: 2 s.
    pub backoff_max: Duration,
    /// How long a claim may wait before it is reported on the error output
    /// (once; the claim goes on). Default: processing timeout + session
    /// timeout, the longest a healthy handoff can take.
    pub claim_stall_threshold: Duration,
    /// How long before the session could expire on the server a member that
    /// lost contact stops consuming; it covers clock drift and delays, so it
    /// must be more than zero. Default: a fifth of the session timeout.
    pub suspension_margin: Duration,
    /// Where to start a partition with no committed offset. Default: oldest.
    pub initial_offset: InitialOffset,
    /// Whether the member reads and commits offsets in the coordination
    /// store. Default: yes. Without, the application keeps them itself
    /// (beside its output, fenced by the claim's token): no offset is read
    /// when a claim takes effect (the fetch starts where the application
    /// says, else by [`Config::initial_offset`]), and none is ever written.
    pub store_offsets: bool,
}

impl Config {
    /// A configuration with the defaults for member `member` of `group`,
    /// consuming `topics`. Names are checked here; durations in
    /// [`Config::validate`].
    pub fn new<T: AsRef<str>>(
        group: &str,
        member: &str,
        topics: impl IntoIterator<Item = T>,
    ) -> Result<Config, ConfigError> {
        Config::subscribing(group, member, Subscription::topics(topics)?)
    }

    /// A configuration with the defaults for member `member` of `group`,
    /// consuming what `subscription` takes, such as
    /// `Subscription::matching("orders-.*")?`.
    pub fn subscribing(
        group: &str,
        member: &str,
        subscription: Subscription,
    ) -> Result<Config, ConfigError> {
        validate_path_element("group", group)?;
        let member = MemberId::new(member)?;
        let session_timeout = Duration::from_secs(10);
        let processing_timeout = Duration::from_secs(60);
        Ok(Config {
            group: group.to_owned(),
            member,
            subscription,
            strategy: Arc::new(Sticky),
            session_timeout,
            processing_timeout,
            commit_interval: Duration::from_secs(5),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
            claim_stall_threshold: processing_timeout + session_timeout,
            suspension_margin: session_timeout / 5,
            initial_offset: InitialOffset::Oldest,
            store_offsets: true,
        })
    }

    /// Sets the session timeout, and with it the defaults derived from it
    /// (suspension margin, claim-stall threshold).
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self.suspension_margin = timeout / 5;
        self.claim_stall_threshold = self.processing_timeout + timeout;
        self
    }

    /// Sets the processing timeout, and with it the default claim-stall
    /// threshold.
    pub fn with_processing_timeout(mut self, timeout: Duration) -> Self {
        self.processing_timeout = timeout;
        self.claim_stall_threshold = timeout + self.session_timeout;
        self
    }

    /// Checks every value, naming the first one that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate_path_element("group", &self.group)?;
        if let Some(topics) = self.subscription.named_topics() {
            if topics.is_empty() {
                return Err(ConfigError::NoTopics);
            }
            for topic in topics {
                validate_topic(topic)?;
            }
        }
        for (name, value) in [
            ("session_timeout", self.session_timeout),
            ("processing_timeout", self.processing_timeout),
            ("commit_interval", self.commit_interval),
            ("backoff_min", self.backoff_min),
            ("backoff_max", self.backoff_max),
            ("claim_stall_threshold", self.claim_stall_threshold),
            ("suspension_margin", self.suspension_margin),
        ] {
            if value.is_zero() {
                return Err(ConfigError::Zero { name });
            }
        }
        if self.backoff_min > self.backoff_max {
            return Err(ConfigError::NotBelow {
                name: "backoff_min",
                value: self.backoff_min,
                bound_name: "backoff_max",
                bound: self.backoff_max,
            });
        }
        // The margin is subtracted from the session timeout; a margin as long
        // as the timeout would leave no time to consume after a hiccup.
        if self.suspension_margin >= self.session_timeout {
            return Err(ConfigError::NotBelow {
                name: "suspension_margin",
                value: self.suspension_margin,
                bound_name: "session_timeout",
                bound: self.session_timeout,
            });
        }
        Ok(())
    }
}
