//! Server-side apply of the tests' own objects, waiting as long as the apiserver asks to.

use kube::Client;
use kube::api::Api;
use std::time::{Duration, Instant};

/// How long an apiserver's refusal asks to be retried after, when it asks: a Pod in a namespace
/// whose service-account token the token controller has not made yet is refused so ("No API
/// token found for service account \"default\", retry after the token is automatically
/// created"), as is a request past the apiserver's rate.
pub fn retry_after(error: &kube::Error) -> Option<Duration> {
    let kube::Error::Api(status) = error else { return None };
    let seconds = status.details.as_ref().map_or(0, |details| details.retry_after_seconds);
    let asks = seconds > 0 || status.code == 429 || status.reason == "ServerTimeout";
    asks.then(|| Duration::from_secs(u64::from(seconds.clamp(1, 10))))
}

/// Server-side apply `object` (JSON with its apiVersion and kind) as `manager`, waiting, for
/// two minutes at most, as long as the apiserver asks to be retried after ([`retry_after`]).
pub async fn server_side_apply(client: &Client, manager: &str, object: &serde_json::Value) -> Result<(), kube::Error> {
    use kube::api::{DynamicObject, Patch, PatchParams};
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
    // The objects are the test's own: a missing or bad apiVersion is the test's bug.
    let types = object.types.clone().expect("the object's apiVersion and kind");
    let gvk = kube::core::GroupVersionKind::try_from(&types).expect("a valid apiVersion");
    let resource = kube::discovery::ApiResource::from_gvk(&gvk);
    let name = object.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = match object.metadata.namespace.as_deref() {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let params = PatchParams::apply(manager).force();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match api.patch(&name, &params, &Patch::Apply(&object)).await {
            Ok(_) => return Ok(()),
            Err(error) => match retry_after(&error) {
                Some(wait) if Instant::now() + wait < deadline => tokio::time::sleep(wait).await,
                _ => return Err(error),
            },
        }
    }
}
