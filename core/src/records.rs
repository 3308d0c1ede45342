//! The records a group keeps in its store, as Kafka 0.8's ZooKeeper
//! consumer keeps them, shared by every backend and the in-memory model:
//! the paths of a group's records ([`Layout`]), a member's JSON
//! registration, and the committed offset's ASCII decimal.
//!
//! Layout under `<chroot>/consumers/<group>` (etcd: `<prefix>/<group>`, with
//! its own names for the first level):
//! - `ids/<member>`: ephemeral, the member's JSON registration;
//! - `owners/<topic>/<partition>`: ephemeral, the owner's member id;
//! - `offsets/<topic>/<partition>`: persistent, the next offset to consume
//!   as ASCII decimal;
//! - `progress/<topic>/<partition>`: persistent, what was done above the
//!   committed offset (JSON, [`crate::progress`]), written with it.

use crate::error::{ClientError, StoreError};
use crate::protocol::ClaimOutcome;
use crate::subscription::MemberInfo;
use crate::subscription::Subscription;
use crate::types::{FencingToken, MemberId, Offset, SessionId, TopicPartition};

/// How many claims, offset reads, commits or releases a backend sends in
/// one request at most when a member's step has many of them. etcd refuses
/// a transaction of more than 128 operations by default (`--max-txn-ops`),
/// counting those of a transaction nested in it (one per partition, with
/// up to two compares) on top of the ones around it: 120 leaves them room.
/// ZooKeeper refuses a request larger than its `jute.maxbuffer` (1 MiB by
/// default; a partition's operations take a few hundred bytes).
pub const OPS_PER_BATCH: usize = 120;

/// The paths of one group's records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    base: String,
}

/// What a watched path is, for routing its events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Watched {
    /// The member list.
    Members,
    /// A partition's owner record.
    Owner(TopicPartition),
}

impl Layout {
    /// The layout of `group` under `chroot` (`""` or `"/"` for none).
    pub fn new(chroot: &str, group: &str) -> Layout {
        Layout {
            base: format!("{}/{group}", Layout::groups(chroot)),
        }
    }

    /// The parent of every group's records under `chroot` (`""` or `"/"` for
    /// none): `<chroot>/consumers`.
    pub fn groups(chroot: &str) -> String {
        format!("{}/consumers", chroot.trim_end_matches('/'))
    }

    /// The group's own node, the parent of all its records.
    pub fn group(&self) -> &str {
        &self.base
    }

    /// The parent of the owner records, one child per topic.
    pub fn owners(&self) -> String {
        format!("{}/owners", self.base)
    }

    /// The parent of the committed offsets, one child per topic.
    pub fn offsets(&self) -> String {
        format!("{}/offsets", self.base)
    }

    /// The parent of the member registrations.
    pub fn ids(&self) -> String {
        format!("{}/ids", self.base)
    }

    /// A member's registration.
    pub fn member(&self, id: &MemberId) -> String {
        format!("{}/ids/{}", self.base, id)
    }

    /// A partition's owner record.
    pub fn owner(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/owners/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// A partition's committed offset.
    pub fn offset(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/offsets/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// The parent of the progress records, one child per topic.
    pub fn progresses(&self) -> String {
        format!("{}/progress", self.base)
    }

    /// A partition's progress record ([`crate::Progress`]), beside its
    /// committed offset.
    pub fn progress(&self, partition: &TopicPartition) -> String {
        format!(
            "{}/progress/{}/{}",
            self.base, partition.topic, partition.partition
        )
    }

    /// What `path` is, if it is a path this layout watches.
    pub fn classify(&self, path: &str) -> Option<Watched> {
        let rest = path.strip_prefix(&self.base)?;
        if rest == "/ids" {
            return Some(Watched::Members);
        }
        let rest = rest.strip_prefix("/owners/")?;
        let (topic, partition) = rest.split_once('/')?;
        let partition = partition.parse().ok()?;
        Some(Watched::Owner(TopicPartition::new(topic, partition)))
    }
}

/// Writes a member's registration: the JSON of Kafka 0.8's ZooKeeper
/// consumer, plus the member's strategy and host (which Kafka 0.8 and the Go
/// package ignore).
pub fn encode_registration(info: &MemberInfo, timestamp_secs: u64, host: Option<&str>) -> Vec<u8> {
    // Kafka 0.8's form: the topics, or the one pattern, each with its
    // number of streams (always one here).
    let subscription: serde_json::Map<String, serde_json::Value> = info
        .subscription
        .record_keys()
        .into_iter()
        .map(|key| (key.to_owned(), serde_json::Value::from(1)))
        .collect();
    let mut value = serde_json::json!({
        "version": 1,
        "subscription": subscription,
        "pattern": info.subscription.record_form(),
        "timestamp": timestamp_secs,
        "strategy": info.strategy,
    });
    if let (Some(host), Some(object)) = (host, value.as_object_mut()) {
        object.insert("host".to_owned(), serde_json::Value::from(host));
    }
    value.to_string().into_bytes()
}

/// A decoded registration, with what tools show besides the member's info.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registration {
    /// What the member tells the group.
    pub info: MemberInfo,
    /// The member's host, when written (tenure writes it).
    pub host: Option<String>,
    /// When the member registered, in seconds since the Unix epoch.
    pub timestamp_secs: Option<u64>,
}

/// Why a record cannot be read: what is wrong with it, and the parser's
/// own error where one said so.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct RecordError {
    /// What is wrong with the record.
    pub detail: String,
    /// The parser's error (JSON, a member id's check), if any.
    #[source]
    pub source: Option<ClientError>,
}

impl RecordError {
    /// `detail` is wrong with the record, as no parser said.
    fn plain(detail: impl Into<String>) -> RecordError {
        RecordError {
            detail: detail.into(),
            source: None,
        }
    }

    /// `detail` is wrong with the record, as `source` said.
    pub(crate) fn caused(
        detail: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> RecordError {
        RecordError {
            detail: detail.into(),
            source: Some(ClientError::new(source)),
        }
    }

    /// The store error of the record at `path` that holds this.
    pub fn at(self, path: &str) -> StoreError {
        StoreError::Corrupt {
            path: path.to_owned(),
            detail: self.detail,
            source: self.source,
        }
    }
}

impl From<String> for RecordError {
    fn from(detail: String) -> RecordError {
        RecordError::plain(detail)
    }
}

impl From<&str> for RecordError {
    fn from(detail: &str) -> RecordError {
        RecordError::plain(detail)
    }
}

/// Reads a registration written by [`encode_registration`] (or by a Kafka
/// 0.8 consumer, whose strategy is taken to be `range`).
pub fn decode_registration(id: &str, data: &[u8]) -> Result<MemberInfo, RecordError> {
    decode_registration_record(id, data).map(|registration| registration.info)
}

/// Reads a registration with its host and timestamp. Kafka 0.8 writes the
/// timestamp as a string of milliseconds, tenure and the Go package as a
/// number of seconds; both are read.
pub fn decode_registration_record(id: &str, data: &[u8]) -> Result<Registration, RecordError> {
    let value: serde_json::Value = serde_json::from_slice(data)
        .map_err(|e| RecordError::caused(format!("not JSON: {e}"), e))?;
    let subscription = value
        .get("subscription")
        .and_then(|s| s.as_object())
        .ok_or("no \"subscription\" object")?;
    let form = match value.get("pattern") {
        None => "static",
        Some(form) => form.as_str().ok_or("\"pattern\" is not a string")?,
    };
    let subscription = Subscription::from_record(form, subscription.keys().map(String::as_str))?;
    let strategy = match value.get("strategy") {
        None => "range".to_owned(),
        Some(s) => s.as_str().ok_or("\"strategy\" is not a string")?.to_owned(),
    };
    let host = value
        .get("host")
        .and_then(|h| h.as_str())
        .map(str::to_owned);
    let timestamp = value.get("timestamp").and_then(|t| match t {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    });
    // Any time after 1973 in milliseconds is above this; in seconds it is
    // a date thousands of years away.
    let timestamp_secs = timestamp.map(|t| if t > 100_000_000_000 { t / 1000 } else { t });
    let id = MemberId::new(id).map_err(|e| RecordError::caused(e.to_string(), e))?;
    Ok(Registration {
        info: MemberInfo {
            id,
            subscription,
            strategy,
        },
        host,
        timestamp_secs,
    })
}

/// Writes a committed offset: the next offset to consume, in ASCII
/// decimal with nothing around it, as Kafka 0.8's consumer and the Go
/// package write and read it.
pub fn encode_offset(offset: Offset) -> Vec<u8> {
    offset.to_string().into_bytes()
}

/// Parses a committed offset: ASCII decimal, not negative.
pub fn parse_offset(path: &str, data: &[u8]) -> Result<Offset, StoreError> {
    let text = std::str::from_utf8(data)
        .map_err(|e| RecordError::caused("offset is not UTF-8", e).at(path))?;
    let offset: Offset = text.trim().parse().map_err(|e| {
        RecordError::caused(format!("offset {text:?} is not a decimal number"), e).at(path)
    })?;
    if offset < 0 {
        return Err(RecordError::plain(format!("offset {offset} is negative")).at(path));
    }
    Ok(offset)
}

/// What a claim learns from an owner record it found in place: the member
/// named in it (`None` if the id does not parse: the record still blocks
/// the claim), the session it belongs to and its token. A record with no
/// session (not ephemeral, no lease) is corrupt: no member could ever lose
/// it.
pub fn held_claim(
    path: &str,
    data: &[u8],
    session: Option<SessionId>,
    token: FencingToken,
) -> Result<ClaimOutcome, StoreError> {
    match session {
        Some(session) => Ok(ClaimOutcome::Held {
            owner: std::str::from_utf8(data)
                .ok()
                .and_then(|s| MemberId::new(s).ok()),
            session,
            token,
        }),
        None => Err(RecordError::plain(
            "owner record belongs to no session (a znode that is not ephemeral, an etcd key with no lease)",
        )
        .at(path)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_corrupt_record_keeps_the_parsers_error_as_its_cause() {
        let error = parse_offset("/o/t/0", b"12x").expect_err("not a number");
        let cause = std::error::Error::source(&error).expect("a cause");
        let parse = cause
            .downcast_ref::<ClientError>()
            .and_then(|c| c.get_ref().downcast_ref::<std::num::ParseIntError>());
        assert!(parse.is_some(), "{cause:?}");
        assert!(
            error
                .to_string()
                .contains("\"12x\" is not a decimal number"),
            "{error}"
        );

        let error = decode_registration("m1", b"{").expect_err("not JSON");
        let cause = std::error::Error::source(&error).expect("a cause");
        let json = cause
            .downcast_ref::<ClientError>()
            .and_then(|c| c.get_ref().downcast_ref::<serde_json::Error>());
        assert!(json.is_some(), "{cause:?}");
        let at = error.at("/ids/m1");
        assert!(
            std::error::Error::source(&at).is_some(),
            "kept in the store error"
        );

        let error = crate::subscription::TopicPattern::new("(").expect_err("not a regex");
        assert!(std::error::Error::source(&error).is_some(), "{error}");
    }

    fn member(subscription: Subscription) -> MemberInfo {
        MemberInfo {
            id: MemberId::new("m1").expect("an id"),
            subscription,
            strategy: "sticky".to_owned(),
        }
    }

    #[test]
    fn registrations_say_how_the_member_subscribes_in_kafka_0_8s_form() {
        for (subscription, form) in [
            (Subscription::topics(["a", "b"]).expect("topics"), "static"),
            (
                Subscription::matching("orders-.*").expect("a pattern"),
                "white_list",
            ),
            (
                Subscription::all_except("audit").expect("a pattern"),
                "black_list",
            ),
        ] {
            let info = member(subscription);
            let data = encode_registration(&info, 1_700_000_000, Some("host-1"));
            let json: serde_json::Value = serde_json::from_slice(&data).expect("JSON");
            assert_eq!(json["pattern"], form);
            assert_eq!(decode_registration("m1", &data), Ok(info));
        }
    }

    #[test]
    fn a_kafka_0_8_wildcard_registration_reads_as_a_pattern() {
        let data = br#"{"version":1,"subscription":{"orders-.*":2},"pattern":"white_list","timestamp":"1700000000000"}"#;
        let info = decode_registration("legacy-1", data).expect("a registration");
        assert_eq!(
            info.subscription,
            Subscription::matching("orders-.*").expect("a pattern")
        );
        assert_eq!(info.strategy, "range");
        for bad in [
            &br#"{"subscription":{"(":1},"pattern":"white_list"}"#[..],
            br#"{"subscription":{"a":1,"b":1},"pattern":"black_list"}"#,
            br#"{"subscription":{"a":1},"pattern":"glob"}"#,
            br#"{"subscription":{"a":1},"pattern":7}"#,
        ] {
            assert!(decode_registration("m", bad).is_err(), "{bad:?}");
        }
    }
}
