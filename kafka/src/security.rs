//! Secured brokers: what a secured Kafka asks of a client — SASL (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512 with a user and password, or OAUTHBEARER
//! with a token an application callback hands out) and, with the Cargo
//! feature `tls`, TLS (the brokers' certificates checked against a CA —
//! from a PEM file, from PEM in memory, or the system's trust roots — and
//! a client certificate where they ask for one).

use std::future::Future;
#[cfg(feature = "tls")]
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use rskafka::client::{
    ClientBuilder, Credentials, OauthBearerCredentials, OauthCallback, SaslConfig,
};

use tenure_core::credentials::Password;

use crate::error::{ClientError, KafkaError};
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

/// Why an OAUTHBEARER token callback could not hand out a token.
pub type TokenError = Box<dyn std::error::Error + Send + Sync>;

/// What SASL a client speaks.
#[derive(Clone)]
enum Sasl {
    /// A user and password.
    Password(SaslMechanism, String, Password),
    /// OAUTHBEARER, with the callback that hands out tokens.
    OAuthBearer(OauthCallback),
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sasl::Password(mechanism, user, password) => f
                .debug_tuple("Password")
                .field(mechanism)
                .field(user)
                .field(password)
                .finish(),
            Sasl::OAuthBearer(_) => f.write_str("OAuthBearer(..)"),
        }
    }
}

/// Credentials and TLS settings for Kafka brokers that require them
/// (listeners `SASL_PLAINTEXT`, `SSL`, `SASL_SSL`).
///
/// ```
/// # fn main() -> Result<(), tenure_kafka::KafkaError> {
/// use tenure_kafka::{KafkaSecurity, SaslMechanism};
/// // SCRAM over TLS, trusting the CAs the system trusts.
/// let scram = KafkaSecurity::new().sasl(SaslMechanism::ScramSha512, "billing", "s3cret");
/// # #[cfg(feature = "tls")]
/// let scram = scram.tls_system_roots(None)?;
/// // OAUTHBEARER: the callback is asked for a token at every connection.
/// let oauth = KafkaSecurity::new().oauthbearer(|| async {
///     Ok::<_, tenure_kafka::security::TokenError>(std::env::var("KAFKA_TOKEN")?)
/// });
/// # drop((scram, oauth));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct KafkaSecurity {
    sasl: Option<Sasl>,
    #[cfg(feature = "tls")]
    tls: Option<Arc<rustls::ClientConfig>>,
    /// Where the trusted CAs come from, named in errors about the brokers'
    /// certificates.
    ca: Option<String>,
}

impl KafkaSecurity {
    /// No credentials, no TLS: a `PLAINTEXT` listener.
    pub fn new() -> KafkaSecurity {
        KafkaSecurity::default()
    }

    /// Authenticates with SASL `mechanism` as `user` with `password`.
    pub fn sasl(mut self, mechanism: SaslMechanism, user: &str, password: &str) -> KafkaSecurity {
        self.sasl = Some(Sasl::Password(
            mechanism,
            user.to_owned(),
            Password::new(password),
        ));
        self
    }

    /// Authenticates with SASL `OAUTHBEARER` (KIP-255), with the token
    /// `token` hands out: a JWT as the brokers' validator expects it
    /// (`sasl.oauthbearer.*` on the listener). It is called for every new
    /// connection to a broker, so it should cache a token and fetch a new
    /// one only when the cached one is close to expiring. An error it
    /// returns fails the connection (and a join) with
    /// [`KafkaError::Refused`], as does a token the brokers refuse.
    pub fn oauthbearer<F, T>(mut self, token: F) -> KafkaSecurity
    where
        F: Fn() -> T + Send + Sync + 'static,
        T: Future<Output = Result<String, TokenError>> + Send + 'static,
    {
        let callback: OauthCallback = Arc::new(move || {
            let future: Pin<Box<dyn Future<Output = Result<String, TokenError>> + Send>> =
                Box::pin(token());
            future
        });
        self.sasl = Some(Sasl::OAuthBearer(callback));
        self
    }

    /// Speaks TLS, trusting the broker certificates the CA in the PEM file
    /// `ca` signed, and presenting the client certificate and key in the
    /// PEM files of `client` if given (for brokers with
    /// `ssl.client.auth=required`).
    #[cfg(feature = "tls")]
    pub fn tls(
        self,
        ca: impl AsRef<Path>,
        client: Option<(&Path, &Path)>,
    ) -> Result<KafkaSecurity, KafkaError> {
        let ca_path = ca.as_ref();
        let what = format!("the CA file {}", ca_path.display());
        let pem = std::fs::read(ca_path)
            .map_err(|e| KafkaError::invalid_setting(format!("cannot read {what}"), e))?;
        let roots = tls::roots_from_pem(&pem, &what)?;
        let client = match client {
            None => None,
            Some((cert, key)) => {
                let read = |path: &Path, what: &str| {
                    std::fs::read(path).map_err(|e| {
                        KafkaError::invalid_setting(
                            format!("cannot read the {what} {}", path.display()),
                            e,
                        )
                    })
                };
                let cert_what = format!("client certificate {}", cert.display());
                let key_what = format!("client key {}", key.display());
                Some(tls::identity(
                    &read(cert, "client certificate")?,
                    &cert_what,
                    &read(key, "client key")?,
                    &key_what,
                )?)
            }
        };
        self.with_tls(roots, client, what)
    }

    /// Speaks TLS, trusting the broker certificates the CAs in `ca` signed:
    /// PEM in memory, one certificate or several (a bundle). `client`, if
    /// given, is the client certificate chain and its private key, PEM too.
    #[cfg(feature = "tls")]
    pub fn tls_ca_pem(
        self,
        ca: &[u8],
        client: Option<(&[u8], &[u8])>,
    ) -> Result<KafkaSecurity, KafkaError> {
        let what = "the CA PEM given".to_owned();
        let roots = tls::roots_from_pem(ca, &what)?;
        let client = match client {
            None => None,
            Some((cert, key)) => Some(tls::identity(
                cert,
                "client certificate PEM",
                key,
                "client key PEM",
            )?),
        };
        self.with_tls(roots, client, what)
    }

    /// Speaks TLS, trusting the broker certificates any CA the system
    /// trusts signed (its trust store: on Linux the distribution's bundle;
    /// if `SSL_CERT_FILE` or `SSL_CERT_DIR` is set, only the file and the
    /// directories they name). `client` as for
    /// [`KafkaSecurity::tls_ca_pem`].
    #[cfg(feature = "tls")]
    pub fn tls_system_roots(
        self,
        client: Option<(&[u8], &[u8])>,
    ) -> Result<KafkaSecurity, KafkaError> {
        let roots = tls::system_roots()?;
        let client = match client {
            None => None,
            Some((cert, key)) => Some(tls::identity(
                cert,
                "client certificate PEM",
                key,
                "client key PEM",
            )?),
        };
        self.with_tls(roots, client, "the system's trust store".to_owned())
    }

    #[cfg(feature = "tls")]
    fn with_tls(
        mut self,
        roots: rustls::RootCertStore,
        client: Option<tls::Identity>,
        ca: String,
    ) -> Result<KafkaSecurity, KafkaError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| KafkaError::invalid_setting("TLS", e))?
            .with_root_certificates(roots);
        let config = match client {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(|e| {
                KafkaError::invalid_setting("the client certificate cannot be used", e)
            })?,
        };
        self.tls = Some(Arc::new(config));
        self.ca = Some(ca);
        Ok(self)
    }

    /// Whether TLS is on.
    pub fn uses_tls(&self) -> bool {
        self.ca.is_some()
    }

    /// The SASL mechanism and user, if any.
    pub fn sasl_user(&self) -> Option<(SaslMechanism, &str)> {
        match &self.sasl {
            Some(Sasl::Password(mechanism, user, _)) => Some((*mechanism, user.as_str())),
            Some(Sasl::OAuthBearer(_)) | None => None,
        }
    }

    /// Whether SASL `OAUTHBEARER` is on.
    pub fn uses_oauthbearer(&self) -> bool {
        matches!(self.sasl, Some(Sasl::OAuthBearer(_)))
    }

    /// `builder` with these settings.
    pub(crate) fn apply(&self, mut builder: ClientBuilder) -> ClientBuilder {
        match &self.sasl {
            Some(Sasl::Password(mechanism, user, password)) => {
                let credentials = Credentials::new(user.clone(), password.expose().to_owned());
                builder = builder.sasl_config(match mechanism {
                    SaslMechanism::Plain => SaslConfig::Plain(credentials),
                    SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(credentials),
                    SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(credentials),
                });
            }
            Some(Sasl::OAuthBearer(callback)) => {
                builder = builder.sasl_config(SaslConfig::Oauthbearer(OauthBearerCredentials {
                    callback: callback.clone(),
                    authz_id: None,
                    bearer_kvs: Vec::new(),
                }));
            }
            None => {}
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            builder = builder.tls_config(tls.clone());
        }
        builder
    }

    /// What a failed connection means, in words that say what to check:
    /// refused credentials, or a broker certificate the CA did not sign.
    pub(crate) fn explain(
        &self,
        bootstrap: &str,
        error: &str,
        source: &ClientError,
    ) -> Option<KafkaError> {
        let refused = |detail: String| KafkaError::Refused {
            bootstrap: bootstrap.to_owned(),
            detail,
            source: Some(source.clone()),
        };
        let lower = error.to_ascii_lowercase();
        if lower.contains("sasl") || lower.contains("authentication") {
            let detail = match &self.sasl {
                Some(Sasl::Password(mechanism, user, _)) => format!(
                    "the brokers refused user {user:?} with {}: check the user, its password and \
                     the mechanism the listener offers ({error})",
                    mechanism.name()
                ),
                Some(Sasl::OAuthBearer(_)) => format!(
                    "the brokers refused the OAUTHBEARER token (or the token callback failed): \
                     check that the token is current and what the listener's validator expects \
                     of it, and that the listener offers OAUTHBEARER ({error})"
                ),
                None => format!(
                    "the brokers refused no SASL credentials: check the mechanism the listener \
                     offers ({error})"
                ),
            };
            return Some(refused(detail));
        }
        if self.uses_tls() && lower.contains("certificate") {
            let ca = self.ca.as_deref().unwrap_or("(none)");
            return Some(refused(format!(
                "the brokers' TLS certificate is not trusted: check that a CA of {ca} signed it \
                 and that it names the broker's host ({error})"
            )));
        }
        None
    }
}

#[cfg(feature = "tls")]
mod tls {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::error::KafkaError;

    /// A client certificate chain and its key.
    pub(super) type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

    /// The certificates of `pem` (`what` names it in errors): at least one,
    /// each usable as a trust anchor.
    pub(super) fn roots_from_pem(
        pem: &[u8],
        what: &str,
    ) -> Result<rustls::RootCertStore, KafkaError> {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|e| {
                KafkaError::invalid_setting(format!("{what} is not readable PEM"), e)
            })?;
            roots.add(certificate).map_err(|e| {
                KafkaError::invalid_setting(format!("{what} holds an unusable certificate"), e)
            })?;
        }
        if roots.is_empty() {
            return Err(KafkaError::Config(format!(
                "{what} holds no certificate (no `-----BEGIN CERTIFICATE-----` block)"
            )));
        }
        Ok(roots)
    }

    /// The CAs the system trusts.
    pub(super) fn system_roots() -> Result<rustls::RootCertStore, KafkaError> {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            return Err(KafkaError::Config(format!(
                "the system's trust store holds no usable CA certificate (SSL_CERT_FILE or \
                 SSL_CERT_DIR can name one){}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join("; "))
                }
            )));
        }
        Ok(roots)
    }

    /// The client certificate chain in `cert` and its key in `key`.
    pub(super) fn identity(
        cert: &[u8],
        cert_what: &str,
        key: &[u8],
        key_what: &str,
    ) -> Result<Identity, KafkaError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                KafkaError::invalid_setting(format!("the {cert_what} is not readable PEM"), e)
            })?;
        if chain.is_empty() {
            return Err(KafkaError::Config(format!(
                "the {cert_what} holds no certificate"
            )));
        }
        let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
            KafkaError::invalid_setting(format!("the {key_what} holds no usable private key"), e)
        })?;
        Ok((chain, key))
    }
}
