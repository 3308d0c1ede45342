//! Secured brokers: what a secured Kafka asks of a client — SASL (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512) and, with the Cargo feature `tls`, TLS
//! (the brokers' certificates checked against a CA, and a client
//! certificate where they ask for one).

#[cfg(feature = "tls")]
use std::path::Path;
#[cfg(feature = "tls")]
use std::sync::Arc;

use rskafka::client::{ClientBuilder, Credentials, SaslConfig};

use tenure_core::credentials::Password;

use crate::error::KafkaError;

/// A SASL mechanism Kafka brokers offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SaslMechanism {
    /// `PLAIN`: the password goes to the broker (use it only over TLS).
    Plain,
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-512`.
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism by its Kafka name (`PLAIN`, `SCRAM-SHA-256`,
    /// `SCRAM-SHA-512`, any case).
    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        match name.to_ascii_uppercase().as_str() {
            "PLAIN" => Some(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Some(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(SaslMechanism::ScramSha512),
            _ => None,
        }
    }

    /// Its Kafka name.
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Credentials and TLS settings for Kafka brokers that require them
/// (listeners `SASL_PLAINTEXT`, `SSL`, `SASL_SSL`).
#[derive(Clone, Debug, Default)]
pub struct KafkaSecurity {
    sasl: Option<(SaslMechanism, String, Password)>,
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
    /// The CA file, named in errors about the brokers' certificates.
    ca: Option<String>,
}

impl KafkaSecurity {
    /// No credentials, no TLS: a `PLAINTEXT` listener.
    pub fn new() -> KafkaSecurity {
        KafkaSecurity::default()
    }

    /// Authenticates with SASL `mechanism` as `user` with `password`.
    pub fn sasl(mut self, mechanism: SaslMechanism, user: &str, password: &str) -> KafkaSecurity {
        self.sasl = Some((mechanism, user.to_owned(), Password::new(password)));
        self
    }

    /// Speaks TLS, trusting the broker certificates the CA in the PEM file
    /// `ca` signed, and presenting the client certificate and key in the
    /// PEM files of `client` if given (for brokers with
    /// `ssl.client.auth=required`).
    #[cfg(feature = "tls")]
    pub fn tls(
        mut self,
        ca: impl AsRef<Path>,
        client: Option<(&Path, &Path)>,
    ) -> Result<KafkaSecurity, KafkaError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let bad = |detail: String| KafkaError::Config(detail);
        let ca_path = ca.as_ref();
        let mut roots = rustls::RootCertStore::empty();
        let certificates = CertificateDer::pem_file_iter(ca_path).map_err(|e| {
            bad(format!(
                "cannot read the CA file {}: {e}",
                ca_path.display()
            ))
        })?;
        for certificate in certificates {
            let certificate = certificate
                .map_err(|e| bad(format!("the CA file {} is not PEM: {e}", ca_path.display())))?;
            roots.add(certificate).map_err(|e| {
                bad(format!(
                    "the CA file {} holds an unusable certificate: {e}",
                    ca_path.display()
                ))
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad(format!("TLS: {e}")))?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_file_iter(cert)
                    .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                    .map_err(|e| {
                        bad(format!(
                            "cannot read the client certificate {}: {e}",
                            cert.display()
                        ))
                    })?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
                    bad(format!("cannot read the client key {}: {e}", key.display()))
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad(format!("the client certificate cannot be used: {e}")))?
            }
        };
        self.tls = Some(Arc::new(config));
        self.ca = Some(ca_path.display().to_string());
        Ok(self)
    }

    /// Whether TLS is on.
    pub fn uses_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The SASL mechanism and user, if any.
    pub fn sasl_user(&self) -> Option<(SaslMechanism, &str)> {
        self.sasl
            .as_ref()
            .map(|(mechanism, user, _)| (*mechanism, user.as_str()))
    }

    /// `builder` with these settings.
    pub(crate) fn apply(&self, mut builder: ClientBuilder) -> ClientBuilder {
        if let Some((mechanism, user, password)) = &self.sasl {
            let credentials = Credentials::new(user.clone(), password.expose().to_owned());
            builder = builder.sasl_config(match mechanism {
                SaslMechanism::Plain => SaslConfig::Plain(credentials),
                SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(credentials),
                SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(credentials),
            });
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            builder = builder.tls_config(tls.clone());
        }
        builder
    }

    /// What a failed connection means, in words that say what to check:
    /// refused credentials, or a broker certificate the CA did not sign.
    pub(crate) fn explain(&self, bootstrap: &str, error: &str) -> Option<KafkaError> {
        let refused = |detail: String| KafkaError::Refused {
            bootstrap: bootstrap.to_owned(),
            detail,
        };
        let lower = error.to_ascii_lowercase();
        if lower.contains("sasl") || lower.contains("authentication") {
            let who = match self.sasl_user() {
                Some((mechanism, user)) => format!("user {user:?} with {}", mechanism.name()),
                None => "no SASL credentials".to_owned(),
            };
            return Some(refused(format!(
                "the brokers refused {who}: check the user, its password and the mechanism the \
                 listener offers ({error})"
            )));
        }
        if self.uses_tls() && lower.contains("certificate") {
            let ca = self.ca.as_deref().unwrap_or("(none)");
            return Some(refused(format!(
                "the brokers' TLS certificate is not trusted: check that the CA file {ca} signed \
                 it and that it names the broker's host ({error})"
            )));
        }
        None
    }
}
