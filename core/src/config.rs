//! Member configuration: validated values with documented defaults.

use std::sync::Arc;
use std::time::Duration;

use crate::assignment::{AssignmentStrategy, Sticky};
use crate::error::ConfigError;
use crate::subscription::Subscription;
use crate::types::{validate_path_element, validate_topic, MemberId};

/// Where a member starts consuming a partition that has no committed offset
/// (Kafka's `auto.offset.reset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum InitialOffset {
    /// The oldest message the broker still has: nothing is skipped
    /// (`earliest`).
    #[default]
    Oldest,
    /// The next message produced after the fetch starts (`latest`).
    Newest,
    /// Neither (`none`): a partition with no committed offset is not
    /// fetched. The runtime reports it as a typed problem and waits for the
    /// application to say where to start (a seek, or its own start
    /// offsets); an offset out of range is reported the same way instead of
    /// being reset.
    None,
}

/// The configuration of one member of one group.
///
/// Build it with [`Config::new`] (or [`Config::subscribing`]), change what
/// needs changing with the `with_*` methods, and hand it to
/// [`crate::Member::new`], which validates it. Settings derived from others
/// (the suspension margin and the claim-stall threshold) follow the values
/// they derive from until they are set themselves, so that no order of
/// calls leaves them stale.
///
/// ```
/// use std::time::Duration;
/// use tenure_core::Config;
///
/// let config = Config::new("orders", "worker-1", ["payments"])?
///     .with_session_timeout(Duration::from_secs(30))
///     .with_commit_interval(Duration::from_secs(1));
/// assert_eq!(config.suspension_margin(), Duration::from_secs(6));
/// # Ok::<(), tenure_core::ConfigError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Config {
    group: String,
    member: MemberId,
    subscription: Subscription,
    strategy: Arc<dyn AssignmentStrategy>,
    session_timeout: Duration,
    processing_timeout: Duration,
    commit_interval: Duration,
    backoff_min: Duration,
    backoff_max: Duration,
    /// Set by the application; `None` derives it.
    claim_stall_threshold: Option<Duration>,
    /// Set by the application; `None` derives it.
    suspension_margin: Option<Duration>,
    initial_offset: InitialOffset,
    store_offsets: bool,
}

impl Config {
    /// A configuration with the defaults for member `member` of `group`,
    /// consuming `topics`. Names are checked here; durations in
    /// [`Config::validate`]. `member` may be a name or a
    /// [`MemberId`] (see [`MemberId::from_parts`]).
    pub fn new<T: AsRef<str>>(
        group: &str,
        member: impl AsRef<str>,
        topics: impl IntoIterator<Item = T>,
    ) -> Result<Config, ConfigError> {
        Config::subscribing(group, member, Subscription::topics(topics)?)
    }

    /// A configuration with the defaults for member `member` of `group`,
    /// consuming what `subscription` takes, such as
    /// `Subscription::matching("orders-.*")?`.
    pub fn subscribing(
        group: &str,
        member: impl AsRef<str>,
        subscription: Subscription,
    ) -> Result<Config, ConfigError> {
        validate_path_element("group", group)?;
        let member = MemberId::new(member.as_ref())?;
        Ok(Config {
            group: group.to_owned(),
            member,
            subscription,
            strategy: Arc::new(Sticky),
            session_timeout: Duration::from_secs(10),
            processing_timeout: Duration::from_secs(60),
            commit_interval: Duration::from_secs(5),
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_secs(2),
            claim_stall_threshold: None,
            suspension_margin: None,
            initial_offset: InitialOffset::Oldest,
            store_offsets: true,
        })
    }

    /// The group's name: one path element in the store.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// This member's id, unique within the group.
    pub fn member(&self) -> &MemberId {
        &self.member
    }

    /// The topics this member consumes: named, or a pattern over the
    /// cluster's topics.
    pub fn subscription(&self) -> &Subscription {
        &self.subscription
    }

    /// Consumes what `subscription` takes instead.
    pub fn with_subscription(mut self, subscription: Subscription) -> Self {
        self.subscription = subscription;
        self
    }

    /// How partitions are shared out.
    pub fn strategy(&self) -> &Arc<dyn AssignmentStrategy> {
        &self.strategy
    }

    /// Shares partitions out by `strategy`; every member of a group must
    /// use the same. Default: [`Sticky`].
    pub fn with_strategy(mut self, strategy: Arc<dyn AssignmentStrategy>) -> Self {
        self.strategy = strategy;
        self
    }

    /// The store session's timeout (ZooKeeper session timeout, etcd lease
    /// TTL).
    pub fn session_timeout(&self) -> Duration {
        self.session_timeout
    }

    /// Sets the store session's timeout. Default: 10 s. The suspension
    /// margin and the claim-stall threshold follow it unless set
    /// themselves.
    pub fn with_session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How long a released partition may take to drain before its final
    /// offset is committed and its claim deleted anyway.
    pub fn processing_timeout(&self) -> Duration {
        self.processing_timeout
    }

    /// Sets the processing timeout. Default: 60 s. The claim-stall
    /// threshold follows it unless set itself.
    pub fn with_processing_timeout(mut self, timeout: Duration) -> Self {
        self.processing_timeout = timeout;
        self
    }

    /// How often processed offsets are committed.
    pub fn commit_interval(&self) -> Duration {
        self.commit_interval
    }

    /// Sets how often processed offsets are committed. Default: 5 s.
    pub fn with_commit_interval(mut self, interval: Duration) -> Self {
        self.commit_interval = interval;
        self
    }

    /// The first delay before retrying a failed store request.
    pub fn backoff_min(&self) -> Duration {
        self.backoff_min
    }

    /// The longest delay between retries.
    pub fn backoff_max(&self) -> Duration {
        self.backoff_max
    }

    /// Sets the retry delays of failed store requests: the first one, and
    /// the longest. Default: 20 ms and 2 s.
    pub fn with_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.backoff_min = min;
        self.backoff_max = max;
        self
    }

    /// How long a claim may wait before it is reported on the error output
    /// (once; the claim goes on): unless set, processing timeout + session
    /// timeout, the longest a healthy handoff can take.
    pub fn claim_stall_threshold(&self) -> Duration {
        self.claim_stall_threshold
            .unwrap_or(self.processing_timeout + self.session_timeout)
    }

    /// Sets the claim-stall threshold (it no longer follows the timeouts).
    pub fn with_claim_stall_threshold(mut self, threshold: Duration) -> Self {
        self.claim_stall_threshold = Some(threshold);
        self
    }

    /// How long before the session could expire on the server a member that
    /// lost contact stops consuming: unless set, a fifth of the session
    /// timeout. It covers clock drift and delays.
    pub fn suspension_margin(&self) -> Duration {
        self.suspension_margin.unwrap_or(self.session_timeout / 5)
    }

    /// Sets the suspension margin (it no longer follows the session
    /// timeout); it must be more than zero and less than the session
    /// timeout.
    pub fn with_suspension_margin(mut self, margin: Duration) -> Self {
        self.suspension_margin = Some(margin);
        self
    }

    /// Where to start a partition with no committed offset.
    pub fn initial_offset(&self) -> InitialOffset {
        self.initial_offset
    }

    /// Sets where to start a partition with no committed offset (Kafka's
    /// `auto.offset.reset`). Default: [`InitialOffset::Oldest`].
    pub fn with_initial_offset(mut self, initial: InitialOffset) -> Self {
        self.initial_offset = initial;
        self
    }

    /// Whether the member reads and commits offsets in the coordination
    /// store.
    pub fn store_offsets(&self) -> bool {
        self.store_offsets
    }

    /// Whether the member reads and commits offsets in the coordination
    /// store. Default: yes. Without, the application keeps them itself
    /// (beside its output, fenced by the claim's token): no offset is read
    /// when a claim takes effect (the fetch starts where the application
    /// says, else by [`Config::initial_offset`]), and none is ever written.
    pub fn with_store_offsets(mut self, store_offsets: bool) -> Self {
        self.store_offsets = store_offsets;
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
            ("claim_stall_threshold", self.claim_stall_threshold()),
            ("suspension_margin", self.suspension_margin()),
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
        if self.suspension_margin() >= self.session_timeout {
            return Err(ConfigError::NotBelow {
                name: "suspension_margin",
                value: self.suspension_margin(),
                bound_name: "session_timeout",
                bound: self.session_timeout,
            });
        }
        Ok(())
    }
}
