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
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// The pause before a broken stream is opened again, and before a watch the
/// server refused or ended by itself is asked for again.
const WATCH_RETRY: Duration = Duration::from_millis(500);

/// Whether an event is the change a watch waits for.
pub(crate) type Fires = Box<dyn FnMut(&etcd_client::Event) -> bool + Send + 'static>;

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
    pub(crate) requests: Arc<AtomicU64>,
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
enum Request {
    /// Register a watch.
    Add { id: u64, watch: Entry },
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
struct Entry {
    key: String,
    prefix: bool,
    /// The revision to watch from: the one asked for, moved past every
    /// event seen since, so that a watch registered again misses nothing
    /// and sees nothing twice.
    from: i64,
    fires: Fires,
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

impl Entry {
    fn options(&self) -> WatchOptions {
        let options = WatchOptions::new().with_start_revision(self.from);
        if self.prefix {
            options.with_prefix()
        } else {
            options
        }
    }
}

/// A request for the stream, sent in order by its writer.
enum Outgoing {
    Create { key: String, options: WatchOptions },
    Cancel(i64),
}

/// The watches and what the current stream knows of them.
#[derive(Default)]
struct Book {
    entries: HashMap<u64, Entry>,
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

/// The current stream's writer, and the backend's request count.
struct Out<'a> {
    requests: &'a mpsc::UnboundedSender<Outgoing>,
    count: &'a AtomicU64,
}

impl Out<'_> {
    fn send(&self, request: Outgoing) {
        if matches!(request, Outgoing::Create { .. }) {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
        // A writer that is gone has ended the stream: the task notices
        // that and registers every watch again on the next one.
        let _ = self.requests.send(request);
    }
}

impl Book {
    /// Registers watch `id` on the current stream.
    fn create(&mut self, id: u64, out: &Out<'_>) {
        let Some(entry) = self.entries.get_mut(&id) else {
            return;
        };
        entry.state = State::Creating;
        self.creating.push_back(id);
        out.send(Outgoing::Create {
            key: entry.key.clone(),
            options: entry.options(),
        });
    }

    /// Carries out a watcher's request; `out` is the current stream, if
    /// there is one.
    fn apply(&mut self, request: Request, out: Option<&Out<'_>>) {
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
    fn route(&mut self, response: WatchResponse, out: &Out<'_>) {
        let watch_id = response.watch_id();
        if response.created() {
            let Some(id) = self.creating.pop_front() else {
                tracing::warn!(watch_id, "etcd answered a watch creation nobody asked for");
                return;
            };
            if response.canceled() {
                // Refused (a user without rights on the key, say): the
                // answer's watch id may name nothing.
                if let Some(entry) = self.entries.get(&id) {
                    tracing::debug!(
                        key = %entry.key,
                        reason = response.cancel_reason(),
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
        if response.compact_revision() > 0 {
            tracing::debug!(
                key = %entry.key,
                compacted = response.compact_revision(),
                "watched history compacted; reporting a change"
            );
            // The server has cancelled the watch itself.
            self.fire(id);
            return;
        }
        for event in response.events() {
            if (entry.fires)(event) {
                out.send(Outgoing::Cancel(watch_id));
                self.fire(id);
                return;
            }
            if let Some(kv) = event.kv() {
                entry.from = entry.from.max(kv.mod_revision() + 1);
            }
        }
        if response.canceled() && !response.created() {
            // Ended by the server for another reason than compaction: ask
            // again from where it stood.
            tracing::debug!(
                key = %entry.key,
                reason = response.cancel_reason(),
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
        let ended = match open(&link, &mut book).await {
            Ok((sender, responses)) => serve(&link, &mut book, &mut requests, sender, responses)
                .await
                .err(),
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

/// Opens a stream with the create request of one of the watches (etcd's
/// client opens a stream only with one).
async fn open(
    link: &Link,
    book: &mut Book,
) -> Result<(WatchRequestSender, WatchResponseStream), StreamError> {
    let Some((&id, entry)) = book.entries.iter_mut().next() else {
        return Err(StreamError::Closed);
    };
    link.requests.fetch_add(1, Ordering::Relaxed);
    let mut client = link.client.clone();
    let opening = client.watch(entry.key.clone(), Some(entry.options()));
    let stream = match tokio::time::timeout(link.request_timeout, opening).await {
        Err(_) => return Err(StreamError::OpenTimeout(link.request_timeout)),
        Ok(Err(error)) => return Err(StreamError::Open(error)),
        Ok(Ok(stream)) => stream,
    };
    entry.state = State::Creating;
    book.creating.push_back(id);
    Ok(stream.split())
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
                Ok(Some(response)) => book.route(response, &out),
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
            Outgoing::Create { key, options } => sender.watch(key, Some(options)).await,
            Outgoing::Cancel(watch_id) => sender.cancel(watch_id).await,
        };
        if let Err(error) = sent {
            return StreamError::Broken(error);
        }
    }
    // The queue's sender lives as long as the stream is served.
    StreamError::Closed
}
