//! The control plane's decisions, free of I/O (checked by hack/check-layout.py): a reconcile's
//! pipeline and the actual-state rules, who may do what, the config a workspace gets, GitLab's agent settings,
//! and the hints its errors carry. The store runs the pipeline inside its transaction; the
//! web layer renders what they decide.

pub mod access;
pub mod agent_config;
pub mod config_builder;
pub mod devfile;
pub mod hints;
pub mod pipeline;
pub mod rules;
pub mod workspace_hosts;
