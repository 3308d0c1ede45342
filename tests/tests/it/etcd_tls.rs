//! A group on a secured etcd — TLS with client certificates and `auth
//! enable`, as `scripts/services` starts it beside the plaintext one —
//! consuming a real Kafka; and the refusals a misconfigured member gets, each
//! saying what to fix, none of them a hang.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use tenure::admin;
use tenure::etcd::{EtcdAdmin, EtcdBackend, EtcdSecurity};
use tenure::tokio::{BackendError, GroupMember, JoinError, KafkaConfig};

const MESSAGES: usize = 40;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the secured etcd of scripts/services; start it \
             with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

/// The credentials and certificates the secured etcd accepts, with `ca` as
/// the trusted CA and `password` as the user's.
fn security(ca: &str, password: &str) -> EtcdSecurity {
    EtcdSecurity::new()
        .user(&var("TENURE_ETCD_TLS_USER"), password)
        .ca_file(ca)
        .expect("the CA file")
        .client_identity_files(var("TENURE_ETCD_TLS_CERT"), var("TENURE_ETCD_TLS_KEY"))
        .expect("the client certificate")
}

fn accepted() -> EtcdSecurity {
    security(&var("TENURE_ETCD_TLS_CA"), &var("TENURE_ETCD_TLS_PASSWORD"))
}

fn backend(prefix: &str, security: EtcdSecurity) -> EtcdBackend {
    EtcdBackend::new(var("TENURE_ETCD_TLS"))
        .prefix(prefix)
        .security(security)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_consumes_through_a_secured_etcd() {
    let _turn = crate::turns::shared().await;
    let client = kafka::client().await;
    let topic = kafka::topic("etcd-tls");
    kafka::create_topic(&client, &topic, 2).await;
    for partition in 0..2 {
        kafka::produce(&client, &topic, partition, MESSAGES / 2).await;
    }
    let group = common::group("etcd-tls");
    let prefix = format!("/tenure-tls/{group}");
    let join = |member: &'static str| {
        GroupMember::builder(common::config_for(&group, member, &topic))
            .kafka(KafkaConfig::new(&kafka::bootstrap()))
            .join(backend(&prefix, accepted()))
    };
    let mut a = join("a").await.expect("a joins");
    let mut b = join("b").await.expect("b joins");
    let mut seen = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < MESSAGES {
        let message = tokio::select! {
            Some(message) = a.next_message() => message,
            Some(message) = b.next_message() => message,
            () = tokio::time::sleep_until(deadline) => panic!("consumed {} of {MESSAGES} in 30 s", seen.len()),
        };
        seen.insert((message.partition(), message.offset()));
        message.ack();
    }

    // The admin side reaches it with the same settings.
    let admin = EtcdAdmin::connect_with(
        &var("TENURE_ETCD_TLS"),
        &prefix,
        accepted(),
        Duration::from_secs(10),
    )
    .await
    .expect("an admin client");
    let described = admin::describe(&admin, &group, None)
        .await
        .expect("described");
    let members: Vec<&str> = described.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(members, ["a", "b"]);
    let _ = a.close().await.expect("close a");
    let _ = b.close().await.expect("close b");
}

/// Joins with `security` and expects a refusal whose detail says `says`,
/// within a few seconds.
async fn refused(security: EtcdSecurity, says: &str) {
    let group = common::group("etcd-refused");
    let started = tokio::time::Instant::now();
    let joined = GroupMember::builder(common::config_for(&group, "m1", common::TOPIC))
        .partitions([(common::TOPIC.to_owned(), 2)].into_iter().collect())
        .join(backend(&format!("/tenure-tls/{group}"), security))
        .await;
    match joined {
        Err(JoinError::Backend(BackendError::Denied { detail, .. })) => {
            assert!(detail.contains(says), "{detail}");
        }
        Err(other) => panic!("expected Denied naming {says:?}, got {other}"),
        Ok(_) => panic!("joined although it should be refused ({says})"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "refused only after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_and_an_untrusted_certificate_are_refused_saying_what_to_fix() {
    let _turn = crate::turns::shared().await;
    refused(
        security(&var("TENURE_ETCD_TLS_CA"), "not-the-password"),
        "password",
    )
    .await;
    refused(
        security(
            &var("TENURE_ETCD_TLS_OTHER_CA"),
            &var("TENURE_ETCD_TLS_PASSWORD"),
        ),
        "certificate",
    )
    .await;
    // TLS settings with a plaintext endpoint are a configuration error.
    let plain = var("TENURE_ETCD_TLS").replace("https://", "http://");
    let joined = GroupMember::builder(common::config_for("g", "m1", common::TOPIC))
        .join(EtcdBackend::new(plain).security(accepted()))
        .await;
    assert!(
        matches!(joined, Err(JoinError::Backend(BackendError::Config(_)))),
        "{:?}",
        joined.err()
    );
}
