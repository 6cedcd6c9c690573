//! TLS on both ports (rustls with ring): a server configuration that is re-read from its
//! files on demand (SIGHUP), the peer client's identity, and the binding of a peer
//! certificate to a member: its subject alternative names carry the URI
//! `urn:baton:node:<id>` ([`member_id`]). Handshakes run in each connection's own task
//! (`listener`), within the port's header timeout.

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

/// The prefix of the URI subject alternative name that names a member in its peer
/// certificate: `urn:baton:node:3` is node 3.
pub const MEMBER_URI_PREFIX: &str = "urn:baton:node:";

/// The member id a peer certificate names in a `urn:baton:node:<id>` URI subject
/// alternative name. A certificate that names none, or more than one, is refused: a
/// service certificate signed by the same CA cannot stand for a member.
pub fn member_id(cert: &CertificateDer<'_>) -> Result<crate::types::NodeId, String> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| format!("unreadable certificate: {e}"))?;
    let names = parsed
        .subject_alternative_name()
        .map_err(|e| format!("unreadable subject alternative names: {e}"))?;
    let mut ids = names
        .into_iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) => uri.strip_prefix(MEMBER_URI_PREFIX),
            _ => None,
        });
    let id = ids.next().ok_or_else(|| {
        format!("the certificate names no member (a subject alternative name URI:{MEMBER_URI_PREFIX}<id>)")
    })?;
    if ids.next().is_some() {
        return Err("the certificate names more than one member".into());
    }
    id.parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| format!("{MEMBER_URI_PREFIX}{id} does not name a node id"))
}

/// Why TLS material could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// rustls refused the material (e.g. a key that does not match the certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The files of one side's TLS: its certificate chain and key, and for mutual TLS the CA
/// that signs the other side's certificates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificate chain, leaf first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// PEM CA bundle: clients must present a certificate it signed (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

fn file_error(path: &Path, message: impl std::fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        message: message.to_string(),
    }
}

/// Every certificate in a PEM file (at least one).
pub fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A root store of the CA bundle at `path`.
fn roots(path: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| file_error(path, e))?;
    }
    Ok(roots)
}

fn server_config(files: &TlsFiles) -> Result<ServerConfig, TlsError> {
    let certs = read_certs(&files.cert)?;
    let key = read_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &files.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider())
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsError::Config(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A server's TLS configuration, read from its files and re-read by [`ReloadableTls::reload`].
#[derive(Debug)]
pub struct ReloadableTls {
    files: TlsFiles,
    config: RwLock<Arc<ServerConfig>>,
}

impl ReloadableTls {
    /// Reads the files; fails if any is missing, unreadable or does not fit.
    pub fn load(files: TlsFiles) -> Result<Arc<ReloadableTls>, TlsError> {
        let config = server_config(&files)?;
        Ok(Arc::new(ReloadableTls {
            files,
            config: RwLock::new(Arc::new(config)),
        }))
    }

    /// Reads the files again; on any error the configuration in force is kept. New
    /// connections use the new one; open ones keep theirs.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = server_config(&self.files)?;
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(config);
        Ok(())
    }

    /// An acceptor with the configuration in force.
    pub(crate) fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(
            self.config
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

/// Sends small writes at once on an accepted connection (no Nagle delay), as the links
/// do; every listener, TLS or plain, calls it. A failure only costs latency, so it is
/// logged at debug level.
pub fn no_delay(tcp: &mut TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set on an accepted connection");
    }
}

/// The peer client's side of mutual TLS: the CA that signs the members' certificates, and
/// this node's own certificate and key, presented to every member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerTls {
    /// This node's certificate chain (PEM); it serves the peer port with it too.
    pub cert: PathBuf,
    /// Its key (PEM).
    pub key: PathBuf,
    /// The CA bundle (PEM) every member's certificate must be signed by.
    pub ca: PathBuf,
}

impl PeerTls {
    /// The peer port's server side: this node's certificate, clients verified by the CA.
    pub fn server_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: Some(self.ca.clone()),
        }
    }

    /// A connector for the Raft links (`network::link`): trusts only the CA, presents this
    /// node's certificate, and offers HTTP/1.1 alone.
    pub(crate) fn connector(&self) -> Result<tokio_rustls::TlsConnector, TlsError> {
        let certs = read_certs(&self.cert)?;
        let key = read_key(&self.key)?;
        let mut config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_root_certificates(roots(&self.ca)?)
            .with_client_auth_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("this node's certificate and key: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}
