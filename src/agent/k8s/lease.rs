//! The leader Lease kept in existence. kube-lease-manager creates it once, at start; deleted
//! later (by hand, or with its namespace's contents), no replica could take it again, and a
//! deposed leader's successor would never come: nothing would sync, silently.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use std::time::Duration;

/// Every `period`, create the Lease `name` again if it is gone, empty, so that the election
/// goes on; the replicas' lease managers then contend for it as at start.
pub async fn keep_present(api: Api<Lease>, name: String, field_manager: String, period: Duration) {
    loop {
        tokio::time::sleep(period).await;
        match api.get_opt(&name).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let lease =
                    Lease { metadata: ObjectMeta { name: Some(name.clone()), ..Default::default() }, spec: None };
                let params = PostParams { field_manager: Some(field_manager.clone()), ..Default::default() };
                match api.create(&params, &lease).await {
                    Ok(_) => tracing::warn!(lease = %name, "the leader Lease was deleted; created it again"),
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(error) => tracing::warn!(%error, lease = %name, "could not create the deleted leader Lease"),
                }
            }
            Err(error) => tracing::debug!(%error, lease = %name, "could not read the leader Lease"),
        }
    }
}
