//! Behind a real TLS-terminating reverse proxy (nginx), the control plane speaks plain HTTP
//! but the browser's origin is `--public-url`'s (#37): page writes pass the Origin check, the
//! session cookie is `Secure`, redirects and links name the public URL, and the sign-in
//! limits count the client's address, not the proxy's. Without `--public-url`, every page
//! write through the proxy is refused: the hole this closes.

use super::sqlite;
use super::support::ControlPlaneProcess;
use super::support::reverse_proxy::{PROXY_ADDRESS, ReverseProxy};
use super::support::tls::Tls;
use reqwest::StatusCode;

fn through(tls: &Tls) -> reqwest::Client {
    wsync::runtime::install_crypto_provider();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&tls.ca).expect("CA")).expect("CA");
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

async fn sign_in(client: &reqwest::Client, public: &str, token: &str) -> reqwest::Response {
    client
        .post(format!("{public}/sign-in"))
        .header("origin", public)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2F"))
        .send()
        .await
        .expect("a sign-in through the proxy")
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_a_tls_proxy_the_page_follows_the_public_url() {
    let dir = tempfile::tempdir().unwrap();
    let tls = Tls::throwaway(dir.path());
    let mut control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    let upstream = control_plane.url.trim_start_matches("http://").to_string();
    let proxy = ReverseProxy::start(dir.path(), &tls, &upstream);
    let public = proxy.url.clone();
    let client = through(&tls);

    let refused = sign_in(&client, &public, &control_plane.admin_token).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN, "without --public-url the proxy's Host is foreign");
    control_plane.restart_with(&["--public-url", &public, "--trusted-proxy", PROXY_ADDRESS]);
    let signed_in = sign_in(&client, &public, &control_plane.admin_token).await;
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER, "{:?}", signed_in.text().await);
    assert_eq!(signed_in.headers()["location"], format!("{public}/").as_str(), "redirects name the public URL");
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.ends_with("; Secure"), "the browser reached it over TLS: {cookie}");
    let session = cookie.split(';').next().unwrap().to_string();

    let page = client.get(format!("{public}/")).header("cookie", &session).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a CSRF token");
    for (origin, expected) in [
        (format!("http://{}", public.trim_start_matches("https://")), StatusCode::FORBIDDEN),
        ("https://evil.example".to_string(), StatusCode::FORBIDDEN),
        (public.clone(), StatusCode::SEE_OTHER),
    ] {
        let write = client
            .post(format!("{public}/sign-out"))
            .header("origin", &origin)
            .header("cookie", &session)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={csrf}"))
            .send()
            .await
            .unwrap();
        assert_eq!(write.status(), expected, "a page write from {origin}");
    }

    // The proxy's address is every client's; the limits count the forwarded one.
    for _ in 0..4 {
        assert_eq!(sign_in(&client, &public, "wrong").await.status(), StatusCode::UNAUTHORIZED);
    }
    assert_eq!(sign_in(&client, &public, "wrong").await.status(), StatusCode::TOO_MANY_REQUESTS);
    let direct = format!("http://{upstream}");
    let other = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let forged = other
        .post(format!("{direct}/sign-in"))
        .header("origin", &public)
        .header("host", public.trim_start_matches("https://"))
        .header("x-forwarded-for", "198.51.100.1")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=wrong&next=%2F")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), StatusCode::TOO_MANY_REQUESTS, "a header from a client itself is not believed");
}
