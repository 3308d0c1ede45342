//! Reaching the store and Kafka as the connection flags (or the `TENURE_*`
//! variables) say: which store, with which credentials and TLS settings.

use std::sync::Arc;

use clap::parser::ValueSource;
use clap::ArgMatches;
use tenure_admin::{GroupAdmin, KafkaClient};
#[cfg(feature = "etcd")]
use tenure_etcd::EtcdAdmin;
use tenure_kafka::{KafkaConfig, KafkaSecurity, SaslMechanism};
#[cfg(feature = "zookeeper")]
use tenure_zookeeper::ZooKeeperAdmin;

use crate::args::Connection;
use crate::error::Failure;

/// The value of `--zookeeper-ca`, `--etcd-ca` and `--kafka-ca` that means
/// the system's trust store rather than a file (as libpq's
/// `sslrootcert=system`); a file of that name is `./system`.
#[cfg(any(feature = "etcd", feature = "zookeeper-tls", feature = "kafka-tls"))]
const SYSTEM_ROOTS: &str = "system";

/// Whether a CA flag's value names the system's trust store.
#[cfg(any(feature = "etcd", feature = "zookeeper-tls", feature = "kafka-tls"))]
fn is_system(ca: &std::path::Path) -> bool {
    ca.as_os_str() == SYSTEM_ROOTS
}

/// Which store the flags and environment name.
#[derive(Clone, Debug)]
pub enum Store {
    /// A ZooKeeper connect string.
    ZooKeeper(String),
    /// etcd endpoints.
    Etcd(String),
}

/// Picks the store: a flag wins over the environment; two flags, or two
/// variables and no flag, are ambiguous.
pub fn pick_store(matches: &ArgMatches, connection: &Connection) -> Result<Store, Failure> {
    let from_flag = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    match (&connection.zookeeper, &connection.etcd) {
        (Some(zookeeper), None) => Ok(Store::ZooKeeper(zookeeper.clone())),
        (None, Some(etcd)) => Ok(Store::Etcd(etcd.clone())),
        (Some(zookeeper), Some(etcd)) => match (from_flag("zookeeper"), from_flag("etcd")) {
            (true, false) => Ok(Store::ZooKeeper(zookeeper.clone())),
            (false, true) => Ok(Store::Etcd(etcd.clone())),
            (true, true) => Err(Failure::TwoStores),
            (false, false) => Err(Failure::TwoStoreVariables),
        },
        (None, None) => Err(Failure::NoStore),
    }
}

/// Connects to the store with the credentials and TLS settings the flags
/// (or variables) give.
pub async fn connect_store(
    store: Store,
    connection: &Connection,
) -> Result<Box<dyn GroupAdmin>, Failure> {
    match store {
        #[cfg(feature = "zookeeper")]
        Store::ZooKeeper(address) => {
            let security = zookeeper_security(connection)?;
            let admin = ZooKeeperAdmin::connect_with(&address, security, connection.wait());
            Ok(Box::new(admin.await?))
        }
        #[cfg(feature = "etcd")]
        Store::Etcd(endpoints) => {
            let (prefix, security) = (&connection.etcd_prefix, etcd_security(connection)?);
            let admin = EtcdAdmin::connect_with(&endpoints, prefix, security, connection.wait());
            Ok(Box::new(admin.await?))
        }
        #[cfg(not(all(feature = "zookeeper", feature = "etcd")))]
        unbuilt => Err(not_built(unbuilt)),
    }
}

/// The failure of a store this build has no backend for.
#[cfg(not(all(feature = "zookeeper", feature = "etcd")))]
fn not_built(store: Store) -> Failure {
    let (asked, missing) = match store {
        Store::ZooKeeper(address) => (
            format!("cannot use ZooKeeper at {address}"),
            "the Cargo feature `zookeeper`",
        ),
        Store::Etcd(endpoints) => (
            format!("cannot use etcd at {endpoints}"),
            "the Cargo feature `etcd` (cargo install --path cli --features etcd)",
        ),
    };
    Failure::NotBuilt { asked, missing }
}

/// The ZooKeeper credentials and TLS settings the flags (or variables)
/// give.
#[cfg(feature = "zookeeper")]
fn zookeeper_security(
    connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, Failure> {
    let mut security = tenure_zookeeper::ZooKeeperSecurity::new();
    if let Some(credentials) = &connection.zookeeper_digest {
        let (user, password) = credentials.split_once(':').ok_or(Failure::DigestForm)?;
        let digest = tenure_zookeeper::Digest::new(user, password)?;
        security = security.digest(digest);
    }
    match &connection.zookeeper_ca {
        Some(ca) => zookeeper_tls(security, ca, connection),
        None => Ok(security),
    }
}

#[cfg(feature = "zookeeper-tls")]
fn zookeeper_tls(
    security: tenure_zookeeper::ZooKeeperSecurity,
    ca: &std::path::Path,
    connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, Failure> {
    let mut security = if is_system(ca) {
        security.system_roots()?
    } else {
        security.ca_file(ca)?
    };
    // Each of the two requires the other (clap says so on bad usage).
    if let (Some(cert), Some(key)) = (&connection.zookeeper_cert, &connection.zookeeper_key) {
        security = security.client_identity_files(cert, key)?;
    }
    Ok(security)
}

#[cfg(all(feature = "zookeeper", not(feature = "zookeeper-tls")))]
fn zookeeper_tls(
    _security: tenure_zookeeper::ZooKeeperSecurity,
    ca: &std::path::Path,
    _connection: &Connection,
) -> Result<tenure_zookeeper::ZooKeeperSecurity, Failure> {
    Err(Failure::NotBuilt {
        asked: format!("--zookeeper-ca {}", ca.display()),
        missing: "TLS to ZooKeeper (the Cargo feature `zookeeper-tls`)",
    })
}

/// The etcd credentials and TLS settings the flags (or variables) give.
#[cfg(feature = "etcd")]
fn etcd_security(connection: &Connection) -> Result<tenure_etcd::EtcdSecurity, Failure> {
    let mut security = tenure_etcd::EtcdSecurity::new();
    // Each of the two requires the other (clap says so on bad usage).
    if let (Some(user), Some(password)) = (&connection.etcd_user, &connection.etcd_password) {
        security = security.user(user, password);
    }
    if let Some(ca) = &connection.etcd_ca {
        security = if is_system(ca) {
            security.system_roots()?
        } else {
            security.ca_file(ca)?
        };
    }
    if let (Some(cert), Some(key)) = (&connection.etcd_cert, &connection.etcd_key) {
        security = security.client_identity_files(cert, key)?;
    }
    Ok(security)
}

/// The Kafka SASL and TLS settings the flags (or variables) give.
fn kafka_security(connection: &Connection) -> Result<KafkaSecurity, Failure> {
    let mut security = KafkaSecurity::new();
    if let (Some(user), Some(password)) = (&connection.kafka_user, &connection.kafka_password) {
        let name = connection
            .kafka_sasl_mechanism
            .as_deref()
            .unwrap_or("SCRAM-SHA-512");
        let mechanism = SaslMechanism::from_name(name)
            .ok_or_else(|| Failure::SaslMechanism(name.to_owned()))?;
        security = security.sasl(mechanism, user, password);
    }
    if let Some(ca) = &connection.kafka_ca {
        security = kafka_tls(security, ca, connection)?;
    }
    Ok(security)
}

#[cfg(feature = "kafka-tls")]
fn kafka_tls(
    security: KafkaSecurity,
    ca: &std::path::Path,
    connection: &Connection,
) -> Result<KafkaSecurity, Failure> {
    let client = match (&connection.kafka_cert, &connection.kafka_key) {
        (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
        _ => None,
    };
    if !is_system(ca) {
        return Ok(security.tls(ca, client)?);
    }
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| Failure::Read {
            path: path.to_owned(),
            source,
        })
    };
    let client = match client {
        Some((cert, key)) => Some((read(cert)?, read(key)?)),
        None => None,
    };
    let client = client
        .as_ref()
        .map(|(cert, key)| (cert.as_slice(), key.as_slice()));
    Ok(security.tls_system_roots(client)?)
}

#[cfg(not(feature = "kafka-tls"))]
fn kafka_tls(
    _security: KafkaSecurity,
    ca: &std::path::Path,
    _connection: &Connection,
) -> Result<KafkaSecurity, Failure> {
    Err(Failure::NotBuilt {
        asked: format!("--kafka-ca {}", ca.display()),
        missing: "TLS to Kafka (the Cargo feature `kafka-tls`)",
    })
}

/// Connects to Kafka if the flags (or variables) name its brokers.
pub async fn connect_kafka(connection: &Connection) -> Result<Option<Arc<KafkaClient>>, Failure> {
    let Some(bootstrap) = &connection.bootstrap else {
        return Ok(None);
    };
    let mut config = KafkaConfig::new(bootstrap);
    config.connect_timeout = connection.wait();
    config.client_id = connection.kafka_client_id.clone();
    config.security = kafka_security(connection)?;
    Ok(Some(tenure_kafka::connect(&config).await?))
}
