//! The agent's HTTP client for the control plane (DESIGN §1).
//!
//! The bearer token comes from a file (a mounted Secret), is re-read when the file changes,
//! and never appears in logs or errors.

use crate::agent::error::{ControlPlaneError, Error};
use crate::protocol::{Prerequisites, RECONCILE_SUCCESS, ReconcileRequest, ReconcileResponse};
use crate::runtime::LockExt;
use reqwest::{StatusCode, Url};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How much of an error body is kept for the operator to read.
const BODY_EXCERPT_BYTES: usize = 256;

#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    pub base_url: Url,
    pub reconcile_path: String,
    pub prerequisites_path: String,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

struct CachedToken {
    stamp: (SystemTime, u64),
    token: String,
}

pub struct ControlPlaneClient {
    http: reqwest::Client,
    reconcile_url: Url,
    prerequisites_url: Url,
    token_file: PathBuf,
    token: Mutex<Option<CachedToken>>,
    request_timeout: Duration,
}

impl std::fmt::Debug for ControlPlaneClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlaneClient")
            .field("reconcile_url", &self.reconcile_url.as_str())
            .finish_non_exhaustive()
    }
}

impl ControlPlaneClient {
    pub fn new(config: &ControlPlaneConfig) -> Result<Self, Error> {
        let join = |path: &str| {
            config
                .base_url
                .join(path)
                .map_err(|e| Error::ControlPlaneUrl { path: path.to_string(), reason: e.to_string() })
        };
        let mut builder = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .user_agent(concat!("wsync-agent/", env!("CARGO_PKG_VERSION")));
        if let Some(ca_file) = &config.ca_file {
            let pem = std::fs::read(ca_file)
                .map_err(|e| Error::CaBundle { path: ca_file.display().to_string(), reason: e.to_string() })?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| Error::CaBundle { path: ca_file.display().to_string(), reason: format!("invalid: {e}") })?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build().map_err(Error::HttpClient)?;
        Ok(Self {
            http,
            reconcile_url: join(&config.reconcile_path)?,
            prerequisites_url: join(&config.prerequisites_path)?,
            token_file: config.token_file.clone(),
            token: Mutex::new(None),
            request_timeout: config.request_timeout,
        })
    }

    /// The token, re-read only when the file's modification time or size changed.
    fn token(&self) -> Result<String, ControlPlaneError> {
        let unreadable =
            |reason: String| ControlPlaneError::Token { path: self.token_file.display().to_string(), reason };
        let meta = std::fs::metadata(&self.token_file).map_err(|e| unreadable(e.to_string()))?;
        let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
        let mut cached = self.token.lock_unpoisoned();
        if let Some(c) = cached.as_ref().filter(|c| c.stamp == stamp) {
            return Ok(c.token.clone());
        }
        let token =
            std::fs::read_to_string(&self.token_file).map_err(|e| unreadable(e.to_string()))?.trim().to_string();
        if token.is_empty() {
            return Err(unreadable("the file is empty".into()));
        }
        *cached = Some(CachedToken { stamp, token: token.clone() });
        Ok(token)
    }

    fn classify(&self, error: reqwest::Error) -> ControlPlaneError {
        if error.is_timeout() {
            ControlPlaneError::Timeout(self.request_timeout)
        } else if error.is_decode() || error.is_body() {
            ControlPlaneError::InvalidBody(error.to_string())
        } else {
            // Without the URL's query: nothing secret is in it, but keep errors short.
            ControlPlaneError::Unreachable(error.without_url().to_string())
        }
    }

    /// POST the reconcile request. Only a 201 with a parsable body is success.
    pub async fn reconcile(&self, request: &ReconcileRequest) -> Result<ReconcileResponse, ControlPlaneError> {
        let token = self.token()?;
        let response = self
            .http
            .post(self.reconcile_url.clone())
            .bearer_auth(token)
            .json(request)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let body =
            self.read_body(response, StatusCode::from_u16(RECONCILE_SUCCESS).unwrap_or(StatusCode::CREATED)).await?;
        serde_json::from_slice(&body).map_err(|e| ControlPlaneError::InvalidBody(e.to_string()))
    }

    /// GET the agent-level prerequisites. 200 is success; unknown fields are ignored.
    pub async fn prerequisites(&self) -> Result<Prerequisites, ControlPlaneError> {
        let token = self.token()?;
        let response = self
            .http
            .get(self.prerequisites_url.clone())
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let body = self.read_body(response, StatusCode::OK).await?;
        serde_json::from_slice(&body).map_err(|e| ControlPlaneError::InvalidBody(e.to_string()))
    }

    async fn read_body(&self, response: reqwest::Response, success: StatusCode) -> Result<Vec<u8>, ControlPlaneError> {
        let status = response.status();
        let body = response.bytes().await.map_err(|e| self.classify(e))?;
        if status != success {
            return Err(ControlPlaneError::Status { status: status.as_u16(), body: excerpt(&body) });
        }
        Ok(body.to_vec())
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(BODY_EXCERPT_BYTES) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}
