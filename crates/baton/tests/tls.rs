//! TLS on the client API and mutual TLS between members, with certificates made here by
//! `rcgen`, over real `baton serve` processes on loopback.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Cluster, free_port};
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// A test CA whose files live in a directory.
struct Pki {
    dir: std::path::PathBuf,
    name: String,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    /// A new CA, written as `<name>-ca.pem` in `dir`.
    fn new(dir: &Path, name: &str) -> Pki {
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        std::fs::write(dir.join(format!("{name}-ca.pem")), ca.pem()).unwrap();
        Pki {
            dir: dir.to_owned(),
            name: name.to_owned(),
            ca,
            ca_key,
        }
    }

    /// The CA file's name.
    fn ca_file(&self) -> String {
        format!("{}-ca.pem", self.name)
    }

    /// A leaf for 127.0.0.1 and localhost, for client and server use, naming `member`
    /// (`URI:urn:baton:node:<id>`) if given; its certificate and key file names.
    fn leaf(&self, stem: &str, member: Option<u64>) -> (String, String) {
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()]).unwrap();
        if let Some(id) = member {
            leaf.subject_alt_names.push(rcgen::SanType::URI(
                format!("urn:baton:node:{id}").try_into().unwrap(),
            ));
        }
        leaf.distinguished_name
            .push(DnType::CommonName, format!("{} {stem}", self.name));
        leaf.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let leaf_key = KeyPair::generate().unwrap();
        let cert = leaf.signed_by(&leaf_key, &self.ca, &self.ca_key).unwrap();
        let paths = (
            format!("{}-{stem}-cert.pem", self.name),
            format!("{}-{stem}-key.pem", self.name),
        );
        std::fs::write(self.dir.join(&paths.0), cert.pem()).unwrap();
        std::fs::write(self.dir.join(&paths.1), leaf_key.serialize_pem()).unwrap();
        paths
    }
}

/// A CA and one leaf certificate for 127.0.0.1 and localhost signed by it, as PEM files
/// in `dir`: the CA's, the leaf's and its key's names.
fn make_pki(dir: &Path, name: &str) -> (String, String, String) {
    let pki = Pki::new(dir, name);
    let (cert, key) = pki.leaf("server", None);
    (pki.ca_file(), cert, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_over_tls_serves_clients_with_the_right_ca_and_refuses_the_others() {
    let dir = tempfile::TempDir::new().unwrap();
    let (ca, cert, key) = make_pki(dir.path(), "api");
    let (other_ca, _, _) = make_pki(dir.path(), "other");
    let port = free_port();
    let api = format!("127.0.0.1:{port}");
    let mut c = Cluster::empty(tempfile::TempDir::new().unwrap());
    c.add(
        1,
        api.clone(),
        vec![
            "serve".into(),
            "--api".into(),
            api.clone(),
            "--peer".into(),
            format!("127.0.0.1:{}", free_port()),
            "--data-dir".into(),
            dir.path().join("data").display().to_string(),
            "--tls-cert".into(),
            dir.path().join(&cert).display().to_string(),
            "--tls-key".into(),
            dir.path().join(&key).display().to_string(),
        ],
    );
    let ca_pem = std::fs::read(dir.path().join(&ca)).unwrap();
    let client = baton_client::Client::builder([api.as_str()])
        .ca_cert_pem(ca_pem)
        .attempts(1)
        .build()
        .unwrap();
    // Ready once it answers over TLS.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        match client.cluster().await {
            Ok(status) if status.leader.is_some() => break status,
            _ => {}
        }
        assert!(Instant::now() < deadline, "{}", c.node(1).log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(status.security.tls);
    client.grant_lease(Duration::from_secs(10)).await.unwrap();
    // A client that trusts another CA is refused in the handshake.
    let wrong = baton_client::Client::builder([api.as_str()])
        .ca_cert_pem(std::fs::read(dir.path().join(&other_ca)).unwrap())
        .attempts(1)
        .build()
        .unwrap();
    assert!(wrong.cluster().await.is_err());
    // Plain HTTP to the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://{api}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(plain.is_err(), "{plain:?}");
    // The CLI with --cacert.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["--endpoints", &api, "--cacert"])
        .arg(dir.path().join(&ca))
        .args(["cluster", "status"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // New certificate files from another CA, and SIGHUP: new connections use them.
    let (new_ca, new_cert, new_key) = make_pki(dir.path(), "renewed");
    std::fs::copy(dir.path().join(&new_cert), dir.path().join(&cert)).unwrap();
    std::fs::copy(dir.path().join(&new_key), dir.path().join(&key)).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.node(1).pid().unwrap() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let renewed = baton_client::Client::builder([api.as_str()])
        .ca_cert_pem(std::fs::read(dir.path().join(&new_ca)).unwrap())
        .attempts(1)
        .build()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while renewed.cluster().await.is_err() {
        assert!(Instant::now() < deadline, "{}", c.node(1).log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fresh_old = baton_client::Client::builder([api.as_str()])
        .ca_cert_pem(std::fs::read(dir.path().join(&ca)).unwrap())
        .attempts(1)
        .build()
        .unwrap();
    assert!(fresh_old.cluster().await.is_err());
    assert!(c.node(1).log().contains("API certificate reloaded"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_over_mutual_tls_replicate_fail_over_and_refuse_a_peer_without_a_certificate()
{
    let dir = tempfile::TempDir::new().unwrap();
    let pki = Pki::new(dir.path(), "peers");
    let ca = pki.ca_file();
    let mut file = String::new();
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let api = format!("127.0.0.1:{}", free_port());
        let peer = format!("127.0.0.1:{}", free_port());
        // Each member's certificate names it (`URI:urn:baton:node:<id>`).
        let (cert, key) = pki.leaf(&format!("node{id}"), Some(id));
        // Relative paths: relative to the cluster file's directory.
        file += &format!(
            "[[node]]\nid = {id}\napi = \"{api}\"\npeer = \"{peer}\"\ndata_dir = \"node-{id}\"\npeer_tls_cert = \"{cert}\"\npeer_tls_key = \"{key}\"\npeer_ca = \"{ca}\"\n\n"
        );
        nodes.push((id, api, peer));
    }
    let path = dir.path().join("cluster.toml");
    std::fs::write(&path, file).unwrap();
    let mut c = Cluster::empty(tempfile::TempDir::new().unwrap());
    for (id, api, _) in &nodes {
        c.add(
            *id,
            api.clone(),
            vec![
                "serve".into(),
                "--config".into(),
                path.display().to_string(),
                "--node".into(),
                id.to_string(),
            ],
        );
    }
    c.wait_ready().await;
    let leader = c.leader(1).await;
    let (status, body) = c.put(leader, "/v1/kv/tls/a", json!({"value": "1"})).await;
    assert_eq!(status, 200, "{body}");
    for id in 1..=3 {
        let (status, body) = c.get(id, "/v1/kv/tls/a").await.unwrap();
        assert_eq!((status, &body["value"]), (200, &json!("1")), "node {id}");
    }
    // A client with the CA but no certificate of its own is refused by every peer port.
    let ca_pem = std::fs::read(dir.path().join(&ca)).unwrap();
    let no_identity = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // A certificate from the same CA that names no member (a service's), or a member that
    // is not in the cluster, is refused by every peer port too: a CA-signed certificate
    // is not a member's identity.
    let with_cert = |stem: &str, member: Option<u64>| {
        let (cert, key) = pki.leaf(stem, member);
        let mut pem = std::fs::read(dir.path().join(cert)).unwrap();
        pem.extend(std::fs::read(dir.path().join(key)).unwrap());
        reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
            .identity(reqwest::Identity::from_pem(&pem).unwrap())
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let service = with_cert("service", None);
    let stranger = with_cert("node9", Some(9));
    let member = with_cert("node2-copy", Some(2));
    for (_, _, peer) in &nodes {
        let url = format!("https://{peer}/baton/status");
        for (who, client) in [("service", &service), ("node 9", &stranger)] {
            let refused = client.post(&url).body(bincode_unit()).send().await;
            assert!(refused.is_err(), "{who} at {peer}: {refused:?}");
        }
        let answered = member.post(&url).body(bincode_unit()).send().await.unwrap();
        assert_eq!(answered.status(), 200, "a member's certificate at {peer}");
        let refused = no_identity
            .post(format!("https://{peer}/baton/identity"))
            .body(Vec::<u8>::new())
            .send()
            .await;
        assert!(refused.is_err(), "{peer}: {refused:?}");
        let plain = reqwest::Client::new()
            .post(format!("http://{peer}/baton/identity"))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        assert!(plain.is_err(), "{peer}: {plain:?}");
    }
    // Fail over: stop the leader; the others elect one over mTLS and take writes.
    c.nodes.get_mut(&leader).unwrap().kill();
    let survivor = (1..=3).find(|id| *id != leader).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) = c.put(survivor, "/v1/kv/tls/b", json!({"value": "2"})).await;
        if status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "no write after the leader died");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let new_leader = c.leader(survivor).await;
    assert_ne!(new_leader, leader);
}

/// The bincode encoding of `()`: the body of a peer call that takes nothing.
fn bincode_unit() -> Vec<u8> {
    Vec::new()
}
