//! Which topics a member consumes: a list of names, or a pattern over the
//! cluster's topics, in the three forms of Kafka 0.8's ZooKeeper consumer
//! (`static`, `white_list`, `black_list`), whose registration records
//! carry them.

use std::collections::BTreeSet;
use std::fmt;

use crate::error::ConfigError;
use crate::types::{validate_topic, MemberId};

/// Which topics a member consumes.
///
/// A pattern is matched against the whole name of every topic the cluster
/// has, again at each metadata refresh: a topic that appears is assigned,
/// one that is deleted is released. Kafka's internal topics (names that
/// start with `__`, such as `__consumer_offsets`) never match a pattern.
///
/// Every member of a group that uses a pattern must subscribe the same way;
/// a member that sees another subscribe differently reports
/// [`crate::Error::SubscriptionMismatch`] and takes no new partitions.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Subscription {
    /// These topics; one that does not exist yet is waited for (Kafka
    /// 0.8's `static`).
    Topics(BTreeSet<String>),
    /// Every topic whose whole name the pattern matches (Kafka 0.8's
    /// `white_list`).
    Matching(TopicPattern),
    /// Every topic whose whole name the pattern does not match (Kafka
    /// 0.8's `black_list`).
    AllExcept(TopicPattern),
}

impl Subscription {
    /// A subscription to `topics`, each name checked; at least one.
    pub fn topics<T: AsRef<str>>(
        topics: impl IntoIterator<Item = T>,
    ) -> Result<Subscription, ConfigError> {
        let mut names = BTreeSet::new();
        for topic in topics {
            validate_topic(topic.as_ref())?;
            names.insert(topic.as_ref().to_owned());
        }
        if names.is_empty() {
            return Err(ConfigError::NoTopics);
        }
        Ok(Subscription::Topics(names))
    }

    /// A subscription to every topic whose whole name `pattern` (a regular
    /// expression) matches, such as `orders-.*`.
    pub fn matching(pattern: &str) -> Result<Subscription, ConfigError> {
        TopicPattern::new(pattern).map(Subscription::Matching)
    }

    /// A subscription to every topic whose whole name `pattern` does not
    /// match, such as `audit|tmp-.*`.
    pub fn all_except(pattern: &str) -> Result<Subscription, ConfigError> {
        TopicPattern::new(pattern).map(Subscription::AllExcept)
    }

    /// Whether the subscription takes `topic`.
    pub fn includes(&self, topic: &str) -> bool {
        match self {
            Subscription::Topics(topics) => topics.contains(topic),
            Subscription::Matching(pattern) => !is_internal(topic) && pattern.matches(topic),
            Subscription::AllExcept(pattern) => !is_internal(topic) && !pattern.matches(topic),
        }
    }

    /// The topics named, for a subscription to a list of names.
    pub fn named_topics(&self) -> Option<&BTreeSet<String>> {
        match self {
            Subscription::Topics(topics) => Some(topics),
            Subscription::Matching(_) | Subscription::AllExcept(_) => None,
        }
    }

    /// Whether the subscription is a pattern over the cluster's topics.
    pub fn is_pattern(&self) -> bool {
        self.named_topics().is_none()
    }

    /// Its form in a registration record: `static`, `white_list` or
    /// `black_list`.
    pub fn record_form(&self) -> &'static str {
        match self {
            Subscription::Topics(_) => "static",
            Subscription::Matching(_) => "white_list",
            Subscription::AllExcept(_) => "black_list",
        }
    }

    /// The keys of its registration record's `subscription` object: the
    /// topics, or the one pattern.
    pub fn record_keys(&self) -> Vec<&str> {
        match self {
            Subscription::Topics(topics) => topics.iter().map(String::as_str).collect(),
            Subscription::Matching(pattern) | Subscription::AllExcept(pattern) => {
                vec![pattern.as_str()]
            }
        }
    }

    /// Reads a subscription from its registration record's form and keys.
    pub fn from_record<'a>(
        form: &str,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Result<Subscription, String> {
        let keys: Vec<&str> = keys.into_iter().collect();
        let one = || match keys.as_slice() {
            [pattern] => Ok(*pattern),
            _ => Err(format!(
                "a {form:?} subscription holds one pattern, not {}",
                keys.len()
            )),
        };
        let subscription = match form {
            "static" => Ok(Subscription::Topics(
                keys.iter().map(|k| (*k).to_owned()).collect(),
            )),
            "white_list" => Subscription::matching(one()?),
            "black_list" => Subscription::all_except(one()?),
            other => return Err(format!("unknown subscription pattern {other:?}")),
        };
        subscription.map_err(|e| e.to_string())
    }
}

impl fmt::Display for Subscription {
    /// `a,b` for topics; `/re/` for a pattern; `all but /re/`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subscription::Topics(topics) => {
                let names: Vec<&str> = topics.iter().map(String::as_str).collect();
                f.write_str(&names.join(","))
            }
            Subscription::Matching(pattern) => write!(f, "/{pattern}/"),
            Subscription::AllExcept(pattern) => write!(f, "all but /{pattern}/"),
        }
    }
}

/// Kafka's internal topics, which no pattern takes.
fn is_internal(topic: &str) -> bool {
    topic.starts_with("__")
}

/// A regular expression matched against whole topic names.
#[derive(Clone)]
pub struct TopicPattern {
    source: String,
    /// `source` anchored at both ends.
    whole: regex_lite::Regex,
}

impl TopicPattern {
    /// Compiles `pattern`; an empty one or one that does not parse is
    /// refused.
    pub fn new(pattern: &str) -> Result<TopicPattern, ConfigError> {
        if pattern.trim().is_empty() {
            return Err(ConfigError::BadPattern {
                pattern: pattern.to_owned(),
                detail: "it is empty".to_owned(),
                source: None,
            });
        }
        let whole = regex_lite::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| {
            ConfigError::BadPattern {
                pattern: pattern.to_owned(),
                detail: e.to_string(),
                source: Some(crate::error::ClientError::new(e)),
            }
        })?;
        Ok(TopicPattern {
            source: pattern.to_owned(),
            whole,
        })
    }

    /// Whether the pattern matches all of `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        self.whole.is_match(topic)
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl PartialEq for TopicPattern {
    fn eq(&self, other: &TopicPattern) -> bool {
        self.source == other.source
    }
}

impl Eq for TopicPattern {}

impl fmt::Debug for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("TopicPattern").field(&self.source).finish()
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_whole_names_and_never_internal_topics() {
        let orders = Subscription::matching("orders-.*").expect("a pattern");
        assert!(orders.includes("orders-eu"));
        assert!(!orders.includes("old-orders-eu"), "anchored at the start");
        assert!(!Subscription::matching("orders")
            .expect("a pattern")
            .includes("orders-eu"));
        let all = Subscription::matching(".*").expect("a pattern");
        assert!(!all.includes("__consumer_offsets"));
        let but = Subscription::all_except("audit|tmp-.*").expect("a pattern");
        assert!(but.includes("orders"));
        assert!(!but.includes("audit"));
        assert!(!but.includes("tmp-1"));
        assert!(!but.includes("__transaction_state"));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_pattern_named() {
        for pattern in ["", "  ", "orders-(", "a{2,1}"] {
            match Subscription::matching(pattern) {
                Err(ConfigError::BadPattern { pattern: named, .. }) => assert_eq!(named, pattern),
                other => panic!("{pattern:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn the_record_form_reads_back() {
        for subscription in [
            Subscription::topics(["a", "b"]).expect("topics"),
            Subscription::matching("orders-.*").expect("a pattern"),
            Subscription::all_except("audit").expect("a pattern"),
        ] {
            let read =
                Subscription::from_record(subscription.record_form(), subscription.record_keys());
            assert_eq!(read, Ok(subscription));
        }
        assert!(Subscription::from_record("white_list", ["a", "b"]).is_err());
        assert!(Subscription::from_record("white_list", ["("]).is_err());
        assert!(Subscription::from_record("glob", ["a"]).is_err());
    }
}

/// What a member advertises in its registration: who it is, which topics it
/// subscribes to, and which assignment strategy it runs.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct MemberInfo {
    /// The member's id.
    pub id: MemberId,
    /// The topics the member consumes.
    pub subscription: Subscription,
    /// The name of the member's assignment strategy; every member of a group
    /// must run the same one.
    pub strategy: String,
}

impl MemberInfo {
    /// Whether the member consumes `topic`.
    pub fn subscribes_to(&self, topic: &str) -> bool {
        self.subscription.includes(topic)
    }
}
