//! A namespace a moment old: its Pods wait for what the apiserver says to wait for.

use crate::support::{self, server_side_apply};
use serde_json::json;

/// The 1.20 apiserver's answer to a Pod whose service account has no token yet, as it sends it.
const NO_TOKEN_YET: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
  "message":"No API token found for service account \"default\", retry after the token is automatically created and added to the service account",
  "reason":"ServerTimeout","details":{"name":"create pod","kind":"serviceaccounts","retryAfterSeconds":1},"code":500}"#;

#[test]
fn a_refusal_that_asks_to_be_retried_is_retried_after_its_time() {
    let status: kube::core::Status = serde_json::from_str(NO_TOKEN_YET).expect("a Status");
    let error = kube::Error::Api(status.boxed());
    assert_eq!(support::retry_after(&error), Some(std::time::Duration::from_secs(1)));
    let forbidden: kube::core::Status =
        serde_json::from_value(json!({"status": "Failure", "reason": "Forbidden", "code": 403})).expect("a Status");
    assert_eq!(support::retry_after(&kube::Error::Api(forbidden.boxed())), None, "a refusal is final");
}

/// What the benchmark does right after `hack/local-cluster.sh up`: Pods in namespaces created
/// a moment before, before the token controller has given them a service-account token.
#[tokio::test(flavor = "multi_thread")]
async fn pods_in_brand_new_namespaces_are_created() {
    let env = support::env();
    let client = support::admin_client(env).await;
    let prefix = support::unique_id("fresh");
    for i in 0..5 {
        let namespace = format!("{prefix}-{i}");
        let labels = json!({ support::TEST_LABEL: prefix });
        let object =
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace, "labels": labels } });
        server_side_apply(&client, "wsync-test", &object).await.expect("a namespace");
        let pod = json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": "p", "namespace": namespace },
            "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] } });
        server_side_apply(&client, "wsync-test", &pod).await.expect("a Pod in a namespace a moment old");
    }
    support::kubectl_ok(
        env,
        &["delete", "namespace", "-l", &format!("{}={prefix}", support::TEST_LABEL), "--wait=false"],
    );
}
