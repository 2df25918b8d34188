//! wsync: an in-cluster agent that keeps cloud development workspaces in step with a control
//! plane, over GitLab's Workspaces reconcile protocol, and the reference control plane it
//! talks to. The map of the code is in docs/ARCHITECTURE.md.
//!
//! The two halves meet only over HTTP: `agent` and `control_plane` never import each other;
//! both build on `protocol`, `tunnel`, `crd`, `names`, `yaml`, `runtime`, `terminal` and `allocator`. `kubectl_plugin` (the
//! `kubectl-wsync` binary) reads the cluster and imports neither.

pub mod agent;
pub mod allocator;
pub mod cli;
pub mod control_plane;
pub mod crd;
pub mod kubectl_plugin;
pub mod names;
pub mod protocol;
pub mod runtime;
pub mod terminal;
pub mod tunnel;
pub mod yaml;
