//! HTTP/2 over TLS: hyper's HTTP/2 server has no idle timeout, and a peer that answers the
//! server's keep-alive pings, as every HTTP/2 library does by itself, would hold one of the
//! control plane's connections for ever. `--http2-idle-timeout` closes a connection with no
//! request open, with a GOAWAY; a client in use sees none of it.

use super::sqlite;
use super::support::{ControlPlaneProcess, tls::Tls};
use rustls_pki_types::pem::PemObject;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const ACK: u8 = 0x1;

fn frame(kind: u8, flags: u8, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    [&length[1..], &[kind, flags], &[0, 0, 0, 0], payload].concat()
}

async fn connect_h2(
    control_plane: &ControlPlaneProcess,
    tls: &Tls,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    wsync::runtime::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_file_iter(&tls.ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let address = control_plane.url.trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    stream
}

/// A peer that sends no request but answers every ping and SETTINGS, as an HTTP/2 library
/// does, is sent a GOAWAY and closed after the idle timeout (3 s here; pings every 1 s).
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_http2_connection_is_closed_though_it_answers_pings() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::throwaway(dir.path());
    let args = ["--header-timeout", "1s", "--http2-idle-timeout", "3s"];
    let control_plane =
        ControlPlaneProcess::start_tls(&sqlite(&dir), dir.path().join("control-plane.log"), &tls, &args);
    let mut stream = connect_h2(&control_plane, &tls).await;
    stream.write_all(&[PREFACE, &frame(SETTINGS, 0, &[])].concat()).await.unwrap();
    let started = Instant::now();
    let (mut pings, mut goaway) = (0, false);
    loop {
        let mut head = [0u8; 9];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read_exact(&mut head)).await;
        let Ok(Ok(_)) = read else { break }; // closed (or, with no idle timeout, the test fails below)
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0u8; length];
        if stream.read_exact(&mut payload).await.is_err() {
            break;
        }
        match (head[3], head[4] & ACK) {
            (PING, 0) => {
                pings += 1;
                stream.write_all(&frame(PING, ACK, &payload)).await.unwrap();
            }
            (SETTINGS, 0) => stream.write_all(&frame(SETTINGS, ACK, &[])).await.unwrap(),
            (GOAWAY, _) => goaway = true,
            _ => {}
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the idle connection is still open");
    }
    let open_for = started.elapsed();
    println!("idle HTTP/2 connection: {pings} pings answered, GOAWAY {goaway}, closed after {open_for:?}");
    assert!(pings >= 1, "the server's pings were answered");
    assert!(goaway, "told with a GOAWAY");
    assert!(open_for >= Duration::from_secs(2) && open_for < Duration::from_secs(6), "closed after {open_for:?}");
}

/// A client that keeps its connection in use, a request every half second for longer than the
/// idle timeout, sees every request answered over HTTP/2: none meets a closing connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_client_in_use_sees_every_request_answered() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::throwaway(dir.path());
    let args = ["--http2-idle-timeout", "1s"];
    let control_plane =
        ControlPlaneProcess::start_tls(&sqlite(&dir), dir.path().join("control-plane.log"), &tls, &args);
    wsync::runtime::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&tls.ca).unwrap()).unwrap();
    let client = reqwest::Client::builder().add_root_certificate(ca).build().unwrap();
    for _ in 0..8 {
        let answer = client.get(format!("{}/healthz", control_plane.url)).send().await.expect("answered");
        assert_eq!((answer.version(), answer.status().as_u16()), (reqwest::Version::HTTP_2, 200));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
