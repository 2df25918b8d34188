//! Retrying a step that may fail transiently, on the agent's one backoff schedule.

use super::error::{Error, Result};
use super::sync::backoff::Backoff;
use tokio::sync::watch;

/// Retry `step` while it fails transiently. A permanent error (a missing CRD, a bad
/// configuration) returns at once; so does the last error once `stop` resolves.
pub async fn retry_transient<T, F, Fut>(
    what: &str,
    backoff: Backoff,
    stop: impl Future<Output = ()>,
    mut step: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    tokio::pin!(stop);
    let mut failures: u32 = 0;
    loop {
        let error: Error = match step().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_permanent() => return Err(error),
            Err(error) => error,
        };
        failures = failures.saturating_add(1);
        let delay = backoff.after(failures);
        tracing::warn!(%error, retry_in_s = delay.as_secs_f32(), "{what} failed; retrying");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {},
            _ = &mut stop => return Err(error),
        }
    }
}

/// Resolves once `signal` holds `value`, or its sender is gone: the stop of a wait.
pub async fn when(mut signal: watch::Receiver<bool>, value: bool) {
    let _ = signal.wait_for(|current| *current == value).await;
}
