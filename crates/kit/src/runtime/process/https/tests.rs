//! Unit tests of the parent module (kept apart so the module reads on its own).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tokio::io::AsyncReadExt;

use super::*;
use crate::runtime::process::pki;

/// A server on loopback with `limits`, answering `ok` on `/`; its address and CA.
async fn start(limits: Limits) -> (std::net::SocketAddr, String) {
    let cert = pki::issue_serving_cert("t", &["127.0.0.1".into()], chrono::Duration::hours(1)).unwrap();
    let slot = CertSlot::new(&cert.cert_pem, &cert.key_pem).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/", axum::routing::get(|| async { "ok" })).route(
        "/panic",
        axum::routing::get(|| async {
            if std::hint::black_box(true) {
                panic!("a handler bug");
            }
            "unreachable"
        }),
    );
    tokio::spawn(serve_with(listener, slot, router, std::future::pending(), limits));
    (addr, cert.ca_pem)
}

async fn get(addr: std::net::SocketAddr, ca: &str) -> String {
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    let res = client.get(format!("https://{addr}/")).send().await.unwrap();
    res.text().await.unwrap()
}

#[tokio::test]
async fn a_panicking_request_ends_its_connection_and_the_server_keeps_answering() {
    let (addr, ca) = start(Limits::default()).await;
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    for _ in 0..3 {
        let res = client.get(format!("https://{addr}/panic")).send().await;
        assert!(res.is_err(), "a panicking handler answered: {res:?}");
        assert_eq!(get(addr, &ca).await, "ok");
    }
}

#[tokio::test]
async fn idle_connections_are_closed_and_never_starve_a_request() {
    let limits = Limits {
        handshake: Duration::from_millis(300),
        headers: Duration::from_millis(300),
        idle: Duration::from_secs(60),
        lifetime: Duration::from_secs(60),
        connections: 8,
        ..Limits::default()
    };
    let (addr, ca) = start(limits).await;
    // Every slot is taken by a connection that never speaks.
    let mut idle = Vec::new();
    for _ in 0..limits.connections {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // The server closes each of them (the wait is only a bound for a hung test).
    for s in &mut idle {
        let mut b = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(30), s.read(&mut b)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "an idle connection was kept: {read:?}"
        );
    }
    // A real client is answered.
    assert_eq!(get(addr, &ca).await, "ok");
    // A client that completes the handshake but never sends a request is closed too.
    let mut silent = tls(addr, &ca).await;
    let mut b = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(30), silent.read(&mut b)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
}

/// A TLS connection to the test server.
async fn tls(addr: std::net::SocketAddr, ca: &str) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap()
}

/// Reads what the server sends until it closes (bounded by 30 s for a hung test).
async fn until_closed(s: &mut tokio_rustls::client::TlsStream<tokio::net::TcpStream>) -> String {
    let mut all = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut all)).await;
    String::from_utf8_lossy(&all).into_owned()
}

#[tokio::test]
async fn slow_bodies_release_their_slot_within_the_request_deadline() {
    use tokio::io::AsyncWriteExt;
    let limits = Limits {
        request: Duration::from_secs(1),
        connections: 16,
        ..Limits::default()
    };
    let (addr, ca) = start(limits).await;
    // Eight clients send headers, then a body a byte at a time.
    let mut slow = Vec::new();
    for _ in 0..8 {
        let mut s = tls(addr, &ca).await;
        s.write_all(b"POST / HTTP/1.1\r\nhost: t\r\ncontent-length: 100000\r\n\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    let drip = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let mut answers = Vec::new();
        for _ in 0..5 {
            for s in &mut slow {
                let _ = s.write_all(b"x").await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for s in &mut slow {
            answers.push(until_closed(s).await);
        }
        (started.elapsed(), answers)
    });
    // A normal request meanwhile is answered at once.
    let started = std::time::Instant::now();
    assert_eq!(get(addr, &ca).await, "ok");
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    // Every slow request is answered 408 and its connection closed within the deadline.
    let (took, answers) = drip.await.unwrap();
    assert!(took < Duration::from_secs(3), "{took:?}");
    for a in answers {
        assert!(a.starts_with("HTTP/1.1 408"), "{a}");
    }
}

#[tokio::test]
async fn oversized_bodies_and_bodies_beyond_the_byte_budget_are_refused_at_once() {
    use tokio::io::AsyncWriteExt;
    let limits = Limits {
        body: 1024,
        in_flight_bytes: 4096,
        ..Limits::default()
    };
    let (addr, ca) = start(limits).await;
    let post = |len: usize| format!("POST / HTTP/1.1\r\nhost: t\r\ncontent-length: {len}\r\n\r\n");
    // Larger than the body limit.
    let mut big = tls(addr, &ca).await;
    big.write_all(post(2048).as_bytes()).await.unwrap();
    big.write_all(&[b'x'; 2048]).await.unwrap();
    assert!(until_closed(&mut big).await.starts_with("HTTP/1.1 413"));
    // Four bodies of 1000 bytes each hold the budget, waiting for their last byte.
    let mut holders = Vec::new();
    for _ in 0..4 {
        let mut s = tls(addr, &ca).await;
        s.write_all(post(1001).as_bytes()).await.unwrap();
        s.write_all(&[b'x'; 1000]).await.unwrap();
        holders.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let mut late = tls(addr, &ca).await;
    late.write_all(post(500).as_bytes()).await.unwrap();
    late.write_all(&[b'x'; 500]).await.unwrap();
    let answer = until_closed(&mut late).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    // A request without a body still gets through.
    assert_eq!(get(addr, &ca).await, "ok");
    drop(holders);
}

/// A CA of client certificates, as the apiserver's webhook client certificate has.
fn client_ca() -> (rcgen::Certificate, rcgen::Issuer<'static, rcgen::KeyPair>) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca = ca_params.self_signed(&ca_key).unwrap();
    (ca, Issuer::new(ca_params, ca_key))
}

/// Serves "ok" on `/` to the clients `clients` admits; its address, and a client builder that
/// trusts its serving certificate.
async fn serve_ok_to(clients: ClientAuth) -> (std::net::SocketAddr, impl Fn() -> reqwest::ClientBuilder) {
    let serving = pki::issue_serving_cert("t", &["127.0.0.1".into()], chrono::Duration::hours(1)).unwrap();
    let slot = CertSlot::new(&serving.cert_pem, &serving.key_pem).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
    tokio::spawn(serve_for(
        listener,
        slot,
        Some(clients),
        router,
        std::future::pending(),
        Limits::default(),
    ));
    let ca = serving.ca_pem;
    let trusting =
        move || reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap());
    (addr, trusting)
}

#[tokio::test]
async fn with_client_auth_only_a_client_with_a_certificate_of_the_ca_is_served() {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
    // The CA the apiserver's webhook client certificate comes from, and that certificate.
    let (ca, issuer) = client_ca();
    let mut client_params = CertificateParams::new(vec!["kube-apiserver".to_string()]).unwrap();
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().unwrap();
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();

    let (addr, trusting) = serve_ok_to(ClientAuth::from_pem(ca.pem().as_bytes()).unwrap()).await;
    let client = |identity: Option<reqwest::Identity>| {
        let mut b = trusting();
        if let Some(id) = identity {
            b = b.identity(id);
        }
        b.build().unwrap()
    };
    // A pod without the certificate: refused in the handshake.
    assert!(client(None).get(format!("https://{addr}/")).send().await.is_err());
    // The apiserver with it: served.
    let pem = format!("{}{}", client_cert.pem(), client_key.serialize_pem());
    let id = reqwest::Identity::from_pem(pem.as_bytes()).unwrap();
    let answer = client(Some(id)).get(format!("https://{addr}/")).send().await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "ok");
    assert!(ClientAuth::from_pem(b"not a certificate").is_err());
}

#[tokio::test]
async fn a_certificate_of_the_ca_with_another_name_is_refused() {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, KeyPair};
    // One CA signs the apiserver's webhook client certificate and a kubelet's.
    let (ca, issuer) = client_ca();
    let client = |cn: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes()).unwrap()
    };

    let clients = ClientAuth::from_pem(ca.pem().as_bytes())
        .unwrap()
        .with_names(vec!["storageos-webhook-client".into()])
        .unwrap();
    let (addr, trusting) = serve_ok_to(clients).await;
    let call = |id: reqwest::Identity| {
        trusting()
            .identity(id)
            .build()
            .unwrap()
            .get(format!("https://{addr}/"))
            .send()
    };
    // A kubelet's certificate of the same CA: refused in the handshake.
    assert!(call(client("system:node:worker-1")).await.is_err());
    // The certificate the admission configuration names: served.
    let answer = call(client("storageos-webhook-client")).await.unwrap();
    assert_eq!(answer.text().await.unwrap(), "ok");
}

#[tokio::test]
async fn a_new_client_ca_takes_effect_without_a_restart_and_a_bad_one_changes_nothing() {
    use rcgen::{CertificateParams, ExtendedKeyUsagePurpose, KeyPair};
    let identity = |issuer: &rcgen::Issuer<'_, KeyPair>| {
        let mut params = CertificateParams::new(vec!["kube-apiserver".to_string()]).unwrap();
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, issuer).unwrap();
        reqwest::Identity::from_pem(format!("{}{}", cert.pem(), key.serialize_pem()).as_bytes()).unwrap()
    };
    let (old_ca, old_issuer) = client_ca();
    let (new_ca, new_issuer) = client_ca();
    let clients = ClientAuth::from_pem(old_ca.pem().as_bytes()).unwrap();
    let (addr, trusting) = serve_ok_to(clients.clone()).await;
    let call = |id: reqwest::Identity| {
        trusting()
            .identity(id)
            .build()
            .unwrap()
            .get(format!("https://{addr}/"))
            .send()
    };

    assert!(call(identity(&old_issuer)).await.is_ok());
    assert!(
        call(identity(&new_issuer)).await.is_err(),
        "a certificate of the next CA, too early"
    );

    // The file changed to the new CA: the running server takes it.
    let (old_pem, new_pem) = (old_ca.pem(), new_ca.pem());
    assert!(
        client_ca::take(&clients, old_pem.as_bytes(), old_pem.as_bytes()).is_none(),
        "unchanged"
    );
    client_ca::take(&clients, old_pem.as_bytes(), new_pem.as_bytes())
        .unwrap()
        .unwrap();
    assert!(call(identity(&new_issuer)).await.is_ok(), "the new CA is not used");
    assert!(
        call(identity(&old_issuer)).await.is_err(),
        "the old CA is still trusted"
    );

    // A truncated file: refused, and the new CA stays in use.
    assert!(
        client_ca::take(&clients, new_pem.as_bytes(), b"-----BEGIN CERT")
            .unwrap()
            .is_err()
    );
    assert!(call(identity(&new_issuer)).await.is_ok());
}
