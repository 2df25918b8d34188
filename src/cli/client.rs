//! The CLI's client of the control plane's JSON API: its flags, its errors, one call.

use crate::runtime::{TokenFileError, read_token_file};
use crate::terminal::printable;
use serde_json::Value;
use std::path::PathBuf;

/// What the CLI tells its user when a command fails.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("{flag} {value:?}: use {form}")]
    Usage { flag: &'static str, value: String, form: &'static str },
    #[error("token: {0}")]
    AdminToken(#[from] TokenFileError),
    #[error("building the HTTP client: {0}")]
    HttpClient(reqwest::Error),
    #[error("{path:?}: {reason}")]
    AgentConfig { path: PathBuf, reason: String },
    #[error("CA file {path:?}: {reason}")]
    CaFile { path: PathBuf, reason: String },
    #[error("{path:?} is not a path below {server}: {reason}")]
    Url { server: String, path: String, reason: String },
    #[error("{url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the control plane answered {status}: {message}")]
    Rejected { status: reqwest::StatusCode, message: String },
    #[error("unexpected answer from the control plane: {0}")]
    UnexpectedAnswer(String),
    #[error("{0}")]
    Io(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// The control plane's base URL.
    #[arg(long, env = "WSYNC_SERVER", default_value = "http://127.0.0.1:8080", global = true)]
    pub server: reqwest::Url,
    /// File holding your personal API token (made on the page's "API tokens", or printed by
    /// `wsync users create`). `WSYNC_TOKEN` gives the token itself.
    #[arg(long, env = "WSYNC_TOKEN_FILE", global = true)]
    pub token_file: Option<PathBuf>,
    /// The personal token itself, from the environment only: arguments show in `ps`.
    #[arg(skip = std::env::var("WSYNC_TOKEN").ok())]
    pub token: Option<String>,
    /// File holding the control plane's admin token (printed on its first start).
    #[arg(long, env = "WSYNC_ADMIN_TOKEN_FILE", global = true)]
    pub admin_token_file: Option<PathBuf>,
    /// The admin token itself, from the environment only: arguments show in `ps`.
    #[arg(skip = std::env::var("WSYNC_ADMIN_TOKEN").ok())]
    pub admin_token: Option<String>,
    /// PEM CA bundle to trust for an https control plane, besides the system's roots.
    #[arg(long, env = "WSYNC_CA_FILE", global = true)]
    pub ca_file: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq)]
pub enum Output {
    Table,
    Json,
}

pub fn client(server: &ServerArgs) -> Result<(reqwest::Client, Option<String>)> {
    let (builder, token) = client_builder(server)?;
    let builder = builder.timeout(std::time::Duration::from_secs(30));
    Ok((builder.build().map_err(Error::HttpClient)?, token))
}

/// The client's builder, with the CA file, and the token to send.
pub fn client_builder(server: &ServerArgs) -> Result<(reqwest::ClientBuilder, Option<String>)> {
    // A file named on the command line first, then the environment's tokens; a personal
    // token before the admin's.
    let token = match (&server.token_file, &server.admin_token_file) {
        (Some(path), _) | (None, Some(path)) => Some(read_token_file(path)?),
        (None, None) => [&server.token, &server.admin_token]
            .into_iter()
            .flatten()
            .map(|t| t.trim().to_string())
            .find(|t| !t.is_empty()),
    };
    let mut builder = reqwest::Client::builder();
    if let Some(path) = &server.ca_file {
        let unreadable = |reason: String| Error::CaFile { path: path.clone(), reason };
        let pem = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
        for certificate in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| unreadable(e.to_string()))? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    Ok((builder, token))
}

pub async fn call(server: &ServerArgs, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
    Ok(send(server, method, path, body).await?.0)
}

/// Every workspace of a list, page after page (`Link: <…>; rel="next"`).
pub async fn list_all(server: &ServerArgs, path: &str) -> Result<Value> {
    let mut all = Vec::new();
    let mut next = Some(path.to_string());
    while let Some(path) = next.take() {
        let (page, link) = send(server, reqwest::Method::GET, &path, None).await?;
        let Value::Array(items) = page else { return Err(Error::UnexpectedAnswer("a list is an array".into())) };
        all.extend(items);
        next = link.and_then(|link| {
            let target = link.strip_prefix("</")?.split_once('>')?;
            target.1.contains("rel=\"next\"").then(|| target.0.to_string())
        });
    }
    Ok(Value::Array(all))
}

/// One call: the answer's JSON and its `Link` header.
async fn send(
    server: &ServerArgs,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Result<(Value, Option<String>)> {
    let (http, token) = client(server)?;
    // The JSON API takes only JSON: a write without a body sends an empty object.
    let body = body.or_else(|| (method != reqwest::Method::GET).then(|| serde_json::json!({})));
    let url = server.server.join(path).map_err(|e| Error::Url {
        server: server.server.to_string(),
        path: path.to_string(),
        reason: e.to_string(),
    })?;
    let mut request = http.request(method, url.clone());
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .map_err(|e| Error::Unreachable { url: url.to_string(), reason: e.without_url().to_string() })?;
    let status = response.status();
    let link = response.headers().get(reqwest::header::LINK).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let message = printable(body["error"].as_str().unwrap_or("no details"));
        return Err(Error::Rejected { status, message });
    }
    Ok((body, link))
}

/// One path segment of the API, percent-encoded: an argument can never add a `/`, a `..`
/// or a `?` to the path it goes in.
pub fn segment(part: &str) -> String {
    crate::control_plane::http::validation::url_part(part)
}
