//! One watch stream per backend, carrying every key it watches.
//!
//! etcd multiplexes any number of watches over one bidirectional Watch
//! stream. A stream per watch would cost the server a stream per watched
//! key: with thousands of partitions waiting for their owners, thousands of
//! streams. Here one task holds one stream, registers every watch on it
//! (each with its key, prefix flag and start revision), routes responses to
//! their watch by watch id, cancels on the server the watches that fired or
//! that nobody waits for any more, and when the stream breaks opens another
//! and registers every live watch on it again, from the revision after the
//! last event it saw.
//!
//! The stream is opened when the first watch is registered and kept while
//! the backend runs, idle or not (a member's membership watch is set again
//! after every notification: closing an idle stream would open one per
//! membership change). The task ends once the backend and every watch it
//! handed out are gone.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, WatchOptions, WatchRequestSender, WatchResponse, WatchResponseStream};
use tenure_tokio::store::{RequestCounts, RequestKind};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The pause before a broken stream is opened again, and before a watch the
/// server refused or ended by itself is asked for again.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// Whether an event is the change a watch waits for.
pub(crate) type Fires<E = etcd_client::Event> = Box<dyn FnMut(&E) -> bool + Send + 'static>;

/// An event as the task reads it: generic so that routing can be tested
/// without a server.
trait Change {
    /// The revision the event made, if it says.
    fn revision(&self) -> Option<i64>;
}

impl Change for etcd_client::Event {
    fn revision(&self) -> Option<i64> {
        self.kv().map(|kv| kv.mod_revision())
    }
}

/// What the task reads of a response of the stream.
struct Answer<'a, E> {
    watch_id: i64,
    created: bool,
    canceled: bool,
    compact_revision: i64,
    cancel_reason: &'a str,
    events: &'a [E],
}

impl<'a> From<&'a WatchResponse> for Answer<'a, etcd_client::Event> {
    fn from(response: &'a WatchResponse) -> Self {
        Answer {
            watch_id: response.watch_id(),
            created: response.created(),
            canceled: response.canceled(),
            compact_revision: response.compact_revision(),
            cancel_reason: response.cancel_reason(),
            events: response.events(),
        }
    }
}

/// Why a watch stream could not be opened, or ended.
#[derive(Debug, thiserror::Error)]
enum StreamError {
    /// Opening the stream went unanswered.
    #[error("no answer to opening a watch stream within {0:?}")]
    OpenTimeout(Duration),
    /// Opening the stream failed.
    #[error("cannot open a watch stream: {0}")]
    Open(#[source] etcd_client::Error),
    /// The stream failed (the connection broke, the server went away).
    #[error("watch stream broken: {0}")]
    Broken(#[source] etcd_client::Error),
    /// The server ended the stream.
    #[error("watch stream closed by the server")]
    Closed,
}

/// What the stream's task needs of the backend.
pub(crate) struct Link {
    /// The client; it reconnects by itself.
    pub(crate) client: Client,
    /// How long opening a stream may go unanswered.
    pub(crate) request_timeout: Duration,
    /// The backend's count of requests sent to etcd: each watch registered
    /// (again) on a stream is one.
    pub(crate) requests: Arc<RequestCounts>,
}

/// The backend's handle on its watch stream: registers watches on it.
#[derive(Debug)]
pub(crate) struct Watches {
    requests: mpsc::UnboundedSender<Request>,
    /// The id of the next watch registered (the task's own ids, not etcd's
    /// watch ids, which are per stream).
    next: AtomicU64,
}

/// A request to the stream's task.
enum Request<E = etcd_client::Event> {
    /// Register a watch.
    Add { id: u64, watch: Entry<E> },
    /// Nobody waits for this watch any more: cancel it.
    Remove { id: u64 },
}

impl Watches {
    /// The handle, and the task that holds the stream (for the caller to
    /// spawn): it ends once the handle and every [`Registration`] are gone.
    pub(crate) fn new(link: Link) -> (Watches, impl std::future::Future<Output = ()> + Send) {
        let (requests, receiver) = mpsc::unbounded_channel();
        let watches = Watches {
            requests,
            next: AtomicU64::new(1),
        };
        (watches, run(link, receiver))
    }

    /// Watches `key` (every key under it if `prefix`) from revision `from`
    /// until an event `fires` accepts, or history it needs is lost to
    /// compaction (so such an event may have been missed): then the
    /// registration fires, once. Dropping the registration cancels the
    /// watch.
    pub(crate) fn add(&self, key: String, prefix: bool, from: i64, fires: Fires) -> Registration {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (fired, notice) = oneshot::channel();
        let watch = Entry {
            key,
            prefix,
            from,
            fires,
            fired,
            state: State::Unsent,
        };
        // A task that is gone has dropped `fired`: the registration then
        // ends without firing, as it must once the backend is gone.
        let _ = self.requests.send(Request::Add { id, watch });
        Registration {
            id,
            requests: self.requests.clone(),
            notice,
        }
    }
}

/// One watch on the stream, as its watcher holds it.
#[derive(Debug)]
pub(crate) struct Registration {
    id: u64,
    requests: mpsc::UnboundedSender<Request>,
    notice: oneshot::Receiver<()>,
}

impl Registration {
    /// Resolves to `true` once the watch fires; to `false` if it never
    /// can (the stream's task is gone: the backend shut down).
    pub(crate) async fn fired(&mut self) -> bool {
        (&mut self.notice).await.is_ok()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Fired or not, nobody waits for it any more. A task that is gone
        // holds no watch to cancel.
        let _ = self.requests.send(Request::Remove { id: self.id });
    }
}

/// A watch in the stream's task.
struct Entry<E = etcd_client::Event> {
    key: String,
    prefix: bool,
    /// The revision to watch from: the one asked for, moved past every
    /// event seen since, so that a watch registered again misses nothing
    /// and sees nothing twice.
    from: i64,
    fires: Fires<E>,
    fired: oneshot::Sender<()>,
    state: State,
}

/// Where a watch stands on the current stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Not registered on the current stream (or there is none).
    Unsent,
    /// Its create request is sent; the answer has not come.
    Creating,
    /// Registered under this watch id.
    Watching(i64),
    /// Refused or ended by the server: asked for again after a pause.
    Waiting,
}

/// A request for the stream, sent in order by its writer.
#[derive(Debug, PartialEq, Eq)]
enum Outgoing {
    /// Register a watch of `key` (every key under it if `prefix`) from
    /// revision `from`.
    Create {
        key: String,
        prefix: bool,
        from: i64,
    },
    /// Cancel the watch of this id.
    Cancel(i64),
}

impl Outgoing {
    /// The create request of `entry`.
    fn create<E>(entry: &Entry<E>) -> Outgoing {
        Outgoing::Create {
            key: entry.key.clone(),
            prefix: entry.prefix,
            from: entry.from,
        }
    }
}

/// A create request as etcd's client sends it.
fn options(prefix: bool, from: i64) -> WatchOptions {
    let options = WatchOptions::new().with_start_revision(from);
    if prefix {
        options.with_prefix()
    } else {
        options
    }
}

/// The watches and what the current stream knows of them.
struct Book<E = etcd_client::Event> {
    entries: HashMap<u64, Entry<E>>,
    /// Watches whose create request was sent on the current stream and not
    /// yet answered, in the order sent: etcd answers creates in the order
    /// it receives them, and the answer to one it refused may carry no
    /// usable watch id.
    creating: VecDeque<u64>,
    /// The watch ids of the current stream.
    by_watch_id: HashMap<i64, u64>,
    /// Watches to ask for again, and when (in the order they were put off,
    /// which, with one pause for all, is the order of their times).
    waiting: VecDeque<(Instant, u64)>,
}

impl<E> Default for Book<E> {
    fn default() -> Self {
        Book {
            entries: HashMap::new(),
            creating: VecDeque::new(),
            by_watch_id: HashMap::new(),
            waiting: VecDeque::new(),
        }
    }
}

/// The current stream's writer, and the backend's request count.
struct Out<'a> {
    requests: &'a mpsc::UnboundedSender<Outgoing>,
    count: &'a RequestCounts,
}

/// The kind of request a watch's registration counts as: a prefix is the
/// member list's, a key an owner record's.
fn watch_kind(prefix: bool) -> RequestKind {
    if prefix {
        RequestKind::Members
    } else {
        RequestKind::WatchOwner
    }
}

impl Out<'_> {
    fn send(&self, request: Outgoing) {
        if let Outgoing::Create { prefix, .. } = request {
            self.count.count(watch_kind(prefix), 1);
        }
        // A writer that is gone has ended the stream: the task notices
        // that and registers every watch again on the next one.
        let _ = self.requests.send(request);
    }
}

impl<E: Change> Book<E> {
    /// Registers watch `id` on the current stream.
    fn create(&mut self, id: u64, out: &Out<'_>) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        entry.state = State::Creating;
        self.creating.push_back(id);
        out.send(Outgoing::create(entry));
    }

    /// Carries out a watcher's request; `out` is the current stream, if
    /// there is one.
    fn apply(&mut self, request: Request<E>, out: Option<&Out<'_>>) {
        match request {
            Request::Add { id, watch } => {
                self.entries.insert(id, watch);
                if let Some(out) = out {
                    self.create(id, out);
                }
            }
            Request::Remove { id } => {
                let Some(entry) = self.entries.remove(&id) else {
                    // Fired already (and cancelled then).
                    return;
                };
                if let (State::Watching(watch_id), Some(out)) = (entry.state, out) {
                    self.by_watch_id.remove(&watch_id);
                    out.send(Outgoing::Cancel(watch_id));
                }
                // Creating: cancelled when its answer names its watch id.
                // Unsent or waiting: not on the server.
            }
        }
    }

    /// Every watch waiting for its creation is registered now.
    fn create_unsent(&mut self, out: &Out<'_>) {
        let unsent: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.state == State::Unsent)
            .map(|(id, _)| *id)
            .collect();
        for id in unsent {
            self.create(id, out);
        }
    }

    /// Asks again for the watches whose pause is over at `now`.
    fn retry_due(&mut self, now: Instant, out: &Out<'_>) {
        while let Some(&(at, id)) = self.waiting.front() {
            if at > now {
                break;
            }
            self.waiting.pop_front();
            if self.entries.get(&id).map(|e| e.state) == Some(State::Waiting) {
                self.create(id, out);
            }
        }
    }

    /// Puts watch `id` off: asked for again after a pause.
    fn put_off(&mut self, id: u64) {
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.state = State::Waiting;
            self.waiting.push_back((Instant::now() + WATCH_RETRY, id));
        }
    }

    /// The watch `id` fired: tells its watcher and forgets it.
    fn fire(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id) {
            if let State::Watching(watch_id) = entry.state {
                self.by_watch_id.remove(&watch_id);
            }
            // A watcher that is gone has sent its Remove, which now finds
            // nothing to do.
            let _ = entry.fired.send(());
        }
    }

    /// The stream is gone, and with it every watch registered on it.
    fn stream_lost(&mut self) {
        for entry in self.entries.values_mut() {
            entry.state = State::Unsent;
        }
        self.creating.clear();
        self.by_watch_id.clear();
        self.waiting.clear();
    }

    /// Routes one response of the stream to the watch it is about.
    fn route(&mut self, response: Answer<'_, E>, out: &Out<'_>) {
        let watch_id = response.watch_id;
        if response.created {
            let Some(id) = self.creating.pop_front() else {
                tracing::warn!(watch_id, "etcd answered a watch creation nobody asked for");
                return;
            };
            if response.canceled {
                // Refused (a user without rights on the key, say): the
                // answer's watch id may name nothing.
                if let Some(entry) = self.entries.get(&id) {
                    tracing::debug!(
                        key = %entry.key,
                        reason = response.cancel_reason,
                        "watch refused; asking again"
                    );
                }
                self.put_off(id);
                return;
            }
            match self.entries.get_mut(&id) {
                // Nobody waits for it any more.
                None => out.send(Outgoing::Cancel(watch_id)),
                Some(entry) => {
                    entry.state = State::Watching(watch_id);
                    self.by_watch_id.insert(watch_id, id);
                }
            }
        }
        // A watch cancelled already (fired, or nobody waits for it) may
        // still have had events on the way.
        let Some(&id) = self.by_watch_id.get(&watch_id) else {
            return;
        };
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        if response.compact_revision > 0 {
            tracing::debug!(
                key = %entry.key,
                compacted = response.compact_revision,
                "watched history compacted; reporting a change"
            );
            // The server has cancelled the watch itself.
            self.fire(id);
            return;
        }
        for event in response.events {
            if (entry.fires)(event) {
                out.send(Outgoing::Cancel(watch_id));
                self.fire(id);
                return;
            }
            if let Some(revision) = event.revision() {
                entry.from = entry.from.max(revision + 1);
            }
        }
        if response.canceled && !response.created {
            // Ended by the server for another reason than compaction: ask
            // again from where it stood.
            tracing::debug!(
                key = %entry.key,
                reason = response.cancel_reason,
                "watch canceled by the server; asking again"
            );
            self.by_watch_id.remove(&watch_id);
            self.put_off(id);
        }
    }
}

/// The stream's task: opens a stream when a watch needs one, serves it until
/// it breaks, opens another, until the backend and every registration are
/// gone.
async fn run(link: Link, mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut book = Book::default();
    loop {
        // No stream until some watch needs one.
        while book.entries.is_empty() {
            match requests.recv().await {
                Some(request) => book.apply(request, None),
                None => return,
            }
        }
        // etcd's client opens a stream only with a first create request:
        // any watch's will do.
        let Some((&first, entry)) = book.entries.iter_mut().next() else {
            continue;
        };
        link.requests.count(watch_kind(entry.prefix), 1);
        let opening = open(&link, entry.key.clone(), options(entry.prefix, entry.from));
        let ended = match opening.await {
            Ok((sender, responses)) => {
                entry.state = State::Creating;
                book.creating.push_back(first);
                serve(&link, &mut book, &mut requests, sender, responses)
                    .await
                    .err()
            }
            Err(error) => Some(error),
        };
        let Some(error) = ended else {
            return;
        };
        tracing::debug!(%error, watches = book.entries.len(), "no watch stream; opening another");
        book.stream_lost();
        let resume = Instant::now() + WATCH_RETRY;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(resume) => break,
                request = requests.recv() => match request {
                    Some(request) => book.apply(request, None),
                    None => return,
                },
            }
        }
    }
}

/// Opens a stream with the create request of a watch of `key`.
async fn open(
    link: &Link,
    key: String,
    options: WatchOptions,
) -> Result<(WatchRequestSender, WatchResponseStream), StreamError> {
    let mut client = link.client.clone();
    let opening = client.watch(key, Some(options));
    match tokio::time::timeout(link.request_timeout, opening).await {
        Err(_) => Err(StreamError::OpenTimeout(link.request_timeout)),
        Ok(Err(error)) => Err(StreamError::Open(error)),
        Ok(Ok(stream)) => Ok(stream.split()),
    }
}

/// Serves an open stream: registers the watches not on it yet, and those
/// that come, routes its responses, cancels what nobody waits for, until
/// the stream breaks (`Err`) or the backend and every registration are gone
/// (`Ok`).
async fn serve(
    link: &Link,
    book: &mut Book,
    requests: &mut mpsc::UnboundedReceiver<Request>,
    sender: WatchRequestSender,
    mut responses: WatchResponseStream,
) -> Result<(), StreamError> {
    let (outgoing, queue) = mpsc::unbounded_channel();
    // Requests go out from a writer of their own: a full request channel
    // must never stop this task from reading the responses the server
    // waits to send before it reads more requests.
    let writer = write(sender, queue);
    tokio::pin!(writer);
    let out = Out {
        requests: &outgoing,
        count: &link.requests,
    };
    book.create_unsent(&out);
    loop {
        let retry = book.waiting.front().map(|&(at, _)| at);
        tokio::select! {
            request = requests.recv() => match request {
                Some(request) => book.apply(request, Some(&out)),
                None => return Ok(()),
            },
            message = responses.message() => match message {
                Ok(Some(response)) => book.route(Answer::from(&response), &out),
                Ok(None) => return Err(StreamError::Closed),
                Err(error) => return Err(StreamError::Broken(error)),
            },
            error = &mut writer => return Err(error),
            () = tokio::time::sleep_until(retry.unwrap_or_else(Instant::now)), if retry.is_some() => {
                book.retry_due(Instant::now(), &out);
            }
        }
    }
}

/// Sends the stream's requests in order, until sending fails (the stream
/// is gone).
async fn write(
    mut sender: WatchRequestSender,
    mut queue: mpsc::UnboundedReceiver<Outgoing>,
) -> StreamError {
    while let Some(request) = queue.recv().await {
        let sent = match request {
            Outgoing::Create { key, prefix, from } => {
                sender.watch(key, Some(options(prefix, from))).await
            }
            Outgoing::Cancel(watch_id) => sender.cancel(watch_id).await,
        };
        if let Err(error) = sent {
            return StreamError::Broken(error);
        }
    }
    // The queue's sender lives as long as the stream is served.
    StreamError::Closed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event that made `revision`; a watch fires on the ones marked.
    #[derive(Debug)]
    struct Made {
        revision: i64,
        wanted: bool,
    }

    impl Change for Made {
        fn revision(&self) -> Option<i64> {
            Some(self.revision)
        }
    }

    fn made(revision: i64, wanted: bool) -> Made {
        Made { revision, wanted }
    }

    /// A book with its stream's writer and a request count.
    struct Stream {
        book: Book<Made>,
        sent: mpsc::UnboundedReceiver<Outgoing>,
        writer: mpsc::UnboundedSender<Outgoing>,
        count: RequestCounts,
    }

    impl Stream {
        fn new() -> Stream {
            let (writer, sent) = mpsc::unbounded_channel();
            Stream {
                book: Book::default(),
                sent,
                writer,
                count: RequestCounts::new(),
            }
        }

        /// Adds watch `id` of `key` from `from`; its fired signal.
        fn add(&mut self, id: u64, key: &str, from: i64) -> oneshot::Receiver<()> {
            let (fired, notice) = oneshot::channel();
            let watch = Entry {
                key: key.to_owned(),
                prefix: false,
                from,
                fires: Box::new(|event: &Made| event.wanted),
                fired,
                state: State::Unsent,
            };
            let out = Out {
                requests: &self.writer,
                count: &self.count,
            };
            self.book.apply(Request::Add { id, watch }, Some(&out));
            notice
        }

        fn remove(&mut self, id: u64) {
            let out = Out {
                requests: &self.writer,
                count: &self.count,
            };
            self.book.apply(Request::Remove { id }, Some(&out));
        }

        fn answer(&mut self, answer: Answer<'_, Made>) {
            let out = Out {
                requests: &self.writer,
                count: &self.count,
            };
            self.book.route(answer, &out);
        }

        fn retry_due(&mut self, now: Instant) {
            let out = Out {
                requests: &self.writer,
                count: &self.count,
            };
            self.book.retry_due(now, &out);
        }

        fn reopen(&mut self) {
            self.book.stream_lost();
            let out = Out {
                requests: &self.writer,
                count: &self.count,
            };
            self.book.create_unsent(&out);
        }

        /// What was sent on the stream since the last look.
        fn sent(&mut self) -> Vec<Outgoing> {
            let mut sent = Vec::new();
            while let Ok(request) = self.sent.try_recv() {
                sent.push(request);
            }
            sent
        }
    }

    fn create(key: &str, from: i64) -> Outgoing {
        Outgoing::Create {
            key: key.to_owned(),
            prefix: false,
            from,
        }
    }

    fn created(watch_id: i64) -> Answer<'static, Made> {
        Answer {
            watch_id,
            created: true,
            canceled: false,
            compact_revision: 0,
            cancel_reason: "",
            events: &[],
        }
    }

    fn events(watch_id: i64, events: &[Made]) -> Answer<'_, Made> {
        Answer {
            watch_id,
            created: false,
            canceled: false,
            compact_revision: 0,
            cancel_reason: "",
            events,
        }
    }

    #[test]
    fn answers_go_to_their_own_watch_and_a_fired_watch_is_cancelled() {
        let mut stream = Stream::new();
        let mut a = stream.add(1, "a", 10);
        let mut b = stream.add(2, "b", 10);
        assert_eq!(stream.sent(), vec![create("a", 10), create("b", 10)]);
        assert_eq!(stream.count.total(), 2);
        assert_eq!(stream.count.requests(RequestKind::WatchOwner), 2);
        // Creates are answered in the order sent, with the server's ids.
        stream.answer(created(7));
        stream.answer(created(8));

        stream.answer(events(8, &[made(11, false)]));
        assert!(a.try_recv().is_err() && b.try_recv().is_err());
        stream.answer(events(7, &[made(12, false), made(13, true)]));
        assert!(a.try_recv().is_ok(), "a fired");
        assert!(b.try_recv().is_err(), "b did not");
        assert_eq!(stream.sent(), vec![Outgoing::Cancel(7)]);
        // Late events of a cancelled watch go nowhere.
        stream.answer(events(7, &[made(14, true)]));
        assert!(stream.sent().is_empty());

        // b saw revision 11: after a break it watches from 12.
        stream.reopen();
        assert_eq!(stream.sent(), vec![create("b", 12)]);
        stream.answer(created(0));
        stream.answer(events(0, &[made(15, true)]));
        assert!(b.try_recv().is_ok(), "b fired on the new stream");
    }

    #[test]
    fn a_refused_create_is_put_off_and_the_others_keep_their_place() {
        let mut stream = Stream::new();
        let _a = stream.add(1, "a", 5);
        let mut b = stream.add(2, "b", 5);
        stream.sent();
        // The refusal names no watch: it is the first create in line.
        stream.answer(Answer {
            watch_id: -1,
            created: true,
            canceled: true,
            compact_revision: 0,
            cancel_reason: "permission denied",
            events: &[],
        });
        stream.answer(created(3));
        stream.answer(events(3, &[made(6, true)]));
        assert!(b.try_recv().is_ok(), "b's answer found b");
        assert_eq!(stream.sent(), vec![Outgoing::Cancel(3)]);

        // Asked for again after the pause, not before.
        stream.retry_due(Instant::now());
        assert!(stream.sent().is_empty());
        stream.retry_due(Instant::now() + WATCH_RETRY);
        assert_eq!(stream.sent(), vec![create("a", 5)]);
    }

    #[test]
    fn a_watch_dropped_before_its_answer_is_cancelled_when_it_comes() {
        let mut stream = Stream::new();
        let mut a = stream.add(1, "a", 5);
        let mut b = stream.add(2, "b", 5);
        stream.sent();
        stream.remove(1);
        assert!(stream.sent().is_empty(), "its id is not known yet");
        stream.answer(created(4));
        assert_eq!(stream.sent(), vec![Outgoing::Cancel(4)]);
        stream.answer(created(5));
        stream.answer(events(5, &[made(6, true)]));
        assert!(b.try_recv().is_ok());
        assert!(matches!(
            a.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));

        // Once registered, dropping it cancels it at once.
        let _c = stream.add(3, "c", 7);
        stream.answer(created(6));
        stream.sent();
        stream.remove(3);
        assert_eq!(stream.sent(), vec![Outgoing::Cancel(6)]);
        assert!(stream.book.entries.is_empty());
        assert!(stream.book.by_watch_id.is_empty());
    }

    #[test]
    fn compaction_fires_and_a_server_cancel_asks_again_from_where_it_stood() {
        let mut stream = Stream::new();
        let mut a = stream.add(1, "a", 5);
        let mut b = stream.add(2, "b", 5);
        stream.answer(created(1));
        stream.answer(created(2));
        stream.sent();

        stream.answer(Answer {
            watch_id: 1,
            created: false,
            canceled: true,
            compact_revision: 9,
            cancel_reason: "",
            events: &[],
        });
        assert!(a.try_recv().is_ok(), "a compaction may hide a change");
        assert!(stream.sent().is_empty(), "the server cancelled it itself");

        stream.answer(events(2, &[made(8, false)]));
        stream.answer(Answer {
            watch_id: 2,
            created: false,
            canceled: true,
            compact_revision: 0,
            cancel_reason: "no leader",
            events: &[],
        });
        assert!(b.try_recv().is_err());
        stream.retry_due(Instant::now() + WATCH_RETRY);
        assert_eq!(stream.sent(), vec![create("b", 9)]);
    }
}
