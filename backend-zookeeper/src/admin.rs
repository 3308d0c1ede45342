//! Groups in ZooKeeper seen from outside, for the `tenure` command: the
//! znodes of Kafka 0.8's layout read and (offsets only) written with a
//! session of the tool's own.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tenure_core::records::Layout;
use tenure_core::{FencingToken, Offset, TopicPartition};
use tenure_tokio::admin::{AdminError, GroupAdmin, GroupRecords, WriteGuard};
use zookeeper_client as zk;

/// Reads and writes the records of the groups in one ZooKeeper ensemble (a
/// [`GroupAdmin`]).
#[derive(Debug)]
pub struct ZooKeeperAdmin {
    client: zk::Client,
    connect_string: String,
}

impl ZooKeeperAdmin {
    /// Opens a session with the ensemble at `connect_string`
    /// (`host:port[,host:port...][/chroot]`), waiting at most `timeout`.
    pub async fn connect(connect_string: &str, timeout: Duration) -> Result<Self, AdminError> {
        let store = format!("ZooKeeper at {connect_string}");
        let unreachable = |detail: String| AdminError::Unreachable {
            store: store.clone(),
            detail,
        };
        let connecting = zk::Client::connector()
            .with_session_timeout(timeout.max(Duration::from_secs(4)))
            .connect(connect_string);
        let client = match tokio::time::timeout(timeout, connecting).await {
            Err(_) => return Err(unreachable(format!("no session within {timeout:?}"))),
            Ok(Err(zk::Error::BadArguments(detail))) => {
                return Err(AdminError::BadAddress {
                    store,
                    detail: detail.to_string(),
                })
            }
            Ok(Err(error)) => return Err(unreachable(error.to_string())),
            Ok(Ok(client)) => client,
        };
        match tokio::time::timeout(timeout, client.check_stat("/")).await {
            Err(_) => Err(unreachable(format!("no answer within {timeout:?}"))),
            Ok(Err(error)) => Err(unreachable(error.to_string())),
            Ok(Ok(None)) => Err(AdminError::BadAddress {
                store,
                detail: format!("the chroot {} does not exist", client.path()),
            }),
            Ok(Ok(Some(_))) => Ok(ZooKeeperAdmin {
                client,
                connect_string: connect_string.to_owned(),
            }),
        }
    }

    fn refused(&self, operation: String, error: zk::Error) -> AdminError {
        match error {
            zk::Error::ConnectionLoss | zk::Error::SessionExpired | zk::Error::ClientClosed => {
                AdminError::Unreachable {
                    store: self.store(),
                    detail: format!("{operation}: {error}"),
                }
            }
            error => AdminError::Store {
                store: self.store(),
                operation,
                detail: error.to_string(),
            },
        }
    }

    /// The children of `path`, sorted; none when it does not exist.
    async fn children(&self, path: &str) -> Result<Vec<String>, AdminError> {
        match self.client.list_children(path).await {
            Ok(mut children) => {
                children.sort();
                Ok(children)
            }
            Err(zk::Error::NoNode) => Ok(Vec::new()),
            Err(error) => Err(self.refused(format!("listing {path}"), error)),
        }
    }

    /// The data and stat of every path, read in one pipeline (requests go
    /// out when their futures are made); a path that vanished meanwhile is
    /// left out.
    async fn read_all(
        &self,
        paths: Vec<String>,
    ) -> Result<Vec<(String, Vec<u8>, zk::Stat)>, AdminError> {
        let reads: Vec<_> = paths.iter().map(|p| self.client.get_data(p)).collect();
        let mut found = Vec::with_capacity(paths.len());
        for (path, read) in paths.iter().zip(reads) {
            match read.await {
                Ok((data, stat)) => found.push((path.clone(), data, stat)),
                Err(zk::Error::NoNode) => {}
                Err(error) => return Err(self.refused(format!("reading {path}"), error)),
            }
        }
        Ok(found)
    }

    /// Every `<base>/<topic>/<partition>` znode with its partition; a
    /// partition that is not a number is reported as corrupt.
    async fn partition_nodes(
        &self,
        base: &str,
        records: &mut GroupRecords,
    ) -> Result<Vec<(TopicPartition, String)>, AdminError> {
        let mut nodes = Vec::new();
        for topic in self.children(base).await? {
            for child in self.children(&format!("{base}/{topic}")).await? {
                let path = format!("{base}/{topic}/{child}");
                match child.parse::<u32>() {
                    Ok(number) => nodes.push((TopicPartition::new(&topic, number), path)),
                    Err(_) => records.add_corrupt(&path, "the partition is not a number"),
                }
            }
        }
        Ok(nodes)
    }
}

#[async_trait]
impl GroupAdmin for ZooKeeperAdmin {
    fn store(&self) -> String {
        format!("ZooKeeper at {}", self.connect_string)
    }

    async fn groups(&self) -> Result<Vec<String>, AdminError> {
        self.children(&Layout::groups("")).await
    }

    async fn records(&self, group: &str) -> Result<GroupRecords, AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let layout = Layout::new("", group);
        let base = layout.group();
        match self.client.check_stat(base).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                return Err(AdminError::UnknownGroup {
                    group: group.to_owned(),
                    store: self.store(),
                })
            }
            Err(error) => return Err(self.refused(format!("reading {base}"), error)),
        }
        let mut records = GroupRecords::default();

        let ids = layout.ids();
        let paths = self
            .children(&ids)
            .await?
            .into_iter()
            .map(|child| format!("{ids}/{child}"))
            .collect();
        for (path, data, stat) in self.read_all(paths).await? {
            let id = path.rsplit('/').next().unwrap_or_default();
            // The server's clock when the registration was made.
            let created = u64::try_from(stat.ctime)
                .ok()
                .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
            records.add_member(&path, id, &data, created);
        }

        let owners = self.partition_nodes(&layout.owners(), &mut records).await?;
        let (partitions, paths): (Vec<_>, Vec<_>) = owners.into_iter().unzip();
        let read = self.read_all(paths).await?;
        for (partition, (path, data, stat)) in partitions.into_iter().zip(read) {
            records.add_owner(partition, &path, data, FencingToken(stat.czxid as u64));
        }

        let offsets = self
            .partition_nodes(&layout.offsets(), &mut records)
            .await?;
        let (partitions, paths): (Vec<_>, Vec<_>) = offsets.into_iter().unzip();
        let read = self.read_all(paths).await?;
        for (partition, (path, data, _)) in partitions.into_iter().zip(read) {
            records.add_offset(partition, &path, &data);
        }
        Ok(records)
    }

    async fn write_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, Offset>,
        guard: WriteGuard,
    ) -> Result<(), AdminError> {
        tenure_core::types::validate_path_element("group", group)?;
        let layout = Layout::new("", group);
        if guard == WriteGuard::NoLiveMembers {
            // A multi-op can check a node's data version but not whether it
            // has children: a look just before the write is all there is.
            let live = self.children(&layout.ids()).await?;
            if !live.is_empty() {
                return Err(AdminError::GroupActive {
                    group: group.to_owned(),
                    members: live,
                });
            }
        }
        let options = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        for (partition, offset) in offsets {
            let path = layout.offset(partition);
            let data = offset.to_string().into_bytes();
            match self.client.set_data(&path, &data, None).await {
                Ok(_) => continue,
                Err(zk::Error::NoNode) => {}
                Err(error) => return Err(self.refused(format!("writing {path}"), error)),
            }
            if let Some((parent, _)) = path.rsplit_once('/') {
                match self.client.mkdir(parent, &options).await {
                    Ok(()) | Err(zk::Error::NodeExists) => {}
                    Err(error) => return Err(self.refused(format!("creating {parent}"), error)),
                }
            }
            match self.client.create(&path, &data, &options).await {
                Ok(_) => {}
                // Created by someone else meanwhile: ours is the value to keep.
                Err(zk::Error::NodeExists) => {
                    if let Err(error) = self.client.set_data(&path, &data, None).await {
                        return Err(self.refused(format!("writing {path}"), error));
                    }
                }
                Err(error) => return Err(self.refused(format!("creating {path}"), error)),
            }
        }
        Ok(())
    }
}
