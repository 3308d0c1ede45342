//! `/metrics`: the overview in Prometheus' text format. Lag series take
//! kafka-lag-exporter's names and labels where they fit, so dashboards
//! and alerts written for it work; what only tenure knows (status,
//! owners, handoffs) is `tenure_*`.

use std::fmt::Write;

use tenure_admin::overview::{GroupHealth, Overview};

/// One metric family: its name, help and type, and its samples.
struct Family {
    name: &'static str,
    help: &'static str,
    samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Family {
    fn new(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            help,
            samples: Vec::new(),
        }
    }

    fn add(&mut self, labels: Vec<(&'static str, String)>, value: impl Into<f64>) {
        self.samples.push((labels, value.into()));
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} gauge", self.name);
        for (labels, value) in &self.samples {
            out.push_str(self.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape(value));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {value}");
        }
    }
}

/// A label value as the text format writes it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The overview as Prometheus text.
pub fn render(overview: &Overview) -> String {
    let mut lag = Family::new(
        "kafka_consumergroup_group_lag",
        "Messages not committed yet in a group's partition: log end offset minus committed offset.",
    );
    let mut offset = Family::new(
        "kafka_consumergroup_group_offset",
        "A group's committed offset of a partition (the next offset to consume).",
    );
    let mut max_lag = Family::new(
        "kafka_consumergroup_group_max_lag",
        "The largest lag among a group's partitions.",
    );
    let mut sum_lag = Family::new(
        "kafka_consumergroup_group_sum_lag",
        "The sum of a group's partitions' lags.",
    );
    let mut latest = Family::new(
        "kafka_partition_latest_offset",
        "The offset the next message produced to a partition will get (high watermark).",
    );
    let mut earliest = Family::new(
        "kafka_partition_earliest_offset",
        "The first offset still in a partition's log.",
    );
    let mut group_status = Family::new(
        "tenure_group_status",
        "A group's status: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERROR (its worst partition's).",
    );
    let mut partition_status = Family::new(
        "tenure_partition_status",
        "A group's partition's status: 0 OK, 1 WARN, 2 STALL, 3 STOP, 4 ERROR.",
    );
    let mut owned = Family::new(
        "tenure_partition_owned",
        "1 if a member of the group owns the partition, 0 if none does.",
    );
    let mut members = Family::new("tenure_group_members", "A group's live members.");
    let mut partitions = Family::new(
        "tenure_group_partitions",
        "The partitions a group consumes or has records for.",
    );
    let mut unowned = Family::new(
        "tenure_group_unowned_partitions",
        "A group's partitions that no member owns.",
    );
    let mut unowned_long = Family::new(
        "tenure_group_unowned_too_long_partitions",
        "A group's partitions unowned for longer than serve's --unowned-after.",
    );
    let mut handoffs = Family::new(
        "tenure_group_handoffs_in_window",
        "Partitions that moved from one member to another within the window.",
    );
    let mut mismatches = Family::new(
        "tenure_group_mismatches",
        "Disagreements among a group's members on strategy or subscription (0 when they agree).",
    );
    let mut corrupt = Family::new(
        "tenure_group_corrupt_records",
        "A group's records in the store that cannot be read.",
    );
    let mut store_up = Family::new(
        "tenure_serve_store_up",
        "1 while serve watches the store, 0 while it cannot.",
    );
    let mut kafka_up = Family::new(
        "tenure_serve_kafka_up",
        "1 if Kafka answered for every partition at the last refresh, 0 if not.",
    );
    store_up.add(
        vec![("store", overview.store.clone())],
        u8::from(overview.store_error.is_none()),
    );
    kafka_up.add(Vec::new(), u8::from(overview.kafka_error.is_none()));

    let mut logs_written = std::collections::BTreeSet::new();
    for group in &overview.groups {
        let g = || vec![("group", group.group.clone())];
        group_status.add(g(), group.status.code());
        members.add(g(), group.members.len() as f64);
        partitions.add(g(), group.partitions.len() as f64);
        unowned.add(g(), group.unowned as f64);
        unowned_long.add(g(), group.unowned_too_long.len() as f64);
        handoffs.add(g(), group.handoffs_in_window as f64);
        mismatches.add(g(), group.mismatches.len() as f64);
        corrupt.add(g(), group.corrupt.len() as f64);
        if let Some(max) = group.max_lag {
            max_lag.add(g(), max as f64);
        }
        if let Some(sum) = group.total_lag {
            sum_lag.add(g(), sum as f64);
        }
        for p in &group.partitions {
            let tp = || {
                vec![
                    ("group", group.group.clone()),
                    ("topic", p.topic.clone()),
                    ("partition", p.partition.to_string()),
                ]
            };
            let with_member = || {
                let mut labels = tp();
                labels.push(("member_host", member_host(group, p.owner.as_deref())));
                labels.push(("consumer_id", p.owner.clone().unwrap_or_default()));
                labels
            };
            partition_status.add(tp(), p.status.code());
            owned.add(tp(), u8::from(p.owner.is_some()));
            if let Some(value) = p.lag {
                lag.add(with_member(), value as f64);
            }
            if let Some(value) = p.committed {
                offset.add(with_member(), value as f64);
            }
            if logs_written.insert((p.topic.clone(), p.partition)) {
                let tp = || {
                    vec![
                        ("topic", p.topic.clone()),
                        ("partition", p.partition.to_string()),
                    ]
                };
                if let Some(end) = p.log_end {
                    latest.add(tp(), end as f64);
                }
                if let Some(start) = p.log_start {
                    earliest.add(tp(), start as f64);
                }
            }
        }
    }
    let mut out = String::new();
    for family in [
        &lag,
        &offset,
        &max_lag,
        &sum_lag,
        &latest,
        &earliest,
        &group_status,
        &partition_status,
        &owned,
        &members,
        &partitions,
        &unowned,
        &unowned_long,
        &handoffs,
        &mismatches,
        &corrupt,
        &store_up,
        &kafka_up,
    ] {
        family.write(&mut out);
    }
    out
}

/// The host of a partition's owner, as its registration says ("" when
/// unowned or unknown).
fn member_host(group: &GroupHealth, owner: Option<&str>) -> String {
    owner
        .and_then(|id| group.members.iter().find(|m| m.id == id))
        .and_then(|m| m.host.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
