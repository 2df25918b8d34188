//! The control plane's records, as its pipeline and page see them: agents and workspaces.

use super::decisions::access::{Caller, Role, UserRef};
use crate::protocol::{ActualState, DesiredState, ImagePullSecret};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub id: String,
    pub image_pull_secrets: Vec<ImagePullSecret>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Workspace {
    pub agent_id: String,
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub env: BTreeMap<String, String>,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub desired_state_updated_at: i64,
    pub actual_state_updated_at: i64,
    pub deployment_resource_version: Option<String>,
    pub responded_to_agent_at: Option<i64>,
    pub force_include_all_resources: bool,
    pub last_reported_at: Option<i64>,
    pub error: Option<WorkspaceError>,
    pub created_at: i64,
    /// The agent's settings when this workspace was created: what its config is built from.
    /// Shared: an agent's workspaces nearly always hold the same settings.
    #[serde(default = "settings_before_they_existed")]
    pub agent_config: std::sync::Arc<crate::control_plane::decisions::agent_config::AgentConfig>,
    /// Whose it is: the name it was created for (GitLab's user), shown.
    #[serde(default)]
    pub owner: Option<String>,
    /// The owning user's id: who may see it, and whom `workspaces_per_user_quota` counts.
    /// None when its owner matched no user: then it is the admins' alone.
    #[serde(default)]
    pub owner_id: Option<String>,
    /// When it was last used through its hosts, the CLI's port forwarding or SSH (#39), in
    /// milliseconds; written at most once a minute.
    #[serde(default)]
    pub last_activity_at: Option<i64>,
    /// Its declared ports and where each is opened (#39): filled by the web layer as it
    /// answers, never stored.
    #[serde(default)]
    pub endpoints: Vec<Endpoint>,
    /// The devfile it was created from, flattened (#40); None for one created from an image.
    #[serde(skip)]
    pub devfile: Option<std::sync::Arc<crate::control_plane::decisions::devfile::model::Devfile>>,
    /// Its devfile's components, as the API and the page show them: filled as it answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<ComponentShown>,
}

/// One component of a workspace's devfile, as shown.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ComponentShown {
    pub name: String,
    /// `container` or `volume`.
    pub kind: String,
    /// A container's image, a volume's size.
    pub detail: String,
}

/// One declared port of a workspace, and its URL when `--workspaces-domain` names a domain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub port: u16,
    pub url: Option<String>,
}

fn settings_before_they_existed() -> std::sync::Arc<crate::control_plane::decisions::agent_config::AgentConfig> {
    crate::control_plane::decisions::agent_config::AgentConfig::before_settings().into()
}

impl Workspace {
    /// A workspace as the store creates it: desired Running, nothing reported yet.
    pub fn created(
        agent_id: &str,
        namespace: &str,
        new: NewWorkspace,
        agent_config: std::sync::Arc<crate::control_plane::decisions::agent_config::AgentConfig>,
        now: i64,
    ) -> Self {
        Self {
            agent_id: agent_id.into(),
            name: new.name,
            namespace: namespace.into(),
            image: new.image,
            cpu: new.cpu,
            memory: new.memory,
            env: new.env,
            desired_state: DesiredState::Running,
            actual_state: ActualState::CreationRequested,
            desired_state_updated_at: now,
            actual_state_updated_at: now,
            deployment_resource_version: None,
            responded_to_agent_at: None,
            force_include_all_resources: true,
            last_reported_at: None,
            error: None,
            created_at: now,
            agent_config,
            owner: new.owner,
            owner_id: new.owner_id,
            last_activity_at: None,
            endpoints: Vec::new(),
            devfile: new.devfile_accepted,
            components: Vec::new(),
        }
    }
}

impl WorkspaceError {
    /// What to do about it, when the table in `hints` knows.
    pub fn hint(&self) -> Option<&'static str> {
        super::decisions::hints::hint(&self.error_type, &self.message)
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkspaceError {
    pub error_type: String,
    pub message: String,
    pub first_seen: i64,
    pub last_seen: i64,
    /// The desired state when the error arrived; if it differs now, the error predates the change.
    pub desired_state: DesiredState,
}

/// An error a workspace had: what its history on the page shows.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ErrorRecord {
    pub name: String,
    pub error_type: String,
    pub message: String,
    pub first_seen: i64,
}

/// A workspace an agent reports that the control plane does not know: its database was
/// restored from an old backup, say. Never sent config; adopted or terminated by an operator.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Orphan {
    pub namespace: String,
    pub name: String,
    pub deployment_resource_version: Option<String>,
    /// As its last report shows it: what it is adopted with.
    pub actual_state: ActualState,
    pub first_seen: i64,
    pub last_seen: i64,
}

/// What an operator decides for an orphan.
#[derive(Debug, Clone)]
pub enum OrphanFate {
    /// It becomes a workspace, Running, with this image and the state it was last reported in.
    Adopt { image: String },
    /// It becomes a workspace to terminate: the agent deletes its namespace.
    Terminate,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct NewWorkspace {
    pub name: String,
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub owner: Option<String>,
    /// Set by the web layer from who is asking, never from a request's body.
    #[serde(skip)]
    pub owner_id: Option<String>,
    /// A devfile (#40), as the user wrote it: in place of `image`, which it gives.
    #[serde(default)]
    pub devfile: Option<String>,
    /// The devfile once accepted: set by the web layer, never from a request's body.
    #[serde(skip)]
    pub devfile_accepted: Option<std::sync::Arc<crate::control_plane::decisions::devfile::model::Devfile>>,
}

impl NewWorkspace {
    /// A workspace of this name and image, with nothing else set.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            image: image.into(),
            cpu: None,
            memory: None,
            env: BTreeMap::new(),
            owner: None,
            owner_id: None,
            devfile: None,
            devfile_accepted: None,
        }
    }
}

/// A signed-in browser's session: its CSRF token, and when it ends. The cookie that names it
/// is shown once, to the browser, and stored as its hash.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    pub csrf_token: String,
    pub expires_at: i64,
    /// Whose it is: a user, or the admin token's holder.
    pub caller: Caller,
}

/// A person: created by an admin (`wsync users create`, issuer `local`) or on their first
/// sign-in through the identity provider, and keyed by issuer and subject.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct User {
    pub id: String,
    pub issuer: String,
    pub subject: String,
    pub username: String,
    pub email: Option<String>,
    pub display_name: Option<String>,
    pub role: Role,
    pub created_at: i64,
    pub last_sign_in_at: Option<i64>,
    pub disabled_at: Option<i64>,
}

/// The issuer of users an admin creates.
pub const LOCAL_ISSUER: &str = "local";

impl User {
    pub fn reference(&self) -> UserRef {
        UserRef { id: self.id.clone(), username: self.username.clone(), role: self.role, token: None }
    }
}

/// A personal API token, as its list shows it: never the secret, which is shown once.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

/// One write, as the audit trail keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuditEvent {
    pub id: String,
    pub at: i64,
    /// The user's id; None for the admin token and for a sign-in that failed.
    pub actor_id: Option<String>,
    /// The username, `admin-token`, or what a failed sign-in was tried as.
    pub actor: String,
    pub action: String,
    /// `ok` or `refused`.
    pub outcome: String,
    pub agent_id: Option<String>,
    pub workspace: Option<String>,
    /// The client's address, as the front door decided it.
    pub client: String,
    pub detail: String,
}

/// Milliseconds since the epoch, strictly increasing within this process: "changed since the
/// agent last heard" compares these, and two writes in one millisecond must still be ordered.
pub fn now_ms() -> i64 {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let wall = jiff::Timestamp::now().as_millisecond();
    let previous = LAST
        .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |last| {
            Some(wall.max(last + 1))
        })
        .unwrap_or(wall);
    wall.max(previous + 1)
}

/// Where the store's timestamps come from: the system clock, or one a test sets. Every
/// timestamp the store writes or compares comes from one of these.
#[derive(Clone)]
pub struct Clock(std::sync::Arc<dyn Fn() -> i64 + Send + Sync>);

impl Clock {
    pub fn system() -> Self {
        Self(std::sync::Arc::new(now_ms))
    }

    /// A clock that reads `now` (milliseconds since the epoch), for tests.
    pub fn from_fn(now: impl Fn() -> i64 + Send + Sync + 'static) -> Self {
        Self(std::sync::Arc::new(now))
    }

    pub fn now(&self) -> i64 {
        (self.0)()
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Clock")
    }
}

/// A workspace's namespace: stable, and unique per agent and name.
pub fn workspace_namespace(agent_id: &str, name: &str) -> String {
    format!("wsync-{agent_id}-{name}")
}
