//! Connecting to the cluster, and the topics and partition counts a
//! subscription covers, followed as they change.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rskafka::client::{Client, ClientBuilder};
use tenure_core::assignment::PartitionCounts;
use tenure_core::Subscription;
use tokio::sync::mpsc;

use crate::config::KafkaConfig;
use crate::error::KafkaError;
use crate::event::DataEvent;
use tenure_core::credentials::error_chain;

/// Connects to the brokers, bounded by the connect timeout.
pub async fn connect(config: &KafkaConfig) -> Result<Arc<Client>, KafkaError> {
    if config.bootstrap.is_empty() {
        return Err(KafkaError::NoBootstrap);
    }
    if config
        .max_processing_stall
        .is_some_and(|stall| stall.is_zero())
    {
        return Err(KafkaError::Config(
            "max_processing_stall must be greater than zero (None turns the check off)".to_owned(),
        ));
    }
    let bootstrap = config.bootstrap.join(",");
    let unreachable = |detail: String| KafkaError::Unreachable {
        bootstrap: bootstrap.clone(),
        detail,
        source: None,
    };
    // A refused password or an untrusted certificate ends the connection
    // attempts at once, with its cause. Other failures of the connection (a
    // broker not listening yet) are retried by the client until its
    // deadline, and then reported with their cause, rather than retried for
    // ever. The client counts only its pauses against that deadline, not
    // the attempts (a TLS exchange takes a while on a loaded machine): half
    // the connect timeout leaves the other half for them.
    let backoff = rskafka::BackoffConfig {
        deadline: Some(config.connect_timeout / 2),
        ..rskafka::BackoffConfig::default()
    };
    let building = config
        .security
        .apply(ClientBuilder::new(config.bootstrap.clone()))
        .client_id(config.client_id.as_str())
        .backoff_config(backoff)
        .build();
    let failed = |error: rskafka::client::error::Error| {
        let detail = error_chain(&error);
        let source = Arc::new(error);
        config
            .security
            .explain(&bootstrap, &detail, &source)
            .unwrap_or_else(|| KafkaError::Unreachable {
                bootstrap: bootstrap.clone(),
                detail,
                source: Some(source),
            })
    };
    // The retries end at the deadline with their cause; this bound, a
    // little later, only catches an attempt that hangs.
    let bound = config.connect_timeout + Duration::from_secs(3);
    let client = tokio::time::timeout(bound, building)
        .await
        .map_err(|_| unreachable(format!("no answer within {bound:?}")))?
        .map_err(failed)?;
    // The client connects lazily: ask for metadata to know the brokers are
    // really there.
    tokio::time::timeout(config.connect_timeout, client.list_topics())
        .await
        .map_err(|_| unreachable(format!("no metadata within {:?}", config.connect_timeout)))?
        .map_err(failed)?;
    Ok(Arc::new(client))
}

/// What the cluster's topics give a subscription.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct Subscribed {
    /// The partition counts of the topics it takes.
    pub counts: PartitionCounts,
    /// The topics it names that do not exist (yet).
    pub missing: BTreeSet<String>,
}

/// Lists the cluster's topics and keeps those `subscription` takes, with
/// their partition counts: all of them at once, so that one topic deleted
/// or not created yet does not stop the others.
pub async fn subscribed_topics(
    client: &Client,
    config: &KafkaConfig,
    subscription: &Subscription,
) -> Result<Subscribed, KafkaError> {
    let bootstrap = config.bootstrap.join(",");
    let listed = tokio::time::timeout(config.connect_timeout, client.list_topics())
        .await
        .map_err(|_| KafkaError::Unreachable {
            bootstrap: bootstrap.clone(),
            detail: "metadata request timed out".to_owned(),
            source: None,
        })?
        .map_err(|e| KafkaError::Unreachable {
            bootstrap: bootstrap.clone(),
            detail: e.to_string(),
            source: Some(Arc::new(e)),
        })?;
    let mut subscribed = Subscribed::default();
    for topic in &listed {
        // A topic being created can be listed before its partitions are.
        if subscription.includes(&topic.name) && !topic.partitions.is_empty() {
            let count = u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX);
            subscribed.counts.insert(topic.name.clone(), count);
        }
    }
    if let Some(named) = subscription.named_topics() {
        subscribed.missing = named
            .iter()
            .filter(|topic| !subscribed.counts.contains_key(*topic))
            .cloned()
            .collect();
    }
    Ok(subscribed)
}

/// Follows the cluster's topics every `config.metadata_refresh`, from what
/// the join found (`known`): sends the subscription's partition counts after
/// each listing, and reports each named topic as it goes missing.
///
/// A topic is taken as gone only once two listings in a row leave it out,
/// so that one answer from a broker whose metadata lags does not make the
/// member let go of a topic that is still there.
pub(crate) async fn follow_topics(
    client: Arc<Client>,
    config: KafkaConfig,
    subscription: Subscription,
    known: Subscribed,
    events: mpsc::UnboundedSender<DataEvent>,
) {
    let unknown = |topic: &String| {
        DataEvent::Problem(KafkaError::UnknownTopic {
            topic: topic.clone(),
            bootstrap: config.bootstrap.join(","),
        })
    };
    for topic in &known.missing {
        if events.send(unknown(topic)).is_err() {
            return;
        }
    }
    let Subscribed {
        counts: mut last,
        mut missing,
    } = known;
    let mut left_out_once = BTreeSet::new();
    let mut tick = tokio::time::interval(config.metadata_refresh);
    tick.tick().await;
    loop {
        tick.tick().await;
        let sent = match subscribed_topics(&client, &config, &subscription).await {
            Ok(mut subscribed) => {
                // Left out once: kept for now. Left out twice: gone.
                let mut kept = BTreeSet::new();
                for (topic, &count) in &last {
                    if !subscribed.counts.contains_key(topic) && !left_out_once.contains(topic) {
                        kept.insert(topic.clone());
                    }
                    if kept.contains(topic) {
                        subscribed.counts.insert(topic.clone(), count);
                    }
                }
                left_out_once = kept;
                let newly_missing: Vec<&String> = subscribed.missing.difference(&missing).collect();
                let mut sent = newly_missing
                    .into_iter()
                    .all(|topic| events.send(unknown(topic)).is_ok());
                missing = subscribed.missing;
                last = subscribed.counts.clone();
                sent &= events.send(DataEvent::Counts(subscribed.counts)).is_ok();
                sent
            }
            Err(problem) => events.send(DataEvent::Problem(problem)).is_ok(),
        };
        if !sent {
            return;
        }
    }
}
