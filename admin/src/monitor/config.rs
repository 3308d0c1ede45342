//! How a [`Monitor`](super::Monitor)(super::Monitor) watches: which groups, how often it
//! reads Kafka, how long its windows are.

use std::collections::BTreeSet;
use std::time::Duration;

/// Which groups a [`Monitor`](super::Monitor) watches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GroupFilter {
    /// Every group in the store, as groups appear and disappear.
    All,
    /// These groups (a named group without records is shown as ERROR).
    Named(BTreeSet<String>),
}

impl GroupFilter {
    pub(crate) fn selects(&self, group: &str) -> bool {
        match self {
            GroupFilter::All => true,
            GroupFilter::Named(names) => names.contains(group),
        }
    }
}

/// How a [`Monitor`](super::Monitor) watches.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    pub(crate) groups: GroupFilter,
    pub(crate) kafka_interval: Duration,
    pub(crate) window: usize,
    pub(crate) unowned_after: Duration,
    pub(crate) settle: Duration,
    pub(crate) timeline: usize,
    pub(crate) reconnect: Duration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            groups: GroupFilter::All,
            kafka_interval: Duration::from_secs(10),
            window: 10,
            unowned_after: Duration::from_secs(30),
            settle: Duration::from_millis(200),
            timeline: 500,
            reconnect: Duration::from_secs(1),
        }
    }
}

impl MonitorConfig {
    /// Every group in the store, a refresh from Kafka every 10 s, a window
    /// of 10 samples, partitions flagged after 30 s unowned.
    pub fn new() -> MonitorConfig {
        MonitorConfig::default()
    }

    /// Which groups to watch (default: all).
    pub fn with_groups(mut self, groups: GroupFilter) -> Self {
        self.groups = groups;
        self
    }

    /// How often log offsets are read from Kafka and each partition
    /// sampled (default 10 s; at least 100 ms). A window spans this times
    /// [`MonitorConfig::with_window`].
    pub fn with_kafka_interval(mut self, interval: Duration) -> Self {
        self.kafka_interval = interval.max(Duration::from_millis(100));
        self
    }

    /// How many samples a partition is judged on (default 10, Burrow's;
    /// at least 2).
    pub fn with_window(mut self, samples: usize) -> Self {
        self.window = samples.max(2);
        self
    }

    /// After how long unowned a partition is listed in
    /// [`GroupHealth::unowned_too_long`](crate::overview::GroupHealth::unowned_too_long) (default 30 s: set it to the
    /// members' session timeout).
    pub fn with_unowned_after(mut self, after: Duration) -> Self {
        self.unowned_after = after;
        self
    }

    /// How long the changes of a group gather before it is read again
    /// (default 200 ms): a burst of commits costs one read.
    pub fn with_settle(mut self, settle: Duration) -> Self {
        self.settle = settle;
        self
    }

    /// How many timeline entries a group keeps (default 500).
    pub fn with_timeline(mut self, entries: usize) -> Self {
        self.timeline = entries;
        self
    }

    /// How long to wait before connecting again after the store was lost
    /// (default 1 s).
    pub fn with_reconnect(mut self, wait: Duration) -> Self {
        self.reconnect = wait;
        self
    }

    /// The groups watched.
    pub fn groups(&self) -> &GroupFilter {
        &self.groups
    }

    /// How often Kafka is read.
    pub fn kafka_interval(&self) -> Duration {
        self.kafka_interval
    }

    /// The samples per window.
    pub fn window(&self) -> usize {
        self.window
    }
}
