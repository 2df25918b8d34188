//! The real-apiserver tier, as one test binary: the real `wsync` binary, the real control
//! plane, kubectl and headless Chromium against the local kube-apiserver 1.20
//! (hack/local-cluster.sh). A missing apiserver fails every test here; none skips.
//!
//! Each scenario has its own agent id and namespaces, so scenarios run in parallel.

#[path = "../support/mod.rs"]
pub mod support;

mod applier;
mod backup_restore;
mod control_plane_chart;
mod drift;
mod end_to_end;
mod fault_control_plane;
mod fault_kills;
mod fault_suite;
mod faults;
mod fresh_namespaces;
mod gitlab_parity;
mod held_errors;
mod helm_chart;
mod helm_releases;
mod hostile;
mod kubectl_plugin;
mod leader;
mod ledger_leak;
mod manifests;
mod monitoring;
mod rbac;
mod resync;
mod shared_namespace;
mod status_writes;
mod sync_core;
mod system_roots;
mod workload_failures;
