//! `wsync agents …`: register agents, their tokens, pull secrets and workspace settings.

use super::client::{Error, Output, Result, ServerArgs, call, segment};
use crate::protocol::ImagePullSecret;
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum AgentsCommand {
    /// Register an agent; prints its token once.
    Register {
        id: String,
        /// `<namespace>/<name>` of a pull secret to copy into every workspace; repeatable.
        #[arg(long = "image-pull-secret")]
        image_pull_secrets: Vec<String>,
        /// GitLab's workspace settings, as YAML or JSON: an agent config's `remote_development`
        /// block, or its keys alone. GitLab's defaults without it.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Replace an agent's workspace settings (as `register --config`); new workspaces get them,
    /// existing ones keep theirs.
    SetConfig { id: String, file: PathBuf },
    /// Show an agent's workspace settings.
    Config { id: String },
    /// Give an agent a new token, printed once; the old one keeps working for `--grace`.
    RotateToken {
        id: String,
        /// How long the old token keeps working (`0s` ends it now).
        #[arg(long, default_value = "1h", value_parser = crate::runtime::parse_duration)]
        grace: std::time::Duration,
    },
    /// Refuse an agent's every token from now on; `rotate-token` re-enables it with a new one.
    Revoke { id: String },
    /// Replace an agent's image pull secrets; every workspace gets its config again.
    SetImagePullSecrets {
        id: String,
        /// `<namespace>/<name>`; repeatable; none clears them.
        #[arg(long = "image-pull-secret")]
        image_pull_secrets: Vec<String>,
    },
}

fn read_agent_config(path: &std::path::Path) -> Result<crate::control_plane::decisions::agent_config::AgentConfig> {
    let unreadable = |reason: String| Error::AgentConfig { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    crate::control_plane::decisions::agent_config::AgentConfig::parse(&text).map_err(unreadable)
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

pub async fn agents(server: &ServerArgs, command: AgentsCommand) -> Result<()> {
    let path = |id: &str, rest: &str| format!("api/v1/agents/{}/{rest}", segment(id));
    match command {
        AgentsCommand::Register { id, image_pull_secrets, config } => {
            let secrets = parse_pull_secrets(&image_pull_secrets)?;
            let config = config.as_deref().map(read_agent_config).transpose()?;
            let body = serde_json::json!({ "id": id, "image_pull_secrets": secrets, "config": config });
            let answer = call(server, reqwest::Method::POST, "api/v1/agents", Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => {
                    println!("agent {} registered; its token (shown once):", answer["id"].as_str().unwrap_or_default());
                    println!("{}", answer["token"].as_str().unwrap_or_default());
                }
            }
        }
        AgentsCommand::RotateToken { id, grace } => {
            let body = serde_json::json!({ "grace_seconds": grace.as_secs() });
            let answer = call(server, reqwest::Method::POST, &path(&id, "rotate-token"), Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => {
                    println!(
                        "agent {id}: its new token (shown once); the old one works for {}s more:",
                        grace.as_secs()
                    );
                    println!("{}", answer["token"].as_str().unwrap_or_default());
                }
            }
        }
        AgentsCommand::SetConfig { id, file } => {
            let config = read_agent_config(&file)?;
            let body = serde_json::to_value(&config).map_err(|e| Error::UnexpectedAnswer(e.to_string()))?;
            let answer = call(server, reqwest::Method::PUT, &path(&id, "config"), Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => println!("agent {id}: workspace settings set; new workspaces get them"),
            }
        }
        AgentsCommand::Config { id } => {
            let answer = call(server, reqwest::Method::GET, &path(&id, "config"), None).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => print!("{}", crate::yaml::to_string(&answer).unwrap_or_default()),
            }
        }
        AgentsCommand::Revoke { id } => {
            let answer = call(server, reqwest::Method::POST, &path(&id, "revoke"), None).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => println!("agent {id}: revoked; every call with its tokens is refused"),
            }
        }
        AgentsCommand::SetImagePullSecrets { id, image_pull_secrets } => {
            let body = serde_json::json!({ "image_pull_secrets": parse_pull_secrets(&image_pull_secrets)? });
            let answer = call(server, reqwest::Method::PUT, &path(&id, "image-pull-secrets"), Some(body)).await?;
            match server.output {
                Output::Json => println!("{answer}"),
                Output::Table => println!("agent {id}: image pull secrets set; workspaces get their config again"),
            }
        }
    }
    Ok(())
}
