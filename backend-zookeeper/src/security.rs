//! What a secured ZooKeeper ensemble asks of a client: credentials of the
//! `digest` scheme, and TLS to its `secureClientPort` (ZooKeeper 3.5 and
//! later) — the servers' certificates checked against a CA from a PEM file,
//! from PEM in memory, or the system's trust store — with a client
//! certificate where the server asks for one (`ssl.clientAuth`).

use tenure_core::credentials::Password;
use tenure_tokio::BackendError;
use zookeeper_client as zk;

/// Credentials for ZooKeeper's `digest` scheme: a user and a password. The
/// server knows the identity only as `user:base64(sha1(user:password))`, so
/// members that share the credentials share the identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    user: String,
    password: Password,
}

impl Digest {
    /// Credentials of `user` with `password`. A user name with `:` cannot
    /// be told apart from its password on the wire, and is refused, as is
    /// an empty one.
    pub fn new(user: &str, password: &str) -> Result<Digest, BackendError> {
        if user.is_empty() || user.contains(':') {
            return Err(BackendError::Config(format!(
                "ZooKeeper digest user {user:?} cannot be used: it must be non-empty and hold no `:`"
            )));
        }
        Ok(Digest {
            user: user.to_owned(),
            password: Password::new(password),
        })
    }

    /// The user.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// What the client sends: `user:password`.
    fn auth(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password.expose()).into_bytes()
    }
}

/// Credentials and TLS settings for a ZooKeeper ensemble that requires
/// them, for members ([`crate::ZooKeeperBackend::security`]) and for the
/// tools that read their groups ([`crate::ZooKeeperAdmin::connect_with`]).
///
/// With a digest, the group's znodes are created under an ACL that gives
/// that identity every right and everybody else none: members of a group
/// must share the credentials, and so must the `tenure` command and any
/// Kafka 0.8 tool that reads the group. `<chroot>/consumers` itself, shared
/// by every group, is created open if it is missing. TLS alone changes no
/// ACL.
///
/// ```no_run
/// # fn main() -> Result<(), tenure_tokio::BackendError> {
/// use tenure_zookeeper::{Digest, ZooKeeperBackend, ZooKeeperSecurity};
/// let security = ZooKeeperSecurity::new().digest(Digest::new("billing", "s3cret")?);
/// # #[cfg(feature = "tls")]
/// let security = security
///     .ca_file("/etc/zookeeper/ca.pem")?
///     .client_identity_files("/etc/zookeeper/client.pem", "/etc/zookeeper/client-key.pem")?;
/// let backend = ZooKeeperBackend::new("zk1:2182,zk2:2182/kafka").security(security);
/// # drop(backend);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ZooKeeperSecurity {
    digest: Option<Digest>,
    #[cfg(feature = "tls")]
    tls: Option<tls::Tls>,
}

impl ZooKeeperSecurity {
    /// No credentials, no TLS: an open ensemble, as Kafka 0.8 used it.
    pub fn new() -> ZooKeeperSecurity {
        ZooKeeperSecurity::default()
    }

    /// Authenticates every session with ZooKeeper's `digest` scheme (see
    /// the type's documentation for the ACLs this brings).
    pub fn digest(mut self, digest: Digest) -> ZooKeeperSecurity {
        self.digest = Some(digest);
        self
    }

    /// The digest credentials, if any.
    pub fn digest_credentials(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// Whether TLS is on.
    pub fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls")]
        return self.tls.as_ref().is_some_and(|tls| tls.ca.is_some());
        #[cfg(not(feature = "tls"))]
        false
    }

    /// Settings that cannot work together, said before connecting.
    pub(crate) fn check(&self) -> Result<(), BackendError> {
        #[cfg(feature = "tls")]
        if self.tls.as_ref().is_some_and(|tls| tls.ca.is_none()) {
            return Err(BackendError::Config(
                "a ZooKeeper client certificate needs the CA that signed the servers' \
                 certificates too (ZooKeeperSecurity::ca_file, ca_pem or system_roots): the \
                 client trusts no other"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// How the store at `connect_string` is named in errors and logs.
    pub(crate) fn store(&self, connect_string: &str) -> String {
        let scheme = if self.uses_tls() { " over TLS" } else { "" };
        match &self.digest {
            Some(digest) => format!("ZooKeeper at {connect_string}{scheme} as {}", digest.user),
            None => format!("ZooKeeper at {connect_string}{scheme}"),
        }
    }

    /// The ACL of the group's znodes: with credentials, every right for the
    /// identity that created them (every member that authenticates alike)
    /// and none for anyone else; without, open, as Kafka 0.8 made them.
    pub(crate) fn acls(&self) -> zk::Acls<'static> {
        match self.digest {
            Some(_) => zk::Acls::creator_all(),
            None => zk::Acls::anyone_all(),
        }
    }

    /// Opens a session with `connector` (already given its timeouts) at
    /// `connect_string`, with these credentials and over TLS if it is on.
    pub(crate) async fn connect(
        &self,
        mut connector: zk::Connector,
        connect_string: &str,
    ) -> Result<zk::Client, zk::Error> {
        if let Some(digest) = &self.digest {
            connector = connector.with_auth("digest", &digest.auth());
        }
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.connect(connector, connect_string).await;
        }
        connector.connect(connect_string).await
    }

    /// Why a session over TLS to `connect_string` could not open, if the
    /// TLS handshake says (the client only times out): the server's
    /// certificate not trusted, or this client's refused. Looks for at
    /// most `within`.
    pub(crate) async fn tls_refusal(
        &self,
        connect_string: &str,
        within: std::time::Duration,
    ) -> Option<String> {
        #[cfg(feature = "tls")]
        if let Some(tls) = &self.tls {
            return tls.refusal(connect_string, within).await;
        }
        let _ = (connect_string, within);
        None
    }
}

#[cfg(feature = "tls")]
mod tls {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tenure_tokio::BackendError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use zookeeper_client as zk;

    use super::ZooKeeperSecurity;

    /// The TLS settings, kept as PEM until a connection needs them.
    #[derive(Clone, Debug, Default)]
    pub(super) struct Tls {
        pub(super) ca: Option<String>,
        /// Where the CA came from, for errors.
        ca_source: Option<String>,
        identity: Option<(String, String)>,
    }

    impl Tls {
        pub(super) async fn connect(
            &self,
            connector: zk::Connector,
            connect_string: &str,
        ) -> Result<zk::Client, zk::Error> {
            // The client builds its rustls configuration with the process's
            // default crypto provider, which rustls cannot pick by itself
            // when an application's other dependencies compile in a second
            // one: name ring, which every client of tenure's uses. An
            // application that installed its own keeps it.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let mut options = zk::TlsOptions::new();
            if let Some(ca) = &self.ca {
                options = options.with_pem_ca(ca)?;
            }
            if let Some((cert, key)) = &self.identity {
                options = options.with_pem_identity(cert, key)?;
            }
            // Every server speaks TLS unless the string says `tcp://`.
            connector
                .with_tls(options)
                .secure_connect(connect_string)
                .await
        }

        /// A handshake of its own with the first TLS server of
        /// `connect_string`, with the same CA and certificate, then a
        /// four-letter word: what it ran into, if that is TLS.
        pub(super) async fn refusal(
            &self,
            connect_string: &str,
            within: Duration,
        ) -> Option<String> {
            let (host, port) = first_tls_server(connect_string)?;
            let config = self.rustls_config()?;
            let name = ServerName::try_from(host.clone()).ok()?;
            let probe = async {
                // Unreachable is not a TLS matter: the caller's error says it.
                let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
                    .await
                    .ok()?;
                let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
                let mut stream = match connector.connect(name, tcp).await {
                    Ok(stream) => stream,
                    Err(error) => return Some(self.explain(&host, &error)),
                };
                // Under TLS 1.3 a refused client certificate shows only
                // once the server speaks.
                if let Err(error) = stream.write_all(b"srvr").await {
                    return Some(self.explain(&host, &error));
                }
                let mut answer = [0u8; 16];
                match stream.read(&mut answer).await {
                    Err(error) => Some(self.explain(&host, &error)),
                    Ok(0) => Some(format!(
                        "the server at {host}:{port} closed the connection after the TLS \
                         handshake: it may require a client certificate signed by its CA \
                         (ZooKeeperSecurity::client_identity_files)"
                    )),
                    Ok(_) => None,
                }
            };
            tokio::time::timeout(within, probe).await.ok().flatten()
        }

        /// The rustls configuration these settings make, as the client
        /// makes its own.
        fn rustls_config(&self) -> Option<rustls::ClientConfig> {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(self.ca.as_ref()?.as_bytes()) {
                roots.add(cert.ok()?).ok()?;
            }
            let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .ok()?
            .with_root_certificates(roots);
            match &self.identity {
                None => Some(builder.with_no_client_auth()),
                Some((cert, key)) => {
                    let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                        .collect::<Result<Vec<_>, _>>()
                        .ok()?;
                    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?;
                    builder.with_client_auth_cert(chain, key).ok()
                }
            }
        }

        /// What a failed handshake or read says, and what to fix.
        fn explain(&self, host: &str, error: &std::io::Error) -> String {
            let ca = self
                .ca_source
                .as_ref()
                .map_or_else(String::new, |source| format!(" ({source})"));
            let tls = error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>());
            match tls {
                Some(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                    | rustls::CertificateError::NotValidForNameContext { .. },
                )) => format!(
                    "the server's certificate is not issued for {host}: connect by a name the \
                     certificate holds"
                ),
                Some(rustls::Error::InvalidCertificate(reason)) => format!(
                    "the server's certificate is not trusted ({reason:?}): the CAs trusted{ca} \
                     must hold the one that signed the ZooKeeper servers' certificates \
                     (ZooKeeperSecurity::ca_file, ca_pem or system_roots)"
                ),
                Some(rustls::Error::AlertReceived(alert)) => format!(
                    "the server refused this client's certificate ({alert:?}): it requires one \
                     signed by its own CA (ZooKeeperSecurity::client_identity_files)"
                ),
                Some(other) => format!("the TLS handshake failed: {other}"),
                None => format!("the TLS connection failed: {error}"),
            }
        }
    }

    /// The host and port of the first server of `connect_string` that is
    /// spoken to over TLS (every one, unless written `tcp://`).
    fn first_tls_server(connect_string: &str) -> Option<(String, u16)> {
        connect_string.split(',').map(str::trim).find_map(|server| {
            if server.starts_with("tcp://") {
                return None;
            }
            let server = server.strip_prefix("tcp+tls://").unwrap_or(server);
            // The chroot follows the last server.
            let server = server.split('/').next()?;
            match server.rsplit_once(':') {
                Some((host, port)) => Some((host.to_owned(), port.parse().ok()?)),
                None => Some((server.to_owned(), 2181)),
            }
        })
    }

    fn read(path: &Path, what: &str) -> Result<String, BackendError> {
        std::fs::read_to_string(path).map_err(|e| {
            BackendError::invalid_setting(
                format!("cannot read the ZooKeeper {what} at {}", path.display()),
                e,
            )
        })
    }

    impl ZooKeeperSecurity {
        /// Speaks TLS to every server (the connect string names their
        /// `secureClientPort`s, unless one is written `tcp://host:port`),
        /// trusting the server certificates the CA in the PEM file at `path`
        /// signed, and no others (feature `tls`).
        pub fn ca_file(self, path: impl AsRef<Path>) -> Result<ZooKeeperSecurity, BackendError> {
            let pem = read(path.as_ref(), "CA certificate")?;
            let what = format!(
                "the ZooKeeper CA certificate file {}",
                path.as_ref().display()
            );
            self.with_ca(pem, what)
        }

        /// Speaks TLS as [`ZooKeeperSecurity::ca_file`] does, trusting the
        /// server certificates the CAs in `pem` signed: PEM in memory, one
        /// certificate or several (a bundle; feature `tls`).
        pub fn ca_pem(self, pem: &[u8]) -> Result<ZooKeeperSecurity, BackendError> {
            let what = "the ZooKeeper CA PEM given";
            let pem = std::str::from_utf8(pem).map_err(|e| {
                BackendError::invalid_setting(format!("{what} is not PEM (not text)"), e)
            })?;
            self.with_ca(pem.to_owned(), what.to_owned())
        }

        /// Speaks TLS as [`ZooKeeperSecurity::ca_file`] does, trusting the
        /// server certificates any CA the system trusts signed (its trust
        /// store: on Linux the distribution's bundle; if `SSL_CERT_FILE` or
        /// `SSL_CERT_DIR` is set, only the file and the directories they
        /// name; feature `tls`).
        pub fn system_roots(self) -> Result<ZooKeeperSecurity, BackendError> {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(BackendError::Config(format!(
                    "the system's trust store holds no CA certificate (SSL_CERT_FILE or \
                     SSL_CERT_DIR can name one){}",
                    if errors.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", errors.join("; "))
                    }
                )));
            }
            // The client takes its CAs as PEM only.
            let pem: String = found.certs.iter().map(|der| pem_certificate(der)).collect();
            self.with_ca(pem, "the system's trust store".to_owned())
        }

        fn with_ca(mut self, pem: String, what: String) -> Result<ZooKeeperSecurity, BackendError> {
            // Checked now, so that a wrong CA is said at once.
            let mut count = 0;
            for certificate in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                certificate.map_err(|e| {
                    BackendError::invalid_setting(format!("{what} is not readable PEM"), e)
                })?;
                count += 1;
            }
            if count == 0 {
                return Err(BackendError::Config(format!(
                    "{what} holds no certificate (no `-----BEGIN CERTIFICATE-----` block)"
                )));
            }
            zk::TlsOptions::new()
                .with_pem_ca(&pem)
                .map_err(|e| BackendError::invalid_setting(format!("{what} cannot be used"), e))?;
            let tls = self.tls.get_or_insert_with(Tls::default);
            tls.ca = Some(pem);
            tls.ca_source = Some(what);
            Ok(self)
        }

        /// Presents the client certificate and key in the PEM files at
        /// `cert` and `key`, for a server that asks for one
        /// (`ssl.clientAuth=need`; feature `tls`). Needs a CA
        /// ([`ZooKeeperSecurity::ca_file`], [`ZooKeeperSecurity::ca_pem`] or
        /// [`ZooKeeperSecurity::system_roots`]).
        pub fn client_identity_files(
            self,
            cert: impl AsRef<Path>,
            key: impl AsRef<Path>,
        ) -> Result<ZooKeeperSecurity, BackendError> {
            let cert_pem = read(cert.as_ref(), "client certificate")?;
            let key_pem = read(key.as_ref(), "client key")?;
            let what = format!(
                "the ZooKeeper client certificate and key at {}",
                cert.as_ref().display()
            );
            self.with_identity(cert_pem, key_pem, &what)
        }

        /// Presents the client certificate (chain) and key in the PEM
        /// `cert` and `key`, in memory, as
        /// [`ZooKeeperSecurity::client_identity_files`] does (feature `tls`).
        pub fn client_identity_pem(
            self,
            cert: &[u8],
            key: &[u8],
        ) -> Result<ZooKeeperSecurity, BackendError> {
            let what = "the ZooKeeper client certificate and key given";
            let text = |pem: &[u8]| {
                std::str::from_utf8(pem).map(str::to_owned).map_err(|e| {
                    BackendError::invalid_setting(format!("{what} are not PEM (not text)"), e)
                })
            };
            self.with_identity(text(cert)?, text(key)?, what)
        }

        fn with_identity(
            mut self,
            cert: String,
            key: String,
            what: &str,
        ) -> Result<ZooKeeperSecurity, BackendError> {
            if CertificateDer::pem_slice_iter(cert.as_bytes())
                .next()
                .is_none()
            {
                return Err(BackendError::Config(format!(
                    "{what}: no certificate in it"
                )));
            }
            zk::TlsOptions::new()
                .with_pem_identity(&cert, &key)
                .map_err(|e| BackendError::invalid_setting(format!("{what} cannot be used"), e))?;
            self.tls.get_or_insert_with(Tls::default).identity = Some((cert, key));
            Ok(self)
        }
    }

    /// `der` as a PEM certificate block.
    fn pem_certificate(der: &CertificateDer<'_>) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut base64 = String::with_capacity(der.len() * 4 / 3 + 4);
        for chunk in der.chunks(3) {
            let bytes = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(bytes[0]) << 16) | (u32::from(bytes[1]) << 8) | u32::from(bytes[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    base64.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
                } else {
                    base64.push('=');
                }
            }
        }
        let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
        for line in base64.as_bytes().chunks(64) {
            pem.push_str(&String::from_utf8_lossy(line));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
        pem
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn a_certificate_survives_the_trip_through_pem() {
            for len in [1usize, 2, 3, 4, 5, 47, 48, 49, 100] {
                let der: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
                let pem = pem_certificate(&CertificateDer::from(der.clone()));
                let back = CertificateDer::from_pem_slice(pem.as_bytes()).expect("PEM");
                assert_eq!(back.as_ref(), der.as_slice(), "{len} bytes");
            }
        }
    }
}
