//! The audit of every message the members handed out (the at-least-once
//! run), and the failover figure both kinds of run print.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::run::Run;
use crate::store::CHAOS_PREFIX;
use crate::transcript::{lock, Log};

/// Waits for the backlog (every partition's messages handed out up to its
/// log end, 60 s at most), closes the group, audits what the members
/// handed out between `settled_at` and the end of the faults, and prints
/// the result: whether the run held.
pub async fn finish(
    run: &mut Run,
    ends: &[i64],
    settled_at: u64,
    faults_end: u64,
) -> Result<bool, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let consumed = {
            let log = lock(&run.log);
            let mut next = vec![0i64; ends.len()];
            for (_, _, p, o, _) in &log.messages {
                if let Some(n) = next.get_mut(*p as usize) {
                    *n = (*n).max(o + 1);
                }
            }
            next
        };
        if consumed == ends || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let closing_at = run.close_group().await;

    let committed = run
        .store
        .committed(CHAOS_PREFIX, &run.group, &run.topic, ends.len())
        .await?;
    let log = lock(&run.log);
    let audit = audit(&log, run, ends, settled_at, faults_end.min(closing_at));
    println!(
        "lost={} stale={} shared_tokens={} offsets_at_end={} duplicates={} max_unowned_ms={}",
        audit.lost,
        audit.stale,
        audit.shared_tokens,
        committed == ends,
        audit.duplicates,
        audit.max_unowned_ms
    );
    print_failover(&audit.failover, "message", run);
    if committed != ends {
        println!("committed {committed:?}, log ends {ends:?}");
    }
    for line in &audit.findings {
        println!("  {line}");
    }
    let minority_held = crate::partition::audit(&log, &run.partitions, run.session_ms);
    let key_order_held = match run.ordering {
        crate::Ordering::Partition => true,
        crate::Ordering::Key => {
            let keys = key_order(&log);
            println!(
                "key_order_violations={} most_in_flight={} (in one claim at once)",
                keys.violations, keys.most_in_flight
            );
            for line in &keys.findings {
                println!("  {line}");
            }
            keys.violations == 0 && keys.most_in_flight > 1
        }
    };
    Ok(key_order_held
        && audit.lost == 0
        && audit.stale == 0
        && audit.shared_tokens == 0
        && committed == ends
        && minority_held)
}

/// The failover line: for every partition a killed member held, the time
/// from the SIGKILL to its next owner's first `what`, past the session;
/// then the slowest, with the store outages (single node restarted) that
/// fell within it, which restart every session's countdown on the server.
pub fn print_failover(failovers: &[Failover], what: &str, run: &Run) {
    let mut failover: Vec<i64> = failovers.iter().map(|f| f.past_session_ms).collect();
    failover.sort_unstable();
    let Some(slowest) = failovers.iter().max_by_key(|f| f.past_session_ms) else {
        println!("failover: no kill of a member holding partitions in this schedule");
        return;
    };
    let at = |q: f64| failover[((failover.len() - 1) as f64 * q).round() as usize];
    println!(
        "failover_ms_past_session median={} p99={} samples={} (kill to the next owner's \
         first {what}, minus the {} ms session timeout)",
        at(0.5),
        at(0.99),
        failover.len(),
        run.session_ms
    );
    let taken_over_at = slowest
        .killed_at
        .saturating_add_signed(slowest.past_session_ms)
        .saturating_add(run.session_ms);
    let within: Vec<&(u64, u64)> = run
        .outages
        .iter()
        .filter(|(from, to)| *to > slowest.killed_at && *from < taken_over_at)
        .collect();
    let down_ms: u64 = within.iter().map(|(from, to)| to - from).sum();
    println!(
        "  slowest: {}'s partition {}, {} ms past the session; store outages within it: {} \
         ({down_ms} ms down)",
        slowest.member,
        slowest.partition,
        slowest.past_session_ms,
        within.len()
    );
}

/// What the key-order audit found.
#[derive(Default)]
struct KeyOrder {
    violations: usize,
    /// The most messages of one claim in flight at once.
    most_in_flight: usize,
    findings: Vec<String>,
}

/// Per-key order within each claim (`--ordering key`): a message is
/// handed out only after the claim's previous message of its key was
/// acknowledged, and at a higher offset. Across claims the usual audit
/// holds: a claim's hand-outs end before the next claim's begin. A message
/// whose acknowledgement never came (its member was killed) is left out,
/// and so is a second hand-out of an offset under the same claim.
fn key_order(log: &Log) -> KeyOrder {
    let mut found = KeyOrder::default();
    let acks: BTreeMap<(u32, i64, u64), (u64, &str)> = log
        .acks
        .iter()
        .map(|(at, p, o, t, key)| ((*p, *o, *t), (*at, key.as_str())))
        .collect();
    // Per claim (partition, token): per key, the last offset and when it
    // was acknowledged; the claim's hand-outs and acknowledgements, for
    // the most in flight.
    let mut last: BTreeMap<(u32, u64, &str), (i64, u64)> = BTreeMap::new();
    let mut seen: BTreeSet<(u32, i64, u64)> = BTreeSet::new();
    let mut spans: BTreeMap<(u32, u64), Vec<(u64, i32)>> = BTreeMap::new();
    for (member, at, p, o, t) in &log.messages {
        let Some((acked_at, key)) = acks.get(&(*p, *o, *t)) else {
            continue;
        };
        if !seen.insert((*p, *o, *t)) {
            continue;
        }
        if let Some((before, before_acked)) = last.get(&(*p, *t, key)) {
            if *o <= *before || *at < *before_acked {
                found.violations += 1;
                if found.findings.len() < 10 {
                    found.findings.push(format!(
                        "key order: {member} handed out {p}/{o} ({key}) at {at} under token {t}, \
                         after {before} of its key acknowledged at {before_acked}"
                    ));
                }
            }
        }
        last.insert((*p, *t, key), (*o, *acked_at));
        let span = spans.entry((*p, *t)).or_default();
        span.push((*at, 1));
        span.push((*acked_at, -1));
    }
    for span in spans.values_mut() {
        // At the same millisecond an acknowledgement comes first: the
        // next message of its key may go out in that millisecond.
        span.sort_unstable();
        let mut now = 0i32;
        for (_, change) in span.iter() {
            now += change;
            found.most_in_flight = found.most_in_flight.max(now.max(0) as usize);
        }
    }
    found
}

/// One partition's failover after its member was killed.
pub struct Failover {
    /// The member killed.
    pub member: String,
    /// A partition it held then.
    pub partition: u32,
    /// When it was killed (wall ms).
    pub killed_at: u64,
    /// From the kill to the next owner's first output, less the session
    /// timeout.
    pub past_session_ms: i64,
}

#[derive(Default)]
struct Audit {
    lost: usize,
    stale: usize,
    shared_tokens: usize,
    duplicates: usize,
    max_unowned_ms: u64,
    failover: Vec<Failover>,
    /// The first few violations, for the reader.
    findings: Vec<String>,
}

impl Audit {
    fn note(&mut self, line: String) {
        if self.findings.len() < 10 {
            self.findings.push(line);
        }
    }
}

/// Audits what the members handed out against the log ends; the unowned
/// times are those between `from` and `until`.
fn audit(log: &Log, run: &Run, ends: &[i64], from: u64, until: u64) -> Audit {
    let mut audit = Audit::default();
    // Lost and duplicated offsets.
    let mut seen: BTreeMap<(u32, i64), usize> = BTreeMap::new();
    for (_, _, p, o, _) in &log.messages {
        *seen.entry((*p, *o)).or_default() += 1;
    }
    for (p, end) in ends.iter().enumerate() {
        for o in 0..*end {
            if !seen.contains_key(&(p as u32, o)) {
                audit.lost += 1;
                audit.note(format!("lost: partition {p} offset {o}"));
            }
        }
    }
    audit.duplicates = seen.values().map(|n| n - 1).sum();
    // Stale tokens: by the moment of handing out, per partition.
    let mut by_time: Vec<&(String, u64, u32, i64, u64)> = log.messages.iter().collect();
    by_time.sort_by_key(|(_, at, ..)| *at);
    let mut newest: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for (member, at, p, o, token) in by_time {
        match newest.get(p) {
            Some((newer, first_at)) if token < newer && first_at < at => {
                audit.stale += 1;
                audit.note(format!(
                    "stale: {member} handed out {p}/{o} under token {token} after token {newer}"
                ));
            }
            Some((newer, _)) if token <= newer => {}
            _ => {
                newest.insert(*p, (*token, *at));
            }
        }
    }
    // Tokens seen from two members.
    let mut holders: BTreeMap<(u32, u64), BTreeSet<&str>> = BTreeMap::new();
    for (member, _, p, _, token) in &log.messages {
        holders.entry((*p, *token)).or_default().insert(member);
    }
    for ((p, token), members) in &holders {
        if members.len() > 1 {
            audit.shared_tokens += 1;
            audit.note(format!(
                "shared: token {token} of partition {p} from {members:?}"
            ));
        }
    }
    audit.max_unowned_ms = max_unowned_ms(log, run, ends.len() as u32, from, until);
    // Failover: the next owner's first message.
    audit.failover = failovers(log, run, |id, p, killed_at| {
        log.messages
            .iter()
            .filter(|(member, at, mp, ..)| member != id && *mp == p && *at > killed_at)
            .map(|(_, at, ..)| *at)
            .min()
    });
    audit
}

/// The longest time between `from` and `until` that one of `partitions`
/// was held by no member, by the members' own assignment changes (a killed
/// member's hold ending at its kill), less the time the store was down.
fn max_unowned_ms(log: &Log, run: &Run, partitions: u32, from: u64, until: u64) -> u64 {
    let mut held: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    let mut open: BTreeMap<(&str, u32), u64> = BTreeMap::new();
    let mut events: Vec<&(String, u64, String, u32, u64)> = log.events.iter().collect();
    events.sort_by_key(|(_, at, ..)| *at);
    for (member, at, kind, p, _) in events {
        match kind.as_str() {
            "assigned" | "resumed" => {
                open.entry((member, *p)).or_insert(*at);
            }
            "suspended" | "revoked" | "lost" => {
                if let Some(since) = open.remove(&(member.as_str(), *p)) {
                    held.entry(*p).or_default().push((since, *at));
                }
            }
            _ => {}
        }
    }
    for ((member, p), since) in open {
        let end = run
            .members
            .get(member)
            .and_then(|r| r.killed_at)
            .unwrap_or(u64::MAX);
        held.entry(p).or_default().push((since, end));
    }
    let mut max = 0;
    for p in 0..partitions {
        let mut intervals = held.remove(&p).unwrap_or_default();
        intervals.sort_unstable();
        let mut covered_to = from;
        for (start, end) in intervals.into_iter().chain([(until, until)]) {
            if start > covered_to && covered_to < until {
                let gap_end = start.min(until);
                let down: u64 = run
                    .outages
                    .iter()
                    .map(|(a, b)| gap_end.min(*b).saturating_sub(covered_to.max(*a)))
                    .sum();
                max = max.max((gap_end - covered_to).saturating_sub(down));
            }
            covered_to = covered_to.max(end);
        }
    }
    max
}

/// For every partition a killed member held at its kill, the time from the
/// kill to `first(member, partition, killed_at)` (the next owner's first
/// output, wall ms), minus the session timeout.
pub fn failovers(
    log: &Log,
    run: &Run,
    first: impl Fn(&str, u32, u64) -> Option<u64>,
) -> Vec<Failover> {
    let mut failovers = Vec::new();
    for (id, running) in &run.members {
        let Some(killed_at) = running.killed_at else {
            continue;
        };
        for p in held_at(log, id, killed_at) {
            if let Some(first) = first(id, p, killed_at) {
                failovers.push(Failover {
                    member: id.clone(),
                    partition: p,
                    killed_at,
                    past_session_ms: first as i64 - killed_at as i64 - run.session_ms as i64,
                });
            }
        }
    }
    failovers
}

/// The partitions `id` held at `at`, by its own assignment changes.
fn held_at(log: &Log, id: &str, at: u64) -> BTreeSet<u32> {
    let mut state: BTreeMap<u32, bool> = BTreeMap::new();
    for (member, when, kind, p, _) in &log.events {
        if member == id && *when <= at {
            match kind.as_str() {
                "assigned" | "resumed" => {
                    state.insert(*p, true);
                }
                "suspended" | "revoked" | "lost" => {
                    state.insert(*p, false);
                }
                _ => {}
            }
        }
    }
    state
        .into_iter()
        .filter(|(_, h)| *h)
        .map(|(p, _)| p)
        .collect()
}
