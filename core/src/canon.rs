//! A canonical fingerprint of a whole explored state, so that the explorer
//! (`tenure_sim::explore`) visits each state once however it was reached.
//!
//! Two states that differ only in what no future can tell apart get the
//! same fingerprint:
//!
//! - Counters that only ever grow and are only compared (request ids,
//!   session ids, transaction ids and so fencing tokens) are renamed by
//!   their rank among the values present: only equality and order among
//!   them matter, and a fresh one is always above all of them, so a state
//!   renamed that way behaves alike. Request ids are ranked per member,
//!   since each member numbers its own.
//! - Moments are written relative to the current time, on the explorer's
//!   time grid (rounded up: every moment that is compared is compared with
//!   the current time, which is always on the grid), and moments further in
//!   the past than the longest duration any deadline adds are all the same:
//!   every such deadline has passed.
//!
//! Parts can also be fingerprinted on their own (each message in flight),
//! so that a choice among them can depend on the state alone.
//!
//! The fingerprint is 128 bits: two 64-bit lanes, each a multiply-rotate
//! mix of every word with its own constants, finished with SplitMix64's
//! finaliser. It is no cryptographic hash, only one that spreads small
//! differences: with a few million states, a collision (which would wrongly
//! merge two states) is as unlikely as any 128-bit fingerprint makes it.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::types::{RequestId, SessionId};

/// Two lanes of 64 bits, fed word by word.
#[derive(Clone, Copy)]
pub struct Mix {
    a: u64,
    b: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            a: 0x243F_6A88_85A3_08D3,
            b: 0x1319_8A2E_0370_7344,
        }
    }
}

impl Mix {
    fn word(&mut self, w: u64) {
        self.a = (self.a ^ w)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(31);
        self.b = (self.b.rotate_left(17) ^ w).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    }

    /// The 128-bit digest.
    pub fn digest(&self) -> u128 {
        let a = crate::rng::mix64(self.a ^ self.b.rotate_left(32));
        let b = crate::rng::mix64(self.b.wrapping_add(0x6A09_E667_F3BC_C909));
        (u128::from(a) << 64) | u128::from(b)
    }
}

impl Hasher for Mix {
    fn finish(&self) -> u64 {
        crate::rng::mix64(self.a ^ self.b)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.word(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" then "" apart from "a" then "b".
        self.word(u64::from_le_bytes(word) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u64(&mut self, w: u64) {
        self.word(w);
    }

    fn write_u32(&mut self, w: u32) {
        self.word(u64::from(w));
    }

    fn write_u8(&mut self, w: u8) {
        self.word(u64::from(w));
    }

    fn write_usize(&mut self, w: usize) {
        self.word(w as u64);
    }

    fn write_i64(&mut self, w: i64) {
        self.word(w as u64);
    }

    fn write_u128(&mut self, w: u128) {
        self.word(w as u64);
        self.word((w >> 64) as u64);
    }
}

/// One element of a state's description, before renaming.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Item {
    /// A value written as it is (hashed already when it is not a number).
    Raw(u64),
    /// A moment, in grid steps from now (clamped in the past).
    Time(i64),
    /// A request id of the member with this index.
    Request(usize, u64),
    /// A store session id.
    Session(u64),
    /// A store transaction id (a fencing token).
    Zxid(u64),
}

/// The builder of one state's fingerprint.
pub struct Canon {
    epoch: Instant,
    now: i64,
    quantum: Duration,
    horizon: i64,
    items: Vec<Item>,
    /// Ranges of `items` fingerprinted on their own too.
    elements: Vec<Range<usize>>,
}

/// Which moments the fingerprint tells apart.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// The moment the grid starts from.
    pub epoch: Instant,
    /// The current time (on the grid).
    pub now: Instant,
    /// The grid's step.
    pub quantum: Duration,
    /// How far in the past moments are still told apart.
    pub horizon: Duration,
}

fn steps(span: Duration, quantum: Duration) -> i64 {
    let q = quantum.as_nanos().max(1);
    i64::try_from(span.as_nanos().div_ceil(q)).unwrap_or(i64::MAX)
}

impl Canon {
    /// An empty description of a state at `clock.now`.
    pub fn new(clock: Clock) -> Canon {
        Canon {
            epoch: clock.epoch,
            now: steps(
                clock.now.saturating_duration_since(clock.epoch),
                clock.quantum,
            ),
            quantum: clock.quantum,
            horizon: steps(clock.horizon, clock.quantum),
            items: Vec::with_capacity(512),
            elements: Vec::new(),
        }
    }

    /// Writes a value that is kept as it is.
    pub fn raw(&mut self, value: impl Hash) {
        let mut hasher = Mix::default();
        value.hash(&mut hasher);
        self.items.push(Item::Raw(hasher.finish()));
    }

    /// Writes a small number as it is.
    pub fn number(&mut self, value: u64) {
        self.items.push(Item::Raw(value));
    }

    /// Writes a moment.
    pub fn time(&mut self, at: Instant) {
        let at = steps(at.saturating_duration_since(self.epoch), self.quantum);
        let relative = at.saturating_sub(self.now).max(-self.horizon);
        self.items.push(Item::Time(relative));
    }

    /// Writes a moment that may be absent.
    pub fn maybe_time(&mut self, at: Option<Instant>) {
        match at {
            Some(at) => self.time(at),
            None => self.number(u64::MAX),
        }
    }

    /// Writes a request id of member `member`.
    pub fn request(&mut self, member: usize, id: RequestId) {
        self.items.push(Item::Request(member, id.0));
    }

    /// Writes a session id.
    pub fn session(&mut self, session: SessionId) {
        self.items.push(Item::Session(session.0));
    }

    /// Writes a session id that may be absent.
    pub fn maybe_session(&mut self, session: Option<SessionId>) {
        match session {
            Some(session) => self.session(session),
            None => self.number(u64::MAX),
        }
    }

    /// Writes a store transaction id (a fencing token's value).
    pub fn zxid(&mut self, zxid: u64) {
        self.items.push(Item::Zxid(zxid));
    }

    /// Writes a part whose own fingerprint [`Canon::finish`] also gives.
    pub fn element(&mut self, write: impl FnOnce(&mut Canon)) {
        let start = self.items.len();
        write(self);
        self.elements.push(start..self.items.len());
    }

    /// The fingerprint, and each part's own fingerprint in the order they
    /// were written.
    pub fn finish(&self) -> (u128, Vec<u128>) {
        let mut requests: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut sessions = Vec::new();
        let mut zxids = Vec::new();
        for item in &self.items {
            match *item {
                Item::Request(member, id) => requests.entry(member).or_default().push(id),
                Item::Session(s) => sessions.push(s),
                Item::Zxid(z) => zxids.push(z),
                Item::Raw(_) | Item::Time(_) => {}
            }
        }
        for ids in requests.values_mut() {
            ids.sort_unstable();
            ids.dedup();
        }
        for values in [&mut sessions, &mut zxids] {
            values.sort_unstable();
            values.dedup();
        }
        let rank = |values: &[u64], v: u64| values.partition_point(|&x| x < v) as u64;
        let renamed = |item: Item| match item {
            Item::Request(member, id) => {
                let ids = requests.get(&member).map_or(&[][..], Vec::as_slice);
                Item::Request(member, rank(ids, id))
            }
            Item::Session(s) => Item::Session(rank(&sessions, s)),
            Item::Zxid(z) => Item::Zxid(rank(&zxids, z)),
            other => other,
        };
        let digest = |items: &[Item]| -> u128 {
            let mut mix = Mix::default();
            for &item in items {
                renamed(item).hash(&mut mix);
            }
            mix.digest()
        };
        let elements: Vec<u128> = self
            .elements
            .iter()
            .map(|range| digest(&self.items[range.clone()]))
            .collect();
        (digest(&self.items), elements)
    }
}
