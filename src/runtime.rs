//! What every `wsync` process needs, whichever half it runs: logging and its level handle, the
//! TLS crypto provider, the shutdown signal, durations on the command line, token files,
//! locks that survive a panic, and the metrics' content type.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// Changes the log filter of a running process (`info`, `wsync=debug`, …).
pub type LogLevelHandle = std::sync::Arc<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum LogFormat {
    Text,
    Json,
}

/// Install the subscriber; the returned handle changes the level filter while running.
pub fn init_logging(format: LogFormat) -> LogLevelHandle {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let registry = tracing_subscriber::registry().with(filter);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => registry.with(fmt).init(),
        LogFormat::Json => registry.with(fmt.json().flatten_event(true).with_current_span(true)).init(),
    }
    std::sync::Arc::new(move |directives: &str| {
        let filter = tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        handle.reload(filter).map_err(|e| e.to_string())
    })
}

/// Install rustls' ring provider once. kube and reqwest share it; without a default, a build
/// with two providers panics at the first TLS connection.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested");
}

/// Failpoints for the fault suite: a debug build (what `cargo test` runs) armed with
/// `--failpoint <name>` aborts the process at the named point, as `kill -9` would there.
/// Release builds compile them out.
pub mod failpoint {
    use std::sync::OnceLock;

    static ARMED: OnceLock<String> = OnceLock::new();

    /// Arm one failpoint for this process (debug builds only).
    pub fn arm(name: &str) {
        if cfg!(debug_assertions) {
            let _ = ARMED.set(name.to_string());
        }
    }

    /// Whether this failpoint is armed, for a point that fails otherwise than by aborting.
    #[inline]
    pub fn armed(name: &str) -> bool {
        cfg!(debug_assertions) && ARMED.get().is_some_and(|armed| armed == name)
    }

    /// Abort here if this failpoint is armed.
    #[inline]
    pub fn hit(name: &str) {
        if armed(name) {
            tracing::error!(failpoint = name, "failpoint hit: aborting");
            std::process::abort();
        }
    }
}

/// Parse `500ms`, `5s`, `2m`, `1h` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("invalid duration {text:?}"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!("invalid duration unit in {text:?}; use ms, s, m or h"));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

#[derive(thiserror::Error, Debug)]
pub enum TokenFileError {
    #[error("token file {path}: {source}")]
    Unreadable { path: String, source: std::io::Error },
    #[error("token file {path} is empty")]
    Empty { path: String },
    #[error(
        "the token in {path} is too weak ({length} characters, {distinct} different): a token needs at least \
         {MIN_TOKEN_CHARS} random characters (128 bits); generate one with `openssl rand -hex 32`, or \
         `head -c 32 /dev/urandom | base64`"
    )]
    Weak { path: String, length: usize, distinct: usize },
}

/// The fewest characters a secret token may have: 32 of a hex alphabet is 128 bits.
pub const MIN_TOKEN_CHARS: usize = 32;
/// The fewest different characters in it: 32 random hex characters have about 14, and a run of
/// one or two repeated characters is no secret.
const MIN_DISTINCT_TOKEN_CHARS: usize = 8;

/// [`read_token_file`], refusing a token too short or too uniform to hold 128 bits: fewer than
/// [`MIN_TOKEN_CHARS`] characters, or too few different ones. A cheap floor for tokens people
/// write by hand into a Secret, not a measure of randomness.
pub fn read_secret_token_file(path: &Path) -> Result<String, TokenFileError> {
    let token = read_token_file(path)?;
    let length = token.chars().count();
    let distinct = token.chars().collect::<std::collections::BTreeSet<_>>().len();
    if length < MIN_TOKEN_CHARS || distinct < MIN_DISTINCT_TOKEN_CHARS {
        return Err(TokenFileError::Weak { path: path.display().to_string(), length, distinct });
    }
    Ok(token)
}

/// Read a token from a file (a mounted Secret, say), trimmed; the error names the file only.
pub fn read_token_file(path: &Path) -> Result<String, TokenFileError> {
    let shown = || path.display().to_string();
    let token = std::fs::read_to_string(path)
        .map_err(|source| TokenFileError::Unreadable { path: shown(), source })?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(TokenFileError::Empty { path: shown() });
    }
    Ok(token)
}

/// Both halves' `/metrics` answer in OpenMetrics text.
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A lock whose holder panicked still guards plain data that is whole between statements:
/// keep serving it rather than spreading the panic to every later caller.
pub trait LockExt<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn weak_secret_tokens_are_refused_with_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        for weak in ["a", "admin-secret", &"a".repeat(64), &"ab".repeat(32), "0123456789abcdef0123456789abcde"] {
            std::fs::write(&file, format!("{weak}\n")).unwrap();
            let error = read_secret_token_file(&file).unwrap_err();
            assert!(matches!(error, TokenFileError::Weak { .. }), "{weak:?}: {error}");
            assert!(error.to_string().contains("openssl rand -hex 32"), "{error}");
        }
        for strong in ["0123456789abcdef0123456789abcdef", "q83vEjRWeJq83vEjRWeJq83vEjRWeJq8"] {
            std::fs::write(&file, strong).unwrap();
            assert_eq!(read_secret_token_file(&file).unwrap(), strong);
        }
    }

    #[test]
    fn a_poisoned_lock_still_serves_its_data() {
        let lock = std::sync::Arc::new(Mutex::new(7));
        let poisoner = lock.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock_unpoisoned();
            panic!("poison it");
        })
        .join();
        assert!(lock.is_poisoned());
        assert_eq!(*lock.lock_unpoisoned(), 7);
    }
}
