//! tenure-postgres: exactly-once output from Kafka into PostgreSQL.
//!
//! [`PostgresSink`] is a [`TransactionalSink`] for
//! [`tenure_tokio::exactly_once::ExactlyOnce`]: it keeps each partition's
//! next offset and newest fencing token in an offsets table, and writes
//! each batch's output (rows of the application's, by its [`RowWriter`])
//! with the new offset in one transaction, under a row lock on the
//! partition's offsets row, refused when a newer claim has fenced the
//! partition. See `tenure_tokio::exactly_once` for why that is exactly
//! once.
//!
//! The offsets table (default `tenure_offsets`, created if missing):
//!
//! ```sql
//! CREATE TABLE tenure_offsets (
//!     consumer_group text    NOT NULL,
//!     topic          text    NOT NULL,
//!     partition      integer NOT NULL,
//!     next_offset    bigint,          -- NULL: nothing written yet
//!     token          bigint  NOT NULL, -- the newest claim that fenced or wrote
//!     PRIMARY KEY (consumer_group, topic, partition)
//! );
//! ```
//!
//! Tokens only ever grow in one coordination store. A store that starts
//! over (its data wiped) hands out small tokens again, which this table
//! refuses for ever: reset the group's rows' `token` to 0 with it.
//!
//! Connections are plain TCP, a Unix socket, or (feature `tls`,
//! [`PostgresSinkBuilder::tls`]) TLS over TCP with rustls, the server's
//! certificate checked against a CA file, PEM in memory or the system's
//! trust store, and against the host named (as libpq's
//! `sslmode=verify-full`). Each connection sets `idle_in_transaction_session_timeout`, so that a
//! process stopped inside a transaction (SIGSTOP, a long pause) does not
//! hold its partition's row lock, and with it the partition's next owner,
//! for longer than that.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tenure_core::{FencingToken, Offset, TopicPartition};
use tenure_tokio::exactly_once::{Fence, TransactionalSink, Written};
use tenure_tokio::Message;
use tokio::sync::Mutex;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement, Transaction};

pub use tokio_postgres;

#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tls")]
pub use tls::PostgresTls;

/// Writes the application's output of a batch, inside the sink's
/// transaction: the rows it writes commit with the partition's offset, or
/// not at all.
#[async_trait::async_trait]
pub trait RowWriter: Send + Sync + 'static {
    /// Writes the output of `messages` (of `partition`, in offset order,
    /// never empty) in `transaction`. An error rolls the whole batch back;
    /// it is reported and the batch retried while the claim holds.
    async fn write(
        &self,
        transaction: &Transaction<'_>,
        partition: &TopicPartition,
        messages: &[Message],
    ) -> Result<(), tokio_postgres::Error>;

    /// Runs once, on the sink's first connection, before anything is
    /// written: creates the output's tables if they are missing, say.
    /// Several members may run it at once. Does nothing by default.
    async fn setup(&self, client: &Client) -> Result<(), tokio_postgres::Error> {
        let _ = client;
        Ok(())
    }
}

/// A [`RowWriter`] that writes one row per message into a table of its
/// own, created if missing:
///
/// ```sql
/// CREATE TABLE messages (
///     topic      text        NOT NULL,
///     partition  integer     NOT NULL,
///     "offset"   bigint      NOT NULL,
///     token      bigint      NOT NULL, -- the claim it was written under
///     key        bytea,
///     value      bytea,
///     written_at timestamptz NOT NULL DEFAULT now()
/// );
/// ```
///
/// It has no unique key: the sink's fence is what keeps a message from
/// being written twice, and without one a duplicate would show as two
/// rows to an audit rather than fail a batch. Add `PRIMARY KEY (topic,
/// partition, "offset")` as a second guard if you like.
#[derive(Debug, Clone)]
pub struct MessageTable {
    table: String,
    insert: String,
}

impl MessageTable {
    /// Rows into `table` (`table` or `schema.table`).
    pub fn new(table: &str) -> Result<MessageTable, PostgresSinkError> {
        let table = quoted_table(table)?;
        let insert = format!(
            "INSERT INTO {table} (topic, partition, \"offset\", token, key, value) \
             SELECT $1, $2, o, $3, k, v FROM unnest($4::bigint[], $5::bytea[], $6::bytea[]) AS m(o, k, v)"
        );
        Ok(MessageTable { table, insert })
    }
}

#[async_trait::async_trait]
impl RowWriter for MessageTable {
    async fn write(
        &self,
        transaction: &Transaction<'_>,
        partition: &TopicPartition,
        messages: &[Message],
    ) -> Result<(), tokio_postgres::Error> {
        let offsets: Vec<i64> = messages.iter().map(|m| m.offset()).collect();
        let keys: Vec<Option<&[u8]>> = messages.iter().map(|m| m.key()).collect();
        let values: Vec<Option<&[u8]>> = messages.iter().map(|m| m.payload()).collect();
        // The sink checked the token fits a bigint before calling.
        let token = messages.first().map_or(0, |m| m.token().0 as i64);
        let topic: &str = &partition.topic;
        let number = partition.partition as i32;
        transaction
            .execute(
                &self.insert,
                &[&topic, &number, &token, &offsets, &keys, &values],
            )
            .await?;
        Ok(())
    }

    async fn setup(&self, client: &Client) -> Result<(), tokio_postgres::Error> {
        let table = &self.table;
        create_with_lock(
            client,
            &format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                     topic text NOT NULL,
                     partition integer NOT NULL,
                     \"offset\" bigint NOT NULL,
                     token bigint NOT NULL,
                     key bytea,
                     value bytea,
                     written_at timestamptz NOT NULL DEFAULT now())"
            ),
        )
        .await
    }
}

/// Runs `create` (a `CREATE … IF NOT EXISTS`) in a transaction that holds
/// an advisory lock: concurrent `CREATE TABLE IF NOT EXISTS` can fail on
/// PostgreSQL's catalog (a duplicate type), and members that start
/// together take turns instead.
async fn create_with_lock(client: &Client, create: &str) -> Result<(), tokio_postgres::Error> {
    client
        .batch_execute(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock(7340196273); {create}; COMMIT"
        ))
        .await
}

/// What went wrong with PostgreSQL.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresSinkError {
    /// The connection string does not parse.
    #[error("invalid PostgreSQL connection string: {source}")]
    ConnectionString {
        /// What the parser said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The offsets table's name is not one this sink writes unquoted.
    #[error(
        "{name:?} is not a usable table name: letters, digits and '_', not starting with a \
         digit, at most 63 bytes, optionally as schema.table"
    )]
    TableName {
        /// The name given.
        name: String,
    },
    /// PostgreSQL could not be reached, or refused the login.
    #[error("cannot connect to PostgreSQL at {address}: {source}")]
    Connect {
        /// Where it was looked for.
        address: String,
        /// What the client said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The TLS settings cannot be used: a CA file that cannot be read, PEM
    /// with no certificate in it, an empty system trust store, or a
    /// connection string that asks for TLS (`sslmode=require`) with no TLS
    /// settings given.
    #[error("PostgreSQL TLS settings: {detail}")]
    TlsSettings {
        /// What is wrong, and what to do.
        detail: String,
    },
    /// The TLS handshake failed: the server's certificate is not signed by
    /// a trusted CA or does not name the host, the server refused this
    /// client's, or the server does not speak TLS while it is required.
    #[error("TLS to PostgreSQL at {address} failed: {detail}")]
    Tls {
        /// Where it was looked for.
        address: String,
        /// What failed, and what to check.
        detail: String,
        /// What the client said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// A statement of the sink's own failed (or the connection broke).
    #[error("PostgreSQL failed to {what}: {source}")]
    Query {
        /// What the sink was doing.
        what: &'static str,
        /// What the server or the client said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The application's [`RowWriter`] failed; the batch was rolled back.
    #[error("writing the output of {partition} failed: {source}")]
    Output {
        /// The partition.
        partition: TopicPartition,
        /// What the writer's statement said.
        #[source]
        source: tokio_postgres::Error,
    },
    /// The offsets table holds what this sink never writes.
    #[error("the offsets table's row of {partition} is corrupt: {detail}")]
    Corrupt {
        /// The partition.
        partition: TopicPartition,
        /// What is wrong with it.
        detail: String,
    },
    /// A fencing token PostgreSQL's `bigint` cannot hold.
    #[error("fencing token {token} is beyond PostgreSQL's bigint")]
    TokenRange {
        /// The token.
        token: u64,
    },
}

/// Builds a [`PostgresSink`].
pub struct PostgresSinkBuilder {
    url: String,
    group: String,
    offsets_table: String,
    connections: usize,
    connect_timeout: Duration,
    idle_in_transaction_timeout: Duration,
    #[cfg(feature = "tls")]
    tls: Option<PostgresTls>,
}

impl PostgresSinkBuilder {
    /// Speaks TLS to the server with `tls` (feature `tls`): required by
    /// default, whatever `sslmode` the connection string says.
    #[cfg(feature = "tls")]
    pub fn tls(mut self, tls: PostgresTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The offsets table (default `tenure_offsets`), `table` or
    /// `schema.table`.
    pub fn offsets_table(mut self, name: &str) -> Self {
        self.offsets_table = name.to_owned();
        self
    }

    /// How many connections the partitions' writers share (default 4, at
    /// least 1): a connection runs one transaction at a time.
    pub fn connections(mut self, connections: usize) -> Self {
        self.connections = connections.max(1);
        self
    }

    /// How long a connection attempt may take (default 5 s), unless the
    /// connection string sets `connect_timeout`.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long the server keeps a transaction that waits on this process
    /// (default 10 s): past it the server ends the transaction and its row
    /// lock, so a process stopped mid-batch holds its partition's next
    /// owner up no longer. Make it longer than a [`RowWriter`] ever spends
    /// between two statements.
    pub fn idle_in_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_in_transaction_timeout = timeout;
        self
    }

    /// Connects (every connection, so that an unreachable server or a
    /// refused login is an error here, not later), and creates the offsets
    /// table if it is missing.
    pub async fn connect<W: RowWriter>(
        self,
        writer: W,
    ) -> Result<PostgresSink<W>, PostgresSinkError> {
        let mut config: tokio_postgres::Config = self
            .url
            .parse()
            .map_err(|source| PostgresSinkError::ConnectionString { source })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(self.connect_timeout);
        }
        #[cfg(feature = "tls")]
        let tls = match &self.tls {
            Some(tls) => {
                config.ssl_mode(if tls.is_required() {
                    tokio_postgres::config::SslMode::Require
                } else {
                    tokio_postgres::config::SslMode::Prefer
                });
                Some((tls.clone(), tls.connector()?))
            }
            None => None,
        };
        #[cfg(feature = "tls")]
        let asks_tls_without_settings = tls.is_none();
        #[cfg(not(feature = "tls"))]
        let asks_tls_without_settings = true;
        if asks_tls_without_settings
            && config.get_ssl_mode() == tokio_postgres::config::SslMode::Require
        {
            return Err(PostgresSinkError::TlsSettings {
                detail: "the connection string asks for TLS (sslmode=require) but no TLS \
                         settings are given (PostgresSinkBuilder::tls, feature `tls`)"
                    .to_owned(),
            });
        }
        let target = Target {
            address: describe(&config),
            #[cfg(feature = "tls")]
            tls,
            config,
            idle_in_transaction_timeout: self.idle_in_transaction_timeout,
            table: quoted_table(&self.offsets_table)?,
        };
        // The first creates the offsets table the others prepare their
        // statements on, and sets up the writer's tables.
        let first = target.connect(true).await?;
        writer
            .setup(&first.client)
            .await
            .map_err(query_failed("set up the output's tables"))?;
        let mut connections = vec![Mutex::new(Some(first))];
        for _ in 1..self.connections {
            connections.push(Mutex::new(Some(target.connect(false).await?)));
        }
        Ok(PostgresSink {
            group: self.group,
            target,
            connections,
            next: AtomicUsize::new(0),
            writer,
        })
    }
}

/// Where the sink connects, and how.
struct Target {
    config: tokio_postgres::Config,
    /// The TLS settings and the connector made of them, if TLS is on.
    #[cfg(feature = "tls")]
    tls: Option<(PostgresTls, tls::RustlsConnect)>,
    address: String,
    idle_in_transaction_timeout: Duration,
    /// The offsets table, quoted.
    table: String,
}

/// One connection, with the sink's statements prepared on it.
struct Connection {
    client: Client,
    statements: Statements,
}

struct Statements {
    /// Creates a partition's row if it is missing (nothing written, token 0).
    ensure_row: Statement,
    /// Reads and locks a partition's row until the transaction ends.
    lock_row: Statement,
    /// Stores a partition's next offset and token.
    store: Statement,
}

fn query_failed(what: &'static str) -> impl Fn(tokio_postgres::Error) -> PostgresSinkError {
    move |source| PostgresSinkError::Query { what, source }
}

impl Target {
    /// A new client, its connection driven by a task of its own.
    async fn client(&self) -> Result<Client, PostgresSinkError> {
        let failed = |source| PostgresSinkError::Connect {
            address: self.address.clone(),
            source,
        };
        #[cfg(feature = "tls")]
        if let Some((settings, connector)) = &self.tls {
            let (client, connection) = self.config.connect(connector.clone()).await.map_err(
                |source| match tls::explain(&source, settings) {
                    Some(detail) => PostgresSinkError::Tls {
                        address: self.address.clone(),
                        detail,
                        source,
                    },
                    None => failed(source),
                },
            )?;
            drive(connection, self.address.clone());
            return Ok(client);
        }
        let (client, connection) = self.config.connect(NoTls).await.map_err(failed)?;
        drive(connection, self.address.clone());
        Ok(client)
    }

    async fn connect(&self, create_table: bool) -> Result<Connection, PostgresSinkError> {
        let client = self.client().await?;
        client
            .batch_execute(&format!(
                "SET idle_in_transaction_session_timeout = {}",
                self.idle_in_transaction_timeout.as_millis().max(1)
            ))
            .await
            .map_err(query_failed(
                "set the connection's idle-in-transaction timeout",
            ))?;
        let table = &self.table;
        if create_table {
            create_with_lock(
                &client,
                &format!(
                    "CREATE TABLE IF NOT EXISTS {table} (
                         consumer_group text NOT NULL,
                         topic text NOT NULL,
                         partition integer NOT NULL,
                         next_offset bigint,
                         token bigint NOT NULL,
                         PRIMARY KEY (consumer_group, topic, partition))"
                ),
            )
            .await
            .map_err(query_failed("create the offsets table"))?;
        }
        let key = "consumer_group = $1 AND topic = $2 AND partition = $3";
        let prepare = query_failed("prepare the sink's statements on the offsets table");
        let statements = Statements {
            ensure_row: client
                .prepare(&format!(
                    "INSERT INTO {table} (consumer_group, topic, partition, next_offset, token) \
                     VALUES ($1, $2, $3, NULL, 0) ON CONFLICT DO NOTHING"
                ))
                .await
                .map_err(&prepare)?,
            lock_row: client
                .prepare(&format!(
                    "SELECT next_offset, token FROM {table} WHERE {key} FOR UPDATE"
                ))
                .await
                .map_err(&prepare)?,
            store: client
                .prepare(&format!(
                    "UPDATE {table} SET next_offset = $4, token = $5 WHERE {key}"
                ))
                .await
                .map_err(&prepare)?,
        };
        Ok(Connection { client, statements })
    }
}

/// The sink: see the crate docs.
pub struct PostgresSink<W> {
    group: String,
    target: Target,
    connections: Vec<Mutex<Option<Connection>>>,
    next: AtomicUsize,
    writer: W,
}

impl PostgresSink<()> {
    /// Starts building a sink for the consumer group `group` (the offsets
    /// table's rows are the group's), on the PostgreSQL at `url`
    /// (`postgresql://user:password@host:port/database`, or the
    /// `host=… user=…` form).
    pub fn builder(url: &str, group: &str) -> PostgresSinkBuilder {
        PostgresSinkBuilder {
            url: url.to_owned(),
            group: group.to_owned(),
            offsets_table: "tenure_offsets".to_owned(),
            connections: 4,
            connect_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(10),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }
}

/// Drives `connection` (of a client to `address`) until it ends.
fn drive<T>(connection: tokio_postgres::Connection<tokio_postgres::Socket, T>, address: String)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%address, %error, "a PostgreSQL connection ended");
        }
    });
}

/// A partition's offsets row, as locked in a transaction.
struct Stored {
    next_offset: Option<Offset>,
    token: FencingToken,
}

impl<W: RowWriter> PostgresSink<W> {
    /// The application's writer.
    pub fn writer(&self) -> &W {
        &self.writer
    }

    /// A connection: a free one if there is, else the next in turn; one
    /// that broke is replaced.
    async fn connection(
        &self,
    ) -> Result<tokio::sync::MappedMutexGuard<'_, Connection>, PostgresSinkError> {
        let free = self
            .connections
            .iter()
            .find_map(|slot| slot.try_lock().ok());
        let mut guard = match free {
            Some(guard) => guard,
            None => {
                let at = self.next.fetch_add(1, Ordering::Relaxed) % self.connections.len();
                self.connections[at].lock().await
            }
        };
        let usable = match guard.take() {
            Some(connection) if !connection.client.is_closed() => connection,
            _ => self.target.connect(false).await?,
        };
        Ok(tokio::sync::MutexGuard::map(guard, |slot| {
            slot.insert(usable)
        }))
    }

    /// Begins a transaction on `connection` that holds `partition`'s row
    /// (created if missing) locked, for a claim under `token`.
    async fn locked<'c>(
        &self,
        connection: &'c mut Connection,
        partition: &TopicPartition,
        token: FencingToken,
    ) -> Result<(Transaction<'c>, &'c Statements, Stored), PostgresSinkError> {
        bigint(token)?;
        let number = partition_number(partition)?;
        let Connection { client, statements } = connection;
        let transaction = client
            .transaction()
            .await
            .map_err(query_failed("begin a transaction"))?;
        let topic: &str = &partition.topic;
        let key: [&(dyn ToSql + Sync); 3] = [&self.group, &topic, &number];
        transaction
            .execute(&statements.ensure_row, &key)
            .await
            .map_err(query_failed("create a partition's offsets row"))?;
        let row = transaction
            .query_one(&statements.lock_row, &key)
            .await
            .map_err(query_failed("lock a partition's offsets row"))?;
        let read = query_failed("read a partition's offsets row");
        let next_offset: Option<i64> = row.try_get(0).map_err(&read)?;
        let stored_token: i64 = row.try_get(1).map_err(&read)?;
        let corrupt = |detail: String| PostgresSinkError::Corrupt {
            partition: partition.clone(),
            detail,
        };
        if let Some(offset) = next_offset.filter(|o| *o < 0) {
            return Err(corrupt(format!("next_offset is {offset}")));
        }
        let stored_token =
            u64::try_from(stored_token).map_err(|_| corrupt(format!("token is {stored_token}")))?;
        let stored = Stored {
            next_offset,
            token: FencingToken(stored_token),
        };
        Ok((transaction, statements, stored))
    }

    /// Stores `partition`'s next offset and token in `transaction`.
    async fn store(
        &self,
        statements: &Statements,
        transaction: &Transaction<'_>,
        partition: &TopicPartition,
        next_offset: Option<Offset>,
        token: FencingToken,
    ) -> Result<(), PostgresSinkError> {
        let number = partition_number(partition)?;
        let topic: &str = &partition.topic;
        let token = bigint(token)?;
        transaction
            .execute(
                &statements.store,
                &[&self.group, &topic, &number, &next_offset, &token],
            )
            .await
            .map_err(query_failed("store a partition's offset"))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl<W: RowWriter> TransactionalSink for PostgresSink<W> {
    type Error = PostgresSinkError;

    async fn fence(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
    ) -> Result<Fence, PostgresSinkError> {
        let mut guard = self.connection().await?;
        let (transaction, statements, stored) = self.locked(&mut guard, partition, token).await?;
        if stored.token > token {
            // Dropping the transaction rolls it back.
            return Ok(Fence::Newer {
                stored: stored.token,
                next_offset: stored.next_offset,
            });
        }
        self.store(
            statements,
            &transaction,
            partition,
            stored.next_offset,
            token,
        )
        .await?;
        transaction
            .commit()
            .await
            .map_err(query_failed("commit a partition's fence"))?;
        Ok(Fence::Held {
            next_offset: stored.next_offset,
        })
    }

    async fn write(
        &self,
        partition: &TopicPartition,
        token: FencingToken,
        batch: &[Message],
    ) -> Result<Written, PostgresSinkError> {
        let Some(last) = batch.last().map(|m| m.offset()) else {
            return Ok(Written::Applied {
                next_offset: 0,
                written: 0,
            });
        };
        let mut guard = self.connection().await?;
        let (transaction, statements, stored) = self.locked(&mut guard, partition, token).await?;
        if stored.token > token {
            return Ok(Written::Fenced {
                stored: stored.token,
            });
        }
        // What a commit of unknown outcome wrote already is not written
        // again.
        let from = stored.next_offset.unwrap_or(Offset::MIN);
        let fresh = &batch[batch.partition_point(|m| m.offset() < from)..];
        if !fresh.is_empty() {
            self.writer
                .write(&transaction, partition, fresh)
                .await
                .map_err(|source| PostgresSinkError::Output {
                    partition: partition.clone(),
                    source,
                })?;
        }
        let next_offset = from.max(last + 1);
        self.store(
            statements,
            &transaction,
            partition,
            Some(next_offset),
            token,
        )
        .await?;
        transaction
            .commit()
            .await
            .map_err(query_failed("commit a batch"))?;
        Ok(Written::Applied {
            next_offset,
            written: fresh.len(),
        })
    }
}

/// `partition`'s number as PostgreSQL's `integer` (Kafka's are `int32`).
fn partition_number(partition: &TopicPartition) -> Result<i32, PostgresSinkError> {
    i32::try_from(partition.partition).map_err(|_| PostgresSinkError::Corrupt {
        partition: partition.clone(),
        detail: "its number is beyond PostgreSQL's integer".to_owned(),
    })
}

fn bigint(token: FencingToken) -> Result<i64, PostgresSinkError> {
    i64::try_from(token.0).map_err(|_| PostgresSinkError::TokenRange { token: token.0 })
}

/// The table name, quoted, if it is one a user would write unquoted.
fn quoted_table(name: &str) -> Result<String, PostgresSinkError> {
    let invalid = || PostgresSinkError::TableName {
        name: name.to_owned(),
    };
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 2 {
        return Err(invalid());
    }
    let mut quoted = Vec::new();
    for part in parts {
        let mut chars = part.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        if !first_ok
            || part.len() > 63
            || !part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(invalid());
        }
        quoted.push(format!("\"{part}\""));
    }
    Ok(quoted.join("."))
}

/// The server's address, for messages.
fn describe(config: &tokio_postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|host| match host {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    match (hosts.is_empty(), ports.is_empty()) {
        (true, _) => "localhost".to_owned(),
        (false, true) => hosts.join(","),
        (false, false) => format!("{}:{}", hosts.join(","), ports.join(",")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_quoted_and_anything_else_refused() {
        assert_eq!(
            quoted_table("tenure_offsets").ok(),
            Some("\"tenure_offsets\"".into())
        );
        assert_eq!(
            quoted_table("billing.offsets_2").ok(),
            Some("\"billing\".\"offsets_2\"".into())
        );
        for bad in [
            "",
            "1x",
            "a.b.c",
            "x;DROP TABLE y",
            "\"q\"",
            "a b",
            &"t".repeat(64),
        ] {
            assert!(
                matches!(quoted_table(bad), Err(PostgresSinkError::TableName { .. })),
                "{bad:?} was taken"
            );
        }
    }

    #[test]
    fn tokens_beyond_bigint_are_an_error() {
        assert_eq!(bigint(FencingToken(7)).ok(), Some(7));
        assert!(matches!(
            bigint(FencingToken(u64::MAX)),
            Err(PostgresSinkError::TokenRange { token: u64::MAX })
        ));
    }

    #[test]
    fn the_address_in_messages_names_host_and_port() {
        let config: tokio_postgres::Config = "postgresql://u:p@db1:5433/x".parse().expect("a URL");
        assert_eq!(describe(&config), "db1:5433");
        let config: tokio_postgres::Config = "host=db2 user=u".parse().expect("key=value");
        assert_eq!(describe(&config), "db2");
    }
}
