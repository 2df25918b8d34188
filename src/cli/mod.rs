//! `wsync agents …`, `wsync workspaces …` and the people's commands (`people`): a client for
//! the control plane's JSON API.

pub mod agents;
mod client;
pub mod people;
mod streams;
mod table;

use crate::control_plane::model::{Workspace, now_ms};
use crate::terminal::printable;
pub use client::{Error, Output, Result, ServerArgs, segment};
use client::{call, list_all};
use serde_json::Value;
use table::table;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum WorkspacesCommand {
    /// Create a workspace; it starts Running.
    Create {
        name: String,
        /// The short form: a one-container workspace running this image.
        #[arg(long, required_unless_present = "devfile")]
        image: Option<String>,
        /// A devfile (2.2.0), validated whole as GitLab validates it; `-` reads standard input.
        #[arg(long, conflicts_with_all = ["image", "cpu", "memory"])]
        devfile: Option<std::path::PathBuf>,
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
    /// Print the devfile a workspace was created from (for one made from an image, the
    /// devfile that image stands for).
    Devfile {
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
    /// Forward a local port to a port the workspace declares, through the control plane and
    /// its agent: each connection to `127.0.0.1:LOCAL` reaches the workspace's PORT.
    PortForward {
        name: String,
        /// `LOCAL:PORT` (LOCAL 0 picks a free one), or `PORT` for the same number.
        ports: String,
    },
    /// SSH to the workspace's own sshd (its declared port 60022) through the control plane:
    /// runs `ssh` with this command as its ProxyCommand, or with `--stdio` is that command.
    Ssh {
        name: String,
        /// Be the ProxyCommand: the stream on standard input and output.
        #[arg(long)]
        stdio: bool,
        #[arg(long, default_value_t = crate::control_plane::decisions::config_builder::SSH_PORT)]
        port: u16,
        /// The user to log in as (ssh's `-l`).
        #[arg(long, short = 'l')]
        user: Option<String>,
        /// Arguments for ssh itself, after `--`: a command to run, `-v`, …
        #[arg(last = true)]
        ssh_args: Vec<String>,
    },
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
    let agent_id = agent;
    let agent = &segment(agent);
    let base = format!("api/v1/agents/{agent}/workspaces");
    let (method, path, body) = match &command {
        WorkspacesCommand::Create { name, image, devfile, cpu, memory, env, owner } => {
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
            let devfile = match devfile {
                Some(path) => Some(read_devfile(path)?),
                None => None,
            };
            let body = serde_json::json!({ "name": name, "image": image.clone().unwrap_or_default(), "devfile": devfile, "cpu": cpu, "memory": memory, "env": env, "owner": owner });
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
        WorkspacesCommand::Get { name } => {
            let answer = call(server, reqwest::Method::GET, &format!("{base}/{}", segment(name)), None).await?;
            let workspace: Option<Workspace> = serde_json::from_value(answer.clone()).ok();
            print_workspaces(server, answer)?;
            if server.output != Output::Json {
                print!("{}", workspace.as_ref().map(table::details).unwrap_or_default());
            }
            return Ok(());
        }
        WorkspacesCommand::Devfile { name } => {
            let answer = call(server, reqwest::Method::GET, &format!("{base}/{}/devfile", segment(name)), None).await?;
            let devfile = answer.get("devfile").and_then(Value::as_str).unwrap_or_default();
            return print_devfile(devfile);
        }
        WorkspacesCommand::Start { name } => (reqwest::Method::POST, format!("{base}/{}/start", segment(name)), None),
        WorkspacesCommand::Stop { name } => (reqwest::Method::POST, format!("{base}/{}/stop", segment(name)), None),
        WorkspacesCommand::Restart { name } => {
            (reqwest::Method::POST, format!("{base}/{}/restart", segment(name)), None)
        }
        WorkspacesCommand::Terminate { name } => {
            (reqwest::Method::POST, format!("{base}/{}/terminate", segment(name)), None)
        }
        WorkspacesCommand::PortForward { name, ports } => {
            return streams::port_forward(server, agent_id, name, ports).await;
        }
        WorkspacesCommand::Ssh { name, stdio: true, port, .. } => {
            return streams::stdio(server, agent_id, name, *port).await;
        }
        WorkspacesCommand::Ssh { name, stdio: false, port, user, ssh_args } => {
            return streams::ssh(server, agent_id, name, *port, user.as_deref(), ssh_args);
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

/// A devfile from a file (or standard input), refused here when it could never be accepted:
/// too large, or not UTF-8. The control plane checks it whole.
fn read_devfile(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let limit = crate::yaml::MAX_DEVFILE_BYTES;
    let mut bytes = Vec::new();
    let read = match path.to_str() {
        Some("-") => std::io::stdin().take(limit as u64 + 1).read_to_end(&mut bytes),
        _ => std::fs::File::open(path).and_then(|file| file.take(limit as u64 + 1).read_to_end(&mut bytes)),
    };
    read.map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    if bytes.len() > limit {
        return Err(Error::Io(format!("{}: a devfile is at most {limit} bytes", path.display())));
    }
    let text = crate::yaml::devfile_text(&bytes).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
    Ok(text.to_string())
}

/// A devfile as stored: as it is to a file or a pipe, each line made printable on a terminal.
fn print_devfile(devfile: &str) -> Result<()> {
    use std::io::{IsTerminal, Write};
    let mut out = std::io::stdout().lock();
    let written = if out.is_terminal() {
        devfile.lines().try_for_each(|line| writeln!(out, "{}", printable(line)))
    } else {
        out.write_all(devfile.as_bytes())
    };
    written.map_err(|e| Error::Io(e.to_string()))
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
