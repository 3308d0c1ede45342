//! Consuming through Kafka's SASL_SSL listener (as `scripts/services` starts
//! it: TLS with a certificate of a CA made on the spot, SASL PLAIN and
//! SCRAM) with the CA from a file or from PEM in memory, and through its
//! OAUTHBEARER listener with an unsecured JWT, with a real ZooKeeper; and
//! the refusals a misconfigured member gets, each saying what to fix, none
//! of them a hang.

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

fn read(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {path}: {e}"))
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

/// Joins `group` with `config`, on a topic of `MESSAGES` messages, and
/// consumes them all.
async fn consume_all(stores: &ZooKeeper, name: &str, config: KafkaConfig) {
    let client = kafka::client().await;
    let topic = kafka::topic(name);
    kafka::create_topic(&client, &topic, 1).await;
    kafka::produce(&client, &topic, 0, MESSAGES).await;
    let group = common::group(name);
    let mut member = GroupMember::builder(common::config_for(&group, "m1", &topic))
        .kafka(config)
        .join(stores.backend())
        .await
        .unwrap_or_else(|e| panic!("join ({name}): {e}"));
    let mut seen = BTreeSet::new();
    while seen.len() < MESSAGES {
        let message = tokio::time::timeout(Duration::from_secs(30), member.next_message())
            .await
            .unwrap_or_else(|_| panic!("{name}: consumed {} of {MESSAGES}", seen.len()))
            .expect("the member is open");
        seen.insert(message.offset());
        message.ack();
    }
    let _ = member.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_trusts_a_ca_given_as_pem_in_memory() {
    let _turn = crate::turns::shared().await;
    let stores = ZooKeeper::new("tls-pem").await;
    // A bundle: a CA that did not sign the broker's certificate, then the
    // one that did.
    let mut bundle = read(&var("TENURE_KAFKA_SECURED_OTHER_CA"));
    bundle.extend(read(&var("TENURE_KAFKA_SECURED_CA")));
    let mut config = KafkaConfig::new(&var("TENURE_KAFKA_SECURED"));
    config.connect_timeout = Duration::from_secs(5);
    config.security = KafkaSecurity::new()
        .sasl(
            SaslMechanism::ScramSha256,
            &var("TENURE_KAFKA_SECURED_USER"),
            &var("TENURE_KAFKA_SECURED_PASSWORD"),
        )
        .tls_ca_pem(&bundle, None)
        .expect("the CA bundle");
    consume_all(&stores, "tls-pem", config).await;
}

#[test]
fn a_ca_pem_without_a_certificate_is_refused_saying_so() {
    let _turn = crate::turns::shared_blocking();
    for (pem, says) in [
        (&b"not PEM at all"[..], "no certificate"),
        (&b""[..], "no certificate"),
        (
            &b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"[..],
            "PEM",
        ),
    ] {
        match KafkaSecurity::new().tls_ca_pem(pem, None) {
            Err(error @ (KafkaError::Config(_) | KafkaError::InvalidSetting { .. })) => {
                let detail = error.to_string();
                assert!(detail.contains(says), "{detail}")
            }
            other => panic!("expected a settings error saying {says:?}, got {other:?}"),
        }
    }
}

/// base64url without padding, as JWTs are written.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, byte)| n | u32::from(*byte) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// An unsecured JWT (`"alg":"none"`, empty signature) for `sub`, issued
/// `issued` seconds from now and expiring `expires` seconds from now.
fn unsecured_jwt(sub: &str, issued: i64, expires: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock")
        .as_secs() as i64;
    let header = base64url(br#"{"alg":"none"}"#);
    let claims = serde_json::json!({ "sub": sub, "iat": now + issued, "exp": now + expires });
    let claims = base64url(claims.to_string().as_bytes());
    format!("{header}.{claims}.")
}

fn oauth(token: impl Fn() -> String + Send + Sync + 'static) -> KafkaConfig {
    let mut config = KafkaConfig::new(&var("TENURE_KAFKA_OAUTH"));
    config.connect_timeout = Duration::from_secs(5);
    config.client_id = "tenure-oauth-test".to_owned();
    let token = std::sync::Arc::new(token);
    config.security = KafkaSecurity::new().oauthbearer(move || {
        let token = token.clone();
        async move { Ok(token()) }
    });
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_consumes_with_an_oauthbearer_token() {
    let _turn = crate::turns::shared().await;
    let stores = ZooKeeper::new("oauth").await;
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = calls.clone();
    let config = oauth(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        unsecured_jwt("tenure", 0, 3600)
    });
    consume_all(&stores, "oauth", config).await;
    assert!(
        calls.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "the token callback was asked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_malformed_and_failed_oauthbearer_tokens_are_refused() {
    let _turn = crate::turns::shared().await;
    let stores = ZooKeeper::new("oauth-refused").await;
    // Expired an hour ago.
    refused(
        &stores,
        oauth(|| unsecured_jwt("tenure", -7200, -3600)),
        "OAUTHBEARER",
    )
    .await;
    // Not a JWT.
    refused(&stores, oauth(|| "not-a-token".to_owned()), "OAUTHBEARER").await;
    // The callback cannot get a token.
    let mut config = KafkaConfig::new(&var("TENURE_KAFKA_OAUTH"));
    config.connect_timeout = Duration::from_secs(5);
    config.security = KafkaSecurity::new()
        .oauthbearer(|| async { Err::<String, _>("the token service is down".into()) });
    refused(&stores, config, "token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_consumes_through_sasl_ssl_with_scram_and_plain() {
    let _turn = crate::turns::shared().await;
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
            seen.insert(message.offset());
            message.ack();
        }
        let _ = member.close().await.expect("close");
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
            // Refused credentials and an untrusted certificate are final:
            // said after the first answer, not after retrying until the
            // connect deadline (a failing token callback is retried).
            if says == "password" || says == "certificate" {
                assert!(!detail.contains("retries failed"), "{detail}");
            }
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
    let _turn = crate::turns::shared().await;
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
    match KafkaSecurity::new().tls("/nonexistent/ca.pem", None) {
        Err(KafkaError::InvalidSetting { what, source }) => {
            assert!(what.contains("/nonexistent/ca.pem"), "{what}");
            // The reader's own error is kept as the cause.
            let io = source.get_ref().downcast_ref::<std::io::Error>();
            assert_eq!(
                io.map(std::io::Error::kind),
                Some(std::io::ErrorKind::NotFound)
            );
        }
        other => panic!("a CA file that is not there: {other:?}"),
    }
}
