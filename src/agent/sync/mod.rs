//! The agent's decisions, free of I/O: no `.await`, no client (checked by hack/check-layout.py).
//! What a cycle sends and what its answer asks for, the ledger and its durable form, the
//! versioned error tracker, the index of workspace Deployments, and the backoff schedule.

pub mod answer;
pub mod backoff;
pub mod cycle;
pub mod deployment_failure;
pub mod error_tracker;
pub mod index;
pub mod ledger;
pub mod outcome;
pub mod pod_failures;
pub mod status;
pub mod status_write;
pub mod termination_clock;
pub mod workspace;
