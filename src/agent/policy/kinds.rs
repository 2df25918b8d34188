//! Which kinds a control plane may apply, and why, in one place. The operator's
//! `--allowed-kinds` narrows or widens the default list; the groups never allowed and
//! cluster-scoped kinds stay refused whatever it says (DESIGN §2, "Trust": What), and a shared
//! namespace refuses the kinds that would bind every workspace in it.
//!
//! Why these: a workspace as GitLab generates it is a Deployment, its Service, its config and
//! secrets, its volume claims, a ServiceAccount, a NetworkPolicy and, per namespace, a
//! ResourceQuota and a LimitRange. RBAC would let a config grant itself rights; Pods, Jobs and
//! the rest no workspace needs.

/// The kinds a workspace needs, as `Kind` for the core group or `group/Kind`.
pub const DEFAULT_ALLOWED_KINDS: &[&str] = &[
    "ConfigMap",
    "Secret",
    "Service",
    "PersistentVolumeClaim",
    "ServiceAccount",
    "ResourceQuota",
    "LimitRange",
    "apps/Deployment",
    "networking.k8s.io/NetworkPolicy",
];

/// Groups that are never applied, whatever the allow-list says.
pub const NEVER_ALLOWED_GROUPS: &[&str] = &["rbac.authorization.k8s.io"];

/// Kinds whose effect reaches every Pod of a namespace.
pub const NAMESPACE_WIDE_KINDS: &[&str] = &["ResourceQuota", "LimitRange"];
