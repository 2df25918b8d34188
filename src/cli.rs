//! `wsync agents …` and `wsync workspaces …`: a client for the control plane's JSON API.

use crate::control_plane::model::{Workspace, now_ms, state_text};
use crate::protocol::ImagePullSecret;
use crate::runtime::{TokenFileError, read_token_file};
use serde_json::Value;
use std::path::PathBuf;

/// What the CLI tells its user when a command fails.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("{flag} {value:?}: use {form}")]
    Usage { flag: &'static str, value: String, form: &'static str },
    #[error("admin token: {0}")]
    AdminToken(#[from] TokenFileError),
    #[error("building the HTTP client: {0}")]
    HttpClient(reqwest::Error),
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
    /// File holding the control plane's admin token, if it requires one.
    #[arg(long, env = "WSYNC_ADMIN_TOKEN_FILE", global = true)]
    pub admin_token_file: Option<PathBuf>,
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
pub enum AgentsCommand {
    /// Register an agent; prints its token once.
    Register {
        id: String,
        /// `<namespace>/<name>` of a pull secret to copy into every workspace; repeatable.
        #[arg(long = "image-pull-secret")]
        image_pull_secrets: Vec<String>,
    },
    /// Replace an agent's image pull secrets; every workspace gets its config again.
    SetImagePullSecrets {
        id: String,
        /// `<namespace>/<name>`; repeatable; none clears them.
        #[arg(long = "image-pull-secret")]
        image_pull_secrets: Vec<String>,
    },
}

fn parse_pull_secrets(secrets: &[String]) -> Result<Vec<ImagePullSecret>> {
    secrets
        .iter()
        .map(|s| {
            let (namespace, name) = s.split_once('/').ok_or_else(|| Error::Usage {
                flag: "--image-pull-secret",
                value: s.clone(),
                form: "<namespace>/<name>",
            })?;
            Ok(ImagePullSecret { name: name.into(), namespace: namespace.into() })
        })
        .collect()
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
    let token = server.admin_token_file.as_deref().map(read_token_file).transpose()?;
    let http =
        reqwest::Client::builder().timeout(std::time::Duration::from_secs(30)).build().map_err(Error::HttpClient)?;
    Ok((http, token))
}

async fn call(server: &ServerArgs, method: reqwest::Method, path: &str, body: Option<Value>) -> Result<Value> {
    let (http, token) = client(server)?;
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
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let message = body["error"].as_str().unwrap_or("no details").to_string();
        return Err(Error::Rejected { status, message });
    }
    Ok(body)
}

pub async fn agents(server: &ServerArgs, command: AgentsCommand) -> Result<()> {
    match command {
        AgentsCommand::Register { id, image_pull_secrets } => {
            let secrets = parse_pull_secrets(&image_pull_secrets)?;
            let body = serde_json::json!({ "id": id, "image_pull_secrets": secrets });
            let answer = call(server, reqwest::Method::POST, "api/v1/agents", Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => {
                    println!("agent {} registered; its token (shown once):", answer["id"].as_str().unwrap_or_default());
                    println!("{}", answer["token"].as_str().unwrap_or_default());
                }
            }
        }
        AgentsCommand::SetImagePullSecrets { id, image_pull_secrets } => {
            let body = serde_json::json!({ "image_pull_secrets": parse_pull_secrets(&image_pull_secrets)? });
            let path = format!("api/v1/agents/{id}/image-pull-secrets");
            let answer = call(server, reqwest::Method::PUT, &path, Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => println!("agent {id}: image pull secrets set; workspaces get their config again"),
            }
        }
    }
    Ok(())
}

pub async fn workspaces(server: &ServerArgs, agent: &str, command: WorkspacesCommand) -> Result<()> {
    let base = format!("api/v1/agents/{agent}/workspaces");
    let (method, path, body) = match &command {
        WorkspacesCommand::Create { name, image, cpu, memory, env } => {
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
            let body = serde_json::json!({ "name": name, "image": image, "cpu": cpu, "memory": memory, "env": env });
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
        WorkspacesCommand::Get { name } => (reqwest::Method::GET, format!("{base}/{name}"), None),
        WorkspacesCommand::Start { name } => (reqwest::Method::POST, format!("{base}/{name}/start"), None),
        WorkspacesCommand::Stop { name } => (reqwest::Method::POST, format!("{base}/{name}/stop"), None),
        WorkspacesCommand::Restart { name } => (reqwest::Method::POST, format!("{base}/{name}/restart"), None),
        WorkspacesCommand::Terminate { name } => (reqwest::Method::POST, format!("{base}/{name}/terminate"), None),
    };
    let answer = call(server, method, &path, body).await?;
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
            Ok(format!("{namespace}/{name}"))
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

/// What an agent or a control plane sent, made safe for a terminal: control characters (an
/// escape sequence that moves the cursor or rewrites the screen, say) are shown escaped.
fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().collect() } else { c.to_string() }).collect()
}

/// A human-readable table, one workspace a row; errors in full below their row.
pub fn table(workspaces: &[Workspace], now: i64) -> String {
    let rows: Vec<[String; 5]> = workspaces
        .iter()
        .map(|w| {
            let report = match w.last_reported_at {
                Some(at) => format!("{}s ago", (now - at).max(0) / 1000),
                None => "never".into(),
            };
            [
                printable(&w.name),
                printable(&w.namespace),
                state_text(&w.desired_state),
                state_text(&w.actual_state),
                report,
            ]
        })
        .collect();
    let header = ["NAME", "NAMESPACE", "DESIRED", "ACTUAL", "LAST REPORT"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: [&str; 5]| {
        let padded: Vec<String> = cells.iter().zip(widths).map(|(c, w)| format!("{c:<w$}")).collect();
        format!("{}\n", padded.join("   ").trim_end())
    };
    let mut out = line(header);
    for (row, workspace) in rows.iter().zip(workspaces) {
        out += &line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
        if let Some(error) = &workspace.error {
            out += &format!("  └ {} error: {}\n", printable(&error.error_type), printable(&error.message));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ActualState, DesiredState};

    #[test]
    fn what_an_agent_sent_cannot_drive_the_terminal() {
        let workspace = Workspace {
            agent_id: "a".into(),
            name: "ws\u{1b}]0;owned\u{7}".into(),
            namespace: "ns".into(),
            image: "i".into(),
            cpu: None,
            memory: None,
            env: Default::default(),
            desired_state: DesiredState::Running,
            actual_state: ActualState::Error,
            desired_state_updated_at: 0,
            actual_state_updated_at: 0,
            deployment_resource_version: None,
            responded_to_agent_at: None,
            force_include_all_resources: false,
            last_reported_at: None,
            error: Some(crate::control_plane::model::WorkspaceError {
                error_type: "applier".into(),
                message: "boom\u{1b}[2J\u{1b}[31mfake prompt $ \r".into(),
                first_seen: 0,
                last_seen: 0,
                desired_state: DesiredState::Running,
            }),
            created_at: 0,
        };
        let out = table(&[workspace], 0);
        assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
        assert!(out.contains(r"boom\u{1b}[2J"), "{out}");
    }
}
