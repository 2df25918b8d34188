//! Kubernetes objects as the agent's watches and LISTs read them: only the fields it uses.
//!
//! serde skips what a struct does not name without allocating, so a page of 500 Deployments
//! no longer builds 500 `managedFields` trees and pod templates only to drop them. Those trees
//! were most of the agent's peak heap during a full resync (heaptrack, BENCHMARKS.md), and
//! the allocator kept the peak resident afterwards.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ObjectMeta;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;

/// The metadata fields the agent reads; `managedFields` and the rest are skipped unparsed.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataRead {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    owner_references: Option<Vec<OwnerReference>>,
}

fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let read = MetadataRead::deserialize(deserializer)?;
    Ok(ObjectMeta {
        name: read.name,
        namespace: read.namespace,
        uid: read.uid,
        resource_version: read.resource_version,
        generation: read.generation,
        labels: read.labels,
        annotations: read.annotations,
        creation_timestamp: read.creation_timestamp,
        deletion_timestamp: read.deletion_timestamp,
        owner_references: read.owner_references,
        ..Default::default()
    })
}

/// Implements `kube::Resource` for a slim type with the identity of the full type it reads.
macro_rules! reads_as {
    ($slim:ty, $full:ty, $scope:ty) => {
        impl kube::Resource for $slim {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::version(dt)
            }
            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A workspace Deployment: metadata, `spec.replicas` and the status.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WorkspaceDeployment {
    #[serde(default, deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<ReplicasOnly>,
    #[serde(default)]
    pub status: Option<DeploymentStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct ReplicasOnly {
    pub replicas: Option<i32>,
}

reads_as!(WorkspaceDeployment, Deployment, k8s_openapi::NamespaceResourceScope);

/// A workspace namespace: its metadata.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WorkspaceNamespace {
    #[serde(default, deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
}

reads_as!(WorkspaceNamespace, Namespace, k8s_openapi::ClusterResourceScope);

/// A workspace's Pod: its metadata (owner and labels) and status; the spec stays behind.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WorkspacePod {
    #[serde(default, deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<PodStatus>,
}

reads_as!(WorkspacePod, Pod, k8s_openapi::NamespaceResourceScope);

/// An inventory ConfigMap: its metadata and data (the member list).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct InventoryConfigMap {
    #[serde(default, deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub data: Option<BTreeMap<String, String>>,
}

reads_as!(InventoryConfigMap, ConfigMap, k8s_openapi::NamespaceResourceScope);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource;

    #[test]
    fn a_deployment_is_read_without_managed_fields_or_pod_template() {
        let json = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {
                "name": "ws-1", "namespace": "ns-1", "resourceVersion": "42", "generation": 3,
                "labels": {"agent.gitlab.com/id": "a"},
                "managedFields": [{"manager": "wsync", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
            },
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"readyReplicas": 1},
        });
        let read: WorkspaceDeployment = serde_json::from_value(json).unwrap();
        assert_eq!(read.metadata.name.as_deref(), Some("ws-1"));
        assert_eq!(read.metadata.generation, Some(3));
        assert!(read.metadata.managed_fields.is_none());
        assert_eq!(read.spec.and_then(|s| s.replicas), Some(1));
        assert_eq!(read.status.and_then(|s| s.ready_replicas), Some(1));
    }

    #[test]
    fn slim_types_address_the_full_types_urls() {
        assert_eq!(WorkspaceDeployment::url_path(&(), Some("n")), Deployment::url_path(&(), Some("n")));
        assert_eq!(WorkspaceNamespace::url_path(&(), None), Namespace::url_path(&(), None));
        assert_eq!(InventoryConfigMap::url_path(&(), Some("n")), ConfigMap::url_path(&(), Some("n")));
    }

    #[test]
    fn a_watch_bookmark_reads_as_an_object_with_only_a_version() {
        let json = serde_json::json!({"kind": "Deployment", "metadata": {"resourceVersion": "7"}});
        let read: WorkspaceDeployment = serde_json::from_value(json).unwrap();
        assert_eq!(read.metadata.resource_version.as_deref(), Some("7"));
    }
}
