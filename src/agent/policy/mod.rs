//! The agent's trust rules, free of I/O (checked by hack/check-layout.py): what a config may
//! contain and where it may go, decided whole before anything is sent. Below both `apply`,
//! which enforces them, and `k8s`, whose configuration names the Pod Security level and the
//! namespace mode.

pub mod defaults;
pub mod dial;
pub mod drift;
pub mod field_policy;
pub mod kinds;
pub mod namespace_rule;
pub mod plan;
pub mod pod_security;
pub mod pod_selection;
pub mod pull_secrets;
pub mod shared_namespace;
