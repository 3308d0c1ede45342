//! The records tenure keeps in its stores, pinned byte for byte in
//! `tests/golden/`, and the records Kafka 0.8's ZooKeeper consumer and the
//! Go `consumergroup` package write in the same places, decoded. Members of
//! another tenure version read the same group's records: a change to what
//! tenure writes fails here first, and follows the format policy of
//! `docs/stores.md` ("Record formats and versions").
//!
//! After a deliberate change, `TENURE_BLESS=1 cargo test -p tenure-core
//! --test golden_records` rewrites tenure's own files (and only those).

use std::path::PathBuf;

use tenure_core::records::{
    decode_registration_record, encode_offset, encode_registration, held_claim, parse_offset,
    Layout, Registration,
};
use tenure_core::{
    ClaimOutcome, FencingToken, MemberId, MemberInfo, Progress, SessionId, Subscription,
    TopicPartition,
};

fn path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn golden(name: &str) -> Vec<u8> {
    std::fs::read(path(name)).unwrap_or_else(|e| panic!("read tests/golden/{name}: {e}"))
}

/// Compares what tenure writes with its golden file, or rewrites the file
/// when blessing.
fn pinned(name: &str, written: &[u8]) {
    if std::env::var_os("TENURE_BLESS").is_some() {
        std::fs::write(path(name), written).expect("write a golden file");
        return;
    }
    assert_eq!(
        String::from_utf8_lossy(written),
        String::from_utf8_lossy(&golden(name)),
        "tenure now writes {name} differently: members of the previous version read \
         it too (docs/stores.md, \"Record formats and versions\"); if the change is \
         meant, TENURE_BLESS=1 rewrites the file"
    );
}

fn id(id: &str) -> MemberId {
    MemberId::new(id).expect("a valid member id")
}

fn info(member: &str, subscription: Subscription, strategy: &str) -> MemberInfo {
    MemberInfo {
        id: id(member),
        subscription,
        strategy: strategy.to_owned(),
    }
}

fn topics(names: &[&str]) -> Subscription {
    Subscription::topics(names).expect("valid topics")
}

fn registration(info: MemberInfo, host: Option<&str>, timestamp_secs: Option<u64>) -> Registration {
    Registration {
        info,
        host: host.map(str::to_owned),
        timestamp_secs,
    }
}

#[test]
fn tenure_registrations_are_written_as_pinned_and_read_back() {
    let cases = [
        (
            "registration-tenure-topics.json",
            info("m1", topics(&["orders", "payments"]), "sticky"),
            Some("host-1"),
        ),
        (
            "registration-tenure-pattern.json",
            info(
                "m2",
                Subscription::matching("orders-.*").expect("a pattern"),
                "range",
            ),
            None,
        ),
        (
            "registration-tenure-all-except.json",
            info(
                "m3",
                Subscription::all_except("audit-.*").expect("a pattern"),
                "round-robin",
            ),
            Some("host-3"),
        ),
    ];
    for (name, member, host) in cases {
        let written = encode_registration(&member, 1_700_000_000, host);
        pinned(name, &written);
        assert_eq!(
            decode_registration_record(member.id.as_str(), &golden(name)),
            Ok(registration(member, host, Some(1_700_000_000))),
            "{name}"
        );
    }
}

#[test]
fn registrations_of_the_consumers_tenure_succeeds_are_read() {
    let cases = [
        (
            "registration-kafka-0.8.json",
            "g_host-1-1700000000000-1a2b3c4d",
            topics(&["orders", "payments"]),
        ),
        (
            "registration-kafka-0.8-white-list.json",
            "g_host-1-1700000000000-1a2b3c4d",
            Subscription::matching("orders-.*").expect("a pattern"),
        ),
        (
            "registration-go-consumergroup.json",
            "host-1:0f6e2c44-5a3b-4c1d-9e8f-7a6b5c4d3e2f",
            topics(&["orders", "payments"]),
        ),
    ];
    for (name, member, subscription) in cases {
        // Neither names a strategy: both assign by range.
        assert_eq!(
            decode_registration_record(member, &golden(name)),
            Ok(registration(
                info(member, subscription, "range"),
                None,
                Some(1_700_000_000)
            )),
            "{name}"
        );
    }
}

#[test]
fn fields_a_later_format_adds_are_ignored() {
    assert_eq!(
        decode_registration_record("m1", &golden("registration-newer-fields.json")),
        Ok(registration(
            info("m1", topics(&["orders"]), "sticky"),
            Some("host-1"),
            Some(1_700_000_000)
        ))
    );
}

#[test]
fn owner_records_name_the_owner() {
    let session = Some(SessionId(7));
    let token = FencingToken(11);
    pinned("owner-tenure.txt", id("m1").as_str().as_bytes());
    for (name, owner) in [
        ("owner-tenure.txt", "m1"),
        ("owner-kafka-0.8.txt", "g_host-1-1700000000000-1a2b3c4d-0"),
        (
            "owner-go-consumergroup.txt",
            "host-1:0f6e2c44-5a3b-4c1d-9e8f-7a6b5c4d3e2f",
        ),
    ] {
        assert_eq!(
            held_claim(name, &golden(name), session, token),
            Ok(ClaimOutcome::Held {
                owner: Some(id(owner)),
                session: SessionId(7),
                token,
            }),
            "{name}"
        );
    }
}

#[test]
fn offsets_are_ascii_decimal() {
    pinned("offset-tenure.txt", &encode_offset(1_234_567));
    assert_eq!(
        parse_offset("offset-tenure.txt", &golden("offset-tenure.txt")),
        Ok(1_234_567)
    );
    assert_eq!(
        parse_offset("offset-kafka-0.8.txt", &golden("offset-kafka-0.8.txt")),
        Ok(42)
    );
}

/// The progress record beside an offset: what is done above it, and how
/// often the messages there failed. Read back as written; read beside
/// another offset, or written by a later version, it counts for nothing;
/// unknown fields are skipped.
#[test]
fn progress_records_name_the_offset_they_were_written_with() {
    let mut progress = Progress::new();
    for offset in [1_234_569, 1_234_570, 1_234_575] {
        progress.mark_done(offset);
    }
    progress.fail(1_234_567);
    progress.fail(1_234_567);
    progress.fail(1_234_571);
    pinned("progress-tenure.json", &progress.encode(1_234_567));
    let golden = golden("progress-tenure.json");
    let read = |committed| Progress::decode("progress-tenure.json", &golden, committed);
    assert_eq!(read(1_234_567), Ok(Some(progress.clone())));
    assert_eq!(read(1_234_568), Ok(None), "read beside another offset");

    let later = br#"{"version":2,"committed":5,"done":"a bitmap"}"#;
    assert_eq!(
        Progress::decode("later", later, 5),
        Ok(None),
        "a later version"
    );
    let more = br#"{"version":1,"committed":5,"done":[[6,8]],"attempts":[],"by":"m1"}"#;
    let read = Progress::decode("more", more, 5).expect("unknown fields skipped");
    let mut expected = Progress::new();
    expected.mark_done(6);
    expected.mark_done(7);
    assert_eq!(read, Some(expected));
}

#[test]
fn record_paths_are_kafka_0_8s() {
    let layout = Layout::new("/kafka", "g");
    let partition = TopicPartition::new("orders", 3);
    assert_eq!(layout.member(&id("m1")), "/kafka/consumers/g/ids/m1");
    assert_eq!(
        layout.owner(&partition),
        "/kafka/consumers/g/owners/orders/3"
    );
    assert_eq!(
        layout.offset(&partition),
        "/kafka/consumers/g/offsets/orders/3"
    );
    assert_eq!(
        layout.progress(&partition),
        "/kafka/consumers/g/progress/orders/3"
    );
    assert_eq!(Layout::new("", "g").ids(), "/consumers/g/ids");
}
