//! What a secured etcd cluster asks of a client: a user and password (etcd's
//! `auth enable`), and TLS — the server's certificate checked against a CA,
//! and a client certificate where the server asks for one
//! (`--client-cert-auth`). The CA comes from a PEM file, from PEM in
//! memory, or from the system's trust store.

use std::path::Path;

use etcd_client::{Certificate, ConnectOptions, Identity, TlsOptions};
use tenure_admin::AdminError;
use tenure_core::credentials::{error_chain, Password};
use tenure_tokio::BackendError;

/// Credentials and TLS settings for an etcd cluster that requires them.
///
/// ```no_run
/// # fn main() -> Result<(), tenure_tokio::BackendError> {
/// use tenure_etcd::{EtcdBackend, EtcdSecurity};
/// let security = EtcdSecurity::new()
///     .user("billing", "s3cret")
///     .ca_file("/etc/etcd/ca.pem")?
///     .client_identity_files("/etc/etcd/client.pem", "/etc/etcd/client-key.pem")?;
/// let backend = EtcdBackend::new("https://etcd1:2379,https://etcd2:2379").security(security);
/// # drop(backend);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct EtcdSecurity {
    user: Option<(String, Password)>,
    tls: Option<TlsOptions>,
    /// The CA file, named in errors about the server's certificate.
    ca: Option<String>,
}

impl EtcdSecurity {
    /// No credentials, no TLS: a plaintext cluster without auth.
    pub fn new() -> EtcdSecurity {
        EtcdSecurity::default()
    }

    /// Authenticates as `user` with `password`.
    pub fn user(mut self, user: &str, password: &str) -> EtcdSecurity {
        self.user = Some((user.to_owned(), Password::new(password)));
        self
    }

    /// Speaks TLS (the endpoints must be `https://`), trusting the server
    /// certificates the CA in the PEM file at `path` signed.
    pub fn ca_file(self, path: impl AsRef<Path>) -> Result<EtcdSecurity, BackendError> {
        let pem = read(path.as_ref(), "CA certificate")?;
        let what = format!("the CA file {}", path.as_ref().display());
        self.with_ca_pem(pem, what)
    }

    /// Speaks TLS (the endpoints must be `https://`), trusting the server
    /// certificates the CAs in `pem` signed: PEM in memory, one
    /// certificate or several (a bundle).
    pub fn ca_pem(self, pem: &[u8]) -> Result<EtcdSecurity, BackendError> {
        self.with_ca_pem(pem.to_vec(), "the CA PEM given".to_owned())
    }

    /// Speaks TLS (the endpoints must be `https://`), trusting the server
    /// certificates any CA the system trusts signed (its trust store: on
    /// Linux the distribution's bundle; if `SSL_CERT_FILE` or
    /// `SSL_CERT_DIR` is set, only the file and the directories they name).
    pub fn system_roots(mut self) -> Result<EtcdSecurity, BackendError> {
        let found = rustls_native_certs::load_native_certs();
        if found.certs.is_empty() {
            let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
            return Err(BackendError::Config(format!(
                "the system's trust store holds no CA certificate (SSL_CERT_FILE or SSL_CERT_DIR \
                 can name one){}",
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(": {}", errors.join("; "))
                }
            )));
        }
        let tls = self.tls.take().unwrap_or_default();
        self.tls = Some(tls.with_native_roots());
        self.ca = Some("the system's trust store".to_owned());
        Ok(self)
    }

    fn with_ca_pem(mut self, pem: Vec<u8>, what: String) -> Result<EtcdSecurity, BackendError> {
        certificates(&pem, &what)?;
        let tls = self.tls.take().unwrap_or_default();
        self.tls = Some(tls.ca_certificate(Certificate::from_pem(pem)));
        self.ca = Some(what);
        Ok(self)
    }

    /// Presents the client certificate and key in the PEM files at `cert`
    /// and `key`, for a server that asks for one.
    pub fn client_identity_files(
        self,
        cert: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<EtcdSecurity, BackendError> {
        let cert_pem = read(cert.as_ref(), "client certificate")?;
        let key_pem = read(key.as_ref(), "client key")?;
        certificates(
            &cert_pem,
            &format!("the client certificate file {}", cert.as_ref().display()),
        )?;
        Ok(self.with_identity(cert_pem, key_pem))
    }

    /// Presents the client certificate (chain) and key in the PEM `cert`
    /// and `key`, in memory, for a server that asks for one.
    pub fn client_identity_pem(
        self,
        cert: &[u8],
        key: &[u8],
    ) -> Result<EtcdSecurity, BackendError> {
        certificates(cert, "the client certificate PEM given")?;
        Ok(self.with_identity(cert.to_vec(), key.to_vec()))
    }

    fn with_identity(mut self, cert: Vec<u8>, key: Vec<u8>) -> EtcdSecurity {
        let tls = self.tls.take().unwrap_or_default();
        self.tls = Some(tls.identity(Identity::from_pem(cert, key)));
        self
    }

    /// Whether TLS is on.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The user, if any.
    pub fn user_name(&self) -> Option<&str> {
        self.user.as_ref().map(|(user, _)| user.as_str())
    }

    /// `options` with these settings.
    pub(crate) fn apply(&self, mut options: ConnectOptions) -> ConnectOptions {
        if let Some((user, password)) = &self.user {
            options = options.with_user(user.clone(), password.expose());
        }
        if let Some(tls) = &self.tls {
            options = options.with_tls(tls.clone());
        }
        options
    }

    /// Refuses endpoints whose scheme does not match the TLS setting: the
    /// client would otherwise fail later with an obscure transport error.
    pub(crate) fn check_endpoints(&self, endpoints: &[String]) -> Result<(), String> {
        for endpoint in endpoints {
            let https = endpoint.starts_with("https://");
            if self.uses_tls() && !https {
                return Err(format!(
                    "endpoint {endpoint:?} is not https:// but TLS is configured (EtcdSecurity::ca_file, \
                     ca_pem or system_roots)"
                ));
            }
            if !self.uses_tls() && https {
                return Err(format!(
                    "endpoint {endpoint:?} is https:// but no CA is configured to check the server \
                     (EtcdSecurity::ca_file, ca_pem or system_roots)"
                ));
            }
        }
        Ok(())
    }

    /// What a failed connection means, in words that say what to check:
    /// refused credentials, or a server certificate the CA did not sign.
    pub(crate) fn explain(&self, error: &etcd_client::Error) -> Option<Refusal> {
        if let etcd_client::Error::GRpcStatus(status) = error {
            if status.message().contains("authentication failed") {
                let user = self.user_name().unwrap_or("(none)");
                return Some(Refusal::Credentials(format!(
                    "etcd refused user {user:?} and its password (EtcdSecurity::user): {}",
                    status.message()
                )));
            }
            if status.code() == tonic::Code::PermissionDenied
                || status.message().contains("user name is empty")
            {
                return Some(Refusal::Credentials(format!(
                    "etcd requires a user with rights on the prefix (EtcdSecurity::user): {}",
                    status.message()
                )));
            }
        }
        let chain = error_chain(error);
        if self.uses_tls() && (chain.contains("certificate") || chain.contains("Certificate")) {
            let ca = self.ca.as_deref().unwrap_or("(none)");
            return Some(Refusal::Certificate(format!(
                "the server's TLS certificate is not trusted: check that a CA of {ca} signed it, \
                 and that the endpoint's host is named in it ({chain})"
            )));
        }
        None
    }
}

/// Why a secured etcd refused a client.
pub(crate) enum Refusal {
    /// The user or password.
    Credentials(String),
    /// The server's certificate.
    Certificate(String),
}

impl Refusal {
    /// The error the runtime sees, naming `store`, with the client's
    /// `error` it explains as its source.
    pub(crate) fn into_backend_error(
        self,
        store: String,
        error: etcd_client::Error,
    ) -> BackendError {
        match self {
            Refusal::Credentials(detail) | Refusal::Certificate(detail) => BackendError::Denied {
                store,
                detail,
                source: Some(tenure_core::ClientError::new(error)),
            },
        }
    }

    /// The error the admin side sees, naming `store`.
    pub(crate) fn into_admin_error(self, store: String) -> AdminError {
        match self {
            Refusal::Credentials(detail) => AdminError::Denied { store, detail },
            Refusal::Certificate(detail) => AdminError::Unreachable { store, detail },
        }
    }
}

/// Checks that `pem` (`what` names it in errors) is PEM holding at least
/// one certificate, so that a wrong one is said at once rather than as a
/// failed handshake.
fn certificates(pem: &[u8], what: &str) -> Result<(), BackendError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(pem) {
        certificate
            .map_err(|e| BackendError::invalid_setting(format!("{what} is not readable PEM"), e))?;
        count += 1;
    }
    if count == 0 {
        return Err(BackendError::Config(format!(
            "{what} holds no certificate (no `-----BEGIN CERTIFICATE-----` block)"
        )));
    }
    Ok(())
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, BackendError> {
    std::fs::read(path).map_err(|e| {
        BackendError::invalid_setting(format!("cannot read the etcd {what} {}", path.display()), e)
    })
}
