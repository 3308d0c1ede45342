//! The spans and ownership events a member emits, seen by a subscriber that
//! keeps them all.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tenure_core::{Config, TopicPartition};
use tenure_tokio::{GroupMember, MemoryStore, View};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Metadata, Subscriber};

/// A span or event: its name (the message, for an event) and fields.
#[derive(Clone, Debug, Default)]
struct Seen {
    name: String,
    fields: BTreeMap<String, String>,
    /// For a span: closed. For an event: the span it happened in.
    closed: bool,
    within: Option<String>,
}

impl Visit for Seen {
    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.fields
            .insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.fields
            .insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Default)]
struct Log {
    spans: Vec<Seen>,
    references: Vec<usize>,
    events: Vec<Seen>,
    /// The spans entered on the one thread the test runs on.
    stack: Vec<usize>,
}

#[derive(Clone, Default)]
struct Keeper(Arc<Mutex<Log>>);

impl Keeper {
    fn log(&self) -> MutexGuard<'_, Log> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn index(id: &Id) -> usize {
    id.into_u64() as usize - 1
}

impl Subscriber for Keeper {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, attributes: &Attributes<'_>) -> Id {
        let mut seen = Seen {
            name: attributes.metadata().name().to_owned(),
            ..Seen::default()
        };
        attributes.record(&mut seen);
        let mut log = self.log();
        log.spans.push(seen);
        log.references.push(1);
        Id::from_u64(log.spans.len() as u64)
    }

    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut log = self.log();
        values.record(&mut log.spans[index(span)]);
    }

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut seen = Seen::default();
        event.record(&mut seen);
        let mut log = self.log();
        seen.name = seen.fields.remove("message").unwrap_or_default();
        seen.within = log.stack.last().map(|i| log.spans[*i].name.clone());
        log.events.push(seen);
    }

    fn enter(&self, span: &Id) {
        self.log().stack.push(index(span));
    }

    fn exit(&self, _: &Id) {
        self.log().stack.pop();
    }

    fn clone_span(&self, id: &Id) -> Id {
        self.log().references[index(id)] += 1;
        id.clone()
    }

    fn try_close(&self, id: Id) -> bool {
        let mut log = self.log();
        let i = index(&id);
        log.references[i] -= 1;
        let last = log.references[i] == 0;
        if last {
            log.spans[i].closed = true;
        }
        last
    }
}

async fn until(view: &mut tokio::sync::watch::Receiver<View>, done: impl Fn(&View) -> bool) {
    tokio::time::timeout(Duration::from_secs(10), view.wait_for(|v| done(v)))
        .await
        .expect("in time")
        .expect("member alive");
}

#[tokio::test]
async fn a_member_spans_its_claims_commits_drains_and_releases() {
    let keeper = Keeper::default();
    let _guard = tracing::subscriber::set_default(keeper.clone());
    let mut config = Config::new("spans", "m1", ["t"]).expect("valid config");
    config = config.with_commit_interval(Duration::from_millis(50));
    let store = MemoryStore::new();
    let member = GroupMember::builder(config)
        .partitions([("t".to_owned(), 2)].into())
        .auto_drain(true)
        .join(store.backend())
        .await
        .expect("joins");
    let mut view = member.watch_view();
    until(&mut view, |v| v.settled && v.owned.len() == 2).await;
    let token = member.view().owned[&TopicPartition::new("t", 1)];
    member.processed(TopicPartition::new("t", 1), token, 7);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while store.committed("spans", &TopicPartition::new("t", 1)) != Some(8) {
        assert!(tokio::time::Instant::now() < deadline, "no commit");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = member.close().await.expect("closes");

    let log = keeper.log();
    let spans =
        |name: &str| -> Vec<&Seen> { log.spans.iter().filter(|s| s.name == name).collect() };
    let members = spans("member");
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].fields["group"], "spans");
    assert_eq!(members[0].fields["member"], "m1");
    let token = token.0.to_string();
    for (kind, outcome, count) in [
        ("claim", "claimed", 2),
        ("drain", "drained", 2),
        ("release", "released", 2),
    ] {
        let found = spans(kind);
        assert_eq!(found.len(), count, "{kind} spans: {found:?}");
        for span in found {
            assert!(span.closed, "{span:?} ended");
            assert_eq!(span.fields["outcome"], outcome, "{span:?}");
            assert_eq!(span.fields["topic"], "t");
            assert!(span.fields.contains_key("token"), "{span:?}");
        }
    }
    let commits: Vec<&Seen> = spans("commit")
        .into_iter()
        .filter(|s| s.fields["partition"] == "1" && s.fields["offset"] == "8")
        .collect();
    assert!(!commits.is_empty(), "a commit of offset 8");
    for commit in &commits {
        assert!(commit.closed);
        assert_eq!(commit.fields["outcome"], "committed");
        assert_eq!(commit.fields["token"], token);
    }
    for message in ["claimed", "released"] {
        let events: Vec<&Seen> = log.events.iter().filter(|e| e.name == message).collect();
        assert_eq!(events.len(), 2, "{message} events");
        for event in events {
            assert_eq!(event.within.as_deref(), Some("member"), "{event:?}");
            assert!(event.fields.contains_key("token"), "{event:?}");
        }
    }
    assert!(
        !log.events
            .iter()
            .any(|e| e.name == "lost" || e.name == "revoked"),
        "{:?}",
        log.events
    );
}
