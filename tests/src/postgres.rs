//! The real PostgreSQL of `scripts/services`: a table per test, and what
//! an exactly-once run left in it.

use std::collections::BTreeMap;

use tenure::postgres::tokio_postgres::{self, Client, NoTls};

const HOW_TO_START: &str = "start it with `eval \"$(scripts/services start)\"` (it sets \
                            TENURE_POSTGRES), or run scripts/test";

/// The server's URL; fails the test if it is not set.
pub fn url() -> String {
    match std::env::var("TENURE_POSTGRES") {
        Ok(url) if !url.trim().is_empty() => url.trim().to_owned(),
        _ => {
            panic!("TENURE_POSTGRES is not set: these tests need a real PostgreSQL; {HOW_TO_START}")
        }
    }
}

/// A name for a table no other test uses.
pub fn table(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{name}_{}_{nanos}", std::process::id())
}

/// A client of the server, for the test's own queries; fails the test if
/// it does not answer.
pub async fn client() -> Client {
    let url = url();
    let (client, connection) = tokio_postgres::connect(&url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e}; {HOW_TO_START}"));
    tokio::spawn(connection);
    client
}

/// What a run left in a message table (`tenure::postgres::MessageTable`)
/// and the offsets table, for one topic and group.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Rows in the message table.
    pub rows: u64,
    /// Rows of a (partition, offset) written before.
    pub duplicates: u64,
    /// Offsets below the log end with no row.
    pub lost: u64,
    /// Each partition's stored next offset.
    pub next_offsets: BTreeMap<u32, Option<i64>>,
    /// Rows whose token is lower than that of an earlier offset of their
    /// partition: what a stale write that got through would leave.
    pub token_inversions: u64,
}

impl Audit {
    /// Reads the tables; `ends` are the partitions' log ends.
    pub async fn read(
        client: &Client,
        messages: &str,
        group: &str,
        topic: &str,
        ends: &[i64],
    ) -> Audit {
        let mut audit = Audit::default();
        // One snapshot for both tables: rows and offsets commit together,
        // and are read together.
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .await
            .unwrap_or_else(|e| panic!("begin the audit's snapshot: {e}"));
        let rows = client
            .query(
                &format!(
                    "SELECT partition, \"offset\", count(*), max(token), min(token) \
                     FROM {messages} WHERE topic = $1 GROUP BY 1, 2 ORDER BY 1, 2"
                ),
                &[&topic],
            )
            .await
            .unwrap_or_else(|e| panic!("read {messages}: {e}"));
        let mut seen: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
        let mut present: BTreeMap<u32, u64> = BTreeMap::new();
        for row in rows {
            let (partition, offset, count): (i32, i64, i64) = (row.get(0), row.get(1), row.get(2));
            let (max_token, min_token): (i64, i64) = (row.get(3), row.get(4));
            let partition = partition as u32;
            audit.rows += count as u64;
            audit.duplicates += count as u64 - 1;
            let end = ends.get(partition as usize).copied().unwrap_or(0);
            if offset < end {
                *present.entry(partition).or_default() += 1;
            }
            let highest = seen.entry(partition).or_insert((offset, min_token));
            if min_token < highest.1 {
                audit.token_inversions += 1;
            }
            highest.1 = highest.1.max(max_token);
        }
        for (partition, end) in ends.iter().enumerate() {
            let present = present.get(&(partition as u32)).copied().unwrap_or(0);
            audit.lost += (*end as u64).saturating_sub(present);
        }
        let stored = client
            .query(
                "SELECT partition, next_offset FROM tenure_offsets \
                 WHERE consumer_group = $1 AND topic = $2",
                &[&group, &topic],
            )
            .await
            .unwrap_or_else(|e| panic!("read tenure_offsets: {e}"));
        for row in stored {
            let partition: i32 = row.get(0);
            audit.next_offsets.insert(partition as u32, row.get(1));
        }
        client
            .batch_execute("COMMIT")
            .await
            .unwrap_or_else(|e| panic!("end the audit's snapshot: {e}"));
        audit
    }

    /// Whether every partition's stored next offset is its log end.
    pub fn offsets_at(&self, ends: &[i64]) -> bool {
        ends.iter()
            .enumerate()
            .all(|(p, end)| self.next_offsets.get(&(p as u32)) == Some(&Some(*end)))
    }
}

/// How many rows of `topic` the message table holds.
pub async fn rows(client: &Client, messages: &str, topic: &str) -> u64 {
    let row = client
        .query_one(
            &format!("SELECT count(*) FROM {messages} WHERE topic = $1"),
            &[&topic],
        )
        .await
        .unwrap_or_else(|e| panic!("count {messages}: {e}"));
    row.get::<_, i64>(0) as u64
}
