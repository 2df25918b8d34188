//! `wsync agents …`, `wsync workspaces …` and the people's commands (`people`): a client for
//! the control plane's JSON API.

pub mod agents;
pub mod people;
mod table;

use crate::control_plane::model::{Workspace, now_ms};
use crate::runtime::{TokenFileError, read_token_file};
use crate::terminal::printable;
use serde_json::Value;
use std::path::PathBuf;
use table::table;

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

#[derive(clap::Subcommand, Debug, Clone)]
pub enum WorkspacesCommand {
    /// Create a workspace; it starts Running.
    Create {
        name: String,
        #[arg(long)]
        image: String,
        #[arg(long)]
        cpu: Option<String>,
        #[arg(long)]
        memory: Option<String>,
        /// `KEY=VALUE`; repeatable.
        #[arg(long = "env")]
        env: Vec<String>,
        /// Whose workspace it is, for the agent's `workspaces_per_user_quota`.
        #[arg(long)]
        owner: Option<String>,
    },
    List {
        /// The orphans instead: workspaces the agent reports that the control plane does not know.
        #[arg(long)]
        orphans: bool,
    },
    Get {
        name: String,
    },
    /// Make an orphan (`namespace/name`) a workspace, Running, with the image it runs.
    Adopt {
        orphan: String,
        #[arg(long)]
        image: String,
    },
    /// Terminate an orphan (`namespace/name`): the agent deletes its namespace.
    TerminateOrphan {
        orphan: String,
    },
    Start {
        name: String,
    },
    Stop {
        name: String,
    },
    Restart {
        name: String,
    },
    Terminate {
        name: String,
    },
}

fn client(server: &ServerArgs) -> Result<(reqwest::Client, Option<String>)> {
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
    let mut builder = reqwest::Client::builder().timeout(std::time::Duration::from_secs(30));
    if let Some(path) = &server.ca_file {
        let unreadable = |reason: String| Error::CaFile { path: path.clone(), reason };
        let pem = std::fs::read(path).map_err(|e| unreadable(e.to_string()))?;
        for certificate in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| unreadable(e.to_string()))? {
            builder = builder.add_root_certificate(certificate);
        }
    }
    Ok((builder.build().map_err(Error::HttpClient)?, token))
}

async fn call(server: &ServerArgs, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
    Ok(send(server, method, path, body).await?.0)
}

/// Every workspace of a list, page after page (`Link: <…>; rel="next"`).
async fn list_all(server: &ServerArgs, path: &str) -> Result<Value> {
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

/// Without an agent, `list` lists the caller's own workspaces across every agent; the other
/// commands need one.
pub async fn workspaces(server: &ServerArgs, agent: Option<&str>, command: WorkspacesCommand) -> Result<()> {
    let agent = match (agent, &command) {
        (Some(agent), _) => agent,
        (None, WorkspacesCommand::List { orphans: false }) => {
            let answer = list_all(server, "api/v1/workspaces").await?;
            return print_workspaces(server, answer);
        }
        (None, _) => {
            return Err(Error::Usage {
                flag: "--agent",
                value: String::new(),
                form: "--agent <ID> (or WSYNC_AGENT_ID)",
            });
        }
    };
    let agent = &segment(agent);
    let base = format!("api/v1/agents/{agent}/workspaces");
    let (method, path, body) = match &command {
        WorkspacesCommand::Create { name, image, cpu, memory, env, owner } => {
            let env: serde_json::Map<String, Value> = env
                .iter()
                .map(|kv| {
                    let (k, v) = kv.split_once('=').ok_or_else(|| Error::Usage {
                        flag: "--env",
                        value: kv.clone(),
                        form: "KEY=VALUE",
                    })?;
                    Ok((k.to_string(), Value::from(v)))
                })
                .collect::<Result<_>>()?;
            let body = serde_json::json!({ "name": name, "image": image, "cpu": cpu, "memory": memory, "env": env, "owner": owner });
            (reqwest::Method::POST, base.clone(), Some(body))
        }
        WorkspacesCommand::List { orphans: false } => (reqwest::Method::GET, base.clone(), None),
        WorkspacesCommand::List { orphans: true } => {
            return orphans(
                server,
                &call(server, reqwest::Method::GET, &format!("api/v1/agents/{agent}/orphans"), None).await?,
            );
        }
        WorkspacesCommand::Adopt { orphan, image } => {
            let path = format!("api/v1/agents/{agent}/orphans/{}/adopt", orphan_path(orphan)?);
            (reqwest::Method::POST, path, Some(serde_json::json!({ "image": image })))
        }
        WorkspacesCommand::TerminateOrphan { orphan } => {
            (reqwest::Method::POST, format!("api/v1/agents/{agent}/orphans/{}/terminate", orphan_path(orphan)?), None)
        }
        WorkspacesCommand::Get { name } => (reqwest::Method::GET, format!("{base}/{}", segment(name)), None),
        WorkspacesCommand::Start { name } => (reqwest::Method::POST, format!("{base}/{}/start", segment(name)), None),
        WorkspacesCommand::Stop { name } => (reqwest::Method::POST, format!("{base}/{}/stop", segment(name)), None),
        WorkspacesCommand::Restart { name } => {
            (reqwest::Method::POST, format!("{base}/{}/restart", segment(name)), None)
        }
        WorkspacesCommand::Terminate { name } => {
            (reqwest::Method::POST, format!("{base}/{}/terminate", segment(name)), None)
        }
    };
    let answer = match command {
        WorkspacesCommand::List { .. } => list_all(server, &path).await?,
        _ => call(server, method, &path, body).await?,
    };
    print_workspaces(server, answer)
}

fn print_workspaces(server: &ServerArgs, answer: Value) -> Result<()> {
    if server.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(&answer).unwrap_or_default());
        return Ok(());
    }
    let list: Vec<Workspace> = match answer {
        Value::Array(_) => serde_json::from_value(answer),
        single => serde_json::from_value(single).map(|w| vec![w]),
    }
    .map_err(|e| Error::UnexpectedAnswer(e.to_string()))?;
    print!("{}", table(&list, now_ms()));
    Ok(())
}

/// `namespace/name`, checked, as a URL path.
fn orphan_path(orphan: &str) -> Result<String> {
    match orphan.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(format!("{}/{}", segment(namespace), segment(name)))
        }
        _ => Err(Error::Usage { flag: "orphan", value: orphan.to_string(), form: "namespace/name" }),
    }
}

fn orphans(server: &ServerArgs, answer: &Value) -> Result<()> {
    if server.output == Output::Json {
        println!("{}", serde_json::to_string_pretty(answer).unwrap_or_default());
        return Ok(());
    }
    let list: Vec<crate::control_plane::model::Orphan> =
        serde_json::from_value(answer.clone()).map_err(|e| Error::UnexpectedAnswer(e.to_string()))?;
    let now = now_ms();
    println!("{:<30} {:<40} LAST REPORT", "ORPHAN", "NAMESPACE");
    for o in list {
        let age = (now - o.last_seen).max(0) / 1000;
        println!("{:<30} {:<40} {age}s ago", printable(&o.name), printable(&o.namespace));
    }
    Ok(())
}
