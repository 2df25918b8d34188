//! Why a workspace's Pods are failing, as the agent reports it: a `kubernetes` error whose
//! message starts with one of these reasons and a colon (`QuotaExceeded: …`). The protocol has
//! only the error type and the message, so the reason travels in the message, where a person
//! reads it too; the control plane reads it back to show what to do.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureReason {
    /// The kubelet backs off pulling an image.
    ImagePull,
    /// A container keeps exiting and the kubelet backs off restarting it.
    CrashLoop,
    /// A container's postStart hook failed (a devfile's postStart command), and the kubelet
    /// killed it.
    PostStartHook,
    /// A container's config names what is not there (a Secret, a key).
    ContainerConfig,
    /// No node takes the Pod, past the agent's grace.
    Unschedulable,
    /// A ResourceQuota refused the Pod.
    QuotaExceeded,
    /// Pod Security admission refused the Pod.
    PodSecurity,
    /// The ReplicaSet could not create the Pod for another reason.
    FailedCreate,
}

impl FailureReason {
    pub const ALL: [FailureReason; 8] = [
        Self::ImagePull,
        Self::CrashLoop,
        Self::PostStartHook,
        Self::ContainerConfig,
        Self::Unschedulable,
        Self::QuotaExceeded,
        Self::PodSecurity,
        Self::FailedCreate,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ImagePull => "ImagePull",
            Self::CrashLoop => "CrashLoop",
            Self::PostStartHook => "PostStartHook",
            Self::ContainerConfig => "ContainerConfig",
            Self::Unschedulable => "Unschedulable",
            Self::QuotaExceeded => "QuotaExceeded",
            Self::PodSecurity => "PodSecurity",
            Self::FailedCreate => "FailedCreate",
        }
    }

    /// The reason a failure message starts with; None for any other message.
    pub fn of_message(message: &str) -> Option<Self> {
        let (head, _) = message.split_once(": ")?;
        Self::ALL.into_iter().find(|reason| reason.as_str() == head)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_read_back_from_the_message_only_as_its_head() {
        for reason in FailureReason::ALL {
            assert_eq!(FailureReason::of_message(&format!("{reason}: details")), Some(reason));
        }
        assert_eq!(FailureReason::of_message("namespace x is still terminating: QuotaExceeded: no"), None);
        assert_eq!(FailureReason::of_message("QuotaExceeded"), None);
    }
}
