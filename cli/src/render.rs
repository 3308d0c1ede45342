//! What the `tenure` command prints: aligned tables for people, JSON for
//! scripts.

use std::fmt::Write as _;

use serde_json::{json, Value};
use tenure_admin::{
    DeleteOffsetsPlan, GroupDeletion, GroupDescription, GroupRecords, MemberRecord,
    PartitionDescription, ResetPlan,
};

use crate::parse::format_rfc3339;

/// Left-aligned columns two spaces apart, headers first.
pub(crate) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let headers: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&headers).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// `value` as one line of JSON (its `Serialize` cannot fail: no map with
/// keys that are not strings, no float that is not finite).
fn document(value: &impl serde::Serialize) -> String {
    match serde_json::to_string(value) {
        Ok(document) => format!("{document}\n"),
        Err(error) => format!("{{\"error\":{:?}}}\n", error.to_string()),
    }
}

/// `tenure groups`.
pub fn groups(groups: &[String], json: bool) -> String {
    if json {
        return format!("{}\n", json!(groups));
    }
    groups.iter().map(|g| format!("{g}\n")).collect()
}

/// A member's row in `tenure describe`.
fn member_row(m: &MemberRecord) -> Vec<String> {
    vec![
        m.id.clone(),
        or_dash(m.host.as_deref()),
        m.strategy.clone(),
        m.subscription.to_string(),
        or_dash(m.since.map(format_rfc3339)),
    ]
}

/// A partition's row in `tenure describe`.
fn partition_row(p: &PartitionDescription) -> Vec<String> {
    vec![
        p.partition.topic.to_string(),
        p.partition.partition.to_string(),
        or_dash(p.owner.as_ref().map(|o| o.member.clone())),
        or_dash(p.owner.as_ref().map(|o| o.token.0)),
        or_dash(p.committed),
        or_dash(p.log_end),
        or_dash(p.lag),
    ]
}

/// `tenure describe`.
pub fn description(description: &GroupDescription, json: bool, with_kafka: bool) -> String {
    if json {
        return document(description);
    }
    let mut out = format!(
        "group {} in {}: {} live member(s)\n\n",
        description.group,
        description.store,
        description.members.len()
    );
    if !description.members.is_empty() {
        let rows: Vec<Vec<String>> = description.members.iter().map(member_row).collect();
        out.push_str(&table(
            &["MEMBER", "HOST", "STRATEGY", "TOPICS", "SINCE"],
            &rows,
        ));
        out.push('\n');
    }
    let rows: Vec<Vec<String>> = description.partitions.iter().map(partition_row).collect();
    out.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "OWNER",
            "TOKEN",
            "COMMITTED",
            "LOG-END",
            "LAG",
        ],
        &rows,
    ));
    if !with_kafka {
        out.push_str(
            "\n(log-end offsets and lag need Kafka: pass --bootstrap or set TENURE_KAFKA)\n",
        );
    }
    out
}

/// How a reset plan says where the offsets go.
fn plan_target(plan: &ResetPlan) -> String {
    plan.target
        .map_or_else(|| "offsets from a file".to_owned(), |t| t.to_string())
}

/// `tenure reset-offsets`: the plan, and whether it was written.
pub fn plan(plan: &ResetPlan, json: bool, applied: bool) -> String {
    if json {
        let mut document = serde_json::to_value(plan).unwrap_or(Value::Null);
        if let Value::Object(fields) = &mut document {
            fields.insert("applied".to_owned(), Value::Bool(applied));
        }
        return format!("{document}\n");
    }
    let rows: Vec<Vec<String>> = plan
        .changes
        .iter()
        .map(|c| {
            vec![
                c.partition.topic.to_string(),
                c.partition.partition.to_string(),
                or_dash(c.current),
                c.new.to_string(),
            ]
        })
        .collect();
    let topics = plan.topics();
    let mut out = format!(
        "group {}, {} {}: to {}\n\n",
        plan.group,
        if topics.len() == 1 { "topic" } else { "topics" },
        if topics.is_empty() {
            "(none)".to_owned()
        } else {
            topics.join(", ")
        },
        plan_target(plan)
    );
    out.push_str(&table(&["TOPIC", "PARTITION", "CURRENT", "NEW"], &rows));
    out.push_str(if applied {
        "\noffsets written\n"
    } else {
        "\nnothing written: this is the plan; pass --execute to write it\n"
    });
    out
}

/// `tenure delete-offsets`: what goes, and whether it went.
pub fn offset_deletion(plan: &DeleteOffsetsPlan, json: bool, applied: bool) -> String {
    if json {
        let offsets: Vec<Value> = plan
            .offsets
            .iter()
            .map(|(p, offset)| {
                json!({ "topic": &*p.topic, "partition": p.partition, "offset": offset })
            })
            .collect();
        let absent: Vec<String> = plan.absent.iter().map(ToString::to_string).collect();
        let document = json!({
            "group": plan.group,
            "applied": applied,
            "live_members": plan.live_members,
            "offsets": offsets,
            "absent": absent,
        });
        return format!("{document}\n");
    }
    let rows: Vec<Vec<String>> = plan
        .offsets
        .iter()
        .map(|(p, offset)| {
            vec![
                p.topic.to_string(),
                p.partition.to_string(),
                offset.to_string(),
            ]
        })
        .collect();
    let mut out = format!("group {}: committed offsets to delete\n\n", plan.group);
    out.push_str(&table(&["TOPIC", "PARTITION", "OFFSET"], &rows));
    out.push_str(if applied {
        "\noffsets deleted\n"
    } else {
        "\nnothing deleted\n"
    });
    out
}

/// `tenure delete --dry-run`: what the group has.
pub fn group_records(group: &str, records: &GroupRecords, json: bool) -> String {
    let live: Vec<&str> = records.members.iter().map(|m| m.id.as_str()).collect();
    if json {
        let document = json!({
            "group": group,
            "applied": false,
            "offsets": records.offsets.len(),
            "owners": records.owners.len(),
            "live_members": live,
        });
        return format!("{document}\n");
    }
    let mut out = format!(
        "group {group}: {} committed offset(s), {} owner record(s), {} live member(s)\n",
        records.offsets.len(),
        records.owners.len(),
        live.len()
    );
    out.push_str("nothing deleted\n");
    out
}

/// `tenure delete`: what went, and what live sessions still hold.
pub fn group_deletion(group: &str, deletion: &GroupDeletion, json: bool) -> String {
    if json {
        let document = json!({
            "group": group,
            "applied": true,
            "removed": deletion.removed,
            "kept": deletion.kept,
        });
        return format!("{document}\n");
    }
    if deletion.kept.is_empty() {
        return format!("group {group} deleted ({} record(s))\n", deletion.removed);
    }
    let mut out = format!(
        "group {group}: {} record(s) deleted; {} kept that live sessions hold (they go when \
         those members stop):\n",
        deletion.removed,
        deletion.kept.len()
    );
    for kept in &deletion.kept {
        out.push_str(&format!("  {kept}\n"));
    }
    out
}
