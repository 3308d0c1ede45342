//! Groups in etcd seen from outside, for the `tenure` command: the keys
//! under `<prefix>/<group>/` read, offsets written and deleted, and a
//! group's unleased keys deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use crate::errors::{bad_endpoint, no_leader};
use crate::keys::Keys;
use crate::EtcdSecurity;
use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, Txn, TxnOp, TxnOpResponse, WatchOptions,
};
use futures_util::StreamExt;
use tenure_admin::{
    AdminError, GroupAdmin, GroupDeletion, GroupRecords, StoreChange, StoreChanges, WriteGuard,
};
use tenure_core::records::encode_offset;
use tenure_core::{FencingToken, Offset, TopicPartition};

/// etcd's default bound on the operations of one transaction
/// (`--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;

/// The pause before a request refused by a node without a leader goes
/// again (to whichever node the client picks next).
const NO_LEADER_RETRY: Duration = Duration::from_millis(50);

/// Reads and writes the records of the groups under one key prefix of an
/// etcd cluster (a [`GroupAdmin`]).
#[derive(Clone)]
pub struct EtcdAdmin {
    client: Client,
    endpoints: String,
    prefix: String,
    timeout: Duration,
    security: EtcdSecurity,
}

impl std::fmt::Debug for EtcdAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAdmin")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdAdmin {
    /// Connects to the cluster at `endpoints` (`http://host:port`, several
    /// separated by commas), for the groups under `prefix` (the members'
    /// [`crate::EtcdBackend::prefix`], [`crate::DEFAULT_PREFIX`] unless
    /// set). Every request waits at most `timeout`.
    pub async fn connect(
        endpoints: &str,
        prefix: &str,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        EtcdAdmin::connect_with(endpoints, prefix, EtcdSecurity::new(), timeout).await
    }

    /// Connects as [`EtcdAdmin::connect`] does, with the credentials and
    /// TLS settings of a secured cluster.
    pub async fn connect_with(
        endpoints: &str,
        prefix: &str,
        security: EtcdSecurity,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        let store = match security.user_name() {
            Some(user) => format!("etcd at {endpoints} as {user}"),
            None => format!("etcd at {endpoints}"),
        };
        let list: Vec<&str> = endpoints
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        if list.is_empty() {
            return Err(AdminError::BadAddress {
                store,
                detail: "no endpoint given".to_owned(),
            });
        }
        let owned: Vec<String> = list.iter().map(|e| (*e).to_owned()).collect();
        if let Err(detail) = security.check_endpoints(&owned) {
            return Err(AdminError::BadAddress { store, detail });
        }
        let options = security.apply(
            ConnectOptions::new()
                .with_connect_timeout(timeout)
                .with_timeout(timeout)
                // A node cut off from the quorum answers "no leader" at once
                // rather than holding a request (or a watch) until the
                // timeout: the request goes again, to another endpoint
                // (`request`), and a watch on that node ends, so that the
                // monitor opens it again elsewhere instead of waiting on a
                // node that hears nothing.
                .with_require_leader(true),
        );
        let client =
            match tokio::time::timeout(timeout, Client::connect(&list, Some(options))).await {
                Err(_) => {
                    return Err(AdminError::Unreachable {
                        store,
                        detail: format!("no connection within {timeout:?}"),
                    })
                }
                Ok(Err(error)) => {
                    if let Some(refusal) = security.explain(&error) {
                        return Err(refusal.into_admin_error(store));
                    }
                    let detail = error.to_string();
                    return Err(if bad_endpoint(&error) {
                        AdminError::BadAddress { store, detail }
                    } else {
                        AdminError::Unreachable { store, detail }
                    });
                }
                Ok(Ok(client)) => client,
            };
        let admin = EtcdAdmin {
            client,
            endpoints: endpoints.to_owned(),
            prefix: prefix.trim_end_matches('/').to_owned(),
            timeout,
            security,
        };
        // The client connects lazily: one request proves the cluster is there.
        admin.get(&format!("{}/", admin.prefix), true).await?;
        Ok(admin)
    }

    /// Carries out the operations `ops` makes of `group`'s keys (once its
    /// name is checked) in transactions guarded by `guard` (see
    /// `guarded_txns`); `what` names them in errors.
    async fn guarded_ops(
        &self,
        group: &str,
        guard: WriteGuard,
        what: &str,
        ops: impl FnOnce(&Keys) -> Vec<TxnOp>,
    ) -> Result<(), AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let keys = Keys::new(&self.prefix, group);
        let ops = ops(&keys);
        self.guarded_txns(group, &keys, ops, guard, what).await
    }

    /// Sends the request `send` makes (`what` names it in errors) until it
    /// is answered, within the timeout: a refusal from a node without a
    /// leader sends it again, after [`NO_LEADER_RETRY`], as the node did
    /// nothing with it; any other failure is final.
    async fn request<T, Fut>(
        &self,
        what: &str,
        mut send: impl FnMut(Client) -> Fut,
    ) -> Result<T, AdminError>
    where
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = tokio::time::Instant::now() + self.timeout;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, send(self.client.clone())).await {
                Err(_) => {
                    return Err(AdminError::Unreachable {
                        store: self.store(),
                        detail: format!("{what}: no answer within {:?}", self.timeout),
                    })
                }
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(error))
                    if no_leader(&error)
                        && tokio::time::Instant::now() + NO_LEADER_RETRY < deadline =>
                {
                    tokio::time::sleep(NO_LEADER_RETRY).await;
                }
                Ok(Err(error)) => return Err(self.refused(what.to_owned(), error)),
            }
        }
    }

    fn refused(&self, operation: String, error: etcd_client::Error) -> AdminError {
        if let Some(refusal) = self.security.explain(&error) {
            return refusal.into_admin_error(self.store());
        }
        match error {
            etcd_client::Error::GRpcStatus(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable
                        | tonic::Code::DeadlineExceeded
                        | tonic::Code::Cancelled
                ) =>
            {
                AdminError::Unreachable {
                    store: self.store(),
                    detail: format!("{operation}: {}", status.message()),
                }
            }
            etcd_client::Error::TransportError(error) => AdminError::Unreachable {
                store: self.store(),
                detail: format!("{operation}: {error}"),
            },
            error => AdminError::Store {
                store: self.store(),
                operation,
                detail: error.to_string(),
            },
        }
    }

    /// Every key under `prefix` (with values unless `keys_only`), with its
    /// create revision and its lease (0 for none).
    async fn get(
        &self,
        prefix: &str,
        keys_only: bool,
    ) -> Result<Vec<(String, Vec<u8>, i64, i64)>, AdminError> {
        let mut options = GetOptions::new().with_prefix();
        if keys_only {
            options = options.with_keys_only();
        }
        let response = self
            .request(&format!("reading {prefix}"), |mut client| {
                let options = options.clone();
                async move { client.get(prefix, Some(options)).await }
            })
            .await?;
        Ok(response
            .kvs()
            .iter()
            .map(|kv| {
                (
                    String::from_utf8_lossy(kv.key()).into_owned(),
                    kv.value().to_vec(),
                    kv.create_revision(),
                    kv.lease(),
                )
            })
            .collect())
    }

    /// Runs `ops` in transactions of at most [`MAX_TXN_OPS`], each (with
    /// [`WriteGuard::NoLiveMembers`]) only while no member key of the group
    /// exists: the compare is in the same transaction as the writes, so a
    /// member cannot register between a check and the write. A refused
    /// transaction is [`AdminError::GroupActive`], naming the members.
    async fn guarded_txns(
        &self,
        group: &str,
        keys: &Keys,
        ops: Vec<TxnOp>,
        guard: WriteGuard,
        what: &str,
    ) -> Result<(), AdminError> {
        let members = keys.members();
        // All at once where etcd allows it, so a reader sees the old records
        // or the new, not a mix (over an empty range the compare sees
        // version 0). Guarded, one transaction even with nothing to do: the
        // refusal is the answer then.
        let mut chunks: Vec<&[TxnOp]> = ops.chunks(MAX_TXN_OPS).collect();
        if chunks.is_empty() && guard == WriteGuard::NoLiveMembers {
            chunks.push(&[]);
        }
        for chunk in chunks {
            // etcd-client wants the compare before the operations.
            let txn = match guard {
                WriteGuard::None => Txn::new().and_then(chunk.to_vec()),
                WriteGuard::NoLiveMembers => Txn::new()
                    .when([Compare::version(members.clone(), CompareOp::Equal, 0).with_prefix()])
                    .and_then(chunk.to_vec())
                    .or_else([TxnOp::get(
                        members.clone(),
                        Some(GetOptions::new().with_prefix().with_keys_only()),
                    )]),
            };
            // Sent again after "no leader" only: the writes are
            // idempotent, and such a refusal did nothing.
            let response = self
                .request(what, |mut client| {
                    let txn = txn.clone();
                    async move { client.txn(txn).await }
                })
                .await?;
            if !response.succeeded() {
                let live = response
                    .op_responses()
                    .into_iter()
                    .filter_map(|r| match r {
                        TxnOpResponse::Get(get) => Some(get),
                        _ => None,
                    })
                    .flat_map(|get| {
                        get.kvs()
                            .iter()
                            .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
                            .collect::<Vec<_>>()
                    })
                    .map(|key| key.strip_prefix(&members).unwrap_or(&key).to_owned())
                    .collect();
                return Err(AdminError::GroupActive {
                    group: group.to_owned(),
                    members: live,
                });
            }
        }
        Ok(())
    }
}

/// `<topic>/<partition>` of a key under `owners/` or `offsets/`.
fn partition_of(rest: &str) -> Option<TopicPartition> {
    let (topic, number) = rest.rsplit_once('/')?;
    if topic.is_empty() || topic.contains('/') {
        return None;
    }
    Some(TopicPartition::new(topic, number.parse().ok()?))
}

#[async_trait]
impl GroupAdmin for EtcdAdmin {
    fn store(&self) -> String {
        match self.security.user_name() {
            Some(user) => format!("etcd at {} as {user}", self.endpoints),
            None => format!("etcd at {}", self.endpoints),
        }
    }

    async fn groups(&self) -> Result<Vec<String>, AdminError> {
        let base = format!("{}/", self.prefix);
        let groups: BTreeSet<String> = self
            .get(&base, true)
            .await?
            .into_iter()
            .filter_map(|(key, _, _, _)| {
                let rest = key.strip_prefix(&base)?;
                let (group, _) = rest.split_once('/')?;
                Some(group.to_owned())
            })
            .collect();
        Ok(groups.into_iter().collect())
    }

    async fn watch(&self) -> Result<StoreChanges, AdminError> {
        // One prefix watch over every group: each event carries its key,
        // and nothing is read while nothing changes.
        let base = format!("{}/", self.prefix);
        let stream = self
            .request(&format!("watching {base}"), |mut client| {
                let base = base.clone();
                async move {
                    client
                        .watch(base, Some(WatchOptions::new().with_prefix()))
                        .await
                }
            })
            .await?;
        let store = self.store();
        let changes = stream.flat_map(move |response| {
            let changes: Vec<Result<StoreChange, AdminError>> = match response {
                Err(error) => vec![Err(AdminError::Unreachable {
                    store: store.clone(),
                    detail: format!("the watch of {base} broke: {error}"),
                })],
                Ok(response) if response.canceled() => vec![Err(AdminError::Unreachable {
                    store: store.clone(),
                    detail: format!(
                        "the watch of {base} was canceled: {}",
                        response.cancel_reason()
                    ),
                })],
                Ok(response) => {
                    let mut groups: Vec<String> = response
                        .events()
                        .iter()
                        .filter_map(|event| {
                            let key = event.kv()?.key_str().ok()?;
                            let group = key.strip_prefix(&base)?.split('/').next()?;
                            (!group.is_empty()).then(|| group.to_owned())
                        })
                        .collect();
                    // A response's events come in revision order; one
                    // change per group is enough.
                    groups.dedup();
                    groups
                        .into_iter()
                        .map(|g| Ok(StoreChange::Group(g)))
                        .collect()
                }
            };
            futures_util::stream::iter(changes)
        });
        Ok(changes.boxed())
    }

    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let base = Keys::new(&self.prefix, group).all();
        let kvs = self.get(&base, false).await?;
        if kvs.is_empty() {
            return Err(AdminError::UnknownGroup {
                group: group.to_owned(),
                store: self.store(),
            });
        }
        let mut records = GroupRecords::default();
        for (key, value, created, _) in kvs {
            let rest = &key[base.len()..];
            if let Some(id) = rest.strip_prefix("members/") {
                records.add_member(&key, id, &value, None);
            } else if let Some(rest) = rest.strip_prefix("owners/") {
                match partition_of(rest) {
                    Some(partition) => {
                        records.add_owner(partition, &key, value, FencingToken(created as u64))
                    }
                    None => records.add_corrupt(&key, "not an owners/<topic>/<partition> key"),
                }
            } else if let Some(rest) = rest.strip_prefix("offsets/") {
                match partition_of(rest) {
                    Some(partition) => records.add_offset(partition, &key, &value),
                    None => records.add_corrupt(&key, "not an offsets/<topic>/<partition> key"),
                }
            }
        }
        records.members.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(records)
    }

    async fn write_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        self.guarded_ops(group, guard, "writing offsets", |keys| {
            // The progress record speaks of the offset before: it goes.
            offsets
                .iter()
                .flat_map(|(partition, offset)| {
                    [
                        TxnOp::put(keys.offset(partition), encode_offset(*offset), None),
                        TxnOp::delete(keys.progress(partition), None),
                    ]
                })
                .collect()
        })
        .await
    }

    async fn delete_offsets(
        &self,
        group: &str,
        partitions: &BTreeSet<TopicPartition>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        self.guarded_ops(group, guard, "deleting offsets", |keys| {
            // A partition's progress record goes with its offset.
            partitions
                .iter()
                .flat_map(|partition| {
                    [
                        TxnOp::delete(keys.offset(partition), None),
                        TxnOp::delete(keys.progress(partition), None),
                    ]
                })
                .collect()
        })
        .await
    }

    async fn delete_group(
        &self,
        group: &str,
        guard: WriteGuard,
    ) -> Result<GroupDeletion, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let keys = Keys::new(&self.prefix, group);
        let kvs = self.get(&keys.all(), true).await?;
        if kvs.is_empty() {
            return Err(AdminError::UnknownGroup {
                group: group.to_owned(),
                store: self.store(),
            });
        }
        // A leased key is a live session's (a registration, an owner
        // record): it stays, and goes with its lease.
        let (kept, doomed): (Vec<_>, Vec<_>) =
            kvs.into_iter().partition(|(_, _, _, lease)| *lease != 0);
        let removed = doomed.len();
        let deletes = doomed
            .into_iter()
            .map(|(key, _, _, _)| TxnOp::delete(key, None))
            .collect();
        self.guarded_txns(group, &keys, deletes, guard, "deleting the group")
            .await?;
        Ok(GroupDeletion {
            removed,
            kept: kept.into_iter().map(|(key, _, _, _)| key).collect(),
        })
    }
}
