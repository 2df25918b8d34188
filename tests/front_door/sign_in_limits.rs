//! Guessing sign-ins is slow (#37): every attempt is counted before its token is checked, per
//! client address and overall; an address that keeps failing waits longer after each failure
//! until one succeeds; each refusal is a 429 with Retry-After, logged and counted.

use super::support::ControlPlaneProcess;
use super::{http, sqlite};
use reqwest::StatusCode;

async fn attempt(control_plane: &ControlPlaneProcess, token: &str) -> reqwest::Response {
    super::post_sign_in(control_plane, token).await
}

fn retry_after(answer: &reqwest::Response) -> u64 {
    answer.headers()["retry-after"].to_str().expect("text").parse().expect("whole seconds")
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_sign_ins_back_off_and_a_success_resets_them() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    for _ in 0..4 {
        assert_eq!(attempt(&control_plane, "wrong").await.status(), StatusCode::UNAUTHORIZED);
    }
    let refused = attempt(&control_plane, &control_plane.admin_token).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "even the right token waits its turn");
    let wait = retry_after(&refused);
    assert!((1..=2).contains(&wait), "{wait}");
    assert!(refused.text().await.unwrap().contains("Too many sign-in attempts"));
    // The API's admin token backs off with the page's: one address, one count.
    let api = http()
        .get(format!("{}/api/v1/agents/a1/workspaces", control_plane.url))
        .bearer_auth(&control_plane.admin_token)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(api.headers().contains_key("retry-after"));
    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
    assert_eq!(attempt(&control_plane, &control_plane.admin_token).await.status(), StatusCode::SEE_OTHER);
    assert_eq!(attempt(&control_plane, "wrong").await.status(), StatusCode::UNAUTHORIZED, "the count starts again");
    let logs = control_plane.logs();
    assert!(logs.contains("too many attempts") && logs.contains("backoff"), "{logs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn attempts_are_counted_per_address_whatever_their_token() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_token = super::support::secret_token("scrape");
    let metrics_file = dir.path().join("metrics-token");
    std::fs::write(&metrics_file, &metrics_token).unwrap();
    let control_plane = ControlPlaneProcess::start(
        &sqlite(&dir),
        dir.path().join("cp.log"),
        &["--sign-in-attempts-per-minute", "3", "--metrics-token-file", &metrics_file.display().to_string()],
    );
    for _ in 0..3 {
        assert_eq!(attempt(&control_plane, &control_plane.admin_token).await.status(), StatusCode::SEE_OTHER);
    }
    let refused = attempt(&control_plane, &control_plane.admin_token).await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!((1..=20).contains(&retry_after(&refused)), "a third of a minute at most");
    let metrics = http()
        .get(format!("{}/metrics", control_plane.url))
        .bearer_auth(&metrics_token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("wsync_control_plane_sign_in_refusals_total{limit=\"address\"} 1"), "{metrics}");
}
