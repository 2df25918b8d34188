//! `kubectl wsync`: the agents' sync state as their WorkspaceSyncStatus and the cluster hold
//! it, for an operator with a kubeconfig (the `kubectl-wsync` binary). It reads the cluster
//! only, besides `resync`, which sets one annotation; it never talks to a control plane.

pub mod view;

use crate::crd::{RESYNC_REQUESTED_ANNOTATION, WorkspaceSyncStatus};
use crate::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, ResourceExt};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[derive(clap::Parser, Debug)]
#[command(name = "kubectl-wsync", version, about = "The wsync agents' sync state, from the cluster")]
pub struct Args {
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The agents' namespace, where their WorkspaceSyncStatus objects live.
    #[arg(short = 'n', long, global = true, default_value = "wsync-system")]
    pub namespace: String,
    /// The label that marks a workspace's Deployment with its agent id.
    #[arg(long, global = true, default_value = DEFAULT_WORKSPACE_LABEL_KEY)]
    pub label_key: String,
    /// Output format.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq)]
pub enum Output {
    Table,
    Wide,
    Json,
    Yaml,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Conditions, intervals, last and next full sync, and counts, per agent.
    Status { agent: Option<String> },
    /// One row per workspace: in sync or behind, termination, pending error.
    Workspaces { agent: Option<String> },
    /// Request a full resync and wait until the agent has run it.
    Resync {
        agent: String,
        /// How long to wait for the full cycle.
        #[arg(long, default_value = "5m", value_parser = crate::runtime::parse_duration)]
        timeout: Duration,
    },
    /// The errors the control plane has not acknowledged.
    Errors { agent: Option<String> },
}

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("{0}")]
    Kube(#[from] kube::Error),
    #[error("no WorkspaceSyncStatus {agent:?} in namespace {namespace:?} (kubectl get wss -A lists them)")]
    NoAgent { agent: String, namespace: String },
    #[error("the agent did not run the requested full resync within {0:?}; is it running and leading?")]
    ResyncTimeout(Duration),
    #[error("encoding the output: {0}")]
    Encode(String),
}

pub async fn run(args: Args) -> Result<String, Error> {
    let client = client(&args).await?;
    let api: Api<WorkspaceSyncStatus> = Api::namespaced(client.clone(), &args.namespace);
    let now = jiff::Timestamp::now();
    let wide = args.output == Output::Wide;
    match &args.command {
        Command::Status { agent } => {
            let failures = status_write_failures(&client, &args.namespace).await?;
            let statuses: Vec<_> = agents(&api, agent.as_deref(), &args.namespace)
                .await?
                .iter()
                .map(|wss| {
                    let failure = failures.get(&wss.name_any()).cloned();
                    view::with_status_write_failure(view::agent_status(wss), wss, failure)
                })
                .collect();
            render(args.output, &statuses, || view::status_table(&statuses, wide))
        }
        Command::Workspaces { agent } => {
            let mut rows = Vec::new();
            for wss in agents(&api, agent.as_deref(), &args.namespace).await? {
                let deployments = deployments(&client, &args.label_key, &wss.spec.agent_id).await?;
                rows.extend(view::workspaces(&wss, &deployments, now));
            }
            render(args.output, &rows, || view::workspaces_table(&rows, wide))
        }
        Command::Errors { agent } => {
            let rows: Vec<_> = agents(&api, agent.as_deref(), &args.namespace)
                .await?
                .iter()
                .flat_map(|w| view::errors(w, now))
                .collect();
            render(args.output, &rows, || view::errors_table(&rows, wide))
        }
        Command::Resync { agent, timeout } => resync(&api, agent, &args.namespace, *timeout).await,
    }
}

async fn client(args: &Args) -> Result<Client, Error> {
    let options = KubeConfigOptions { context: args.context.clone(), ..Default::default() };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(e.to_string()))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| Error::Kubeconfig(e.to_string()))?;
    Ok(Client::try_from(config)?)
}

/// Each agent's newest `StatusWriteFailed` Event, by its WorkspaceSyncStatus's name: what the
/// agent says when the status itself cannot be written.
async fn status_write_failures(
    client: &Client,
    namespace: &str,
) -> Result<BTreeMap<String, view::StatusWriteFailure>, Error> {
    use k8s_openapi::api::core::v1::Event;
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let reason = crate::crd::EVENT_STATUS_WRITE_FAILED;
    let params = ListParams::default().fields(&format!("reason={reason},involvedObject.kind=WorkspaceSyncStatus"));
    let mut newest: BTreeMap<String, view::StatusWriteFailure> = BTreeMap::new();
    let events = match api.list(&params).await {
        Ok(events) => events.items,
        // One who may not read Events still sees the status itself.
        Err(kube::Error::Api(status)) if status.code == 403 => return Ok(newest),
        Err(error) => return Err(error.into()),
    };
    for event in events {
        let at = event.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).or(event.event_time.as_ref());
        let at = at.map(|t| t.0);
        let at = at.or(event.last_timestamp.as_ref().map(|t| t.0));
        let (Some(agent), Some(at)) = (event.involved_object.name.clone(), at) else { continue };
        let note = event.message.clone().unwrap_or_default();
        if newest.get(&agent).is_none_or(|seen| seen.at < at) {
            newest.insert(agent, view::StatusWriteFailure { at, note });
        }
    }
    Ok(newest)
}

/// One agent's WorkspaceSyncStatus, or every one in the namespace.
async fn agents(
    api: &Api<WorkspaceSyncStatus>,
    agent: Option<&str>,
    namespace: &str,
) -> Result<Vec<WorkspaceSyncStatus>, Error> {
    match agent {
        Some(agent) => match api.get_opt(agent).await? {
            Some(wss) => Ok(vec![wss]),
            None => Err(Error::NoAgent { agent: agent.into(), namespace: namespace.into() }),
        },
        None => Ok(api.list(&ListParams::default()).await?.items),
    }
}

/// The agent's labelled Deployments: `"<namespace>/<name>"` → resourceVersion.
async fn deployments(client: &Client, label_key: &str, agent: &str) -> Result<BTreeMap<String, String>, Error> {
    let api: Api<Deployment> = Api::all(client.clone());
    let listed = api.list_metadata(&ListParams::default().labels(&format!("{label_key}={agent}"))).await?;
    Ok(listed
        .items
        .into_iter()
        .map(|d| {
            (
                format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any()),
                d.resource_version().unwrap_or_default(),
            )
        })
        .collect())
}

fn render<T: serde::Serialize>(output: Output, rows: &T, table: impl FnOnce() -> String) -> Result<String, Error> {
    match output {
        Output::Table | Output::Wide => Ok(table()),
        Output::Json => serde_json::to_string_pretty(rows).map(|s| s + "\n").map_err(|e| Error::Encode(e.to_string())),
        Output::Yaml => crate::yaml::to_string(rows).map_err(|e| Error::Encode(e.to_string())),
    }
}

/// Set the resync annotation to a new value and wait until a full cycle has handled it,
/// saying how long it has waited every few seconds (on stderr: stdout is the result).
async fn resync(
    api: &Api<WorkspaceSyncStatus>,
    agent: &str,
    namespace: &str,
    timeout: Duration,
) -> Result<String, Error> {
    if api.get_opt(agent).await?.is_none() {
        return Err(Error::NoAgent { agent: agent.into(), namespace: namespace.into() });
    }
    let request = format!("kubectl-wsync-{}", jiff::Timestamp::now().as_millisecond());
    let patch = serde_json::json!({ "metadata": { "annotations": { RESYNC_REQUESTED_ANNOTATION: request } } });
    api.patch(agent, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    eprintln!("requested a full resync of agent {agent} ({request}); waiting for it");
    let started = Instant::now();
    let mut said = Instant::now();
    while started.elapsed() < timeout {
        let wss = api.get(agent).await?;
        let status = wss.status.unwrap_or_default();
        if status.last_handled_resync_request.as_deref() == Some(request.as_str()) {
            let last = status.last_full_sync_time.map_or("-".into(), |t| t.0.to_string());
            return Ok(format!(
                "agent {agent}: full resync done in {:.1}s (last full sync {last}, {} workspaces, {} failing)\n",
                started.elapsed().as_secs_f64(),
                status.workspaces,
                status.error_count
            ));
        }
        if said.elapsed() >= Duration::from_secs(3) {
            eprintln!("  still waiting for the full cycle ({:.0}s)", started.elapsed().as_secs_f64());
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(Error::ResyncTimeout(timeout))
}
