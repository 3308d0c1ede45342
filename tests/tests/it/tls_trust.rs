//! Where a client's trust comes from, other than a CA file: PEM in memory
//! (a bundle of several CAs, the client certificate and key too), and the
//! system's trust store — against the secured ZooKeeper, etcd and Kafka of
//! `scripts/services`. The trust store is pointed at the test CAs with
//! `SSL_CERT_FILE` (and `SSL_CERT_DIR` removed), which the system's store
//! honours, as OpenSSL does.
//!
//! One test only: it sets `SSL_CERT_FILE` for the process, which no other
//! thread may read or write meanwhile.

use tenure_tests as common;

use std::time::Duration;

use common::kafka;
use tenure::etcd::{EtcdBackend, EtcdSecurity};
use tenure::tokio::{Backend, BackendError, GroupMember, JoinError, KafkaConfig, KafkaError};
use tenure::tokio::{KafkaSecurity, SaslMechanism};
use tenure::zookeeper::{Digest, ZooKeeperBackend, ZooKeeperSecurity};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this test needs the secured servers of scripts/services; start \
             them with `eval \"$(scripts/services start)\"`, or run scripts/test"
        )
    })
}

fn read(name: &str) -> Vec<u8> {
    let path = var(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path} ({name}): {e}"))
}

/// The TLS ZooKeeper, trusting what `trust` makes of a security setting.
fn zookeeper(security: ZooKeeperSecurity) -> Box<dyn Backend> {
    let security = security
        .client_identity_pem(
            &read("TENURE_ZOOKEEPER_TLS_CERT"),
            &read("TENURE_ZOOKEEPER_TLS_KEY"),
        )
        .expect("the client certificate")
        .digest(Digest::new("billing", "s3cret").expect("valid credentials"));
    Box::new(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER_TLS")).security(security))
}

fn etcd(security: EtcdSecurity, group: &str) -> Box<dyn Backend> {
    let security = security
        .user(
            &var("TENURE_ETCD_TLS_USER"),
            &var("TENURE_ETCD_TLS_PASSWORD"),
        )
        .client_identity_pem(&read("TENURE_ETCD_TLS_CERT"), &read("TENURE_ETCD_TLS_KEY"))
        .expect("the client certificate");
    Box::new(
        EtcdBackend::new(var("TENURE_ETCD_TLS"))
            .prefix(format!("/tenure-tls/{group}"))
            .security(security),
    )
}

fn kafka_secured(security: KafkaSecurity) -> KafkaConfig {
    let mut config = KafkaConfig::new(&var("TENURE_KAFKA_SECURED"));
    config.connect_timeout = Duration::from_secs(5);
    config.security = security.sasl(
        SaslMechanism::ScramSha512,
        &var("TENURE_KAFKA_SECURED_USER"),
        &var("TENURE_KAFKA_SECURED_PASSWORD"),
    );
    config
}

/// Joins a group with `backend` and `kafka` (the plain broker if `None`).
async fn join(
    what: &str,
    backend: Box<dyn Backend>,
    kafka: Option<KafkaConfig>,
    topic: &str,
) -> Result<GroupMember, JoinError> {
    let group = common::group(what);
    let kafka = kafka.unwrap_or_else(|| KafkaConfig::new(&kafka::bootstrap()));
    tokio::time::timeout(
        Duration::from_secs(20),
        GroupMember::builder(common::config_for(&group, "m1", topic))
            .kafka(kafka)
            .join(backend),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: the join neither succeeded nor failed in 20 s"))
}

async fn joins(what: &str, backend: Box<dyn Backend>, kafka: Option<KafkaConfig>, topic: &str) {
    let member = join(what, backend, kafka, topic)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let _ = member.close().await.expect("close");
}

async fn refused(
    what: &str,
    backend: Box<dyn Backend>,
    kafka: Option<KafkaConfig>,
    topic: &str,
    says: &str,
) {
    match join(what, backend, kafka, topic).await {
        Err(JoinError::Backend(BackendError::Denied { detail, .. }))
        | Err(JoinError::Kafka(KafkaError::Refused { detail, .. })) => {
            assert!(detail.contains(says), "{what}: {detail}");
        }
        Err(other) => panic!("{what}: expected a refusal saying {says:?}, got {other}"),
        Ok(_) => panic!("{what}: joined although the server's CA is not trusted"),
    }
}

/// Bytes that are not a CA certificate are refused at once, saying so.
fn not_a_ca(pem: &[u8]) {
    match ZooKeeperSecurity::new().ca_pem(pem) {
        Err(error @ (BackendError::Config(_) | BackendError::InvalidSetting { .. })) => {
            let detail = error.to_string();
            assert!(detail.contains("certificate"), "{detail}")
        }
        other => panic!("ZooKeeper took {pem:?} as a CA: {other:?}"),
    }
    match EtcdSecurity::new().ca_pem(pem) {
        Err(error @ (BackendError::Config(_) | BackendError::InvalidSetting { .. })) => {
            let detail = error.to_string();
            assert!(detail.contains("certificate"), "{detail}")
        }
        other => panic!("etcd took {pem:?} as a CA: {other:?}"),
    }
    match KafkaSecurity::new().tls_ca_pem(pem, None) {
        Err(error @ (KafkaError::Config(_) | KafkaError::InvalidSetting { .. })) => {
            let detail = error.to_string();
            assert!(detail.contains("certificate"), "{detail}")
        }
        other => panic!("Kafka took {pem:?} as a CA: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_and_brokers_trust_cas_from_memory_and_from_the_system_store() {
    let _turn = crate::turns::alone().await;
    let client = kafka::client().await;
    let topic = kafka::topic("tls-trust");
    kafka::create_topic(&client, &topic, 1).await;

    // PEM in memory: a bundle that holds an unrelated CA, then the right
    // one.
    let bundle = |other: &str, right: &str| {
        let mut pem = read(other);
        pem.extend(read(right));
        pem
    };
    let zookeeper_bundle = bundle("TENURE_ZOOKEEPER_TLS_OTHER_CA", "TENURE_ZOOKEEPER_TLS_CA");
    let etcd_bundle = bundle("TENURE_ETCD_TLS_OTHER_CA", "TENURE_ETCD_TLS_CA");
    let kafka_bundle = bundle("TENURE_KAFKA_SECURED_OTHER_CA", "TENURE_KAFKA_SECURED_CA");
    joins(
        "zookeeper-pem",
        zookeeper(
            ZooKeeperSecurity::new()
                .ca_pem(&zookeeper_bundle)
                .expect("PEM"),
        ),
        None,
        &topic,
    )
    .await;
    joins(
        "etcd-pem",
        etcd(
            EtcdSecurity::new().ca_pem(&etcd_bundle).expect("PEM"),
            "etcd-pem",
        ),
        None,
        &topic,
    )
    .await;
    joins(
        "kafka-pem",
        Box::new(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER"))),
        Some(kafka_secured(
            KafkaSecurity::new()
                .tls_ca_pem(&kafka_bundle, None)
                .expect("PEM"),
        )),
        &topic,
    )
    .await;
    // Only the unrelated CA: the servers are not trusted.
    refused(
        "zookeeper-pem-other",
        zookeeper(
            ZooKeeperSecurity::new()
                .ca_pem(&read("TENURE_ZOOKEEPER_TLS_OTHER_CA"))
                .expect("PEM"),
        ),
        None,
        &topic,
        "not trusted",
    )
    .await;
    refused(
        "etcd-pem-other",
        etcd(
            EtcdSecurity::new()
                .ca_pem(&read("TENURE_ETCD_TLS_OTHER_CA"))
                .expect("PEM"),
            "etcd-pem-other",
        ),
        None,
        &topic,
        "certificate",
    )
    .await;
    not_a_ca(b"");
    not_a_ca(b"not PEM at all");
    not_a_ca(&read("TENURE_ETCD_TLS_KEY"));

    // The system's trust store, pointed at the unrelated CAs: refused.
    let dir = std::env::temp_dir().join(format!("tenure-tls-trust-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let others = dir.join("others.pem");
    let mut pem = read("TENURE_ZOOKEEPER_TLS_OTHER_CA");
    pem.extend(read("TENURE_ETCD_TLS_OTHER_CA"));
    pem.extend(read("TENURE_KAFKA_SECURED_OTHER_CA"));
    std::fs::write(&others, &pem).expect("write the bundle");
    // Only that file: a directory the environment names would be read too.
    std::env::remove_var("SSL_CERT_DIR");
    std::env::set_var("SSL_CERT_FILE", &others);
    refused(
        "zookeeper-system-other",
        zookeeper(ZooKeeperSecurity::new().system_roots().expect("roots")),
        None,
        &topic,
        "system's trust store",
    )
    .await;
    refused(
        "etcd-system-other",
        etcd(
            EtcdSecurity::new().system_roots().expect("roots"),
            "etcd-system-other",
        ),
        None,
        &topic,
        "system's trust store",
    )
    .await;
    refused(
        "kafka-system-other",
        Box::new(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER"))),
        Some(kafka_secured(
            KafkaSecurity::new().tls_system_roots(None).expect("roots"),
        )),
        &topic,
        "system's trust store",
    )
    .await;

    // And at the servers' CAs: trusted.
    let right = dir.join("right.pem");
    let mut pem = read("TENURE_ZOOKEEPER_TLS_CA");
    pem.extend(read("TENURE_ETCD_TLS_CA"));
    pem.extend(read("TENURE_KAFKA_SECURED_CA"));
    std::fs::write(&right, &pem).expect("write the bundle");
    std::env::set_var("SSL_CERT_FILE", &right);
    joins(
        "zookeeper-system",
        zookeeper(ZooKeeperSecurity::new().system_roots().expect("roots")),
        None,
        &topic,
    )
    .await;
    joins(
        "etcd-system",
        etcd(
            EtcdSecurity::new().system_roots().expect("roots"),
            "etcd-system",
        ),
        None,
        &topic,
    )
    .await;
    joins(
        "kafka-system",
        Box::new(ZooKeeperBackend::new(var("TENURE_ZOOKEEPER"))),
        Some(kafka_secured(
            KafkaSecurity::new().tls_system_roots(None).expect("roots"),
        )),
        &topic,
    )
    .await;

    // An empty trust store is said at once.
    let empty = dir.join("empty.pem");
    std::fs::write(&empty, "").expect("write");
    std::env::set_var("SSL_CERT_FILE", &empty);
    match ZooKeeperSecurity::new().system_roots() {
        Err(BackendError::Config(detail)) => assert!(detail.contains("no CA"), "{detail}"),
        other => panic!("an empty trust store: {other:?}"),
    }
    match KafkaSecurity::new().tls_system_roots(None) {
        Err(KafkaError::Config(detail)) => assert!(detail.contains("no usable CA"), "{detail}"),
        other => panic!("an empty trust store: {other:?}"),
    }
    std::env::remove_var("SSL_CERT_FILE");
    let _ = std::fs::remove_dir_all(&dir);
}
