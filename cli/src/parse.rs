//! The command's arguments read from text — reset targets (offsets and
//! times), durations, topic and partition lists — and times written back.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

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
    let bytes = text.as_bytes();
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = text.get(range)?;
        if part.bytes().all(|b| b.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let padded = format!("{:0<3}", &fraction[..digits.min(3)]);
        millis = padded.parse::<i64>().ok()?;
        rest = &fraction[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours: i64 = rest[1..3].parse().ok()?;
            let minutes: i64 = rest[4..6].parse().ok()?;
            sign * (hours * 60 + minutes)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1_000 + millis)
}

/// Formats a time as RFC 3339 in UTC, to the second.
pub fn format_rfc3339(time: SystemTime) -> String {
    let seconds = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => since.as_secs() as i64,
        Err(before) => -(before.duration().as_secs() as i64),
    };
    let (days, rest) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the usual era
/// arithmetic: 400-year cycles of 146,097 days).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
