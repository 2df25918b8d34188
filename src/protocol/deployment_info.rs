//! `latest_k8s_deployment_info`: the Deployment as the agent sees it, carried as JSON text.
//!
//! The agent writes its projection straight to text, and the control plane reads only the
//! fields it decides on. Neither side builds a `serde_json::Value` tree per workspace: at
//! 10,000 workspaces those trees were the agent's largest allocation in a full sync and most
//! of the control plane's parsing time (BENCHMARKS.md).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeploymentInfo(Box<RawValue>);

impl DeploymentInfo {
    pub fn of<T: Serialize + ?Sized>(deployment: &T) -> serde_json::Result<Self> {
        serde_json::value::to_raw_value(deployment).map(Self)
    }

    pub fn json(&self) -> &str {
        self.0.get()
    }

    /// What the control plane reads; None when the info is not shaped like a Deployment.
    pub fn facts(&self) -> Option<DeploymentFacts> {
        serde_json::from_str(self.json()).ok()
    }

    pub fn resource_version(&self) -> Option<String> {
        self.facts()?.metadata?.resource_version
    }

    /// The whole info as a tree, for tools and tests.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.json()).unwrap_or_default()
    }
}

impl PartialEq for DeploymentInfo {
    fn eq(&self, other: &Self) -> bool {
        self.json() == other.json()
    }
}

impl From<serde_json::Value> for DeploymentInfo {
    fn from(value: serde_json::Value) -> Self {
        // A Value's map keys are strings, so writing it out cannot fail.
        Self(serde_json::value::to_raw_value(&value).expect("a JSON value serializes"))
    }
}

/// The fields of a Deployment that the actual state and the acknowledgement depend on.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct DeploymentFacts {
    pub metadata: Option<MetadataFacts>,
    pub spec: Option<SpecFacts>,
    pub status: Option<StatusFacts>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetadataFacts {
    pub resource_version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct SpecFacts {
    pub replicas: Option<i64>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusFacts {
    pub available_replicas: Option<i64>,
    pub unavailable_replicas: Option<i64>,
    pub conditions: Option<Vec<ConditionFacts>>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ConditionFacts {
    #[serde(rename = "type")]
    pub type_: String,
    pub reason: Option<String>,
}

impl DeploymentFacts {
    pub fn replicas(&self) -> Option<i64> {
        self.spec.as_ref()?.replicas
    }

    /// None when the status has no conditions at all.
    pub fn conditions(&self) -> Option<&[ConditionFacts]> {
        self.status.as_ref()?.conditions.as_deref()
    }

    /// The reason of the condition of this type, unless it is missing or empty.
    pub fn condition_reason(&self, type_: &str) -> Option<&str> {
        let condition = self.conditions()?.iter().find(|c| c.type_ == type_)?;
        condition.reason.as_deref().filter(|r| !r.is_empty())
    }

    pub fn available_replicas(&self) -> i64 {
        self.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0)
    }

    pub fn unavailable_replicas(&self) -> i64 {
        self.status.as_ref().and_then(|s| s.unavailable_replicas).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_info_travels_as_the_text_it_arrived_as() {
        let text = r#"{"metadata":{"name":"ws","resourceVersion":"7"},"spec":{"replicas":1}}"#;
        let info: DeploymentInfo = serde_json::from_str(text).unwrap();
        assert_eq!(info.json(), text);
        assert_eq!(serde_json::to_string(&info).unwrap(), text);
        assert_eq!(info.resource_version().as_deref(), Some("7"));
    }

    #[test]
    fn facts_read_conditions_and_ignore_the_rest() {
        let info = DeploymentInfo::from(json!({
            "metadata": {"name": "ws", "labels": {"a": "b"}},
            "spec": {"replicas": 1, "template": {}},
            "status": {"availableReplicas": 1, "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": ""},
            ]},
        }));
        let facts = info.facts().unwrap();
        assert_eq!(facts.replicas(), Some(1));
        assert_eq!(facts.available_replicas(), 1);
        assert_eq!(facts.condition_reason("Available"), Some("MinimumReplicasAvailable"));
        assert_eq!(facts.condition_reason("Progressing"), None, "an empty reason is no reason");
        assert_eq!(facts.metadata.and_then(|m| m.resource_version), None);
    }

    #[test]
    fn an_info_of_the_wrong_shape_has_no_facts_but_still_travels() {
        let info = DeploymentInfo::from(json!({"spec": {"replicas": "one"}}));
        assert!(info.facts().is_none());
        assert_eq!(info.to_value()["spec"]["replicas"], "one");
        let null = DeploymentInfo::from(json!({"status": null, "metadata": null}));
        assert_eq!(null.facts(), Some(DeploymentFacts::default()));
    }
}
