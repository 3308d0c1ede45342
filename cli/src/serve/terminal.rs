//! `tenure describe --watch`: one group's picture in the terminal,
//! redrawn in place at every change and every Kafka refresh.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use tenure_admin::overview::{GroupHealth, Overview};
use tenure_admin::{GroupAdmin, GroupFilter, Monitor, MonitorConfig};

use crate::args::Connection;
use crate::connect::{connect_kafka, Store};
use crate::error::Failure;
use crate::render::table;

use super::page::timeline_text;

/// How many timeline entries the terminal shows.
const TIMELINE_LINES: usize = 10;

/// Watches `group` and redraws it until interrupted.
pub async fn watch_group(
    store: Store,
    connection: Connection,
    first: Box<dyn GroupAdmin>,
    group: String,
    kafka_interval: Duration,
) -> Result<ExitCode, Failure> {
    tenure_core::types::validate_path_element("group", &group)
        .map_err(tenure_admin::AdminError::from)?;
    let kafka = connect_kafka(&connection).await?;
    let config = MonitorConfig::new()
        .with_groups(GroupFilter::Named([group.clone()].into()))
        .with_kafka_interval(kafka_interval);
    let monitor = Monitor::start(super::connector(store, connection, first), kafka, config);
    let mut updates = monitor.updates();
    let interrupt = tokio::signal::ctrl_c();
    tokio::pin!(interrupt);
    loop {
        let overview = updates.borrow_and_update().clone();
        let mut out = std::io::stdout().lock();
        // Home and clear: the picture replaces the last one.
        let _ = write!(out, "\x1b[H\x1b[2J{}", picture(&overview, &group));
        let _ = out.flush();
        drop(out);
        tokio::select! {
            _ = &mut interrupt => return Ok(ExitCode::SUCCESS),
            changed = updates.changed() => if changed.is_err() {
                return Ok(ExitCode::FAILURE);
            },
        }
    }
}

/// The picture of `group`: its status, members, partitions with their
/// statuses, and the latest of its timeline.
fn picture(overview: &Overview, group: &str) -> String {
    let updated = tenure_admin::serialize::rfc3339(
        std::time::UNIX_EPOCH + Duration::from_millis(overview.updated_ms),
    );
    let mut out = format!("group {group} in {} — {updated}\n", overview.store);
    if let Some(error) = &overview.store_error {
        out.push_str(&format!("the store cannot be watched: {error}\n"));
    }
    if let Some(error) = &overview.kafka_error {
        out.push_str(&format!("Kafka: {error}\n"));
    }
    let Some(health) = overview.group(group) else {
        out.push_str("(not read yet)\n");
        return out;
    };
    out.push_str(&group_text(health));
    out
}

fn group_text(health: &GroupHealth) -> String {
    let mut out = format!(
        "status {} — {}\n{} member(s), {} partition(s), {} unowned, {} handoff(s) in the window\n",
        health.status,
        health.reason,
        health.members.len(),
        health.partitions.len(),
        health.unowned,
        health.handoffs_in_window
    );
    for mismatch in &health.mismatches {
        out.push_str(&format!("warning: {mismatch}\n"));
    }
    out.push('\n');
    if !health.members.is_empty() {
        let rows: Vec<Vec<String>> = health
            .members
            .iter()
            .map(|m| {
                vec![
                    m.id.clone(),
                    m.host.clone().unwrap_or_else(|| "-".to_owned()),
                    m.strategy.clone(),
                    m.subscription.clone(),
                    m.partitions.to_string(),
                ]
            })
            .collect();
        out.push_str(&table(
            &["MEMBER", "HOST", "STRATEGY", "SUBSCRIPTION", "PARTITIONS"],
            &rows,
        ));
        out.push('\n');
    }
    let dash = || "-".to_owned();
    let rows: Vec<Vec<String>> = health
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.topic.clone(),
                p.partition.to_string(),
                p.owner.clone().unwrap_or_else(dash),
                p.token.map_or_else(dash, |t| t.to_string()),
                p.committed.map_or_else(dash, |c| c.to_string()),
                p.log_end.map_or_else(dash, |c| c.to_string()),
                p.lag.map_or_else(dash, |l| l.to_string()),
                p.status.to_string(),
                p.reason.clone(),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "OWNER",
            "TOKEN",
            "COMMITTED",
            "LOG-END",
            "LAG",
            "STATUS",
            "WHY",
        ],
        &rows,
    ));
    if !health.timeline.is_empty() {
        out.push('\n');
        for entry in health.timeline.iter().rev().take(TIMELINE_LINES) {
            out.push_str(&timeline_text(entry));
            out.push('\n');
        }
    }
    out
}
