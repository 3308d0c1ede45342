//! Driving `tenure-core` from a plain thread, with no tokio and no async:
//! the core is a state machine, so any loop can run it. Here three members
//! share the in-memory store model (the one the simulator checks) and a
//! fourth joins halfway; the loop carries out their commands and delivers
//! results and watch notifications back.
//!
//! It needs no server: the store is the in-memory model, so nothing of
//! `scripts/services` has to run.
//!
//! ```text
//! cargo run --example custom_runtime
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tenure::core::model::adapter::{self, Execution};
use tenure::core::model::store::Store;
use tenure::core::records::Layout;
use tenure::core::{AppEvent, Config, Event, FetchCommand, Member, Output, SessionId};

/// One member and what is on its way to it.
struct Node {
    member: Member,
    session: SessionId,
    inbox: VecDeque<Event>,
}

fn join(store: &mut Store, name: &str, now: Instant) -> Result<Node, String> {
    let mut config = Config::new("plain", name, ["orders"]).map_err(|e| e.to_string())?;
    config = config.with_commit_interval(Duration::from_millis(500));
    let mut member = Member::new(config.clone(), 42, now).map_err(|e| e.to_string())?;
    // Where a Kafka consumer would read the topic's metadata.
    member.set_partition_counts(now, [("orders".to_owned(), 6)].into());
    let session = store.open_session(now, config.session_timeout());
    let mut inbox = VecDeque::new();
    inbox.push_back(Event::SessionEstablished { session });
    // The store counted the session from the moment it opened: the member
    // hands out messages only on the strength of what the store vouches for.
    inbox.push_back(Event::SessionRenewed {
        sent: now,
        counted_after: Duration::ZERO,
    });
    Ok(Node {
        member,
        session,
        inbox,
    })
}

fn main() -> Result<(), String> {
    let layout = Layout::new("", "plain");
    let mut store = Store::new();
    let start = Instant::now();
    let mut nodes = Vec::new();
    for name in ["a", "b", "c"] {
        nodes.push(join(&mut store, name, start)?);
    }
    let mut joined_d = false;
    while start.elapsed() < Duration::from_secs(3) {
        let now = Instant::now();
        if !joined_d && now - start > Duration::from_millis(1500) {
            println!("-- d joins");
            nodes.push(join(&mut store, "d", now)?);
            joined_d = true;
        }
        // The clients keep their sessions alive.
        for node in &nodes {
            let _ = store.touch(node.session, now);
        }
        let mut fired = Vec::new();
        for node in nodes.iter_mut() {
            while let Some(event) = node.inbox.pop_front() {
                node.member.handle_event(now, event);
            }
            let info = node.member.info().clone();
            // Every output in the order the member decided it: a stop
            // reaches the application before the release that follows it
            // reaches the store.
            loop {
                match node.member.poll_output() {
                    Output::Fetch(FetchCommand::Start {
                        partition, token, ..
                    }) => {
                        println!("{} consumes {partition} (token {})", info.id, token.0);
                    }
                    Output::Fetch(FetchCommand::Stop { partition, token }) => {
                        println!("{} stops {partition}", info.id);
                        // This application holds nothing in flight.
                        node.member.drained(now, &partition, token);
                    }
                    // The store may be lapsing: hold the partition, keep
                    // its position, go on when told.
                    Output::Fetch(FetchCommand::Suspend { partition, .. }) => {
                        println!("{} holds {partition}", info.id);
                    }
                    Output::Fetch(FetchCommand::Resume { partition, .. }) => {
                        println!("{} goes on with {partition}", info.id);
                    }
                    Output::Store(store_command) => {
                        let reply = match adapter::execute(
                            &mut store,
                            &layout,
                            node.session,
                            &info,
                            store_command,
                            0,
                            &mut fired,
                        ) {
                            Execution::Done(event) => event,
                            Execution::ReadOwner { id, partition } => {
                                adapter::claim_read_owner(&store, &layout, id, &partition)
                            }
                        };
                        // One store node, its own leader: what it
                        // answers renews the session.
                        node.inbox.extend(adapter::renewal(now, &reply));
                        node.inbox.push_back(reply);
                    }
                    // What the member tells its application: claims,
                    // releases, losses, problems.
                    Output::App(AppEvent::Claimed {
                        partition, waited, ..
                    }) => println!("{} claimed {partition} after {waited:?}", info.id),
                    Output::App(AppEvent::Released { partition, .. }) => {
                        println!("{} released {partition}", info.id)
                    }
                    Output::App(AppEvent::Lost { partition, .. }) => {
                        println!("{} lost {partition}", info.id)
                    }
                    Output::App(AppEvent::Problem(problem)) => println!("{}: {problem}", info.id),
                    // A timer that is due fires; its outputs follow.
                    Output::Timeout(Some(at)) if at <= now => node.member.handle_timeout(now),
                    Output::Timeout(_) => break,
                    _ => {}
                }
            }
        }
        // Watch notifications go to the member whose session set them.
        for watch in fired {
            if let Some(node) = nodes.iter_mut().find(|n| n.session == watch.session) {
                node.inbox.extend(adapter::watch_event(&layout, &watch));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for node in &nodes {
        let owned: Vec<String> = node.member.fetching().map(|(p, _)| p.to_string()).collect();
        println!("{} ends owning {owned:?}", node.member.id());
    }
    Ok(())
}
