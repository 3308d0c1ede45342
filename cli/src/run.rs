//! What each subcommand does: reads and writes through `tenure-admin`,
//! prints through [`crate::render`], and tells on stderr what a plan
//! leaves out or what a write would be refused for.

use std::path::Path;
use std::process::ExitCode;

use clap::ArgMatches;
use tenure_admin::{
    self as admin, AdminError, GroupAdmin, PartitionSelection, ResetPlan, ResetTarget,
};

use crate::args::{Cli, Command, Connection, ResetArgs};
use crate::connect::{connect_kafka, connect_store, pick_store};
use crate::csv;
use crate::error::Failure;
use crate::render;

/// Runs the subcommand `cli` names: connects, reads or writes, prints.
pub async fn run(cli: Cli, matches: &ArgMatches) -> Result<ExitCode, Failure> {
    let store = pick_store(matches, &cli.connection)?;
    let admin = connect_store(store.clone(), &cli.connection).await?;
    match cli.command {
        Command::Groups { json } => {
            let groups = admin.groups().await?;
            print!("{}", render::groups(&groups, json));
            Ok(ExitCode::SUCCESS)
        }
        Command::Describe {
            group,
            watch: true,
            kafka_interval,
            ..
        } => crate::serve::watch_group(store, cli.connection, admin, group, kafka_interval).await,
        Command::Serve(args) => crate::serve::serve(store, cli.connection, admin, args).await,
        Command::Describe { group, json, .. } => {
            let client = connect_kafka(&cli.connection).await?;
            let description = admin::describe(admin.as_ref(), &group, client.as_deref()).await?;
            print!(
                "{}",
                render::description(&description, json, client.is_some())
            );
            for record in &description.corrupt {
                eprintln!("warning: {record}");
            }
            Ok(if description.corrupt.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::ResetOffsets(args) => reset_offsets(admin.as_ref(), &cli.connection, args).await,
        Command::DeleteOffsets {
            group,
            topics,
            dry_run,
            force,
            json,
        } => {
            let plan = admin::plan_delete_offsets(admin.as_ref(), &group, &topics).await?;
            for absent in &plan.absent {
                eprintln!("note: group {group} has no committed offset for {absent}: skipped");
            }
            if plan.offsets.is_empty() {
                return Err(Failure::NothingToDelete { group });
            }
            if dry_run {
                print!("{}", render::offset_deletion(&plan, json, false));
                note_live_members(&plan.live_members, force, "without --dry-run");
                return Ok(ExitCode::SUCCESS);
            }
            match admin::apply_delete_offsets(admin.as_ref(), &plan, force).await {
                Ok(()) => {
                    print!("{}", render::offset_deletion(&plan, json, true));
                    Ok(ExitCode::SUCCESS)
                }
                Err(error @ AdminError::GroupActive { .. }) => {
                    eprint!("{}", render::offset_deletion(&plan, false, false));
                    Err(error.into())
                }
                Err(error) => Err(error.into()),
            }
        }
        Command::Delete {
            group,
            dry_run,
            force,
            json,
        } => {
            if dry_run {
                let records = admin.records(&group).await?;
                print!("{}", render::group_records(&group, &records, json));
                let live: Vec<String> = records.members.iter().map(|m| m.id.clone()).collect();
                note_live_members(&live, force, "without --dry-run");
                return Ok(ExitCode::SUCCESS);
            }
            let deletion = admin::delete_group(admin.as_ref(), &group, force).await?;
            print!("{}", render::group_deletion(&group, &deletion, json));
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Tells, on stderr, that the write a plan shows would be refused for
/// `live` members unless forced; `how` names what would write.
fn note_live_members(live: &[String], force: bool, how: &str) {
    if !live.is_empty() && !force {
        eprintln!(
            "note: the group has live members ({}); {how} this is refused unless --force",
            live.join(", ")
        );
    }
}

/// `tenure reset-offsets`: plans, prints, and with `--execute` writes.
async fn reset_offsets(
    admin: &dyn GroupAdmin,
    connection: &Connection,
    args: ResetArgs,
) -> Result<ExitCode, Failure> {
    let Some(client) = connect_kafka(connection).await? else {
        return Err(Failure::NoKafka);
    };
    let group = args.group.as_str();
    let plan = if let Some(path) = &args.from_file {
        let text = read_file(path)?;
        let offsets =
            csv::parse_offsets_csv(&text, group).map_err(|source| Failure::OffsetsFile {
                path: path.clone(),
                source,
            })?;
        match admin::plan_listed(admin, &client, group, &offsets, args.force).await {
            // A partition Kafka does not have is named with its line.
            Err(
                source @ (AdminError::UnknownTopic { .. } | AdminError::UnknownPartition { .. }),
            ) => {
                let line = match &source {
                    AdminError::UnknownPartition {
                        topic, partition, ..
                    } => line_of(&text, group, topic, Some(*partition)),
                    AdminError::UnknownTopic { topic } => line_of(&text, group, topic, None),
                    _ => None,
                };
                return Err(Failure::NotInKafka {
                    path: path.clone(),
                    line,
                    source,
                });
            }
            other => other,
        }
    } else {
        let target = if let Some(to) = args.to {
            to
        } else if let Some(by) = args.shift_by {
            ResetTarget::ShiftBy(by)
        } else if let Some(duration) = args.by_duration {
            ResetTarget::Duration(duration)
        } else {
            // clap requires one target: --to-current is the one left.
            ResetTarget::Current
        };
        let selection = if args.all_topics {
            PartitionSelection::AllTopics
        } else {
            PartitionSelection::Topics(args.topics.clone())
        };
        admin::plan_reset(admin, &client, group, &selection, target, args.force).await
    }
    .map_err(|error| match error {
        source @ AdminError::UnknownGroup { .. } => Failure::NewGroup { source },
        error => error.into(),
    })?;
    note_plan(&plan);
    if plan.changes.is_empty() {
        return Err(Failure::NothingToReset {
            group: group.to_owned(),
        });
    }
    let output = |applied| {
        if args.export {
            csv::offsets_csv(&plan)
        } else {
            render::plan(&plan, args.json, applied)
        }
    };
    if !args.execute {
        print!("{}", output(false));
        note_live_members(&plan.live_members, args.force, "with --execute");
        return Ok(ExitCode::SUCCESS);
    }
    match admin::apply_reset(admin, &plan, args.force).await {
        Ok(()) => {
            print!("{}", output(true));
            Ok(ExitCode::SUCCESS)
        }
        Err(error @ AdminError::GroupActive { .. }) => {
            eprint!("{}", render::plan(&plan, false, false));
            Err(error.into())
        }
        Err(error) => Err(error.into()),
    }
}

/// Tells, on stderr, what a plan leaves out or bends: topics Kafka does not
/// know, offsets clamped to the log.
fn note_plan(plan: &ResetPlan) {
    for topic in &plan.missing_topics {
        eprintln!("note: topic {topic} does not exist in Kafka: its offsets are left as they are");
    }
    for change in &plan.changes {
        if let Some(asked) = change.clamped_from {
            eprintln!(
                "note: {}:{}: offset {asked} is outside the log, {} is used",
                change.partition.topic, change.partition.partition, change.new
            );
        }
    }
}

/// Reads a whole file (`-`: standard input), naming it in its error.
fn read_file(path: &Path) -> Result<String, Failure> {
    if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .map_err(|source| Failure::Read {
        path: path.to_owned(),
        source,
    })
}

/// The number of the first line of an offsets file that names `topic` (and
/// `partition`, if given).
fn line_of(text: &str, group: &str, topic: &str, partition: Option<u32>) -> Option<usize> {
    text.lines().enumerate().find_map(|(index, line)| {
        let offsets = csv::parse_offsets_csv(line, group).ok()?;
        offsets
            .keys()
            .any(|p| &*p.topic == topic && partition.is_none_or(|n| p.partition == n))
            .then_some(index + 1)
    })
}
