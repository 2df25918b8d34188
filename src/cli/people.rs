//! `wsync users …`, `wsync tokens …`, `wsync audit` and `wsync whoami`: people, their tokens
//! and the audit trail, through the control plane's JSON API.

use super::client::{Error, Output, Result, ServerArgs, call, segment};
use crate::terminal::printable;
use serde_json::Value;

#[derive(clap::Subcommand, Debug, Clone)]
pub enum UsersCommand {
    /// Create a user (no identity provider needed); prints their first token once.
    Create {
        username: String,
        /// Make them an admin.
        #[arg(long)]
        admin: bool,
        /// How long the first token lives, in days (1 to 366).
        #[arg(long, default_value_t = 30)]
        token_days: u32,
    },
    List,
    /// End their sessions now and refuse their tokens until enabled again.
    Disable {
        username: String,
    },
    Enable {
        username: String,
    },
    /// Delete a user, their sessions and tokens; their workspaces stay, the admins'.
    Delete {
        username: String,
    },
}

#[derive(clap::Subcommand, Debug, Clone)]
pub enum TokensCommand {
    /// Create a personal API token; prints it once.
    Create {
        name: String,
        /// Days until it expires (1 to 366).
        #[arg(long, default_value_t = 30)]
        days: u32,
    },
    List,
    Revoke {
        id: String,
    },
}

/// `wsync audit`'s filters.
#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Only this user's entries (admins).
    #[arg(long)]
    pub user: Option<String>,
    #[arg(long)]
    pub agent: Option<String>,
    #[arg(long)]
    pub workspace: Option<String>,
    /// How many entries, newest first.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
}

fn print_json(answer: &Value) {
    println!("{}", serde_json::to_string_pretty(answer).unwrap_or_default());
}

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap_or("")
}

fn when(value: &Value) -> String {
    value.as_i64().and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok()).map(|t| t.to_string()).unwrap_or_default()
}

pub async fn users(server: &ServerArgs, command: UsersCommand) -> Result<()> {
    let post = reqwest::Method::POST;
    let answer = match &command {
        UsersCommand::Create { username, admin, token_days } => {
            let body = serde_json::json!({ "username": username, "admin": admin, "token_days": token_days });
            call(server, post, "api/v1/users", Some(body)).await?
        }
        UsersCommand::List => call(server, reqwest::Method::GET, "api/v1/users", None).await?,
        UsersCommand::Disable { username } => {
            call(server, post, &format!("api/v1/users/{}/disable", segment(username)), None).await?
        }
        UsersCommand::Enable { username } => {
            call(server, post, &format!("api/v1/users/{}/enable", segment(username)), None).await?
        }
        UsersCommand::Delete { username } => {
            call(server, reqwest::Method::DELETE, &format!("api/v1/users/{}", segment(username)), None).await?
        }
    };
    if server.output == Output::Json {
        print_json(&answer);
        return Ok(());
    }
    match command {
        UsersCommand::Create { username, .. } => {
            println!("user {} created; their sign-in token (shown once):", printable(&username));
            println!("{}", text(&answer, "token"));
            if let Some(claimed) = answer["claimed_workspaces"].as_u64().filter(|n| *n > 0) {
                println!(
                    "{claimed} workspaces created for {} before users existed are now theirs",
                    printable(&username)
                );
            }
        }
        UsersCommand::List => {
            let Value::Array(users) = answer else { return Err(Error::UnexpectedAnswer("a list is an array".into())) };
            println!("{:<24} {:<6} {:<9} {:<32} ISSUER", "USERNAME", "ROLE", "STATE", "EMAIL");
            for u in users {
                let state = if u["disabled_at"].is_null() { "active" } else { "disabled" };
                println!(
                    "{:<24} {:<6} {:<9} {:<32} {}",
                    printable(text(&u, "username")),
                    printable(text(&u, "role")),
                    state,
                    printable(text(&u, "email")),
                    printable(text(&u, "issuer"))
                );
            }
        }
        UsersCommand::Disable { username } => {
            println!("user {}: disabled; their sessions ended and their tokens are refused", printable(&username))
        }
        UsersCommand::Enable { username } => println!("user {}: enabled", printable(&username)),
        UsersCommand::Delete { username } => println!("user {}: deleted", printable(&username)),
    }
    Ok(())
}

pub async fn tokens(server: &ServerArgs, command: TokensCommand) -> Result<()> {
    let answer = match &command {
        TokensCommand::Create { name, days } => {
            let body = serde_json::json!({ "name": name, "days": days });
            call(server, reqwest::Method::POST, "api/v1/tokens", Some(body)).await?
        }
        TokensCommand::List => call(server, reqwest::Method::GET, "api/v1/tokens", None).await?,
        TokensCommand::Revoke { id } => {
            call(server, reqwest::Method::POST, &format!("api/v1/tokens/{}/revoke", segment(id)), None).await?
        }
    };
    if server.output == Output::Json {
        print_json(&answer);
        return Ok(());
    }
    match command {
        TokensCommand::Create { name, .. } => {
            println!("token {} created (shown once):", printable(&name));
            println!("{}", text(&answer, "token"));
        }
        TokensCommand::List => {
            let Value::Array(tokens) = answer else { return Err(Error::UnexpectedAnswer("a list is an array".into())) };
            println!("{:<50} {:<30} {:<26} STATE", "ID", "NAME", "EXPIRES");
            for t in tokens {
                let state = if t["revoked_at"].is_null() { "" } else { "revoked" };
                let name = printable(text(&t, "name"));
                println!("{:<50} {:<30} {:<26} {state}", printable(text(&t, "id")), name, when(&t["expires_at"]));
            }
        }
        TokensCommand::Revoke { id } => println!("token {}: revoked", printable(&id)),
    }
    Ok(())
}

pub async fn audit(server: &ServerArgs, args: AuditArgs) -> Result<()> {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", &args.limit.to_string());
    for (key, value) in [("user", &args.user), ("agent", &args.agent), ("workspace", &args.workspace)] {
        if let Some(value) = value {
            query.append_pair(key, value);
        }
    }
    let answer = call(server, reqwest::Method::GET, &format!("api/v1/audit?{}", query.finish()), None).await?;
    if server.output == Output::Json {
        print_json(&answer);
        return Ok(());
    }
    let Value::Array(events) = answer else { return Err(Error::UnexpectedAnswer("a list is an array".into())) };
    println!("{:<30} {:<20} {:<24} {:<8} {:<30} {:<16} DETAIL", "WHEN", "WHO", "WHAT", "OUTCOME", "TARGET", "FROM");
    for e in events {
        let target =
            [text(&e, "agent_id"), text(&e, "workspace")].into_iter().filter(|s| !s.is_empty()).collect::<Vec<_>>();
        println!(
            "{:<30} {:<20} {:<24} {:<8} {:<30} {:<16} {}",
            when(&e["at"]),
            printable(text(&e, "actor")),
            printable(text(&e, "action")),
            printable(text(&e, "outcome")),
            printable(&target.join("/")),
            printable(text(&e, "client")),
            printable(text(&e, "detail"))
        );
    }
    Ok(())
}

pub async fn whoami(server: &ServerArgs) -> Result<()> {
    let answer = call(server, reqwest::Method::GET, "api/v1/whoami", None).await?;
    match server.output {
        Output::Json => print_json(&answer),
        Output::Table => match answer["username"].as_str() {
            Some(user) => println!("{} ({})", printable(user), printable(text(&answer, "role"))),
            None => println!("the admin token"),
        },
    }
    Ok(())
}
