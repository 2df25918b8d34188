//! Why a workspace's workload is failing (issue #21), read from its Deployment: the
//! `ReplicaFailure` condition, which the deployment controller copies from the ReplicaSet when
//! a Pod cannot be created. `pod_failures` reads the Pods. Either is reported as a
//! `kubernetes` error whose message starts with the reason (`protocol::failure_reason`).

use crate::protocol::failure_reason::FailureReason;
use k8s_openapi::api::apps::v1::DeploymentStatus;

/// The longest Kubernetes message kept: the error's own cap is 1 KiB, and a projection is
/// held per workspace.
const MAX_DETAIL_BYTES: usize = 512;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadFailure {
    pub reason: FailureReason,
    /// Starts with the reason: what the control plane shows.
    pub message: Box<str>,
}

/// The failure a Deployment's status shows, if any.
pub fn from_status(status: Option<&DeploymentStatus>) -> Option<WorkloadFailure> {
    let condition = status?.conditions.as_ref()?.iter().find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
    let detail = condition.message.as_deref().or(condition.reason.as_deref()).unwrap_or("no message");
    let reason = if detail.contains("exceeded quota") {
        FailureReason::QuotaExceeded
    } else if detail.contains("violates PodSecurity") {
        FailureReason::PodSecurity
    } else {
        FailureReason::FailedCreate
    };
    Some(WorkloadFailure::new(reason, &format!("the workspace's Pod could not be created: {detail}")))
}

impl WorkloadFailure {
    pub fn new(reason: FailureReason, detail: &str) -> Self {
        let detail = crate::protocol::cap_message_to(detail, MAX_DETAIL_BYTES);
        Self { reason, message: format!("{reason}: {detail}").into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentCondition;

    fn status(type_: &str, state: &str, message: &str) -> DeploymentStatus {
        DeploymentStatus {
            conditions: Some(vec![DeploymentCondition {
                type_: type_.into(),
                status: state.into(),
                reason: Some("FailedCreate".into()),
                message: Some(message.into()),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    #[test]
    fn replica_failures_are_classified_by_what_refused_the_pod() {
        let quota = "pods \"ws-7d9-x\" is forbidden: exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=0, limited: requests.cpu=1";
        let failure = from_status(Some(&status("ReplicaFailure", "True", quota))).unwrap();
        assert_eq!(failure.reason, FailureReason::QuotaExceeded);
        assert!(failure.message.starts_with("QuotaExceeded: the workspace's Pod could not be created: pods"));
        assert_eq!(FailureReason::of_message(&failure.message), Some(FailureReason::QuotaExceeded));
        let security = "pods \"ws\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces";
        assert_eq!(
            from_status(Some(&status("ReplicaFailure", "True", security))).unwrap().reason,
            FailureReason::PodSecurity
        );
        let other = "pods \"ws\" is forbidden: error looking up service account ns/ws: serviceaccount \"ws\" not found";
        assert_eq!(
            from_status(Some(&status("ReplicaFailure", "True", other))).unwrap().reason,
            FailureReason::FailedCreate
        );
    }

    #[test]
    fn no_failure_without_a_true_replica_failure() {
        assert_eq!(from_status(None), None);
        assert_eq!(from_status(Some(&status("ReplicaFailure", "False", "exceeded quota"))), None);
        assert_eq!(from_status(Some(&status("Progressing", "True", "exceeded quota"))), None);
    }

    #[test]
    fn a_long_message_is_capped() {
        let long = "exceeded quota ".repeat(200);
        let failure = from_status(Some(&status("ReplicaFailure", "True", &long))).unwrap();
        assert!(failure.message.len() < 700, "{}", failure.message.len());
    }
}
