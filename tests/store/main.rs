//! The control plane's store, one binary, on SQLite and PostgreSQL: its records and pipeline,
//! and its behaviour under concurrency and a moving clock. PostgreSQL comes from
//! `hack/local-postgres.sh`; a missing one fails the run, never skips.

#[path = "../support/postgres.rs"]
pub mod postgres;

mod concurrency;
mod people;
mod records;
