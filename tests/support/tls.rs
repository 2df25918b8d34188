//! A throw-away CA and a server certificate (for 127.0.0.1 and localhost, or the names given),
//! as PEM files.

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use std::path::{Path, PathBuf};

pub struct Tls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Tls {
    pub fn throwaway(dir: &Path) -> Self {
        Self::for_names(dir, &["127.0.0.1", "localhost"])
    }

    pub fn for_names(dir: &Path, names: &[&str]) -> Self {
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, "wsync throw-away test CA");
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
        let server = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).expect("params");
        let key = KeyPair::generate().expect("server key");
        let cert = server.signed_by(&key, &ca).expect("server certificate");
        let tls = Self { ca: dir.join("ca.pem"), cert: dir.join("server.pem"), key: dir.join("server-key.pem") };
        std::fs::write(&tls.ca, ca.pem()).expect("write CA");
        std::fs::write(&tls.cert, cert.pem()).expect("write certificate");
        std::fs::write(&tls.key, key.serialize_pem()).expect("write key");
        tls
    }
}
