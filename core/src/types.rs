//! The nouns of the protocol: members, partitions, sessions, requests and
//! fencing tokens. Backends translate these into znodes, keys and leases.

use std::fmt;
use std::sync::Arc;

/// A name (group, member id, topic) that the store or Kafka would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} {name:?}: {reason}")]
pub struct NameError {
    /// What the name names: "group", "member id", "topic".
    pub kind: &'static str,
    /// The name as given.
    pub name: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// A Kafka offset: the position of a message in its partition.
pub type Offset = i64;

/// The longest name tenure accepts for a member id or a group; a ZooKeeper
/// path element or an etcd key segment of this size stays far below both
/// stores' limits.
pub const MAX_NAME_LEN: usize = 255;

/// Kafka's own limit on topic names.
pub const MAX_TOPIC_LEN: usize = 249;

/// Checks a name that becomes one path element in the store (a group name or
/// a member id): non-empty, at most [`MAX_NAME_LEN`] bytes, not `.` or `..`,
/// and made of printable characters other than `/`.
pub fn validate_path_element(kind: &'static str, name: &str) -> Result<(), NameError> {
    check_rules(
        kind,
        name,
        &[
            (name.is_empty(), "it is empty"),
            (name.len() > MAX_NAME_LEN, "it is longer than 255 bytes"),
            (
                name == "." || name == "..",
                "`.` and `..` are not path elements",
            ),
            (name.contains('/'), "it contains `/`"),
            (
                name.chars().any(|c| c.is_control()),
                "it contains a control character",
            ),
        ],
    )
}

/// Checks a topic name by Kafka's rules: 1 to 249 characters of ASCII
/// letters, digits, `.`, `_` and `-`, and not `.` or `..`.
pub fn validate_topic(name: &str) -> Result<(), NameError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-';
    check_rules(
        "topic",
        name,
        &[
            (name.is_empty(), "it is empty"),
            (
                name.len() > MAX_TOPIC_LEN,
                "it is longer than 249 characters",
            ),
            (
                name == "." || name == "..",
                "`.` and `..` are not topic names",
            ),
            (
                !name.bytes().all(allowed),
                "only ASCII letters, digits, `.`, `_` and `-` are allowed",
            ),
        ],
    )
}

/// Refuses `name`, a `kind`, for the first of `rules` it breaks; a rule is
/// whether the name breaks it and the reason to give. The order of the
/// rules decides which reason a name that breaks several gets.
fn check_rules(
    kind: &'static str,
    name: &str,
    rules: &[(bool, &'static str)],
) -> Result<(), NameError> {
    match rules.iter().find(|(broken, _)| *broken) {
        Some(&(_, reason)) => Err(NameError {
            kind,
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The id of one member of a group, unique within the group. It is a path
/// element in the store, so it is validated on construction.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(Arc<str>);

impl MemberId {
    /// Makes a member id, refusing names that cannot be a store path element.
    pub fn new(id: impl AsRef<str>) -> Result<Self, NameError> {
        let id = id.as_ref();
        validate_path_element("member id", id)?;
        Ok(MemberId(Arc::from(id)))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// An id made of where a process runs and something unique to it:
    /// `<host>-<pid>-<nonce as 8 hex digits>`, the host name cut to what a
    /// store path element allows (`/` and control characters become `_`,
    /// at most 200 bytes; an empty one is `host`). Two processes on one
    /// host differ by their pid, two runs of one pid by their nonce. The
    /// runtime's `generate_member_id` fills in the host, the pid and a
    /// random nonce; this function only composes them, so that it stays
    /// free of I/O.
    pub fn from_parts(host: &str, pid: u32, nonce: u32) -> MemberId {
        let mut host: String = host
            .chars()
            .map(|c| if c == '/' || c.is_control() { '_' } else { c })
            .collect();
        while host.len() > 200 {
            host.pop();
        }
        if host.is_empty() || host == "." || host == ".." {
            host = "host".to_owned();
        }
        MemberId(Arc::from(format!("{host}-{pid}-{nonce:08x}")))
    }
}

impl AsRef<str> for MemberId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for MemberId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One partition of one topic.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// The topic's name.
    pub topic: Arc<str>,
    /// The partition's number within the topic, from 0.
    pub partition: u32,
}

impl TopicPartition {
    /// Names partition `partition` of `topic`.
    pub fn new(topic: impl AsRef<str>, partition: u32) -> Self {
        TopicPartition {
            topic: Arc::from(topic.as_ref()),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.topic, self.partition)
    }
}

/// As its text, `topic/partition`, so that it can key a JSON object.
#[cfg(feature = "serde")]
impl serde::Serialize for TopicPartition {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// As its text.
#[cfg(feature = "serde")]
impl serde::Serialize for MemberId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

/// The store's id of a member's session: a ZooKeeper session id or an etcd
/// lease id. Records created under a session vanish when it ends.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct SessionId(pub u64);

/// The id the core gives each store request; its result carries the same id,
/// and a result whose request was superseded is ignored.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct RequestId(pub u64);

/// A number that grows with every new claim of a partition (ZooKeeper: the
/// owner node's czxid; etcd: the owner key's create_revision). The
/// application can use it to fence its own side effects, and the store uses
/// it to fence offset commits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(transparent))]
pub struct FencingToken(pub u64);
