//! The command's arguments read from text — reset targets (offsets and
//! times), durations, topic and partition lists — and times written back.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::DateTime;
use tenure_admin::{ResetTarget, TopicPartitions};
use tenure_core::NameError;

/// A reset target that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid reset target {given:?}: expected earliest, latest, an offset (0, 42...) or a time \
     (2026-11-30T12:00:00Z, or @<milliseconds since the epoch>)"
)]
pub struct ResetTargetError {
    /// The target as given.
    pub given: String,
}

/// Reads a reset target: `earliest`, `latest`, a decimal offset, an
/// RFC 3339 time (`2026-11-30T12:00:00Z`, `2026-11-30T13:00:00.250+01:00`)
/// or `@<milliseconds since the epoch>`: the forms of `--to`.
pub fn reset_target(given: &str) -> Result<ResetTarget, ResetTargetError> {
    let error = || ResetTargetError {
        given: given.to_owned(),
    };
    match given {
        "earliest" => Ok(ResetTarget::Earliest),
        "latest" => Ok(ResetTarget::Latest),
        _ if given.starts_with('@') => given[1..]
            .parse()
            .map(ResetTarget::Timestamp)
            .map_err(|_| error()),
        _ if given.bytes().all(|b| b.is_ascii_digit()) => {
            given.parse().map(ResetTarget::Offset).map_err(|_| error())
        }
        _ => parse_rfc3339_millis(given)
            .map(ResetTarget::Timestamp)
            .ok_or_else(error),
    }
}

/// A duration that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {given:?}: {reason} (expected ISO 8601 such as PT1H30M or P1DT12H, or \
     1h30m, 90s, 2d)"
)]
pub struct DurationError {
    /// The duration as given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Parses a duration: ISO 8601 (`PT1H30M`, `P1DT12H`, `PT0.5S`, `P2W`;
/// years and months are refused, their length varies) or the short form
/// (`1h30m`, `90s`, `2d`, `1d12h`). Negative durations are refused.
pub fn parse_duration(given: &str) -> Result<Duration, DurationError> {
    let error = |reason| DurationError {
        given: given.to_owned(),
        reason,
    };
    let text = given.trim();
    if text.is_empty() {
        return Err(error("it is empty"));
    }
    if text.starts_with('-') {
        return Err(error("it is negative"));
    }
    let iso = text.strip_prefix('P').or_else(|| text.strip_prefix('p'));
    let (units, body) = match iso {
        Some(body) => (Units::Iso, body),
        None => (Units::Short, text),
    };
    let mut total = 0f64;
    let mut in_time = false;
    let mut seen_any = false;
    let mut rest = body;
    while !rest.is_empty() {
        if units == Units::Iso && (rest.starts_with('T') || rest.starts_with('t')) {
            if in_time {
                return Err(error("`T` is given twice"));
            }
            in_time = true;
            rest = &rest[1..];
            continue;
        }
        let digits = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.' || *b == b',')
            .count();
        if digits == 0 {
            return Err(error("a number must come before each unit"));
        }
        let number: f64 = rest[..digits]
            .replace(',', ".")
            .parse()
            .map_err(|_| error("a number cannot be read"))?;
        rest = &rest[digits..];
        let unit = rest
            .chars()
            .next()
            .ok_or_else(|| error("the last number has no unit"))?;
        rest = &rest[unit.len_utf8()..];
        let seconds = match (units, in_time, unit.to_ascii_uppercase()) {
            (Units::Iso, false, 'W') => 604_800.0,
            (Units::Iso, false, 'D') | (Units::Short, _, 'D') => 86_400.0,
            (Units::Iso, false, 'Y') | (Units::Iso, false, 'M') => {
                return Err(error("years and months have no fixed length: use days"))
            }
            (Units::Iso, true, 'H') | (Units::Short, _, 'H') => 3_600.0,
            (Units::Iso, true, 'M') | (Units::Short, _, 'M') => 60.0,
            (Units::Iso, true, 'S') | (Units::Short, _, 'S') => 1.0,
            (Units::Iso, false, 'H' | 'S') => {
                return Err(error("hours, minutes and seconds come after `T`"))
            }
            _ => return Err(error("unknown unit")),
        };
        total += number * seconds;
        seen_any = true;
    }
    if !seen_any {
        return Err(error("it has no amount"));
    }
    Duration::try_from_secs_f64(total).map_err(|_| error("it is too long"))
}

/// Which notation [`parse_duration`] reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Units {
    /// ISO 8601, after its `P`.
    Iso,
    /// `1h30m`.
    Short,
}

/// A `--topic` argument that cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicPartitionsError {
    /// The topic's name is not one Kafka allows.
    #[error("invalid topic selection {given:?}: {source}")]
    Topic {
        /// The selection as given.
        given: String,
        /// What is wrong with the name.
        #[source]
        source: NameError,
    },
    /// A partition is not a number.
    #[error(
        "invalid topic selection {given:?}: partition {partition:?} is not a partition number \
         (expected TOPIC or TOPIC:P[,P...])"
    )]
    Partition {
        /// The selection as given.
        given: String,
        /// The partition as given.
        partition: String,
    },
}

/// A partition number as an operator writes it: ASCII digits only (no
/// sign, no spaces), fitting in a `u32`.
pub fn parse_partition(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Reads a topic selection: `TOPIC` or `TOPIC:P[,P...]` (Kafka topic
/// names have no `:`), the form of `--topic`.
pub fn topic_partitions(given: &str) -> Result<TopicPartitions, TopicPartitionsError> {
    let (topic, partitions) = match given.split_once(':') {
        None => (given, None),
        Some((topic, list)) => {
            let mut partitions = BTreeSet::new();
            for part in list.split(',') {
                let part = part.trim();
                let number =
                    parse_partition(part).ok_or_else(|| TopicPartitionsError::Partition {
                        given: given.to_owned(),
                        partition: part.to_owned(),
                    })?;
                partitions.insert(number);
            }
            (topic, Some(partitions))
        }
    };
    tenure_core::types::validate_topic(topic).map_err(|source| TopicPartitionsError::Topic {
        given: given.to_owned(),
        source,
    })?;
    Ok(TopicPartitions {
        topic: topic.to_owned(),
        partitions,
    })
}

/// Parses an RFC 3339 time (`2026-11-30T12:00:00Z`,
/// `2026-11-30 12:00:00.5+01:00`) into milliseconds since the Unix epoch.
pub fn parse_rfc3339_millis(text: &str) -> Option<i64> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|time| time.timestamp_millis())
}

/// Formats a time as RFC 3339 in UTC, to the second
/// (`2026-11-30T12:00:00Z`); one beyond the calendar's range (some
/// 260,000 years either way) as seconds since the epoch.
pub use tenure_admin::serialize::rfc3339 as format_rfc3339;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn reset_targets_parse() {
        assert_eq!(reset_target("earliest"), Ok(ResetTarget::Earliest));
        assert_eq!(reset_target("latest"), Ok(ResetTarget::Latest));
        assert_eq!(reset_target("42"), Ok(ResetTarget::Offset(42)));
        assert_eq!(reset_target("@1000"), Ok(ResetTarget::Timestamp(1000)));
        assert_eq!(
            reset_target("1970-01-01T00:00:01Z"),
            Ok(ResetTarget::Timestamp(1000))
        );
        assert_eq!(
            reset_target("2026-11-30T13:00:00.25+01:00"),
            Ok(ResetTarget::Timestamp(1_796_040_000_250))
        );
        assert_eq!(
            reset_target("2026-11-30 12:00:00z"),
            Ok(ResetTarget::Timestamp(1_796_040_000_000))
        );
        for bad in [
            "",
            "-1",
            "newest",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-30",
            "2026-11-30T12:00:00",
            "2026-11-30T24:00:00Z",
            "@x",
        ] {
            assert!(reset_target(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn durations_parse() {
        let secs = Duration::from_secs;
        assert_eq!(parse_duration("PT1H30M"), Ok(secs(5_400)));
        assert_eq!(parse_duration("1h30m"), Ok(secs(5_400)));
        assert_eq!(parse_duration("P1DT12H"), Ok(secs(129_600)));
        assert_eq!(parse_duration("P2W"), Ok(secs(1_209_600)));
        assert_eq!(parse_duration("PT0.5S"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("90s"), Ok(secs(90)));
        assert_eq!(parse_duration("2d"), Ok(secs(172_800)));
        assert_eq!(parse_duration("pt15m"), Ok(secs(900)));
        for bad in [
            "", "P", "PT", "-PT1H", "P1M", "P1Y", "P1H", "PT1D", "1x", "90", "h", "PT1H1H2",
            "PTT1H",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn a_plans_duration_reads_back() {
        for millis in [5_400_000, 129_600_000, 0, 59_000, 86_400_000, 1_500] {
            let duration = Duration::from_millis(millis);
            let shown = ResetTarget::Duration(duration).to_string();
            let text = shown.strip_suffix(" before now").expect("a duration");
            assert_eq!(parse_duration(text), Ok(duration), "{shown}");
        }
    }

    #[test]
    fn topic_selections_parse() {
        let t = topic_partitions("orders").expect("a topic");
        assert_eq!(t.partitions, None);
        let t = topic_partitions("orders:0,2").expect("a topic and partitions");
        assert_eq!(t.topic, "orders");
        assert_eq!(t.partitions, Some([0, 2].into()));
        assert_eq!(t.to_string(), "orders:0,2");
        for bad in [
            "",
            "a b",
            "orders:",
            "orders:x",
            "orders:-1",
            "orders:1,,2",
            ":1",
        ] {
            assert!(topic_partitions(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn dates_round_trip() {
        for seconds in [0_u64, 951_782_400, 1_796_036_400, 4_102_444_800] {
            let time = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
            let text = format_rfc3339(time);
            assert_eq!(
                parse_rfc3339_millis(&text),
                Some(seconds as i64 * 1000),
                "{text}"
            );
        }
        assert_eq!(
            format_rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            format_rfc3339(SystemTime::UNIX_EPOCH - Duration::from_secs(1)),
            "1969-12-31T23:59:59Z"
        );
        let far = SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 60);
        assert_eq!(format_rfc3339(far), "1152921504606846976 s since the epoch");
    }
}
