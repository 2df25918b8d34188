//! What the agent knows about one workspace's Deployment: a small projection, not the object.

use super::deployment_failure::WorkloadFailure;
use crate::agent::objects::WorkspaceDeployment;
use crate::protocol::DeploymentInfo;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DeploymentStatus;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A workspace is identified by its namespace and name, as on the wire. Held as one
/// `namespace/name` string: every map of per-workspace state holds a key, and one allocation
/// per key instead of two is part of the agent's memory budget (BENCHMARKS.md).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkspaceKey {
    text: Box<str>,
    /// Where the namespace ends in `text`.
    split: usize,
}

impl WorkspaceKey {
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        let namespace = namespace.as_ref();
        Self { text: format!("{namespace}/{}", name.as_ref()).into(), split: namespace.len() }
    }

    /// Parse the ledger's `"<namespace>/<name>"` form. The status may have been edited by
    /// hand: a namespace or name that is no DNS label is no workspace.
    pub fn parse(s: &str) -> Option<Self> {
        let (namespace, name) = s.split_once('/')?;
        let valid = crate::names::is_dns_label;
        (valid(namespace) && valid(name)).then(|| Self::new(namespace, name))
    }

    pub fn namespace(&self) -> &str {
        &self.text[..self.split]
    }

    pub fn name(&self) -> &str {
        &self.text[self.split + 1..]
    }
}

/// By namespace, then name, as the pair would order.
impl Ord for WorkspaceKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.namespace(), self.name()).cmp(&(other.namespace(), other.name()))
    }
}

impl PartialOrd for WorkspaceKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for WorkspaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkspaceKey({:?})", self.text)
    }
}

impl fmt::Display for WorkspaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The parts of a Deployment that the control plane reads (DESIGN §2): what the index holds
/// and what goes out as `latest_k8s_deployment_info`; `managedFields` and the pod template stay
/// behind. Held as the JSON it is sent as: one allocation per workspace, where the parsed
/// maps and status took a dozen (BENCHMARKS.md, agent memory).
///
/// Once the control plane holds a version, nothing reads its info again until the Deployment
/// changes (and the watch brings a new one): the index then keeps only the key and version
/// (`reported`), most of the agent's memory per workspace at rest.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentProjection {
    key: WorkspaceKey,
    resource_version: Box<str>,
    info: Option<DeploymentInfo>,
    /// What its status says is failing; kept when the info is dropped (a box, only while
    /// failing), so that a Pod's change can be observed beside it.
    failure: Option<Box<WorkloadFailure>>,
}

/// The projection's shape, as serialized.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectedDeployment {
    pub metadata: ProjectedMeta,
    pub spec: ProjectedSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<DeploymentStatus>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectedMeta {
    pub name: String,
    pub namespace: String,
    pub resource_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectedSpec {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
}

impl DeploymentProjection {
    /// None for an object without name, namespace or resourceVersion: nothing a watch returns.
    pub fn from_deployment(deployment: WorkspaceDeployment) -> Option<Self> {
        let meta = deployment.metadata;
        Self::new(ProjectedDeployment {
            metadata: ProjectedMeta {
                name: meta.name?,
                namespace: meta.namespace?,
                resource_version: meta.resource_version?,
                generation: meta.generation,
                labels: meta.labels.unwrap_or_default(),
                annotations: meta.annotations.unwrap_or_default(),
                creation_timestamp: meta.creation_timestamp.map(|t| t.0),
            },
            spec: ProjectedSpec { replicas: deployment.spec.and_then(|s| s.replicas) },
            status: deployment.status,
        })
    }

    /// None only if it cannot be serialized, which plain strings and numbers always can.
    pub fn new(projected: ProjectedDeployment) -> Option<Self> {
        let info = DeploymentInfo::of(&projected)
            .inspect_err(|error| tracing::warn!(%error, "a Deployment could not be serialized; skipped"))
            .ok()?;
        let failure = super::deployment_failure::from_status(projected.status.as_ref()).map(Box::new);
        let meta = projected.metadata;
        Some(Self {
            key: WorkspaceKey::new(&meta.namespace, &meta.name),
            resource_version: meta.resource_version.into_boxed_str(),
            info: Some(info),
            failure,
        })
    }

    /// The same version without its info: what the index keeps once it is acknowledged.
    pub fn reported(&self) -> Self {
        Self {
            key: self.key.clone(),
            resource_version: self.resource_version.clone(),
            info: None,
            failure: self.failure.clone(),
        }
    }

    /// The workload failure its status shows.
    pub fn failure(&self) -> Option<&WorkloadFailure> {
        self.failure.as_deref()
    }

    pub fn key(&self) -> &WorkspaceKey {
        &self.key
    }

    pub fn resource_version(&self) -> &str {
        &self.resource_version
    }

    /// What is sent as `latest_k8s_deployment_info`; None once dropped as `reported`.
    pub fn info(&self) -> Option<&DeploymentInfo> {
        self.info.as_ref()
    }
}

/// True when `candidate` is older than `current`. resourceVersions are opaque strings, but etcd
/// issues them as increasing integers; where both parse, a LIST result that raced a newer
/// watch event must not roll the index back. Where they don't parse, the newest arrival wins.
pub fn is_older(candidate: &str, current: &str) -> bool {
    match (candidate.parse::<u64>(), current.parse::<u64>()) {
        (Ok(c), Ok(cur)) => c < cur,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::objects::ReplicasOnly;
    use kube::api::ObjectMeta;

    #[test]
    fn projection_keeps_what_the_control_plane_reads_and_drops_managed_fields() {
        let deployment = WorkspaceDeployment {
            metadata: ObjectMeta {
                name: Some("ws-1".into()),
                namespace: Some("ns-1".into()),
                resource_version: Some("42".into()),
                generation: Some(3),
                managed_fields: Some(vec![Default::default()]),
                ..Default::default()
            },
            spec: Some(ReplicasOnly { replicas: Some(1) }),
            status: Some(DeploymentStatus { ready_replicas: Some(1), ..Default::default() }),
        };
        let projection = DeploymentProjection::from_deployment(deployment).unwrap();
        let json = projection.info().expect("a fresh projection has its info").to_value();
        assert_eq!(
            json,
            serde_json::json!({
                "metadata": {"name": "ws-1", "namespace": "ns-1", "resourceVersion": "42", "generation": 3},
                "spec": {"replicas": 1},
                "status": {"readyReplicas": 1}
            })
        );
        assert_eq!(projection.key().to_string(), "ns-1/ws-1");
    }

    #[test]
    fn keys_round_trip_through_the_ledger_form() {
        let key = WorkspaceKey::new("ns", "ws");
        assert_eq!(WorkspaceKey::parse(&key.to_string()), Some(key.clone()));
        assert_eq!(WorkspaceKey::parse("no-slash"), None);
        assert_eq!((key.namespace(), key.name()), ("ns", "ws"));
        // Ordered as the (namespace, name) pair, not as the joined text ('-' sorts before '/').
        assert!(WorkspaceKey::new("a", "z") < WorkspaceKey::new("a-b", "c"));
    }

    #[test]
    fn resource_version_ordering() {
        assert!(is_older("9", "10"));
        assert!(!is_older("10", "10"));
        assert!(!is_older("abc", "10"));
    }
}
