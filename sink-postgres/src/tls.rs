//! TLS to PostgreSQL (feature `tls`): rustls, the server's certificate
//! checked against a CA from a PEM file, from PEM in memory or from the
//! system's trust store, and against the host the connection string names
//! (as libpq's `sslmode=verify-full`).

use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::Socket;

use crate::PostgresSinkError;

/// How the sink speaks TLS to PostgreSQL: which CAs it trusts, whether it
/// presents a client certificate, and whether TLS is required.
///
/// ```no_run
/// # async fn run() -> Result<(), tenure_postgres::PostgresSinkError> {
/// use tenure_postgres::{MessageTable, PostgresSink, PostgresTls};
/// let tls = PostgresTls::ca_file("/etc/postgresql/ca.pem")?;
/// let sink = PostgresSink::builder("postgresql://app:secret@db.internal/app", "orders")
///     .tls(tls)
///     .connect(MessageTable::new("orders_out")?)
///     .await?;
/// # drop(sink);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresTls {
    roots: rustls::RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, Arc<PrivateKeyDer<'static>>)>,
    /// Where the trusted CAs come from, for errors.
    source: String,
    required: bool,
}

impl std::fmt::Debug for PostgresTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresTls")
            .field("trusting", &self.source)
            .field("client_certificate", &self.identity.is_some())
            .field("required", &self.required)
            .finish()
    }
}

fn settings(detail: String) -> PostgresSinkError {
    PostgresSinkError::TlsSettings { detail }
}

impl PostgresTls {
    /// Trusts the server certificates the CAs in the PEM file at `path`
    /// signed.
    pub fn ca_file(path: impl AsRef<Path>) -> Result<PostgresTls, PostgresSinkError> {
        let path = path.as_ref();
        let what = format!("the CA file {}", path.display());
        let pem = std::fs::read(path).map_err(|e| settings(format!("cannot read {what}: {e}")))?;
        PostgresTls::from_pem(&pem, what)
    }

    /// Trusts the server certificates the CAs in `pem` signed: PEM in
    /// memory, one certificate or several (a bundle).
    pub fn ca_pem(pem: &[u8]) -> Result<PostgresTls, PostgresSinkError> {
        PostgresTls::from_pem(pem, "the CA PEM given".to_owned())
    }

    /// Trusts the server certificates any CA the system trusts signed (its
    /// trust store: on Linux the distribution's bundle; if `SSL_CERT_FILE`
    /// or `SSL_CERT_DIR` is set, only the file and the directories they
    /// name).
    pub fn system_roots() -> Result<PostgresTls, PostgresSinkError> {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            return Err(settings(format!(
                "the system's trust store holds no usable CA certificate (SSL_CERT_FILE or \
                 SSL_CERT_DIR can name one){}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join("; "))
                }
            )));
        }
        Ok(PostgresTls {
            roots,
            identity: None,
            source: "the system's trust store".to_owned(),
            required: true,
        })
    }

    fn from_pem(pem: &[u8], what: String) -> Result<PostgresTls, PostgresSinkError> {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate =
                certificate.map_err(|e| settings(format!("{what} is not readable PEM: {e}")))?;
            roots
                .add(certificate)
                .map_err(|e| settings(format!("{what} holds an unusable certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(settings(format!(
                "{what} holds no certificate (no `-----BEGIN CERTIFICATE-----` block)"
            )));
        }
        Ok(PostgresTls {
            roots,
            identity: None,
            source: what,
            required: true,
        })
    }

    /// Presents the client certificate (chain) and key in the PEM `cert`
    /// and `key`, for a server that asks for one (`clientcert=verify-ca`
    /// or `verify-full` in `pg_hba.conf`, or the `cert` method).
    pub fn client_identity_pem(
        mut self,
        cert: &[u8],
        key: &[u8],
    ) -> Result<PostgresTls, PostgresSinkError> {
        let chain = CertificateDer::pem_slice_iter(cert)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| settings(format!("the client certificate is not readable PEM: {e}")))?;
        if chain.is_empty() {
            return Err(settings(
                "the client certificate PEM holds no certificate".to_owned(),
            ));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| settings(format!("the client key holds no usable private key: {e}")))?;
        self.identity = Some((chain, Arc::new(key)));
        Ok(self)
    }

    /// Whether a server that does not speak TLS is refused (default
    /// `true`, as libpq's `sslmode=verify-full`), or spoken to in plaintext
    /// (`false`, as `sslmode=prefer`, but checking a server that does speak
    /// TLS as strictly). `sslmode` in the connection string is overridden
    /// when TLS settings are given.
    pub fn required(mut self, required: bool) -> PostgresTls {
        self.required = required;
        self
    }

    /// Whether a server without TLS is refused.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Where the trusted CAs come from, as errors name it.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The connector the client takes.
    pub(crate) fn connector(&self) -> Result<RustlsConnect, PostgresSinkError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| settings(format!("TLS: {e}")))?
            .with_root_certificates(self.roots.clone());
        let config = match &self.identity {
            None => builder.with_no_client_auth(),
            Some((chain, key)) => builder
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(|e| settings(format!("the client certificate cannot be used: {e}")))?,
        };
        Ok(RustlsConnect {
            config: Arc::new(config),
        })
    }
}

/// What a failed connection's error chain says about TLS, if anything: a
/// server certificate not trusted or not naming the host, a client
/// certificate refused, or a server that does not speak TLS.
pub(crate) fn explain(error: &tokio_postgres::Error, tls: &PostgresTls) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        let rustls_error = current.downcast_ref::<rustls::Error>().or_else(|| {
            current
                .downcast_ref::<io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        match rustls_error {
            Some(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            )) => {
                return Some(
                    "the server's certificate does not name the host connected to: connect by a \
                     name (or address) the certificate holds"
                        .to_owned(),
                )
            }
            Some(rustls::Error::InvalidCertificate(reason)) => {
                return Some(format!(
                    "the server's certificate is not trusted ({reason:?}): a CA of {} must have \
                     signed it",
                    tls.source()
                ))
            }
            Some(rustls::Error::AlertReceived(alert)) => {
                return Some(format!(
                    "the server refused the TLS handshake ({alert:?}): it may require a client \
                     certificate its CA signed (PostgresTls::client_identity_pem)"
                ))
            }
            Some(other) => return Some(format!("the TLS handshake failed: {other}")),
            None => {}
        }
        source = current.source();
    }
    let text = error.to_string();
    if text.contains("server does not support TLS") {
        return Some(
            "the server does not speak TLS (ssl = off), and TLS is required \
             (PostgresTls::required)"
                .to_owned(),
        );
    }
    None
}

/// tokio-postgres's TLS connector, made of a rustls configuration.
#[derive(Clone)]
pub(crate) struct RustlsConnect {
    config: Arc<rustls::ClientConfig>,
}

impl MakeTlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnectTo;
    type Error = rustls::pki_types::InvalidDnsNameError;

    fn make_tls_connect(&mut self, host: &str) -> Result<RustlsConnectTo, Self::Error> {
        Ok(RustlsConnectTo {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name: ServerName::try_from(host.to_owned())?,
        })
    }
}

/// A TLS connection to one host about to be made.
pub(crate) struct RustlsConnectTo {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl TlsConnect<Socket> for RustlsConnectTo {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, socket: Socket) -> Self::Future {
        Box::pin(async move {
            self.connector
                .connect(self.name, socket)
                .await
                .map(RustlsStream)
        })
    }
}

/// A TLS connection to PostgreSQL. No channel binding: SCRAM runs without
/// it (`SCRAM-SHA-256`, not `-PLUS`), as with libpq's
/// `channel_binding=prefer` against a client that lacks it.
pub(crate) struct RustlsStream(tokio_rustls::client::TlsStream<Socket>);

impl TlsStream for RustlsStream {
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}
