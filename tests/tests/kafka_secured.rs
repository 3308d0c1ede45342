//! Consuming through Kafka's SASL_SSL listener (as `scripts/services` starts
//! it: TLS with a certificate of a CA made on the spot, SASL PLAIN and
//! SCRAM), with a real ZooKeeper; and the refusals a misconfigured member
//! gets, each saying what to fix, none of them a hang.

use tenure_tests as common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::kafka;
use common::zookeeper::ZooKeeper;
use common::Stores;
use tenure::tokio::{
    GroupMember, JoinError, KafkaConfig, KafkaError, KafkaSecurity, SaslMechanism,
};

const MESSAGES: usize = 20;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: these tests need the SASL_SSL listener of scripts/services' \
             Kafka; start it with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

fn secured(mechanism: SaslMechanism, password: &str, ca: &str) -> KafkaConfig {
    let mut config = KafkaConfig::new(&var("TENURE_KAFKA_SECURED"));
    config.connect_timeout = Duration::from_secs(5);
    config.client_id = "tenure-secured-test".to_owned();
    config.security = KafkaSecurity::new()
        .sasl(mechanism, &var("TENURE_KAFKA_SECURED_USER"), password)
        .tls(ca, None)
        .expect("the CA file");
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_consumes_through_sasl_ssl_with_scram_and_plain() {
    let client = kafka::client().await;
    let stores = ZooKeeper::new("sasl").await;
    for mechanism in [
        SaslMechanism::ScramSha512,
        SaslMechanism::ScramSha256,
        SaslMechanism::Plain,
    ] {
        let topic = kafka::topic(&format!("sasl-{}", mechanism.name().to_ascii_lowercase()));
        kafka::create_topic(&client, &topic, 1).await;
        kafka::produce(&client, &topic, 0, MESSAGES).await;
        let group = common::group("sasl");
        let mut member = GroupMember::builder(common::config_for(&group, "m1", &topic))
            .kafka(secured(
                mechanism,
                &var("TENURE_KAFKA_SECURED_PASSWORD"),
                &var("TENURE_KAFKA_SECURED_CA"),
            ))
            .join(stores.backend())
            .await
            .unwrap_or_else(|e| panic!("join with {}: {e}", mechanism.name()));
        let mut seen = BTreeSet::new();
        while seen.len() < MESSAGES {
            let message = tokio::time::timeout(Duration::from_secs(30), member.next_message())
                .await
                .unwrap_or_else(|_| {
                    panic!("{} consumed {} of {MESSAGES}", mechanism.name(), seen.len())
                })
                .expect("the member is open");
            seen.insert(message.offset);
            message.ack();
        }
        member.close().await.expect("close");
    }
}

/// Joins with `config` and expects a refusal whose detail says `says`,
/// well within the connect timeout's bound.
async fn refused(stores: &ZooKeeper, config: KafkaConfig, says: &str) {
    let started = tokio::time::Instant::now();
    let joined = GroupMember::builder(common::config_for(&common::group("refused"), "m1", "t"))
        .kafka(config)
        .join(stores.backend())
        .await;
    match joined {
        Err(JoinError::Kafka(KafkaError::Refused { detail, .. })) => {
            assert!(detail.contains(says), "{detail}");
        }
        Err(other) => panic!("expected Refused naming {says:?}, got {other}"),
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
    let stores = ZooKeeper::new("sasl-refused").await;
    refused(
        &stores,
        secured(
            SaslMechanism::ScramSha512,
            "not-the-password",
            &var("TENURE_KAFKA_SECURED_CA"),
        ),
        "password",
    )
    .await;
    refused(
        &stores,
        secured(
            SaslMechanism::ScramSha512,
            &var("TENURE_KAFKA_SECURED_PASSWORD"),
            &var("TENURE_KAFKA_SECURED_OTHER_CA"),
        ),
        "certificate",
    )
    .await;
    // A CA file that is not there is a configuration error, said at once.
    assert!(matches!(
        KafkaSecurity::new().tls("/nonexistent/ca.pem", None),
        Err(KafkaError::Config(_))
    ));
}
