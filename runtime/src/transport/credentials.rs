//! Cluster membership credentials: mutual TLS rooted in a cluster secret.
//!
//! Every node of a cluster is handed the same secret (by `lazarus run`, through Slurm's
//! environment, or from a file). From it each node derives the same cluster CA key pair
//! (Ed25519, seed = HKDF-SHA256 of the secret), self-signs the same CA certificate, and
//! issues itself a fresh node certificate for `rank<N>.lazarus`. Connections require a
//! client certificate in both directions, verified against that CA: a process without the
//! secret cannot complete a handshake, so it can neither join nor inject a message.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, PKCS_ED25519,
};
use ring::hkdf;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// Smallest accepted secret, in bytes.
pub const MIN_SECRET_LEN: usize = 16;

/// Credentials could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The secret is too short to be a secret.
    #[error("cluster secret must be at least {MIN_SECRET_LEN} bytes, got {0}")]
    WeakSecret(usize),
    /// Certificate generation failed.
    #[error("certificate generation failed: {0}")]
    Certificate(#[from] rcgen::Error),
    /// TLS configuration failed.
    #[error("TLS configuration failed: {0}")]
    Tls(#[from] rustls::Error),
    /// Verifier construction failed.
    #[error("TLS verifier: {0}")]
    Verifier(String),
}

/// The server name a node's certificate is issued for.
pub fn server_name(rank: u16) -> String {
    format!("rank{rank}.lazarus")
}

/// One node's TLS identity and trust root.
pub struct Credentials {
    ca_cert: CertificateDer<'static>,
    node_cert: CertificateDer<'static>,
    node_key: PrivatePkcs8KeyDer<'static>,
}

impl Credentials {
    /// Derives the cluster CA from `secret` and issues a certificate for node `rank`.
    pub fn for_node(secret: &[u8], rank: u16) -> Result<Self, CredentialError> {
        Self::issue(secret, &server_name(rank))
    }

    /// Credentials of another member of the cluster (a logger node) under `name`.
    pub fn for_name(secret: &[u8], name: &str) -> Result<Self, CredentialError> {
        Self::issue(secret, name)
    }

    fn issue(secret: &[u8], name: &str) -> Result<Self, CredentialError> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(CredentialError::WeakSecret(secret.len()));
        }
        let ca_key = ca_key_pair(secret)?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "Lazarus cluster CA");
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let node_key = KeyPair::generate_for(&PKCS_ED25519)?;
        let mut params = CertificateParams::new(vec![name.to_string()])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let node_cert = params.signed_by(&node_key, &issuer)?;
        Ok(Credentials {
            ca_cert: ca_cert.der().clone(),
            node_cert: node_cert.der().clone(),
            node_key: PrivatePkcs8KeyDer::from(node_key.serialize_der()),
        })
    }

    fn roots(&self) -> Result<Arc<rustls::RootCertStore>, CredentialError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_cert.clone())?;
        Ok(Arc::new(roots))
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// TLS config for accepting connections: a client certificate from the cluster CA is
    /// mandatory.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, CredentialError> {
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            self.roots()?,
            Self::provider(),
        )
        .build()
        .map_err(|e| CredentialError::Verifier(e.to_string()))?;
        let mut config = rustls::ServerConfig::builder_with_provider(Self::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_client_cert_verifier(verifier)
            .with_single_cert(
                vec![self.node_cert.clone()],
                PrivateKeyDer::Pkcs8(self.node_key.clone_key()),
            )?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(config)
    }

    /// TLS config for connecting: the server must present a cluster certificate, and we
    /// present ours.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, CredentialError> {
        let mut config = rustls::ClientConfig::builder_with_provider(Self::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(self.roots()?)
            .with_client_auth_cert(
                vec![self.node_cert.clone()],
                PrivateKeyDer::Pkcs8(self.node_key.clone_key()),
            )?;
        config.alpn_protocols = vec![ALPN.to_vec()];
        Ok(config)
    }
}

/// ALPN protocol id: refuses anything that is not a Lazarus node at the TLS layer.
pub const ALPN: &[u8] = b"lazarus/1";

/// The CA key pair every node derives identically from the secret.
fn ca_key_pair(secret: &[u8]) -> Result<KeyPair, CredentialError> {
    let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"lazarus cluster ca v1");
    let prk = salt.extract(secret);
    let mut seed = [0u8; 32];
    prk.expand(&[b"ed25519 seed"], Seed32)
        .and_then(|okm| okm.fill(&mut seed))
        .map_err(|_| CredentialError::Verifier("hkdf expansion failed".into()))?;
    // PKCS#8 v1 wrapping of an Ed25519 seed (RFC 8410).
    let mut der = vec![
        0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04,
        0x20,
    ];
    der.extend_from_slice(&seed);
    Ok(KeyPair::from_pkcs8_der_and_sign_algo(
        &PrivatePkcs8KeyDer::from(der),
        &PKCS_ED25519,
    )?)
}

struct Seed32;
impl hkdf::KeyType for Seed32 {
    fn len(&self) -> usize {
        32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_derives_the_same_ca_from_the_same_secret() {
        let a = Credentials::for_node(b"0123456789abcdef0123", 0).unwrap();
        let b = Credentials::for_node(b"0123456789abcdef0123", 1).unwrap();
        let c = Credentials::for_node(b"another secret, another cluster", 1).unwrap();
        assert_eq!(a.ca_cert, b.ca_cert);
        assert_ne!(a.ca_cert, c.ca_cert);
        assert_ne!(a.node_cert, b.node_cert);
    }

    #[test]
    fn short_secrets_are_refused() {
        assert!(matches!(
            Credentials::for_node(b"short", 0),
            Err(CredentialError::WeakSecret(5))
        ));
    }
}
