//! What to do about a workspace's error, in one line, for the person whose workspace it is
//! and who cannot run kubectl: a table keyed by the reason a `kubernetes` error starts with
//! (`protocol::failure_reason`), and by the agent's own words for an apply it refused.

use crate::protocol::failure_reason::FailureReason;

/// A devfile's postStart failure, as its hook's error or as the crash loop that follows.
const POST_START_HINT: &str =
    "a devfile postStart command failed: fix the command (its output's end is above) and restart";

/// The hint for an error, if the table has one.
pub fn hint(error_type: &str, message: &str) -> Option<&'static str> {
    if error_type == "kubernetes"
        && let Some(reason) = FailureReason::of_message(message)
    {
        return Some(match reason {
            FailureReason::ImagePull => {
                "check the image name and tag, and that the agent's pull secrets reach its registry"
            }
            FailureReason::CrashLoop if message.contains("OOMKilled") => {
                "the workspace ran out of memory: raise its memory limit"
            }
            FailureReason::CrashLoop if message.contains(": postStart command ") => POST_START_HINT,
            FailureReason::CrashLoop if message.contains("\"gl-project-cloner\"") => {
                "a devfile project could not be cloned: check its remote and revision, and that the cluster reaches it"
            }
            FailureReason::CrashLoop => {
                "the workspace's container keeps exiting: check its image's command and the exit code"
            }
            FailureReason::PostStartHook => POST_START_HINT,
            FailureReason::ContainerConfig => {
                "the container names a Secret, ConfigMap or key that is not there: check the workspace's variables"
            }
            FailureReason::Unschedulable => {
                "no node can take the workspace: ask for less cpu and memory, or have the operator add capacity"
            }
            FailureReason::QuotaExceeded => {
                "the agent's resource quota is too small for this workspace: ask for less cpu and memory, or \
                 have the operator raise max_resources_per_workspace"
            }
            FailureReason::PodSecurity => {
                "the workspace's Pod breaks its namespace's Pod Security level: remove what the message names \
                 (host access, privileges) from the workspace"
            }
            FailureReason::FailedCreate => {
                "Kubernetes could not create the workspace's Pod: the message names what it lacks; tell the \
                 operator"
            }
        });
    }
    if error_type == "applier" && message.starts_with("refused") {
        return Some(
            "the agent's apply policy refused this workspace's config: the operator decides what agents may apply",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_workload_reason_has_a_hint_and_others_may_not() {
        for reason in FailureReason::ALL {
            assert!(hint("kubernetes", &format!("{reason}: x")).is_some(), "{reason}");
        }
        assert!(hint("kubernetes", "QuotaExceeded: x").is_some_and(|h| h.contains("max_resources_per_workspace")));
        assert_eq!(hint("kubernetes", "namespace x is still terminating"), None);
        assert_eq!(hint("applier", "QuotaExceeded: not from the workload"), None);
        assert!(hint("applier", "refused Secret x: not allowed").is_some());
    }
}
