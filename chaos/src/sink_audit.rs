//! `--sink postgres`: the end of the run and its audit, read from the
//! table the members wrote in PostgreSQL.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tenure::postgres::tokio_postgres::{self, Client, NoTls};

use crate::audit::{failovers, print_failover, Failover};
use crate::run::{Run, SinkSetup};
use crate::store::{EXACTLY_ONCE_PREFIX, OFFSETS_TABLE};
use crate::transcript::{lock, Log};

/// One row of the run's table.
struct Row {
    partition: u32,
    offset: i64,
    token: u64,
    /// When its transaction started, wall ms.
    written_ms: u64,
}

/// What the table says, and what it should.
#[derive(Default)]
struct SinkAudit {
    messages: i64,
    rows: usize,
    duplicates: usize,
    lost: usize,
    offsets_at_end: bool,
    token_inversions: usize,
    fenced_writes_refused: usize,
    fenced_messages: u64,
    failures: usize,
    failover: Vec<Failover>,
    /// The first few violations, for the reader.
    findings: Vec<String>,
}

impl SinkAudit {
    fn ok(&self) -> bool {
        self.duplicates == 0
            && self.lost == 0
            && self.offsets_at_end
            && self.token_inversions == 0
            && self.fenced_writes_refused >= 1
    }

    fn note(&mut self, line: String) {
        if self.findings.len() < 10 {
            self.findings.push(line);
        }
    }
}

async fn connect(url: &str) -> Result<Client, String> {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("PostgreSQL at {url}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("chaos: PostgreSQL: {e}");
        }
    });
    Ok(client)
}

/// Every partition's next offset in the offsets table (0: nothing
/// written yet).
async fn next_offsets(
    client: &Client,
    group: &str,
    topic: &str,
    partitions: usize,
) -> Result<Vec<i64>, String> {
    let read = |e: tokio_postgres::Error| format!("read {OFFSETS_TABLE}: {e}");
    let rows = client
        .query(
            &format!(
                "SELECT partition, next_offset FROM {OFFSETS_TABLE} \
                 WHERE consumer_group = $1 AND topic = $2"
            ),
            &[&group, &topic],
        )
        .await
        .map_err(read)?;
    let mut next = vec![0i64; partitions];
    for row in rows {
        let p: i32 = row.try_get(0).map_err(read)?;
        let offset: Option<i64> = row.try_get(1).map_err(read)?;
        if let Some(n) = usize::try_from(p).ok().and_then(|p| next.get_mut(p)) {
            *n = offset.unwrap_or(0);
        }
    }
    Ok(next)
}

async fn rows(client: &Client, table: &str, topic: &str) -> Result<Vec<Row>, String> {
    let read = |e: tokio_postgres::Error| format!("read {table}: {e}");
    let rows = client
        .query(
            &format!(
                "SELECT partition, \"offset\", token, \
                 (extract(epoch FROM written_at) * 1000)::bigint FROM {table} \
                 WHERE topic = $1"
            ),
            &[&topic],
        )
        .await
        .map_err(read)?;
    rows.iter()
        .map(|row| {
            let partition: i32 = row.try_get(0).map_err(read)?;
            let offset: i64 = row.try_get(1).map_err(read)?;
            let token: i64 = row.try_get(2).map_err(read)?;
            let written_ms: i64 = row.try_get(3).map_err(read)?;
            Ok(Row {
                partition: partition as u32,
                offset,
                token: token as u64,
                written_ms: written_ms as u64,
            })
        })
        .collect()
}

/// Waits for the backlog (every partition's next offset in the offsets
/// table at its log end, up to 60 s), closes the group, audits the table
/// and prints the result: whether the run held.
pub async fn finish(run: &mut Run, sink: &SinkSetup, ends: &[i64]) -> Result<bool, String> {
    let client = connect(&sink.postgres).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let next = next_offsets(&client, &run.group, &run.topic, ends.len()).await?;
        if next == ends || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    run.close_group().await;

    let next = next_offsets(&client, &run.group, &run.topic, ends.len()).await?;
    let rows = rows(&client, &sink.table, &run.topic).await?;
    let audit = {
        let log = lock(&run.log);
        audit(&log, run, ends, &next, &rows)
    };
    println!(
        "exactly_once: messages={} rows={} duplicates={} lost={} offsets_at_end={} \
         token_inversions={} fenced_writes_refused={} fenced_messages={} failures={}",
        audit.messages,
        audit.rows,
        audit.duplicates,
        audit.lost,
        audit.offsets_at_end,
        audit.token_inversions,
        audit.fenced_writes_refused,
        audit.fenced_messages,
        audit.failures
    );
    print_failover(&audit.failover, "row written", run);
    if !audit.offsets_at_end {
        println!("offsets table {next:?}, log ends {ends:?}");
    }
    for line in &audit.findings {
        println!("  {line}");
    }
    if audit.fenced_writes_refused == 0 {
        println!(
            "  FAILED: no write was refused by the fence (no `f` line with dropped messages \
             from any member): this run did not exercise the fence, so it shows nothing \
             about it"
        );
    }
    // The store's committed offsets follow the table's (a batch is
    // acknowledged once its transaction committed): not part of the
    // verdict, worth a word when they differ.
    match (run.store)
        .committed(EXACTLY_ONCE_PREFIX, &run.group, &run.topic, ends.len())
        .await
    {
        Ok(committed) if committed != ends => println!(
            "  note: the store's committed offsets {committed:?} are not the log \
             ends {ends:?} (not part of the verdict)"
        ),
        Ok(_) => {}
        Err(e) => println!("  note: {e}"),
    }
    let ok = audit.ok();
    if ok {
        let cleanup = format!(
            "DROP TABLE {}; DELETE FROM {OFFSETS_TABLE} \
             WHERE consumer_group = '{}' AND topic = '{}'",
            sink.table, run.group, run.topic
        );
        if let Err(e) = client.batch_execute(&cleanup).await {
            eprintln!("chaos: cannot drop table {}: {e}", sink.table);
        }
    } else {
        println!(
            "  the rows stay in table {} (TENURE_POSTGRES), the offsets in {OFFSETS_TABLE} \
             (consumer_group '{}', topic '{}')",
            sink.table, run.group, run.topic
        );
    }
    Ok(ok)
}

/// Audits the rows of the run's table against the log ends and the
/// offsets table's next offsets.
fn audit(log: &Log, run: &Run, ends: &[i64], next: &[i64], rows: &[Row]) -> SinkAudit {
    let mut audit = SinkAudit {
        messages: ends.iter().sum(),
        rows: rows.len(),
        offsets_at_end: next == ends,
        ..SinkAudit::default()
    };
    // Who held a token, for the findings.
    let mut holder: BTreeMap<(u32, u64), &str> = BTreeMap::new();
    for (member, _, kind, p, token) in &log.events {
        if kind == "assigned" {
            holder.insert((*p, *token), member);
        }
    }
    let who = |p: u32, token: u64| {
        let member = holder.get(&(p, token)).copied().unwrap_or("?");
        format!("{token} ({member})")
    };
    // (partition, offset) → tokens of its rows.
    let mut written: BTreeMap<(u32, i64), Vec<u64>> = BTreeMap::new();
    for row in rows {
        written
            .entry((row.partition, row.offset))
            .or_default()
            .push(row.token);
    }
    audit.duplicates = rows.len() - written.len();
    for ((p, o), tokens) in &written {
        if tokens.len() > 1 {
            let tokens: Vec<String> = tokens.iter().map(|t| who(*p, *t)).collect();
            audit.note(format!(
                "duplicate: partition {p} offset {o} written {} times, under tokens {}",
                tokens.len(),
                tokens.join(", ")
            ));
        }
        if ends.get(*p as usize).is_none_or(|end| o >= end) {
            audit.note(format!("beyond the log end: partition {p} offset {o}"));
        }
    }
    for (p, end) in ends.iter().enumerate() {
        let mut first_lost = None;
        let mut lost_here = 0;
        for o in 0..*end {
            if !written.contains_key(&(p as u32, o)) {
                first_lost.get_or_insert(o);
                lost_here += 1;
            }
        }
        if let Some(first) = first_lost {
            audit.lost += lost_here;
            audit.note(format!(
                "lost: partition {p}: {lost_here} offsets without a row, the first {first} \
                 (log end {end})"
            ));
        }
    }
    // Token inversions: by offset, a row under a token older than one
    // of an earlier offset.
    let mut newest: BTreeMap<u32, (u64, i64)> = BTreeMap::new();
    for ((p, o), tokens) in &written {
        let before = newest.get(p).copied();
        for token in tokens {
            if let Some((newer, at)) = before {
                if *token < newer {
                    audit.token_inversions += 1;
                    audit.note(format!(
                        "token inversion: partition {p} offset {o} under token {}, after \
                         offset {at} under {}",
                        who(*p, *token),
                        who(*p, newer)
                    ));
                }
            }
        }
        if let Some(max) = tokens.iter().max() {
            if before.is_none_or(|(newer, _)| *max > newer) {
                newest.insert(*p, (*max, *o));
            }
        }
    }
    // The fence at work, and the attempts that failed.
    for (_, _, _, _, _, dropped) in &log.fenced {
        if *dropped > 0 {
            audit.fenced_writes_refused += 1;
            audit.fenced_messages += dropped;
        }
    }
    audit.failures = log.failures.len();
    let failing = audit.duplicates > 0
        || audit.lost > 0
        || !audit.offsets_at_end
        || audit.token_inversions > 0;
    if failing {
        for (member, line) in log.failures.iter().take(3) {
            audit.note(format!("{member} said: {line}"));
        }
    }
    // Failover: the first row written after the kill.
    audit.failover = failovers(log, run, |_, p, killed_at| {
        rows.iter()
            .filter(|row| row.partition == p && row.written_ms > killed_at)
            .map(|row| row.written_ms)
            .min()
    });
    audit
}
