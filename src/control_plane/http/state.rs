//! What the web layer's routes share, below them all: the state, the error answer, the
//! agents' authentication, and the front door's middleware.

use super::front_door::{FrontDoor, Route};
use super::server::ClientAddress;
use super::sign_in_limits::{SignInLimits, TooMany};
use crate::control_plane::decisions::pipeline::PipelineConfig;
use crate::control_plane::identity_provider::IdentityProvider;
use crate::control_plane::model::Agent;
use crate::control_plane::store::{Store, StoreError, hash_token, same_secret};
use crate::protocol::ErrorBody;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;

/// Who may use the management API and sign in to the page.
#[derive(Debug, Clone)]
pub enum AdminCredential {
    /// The token in `--admin-token-file`, as its SHA-256.
    File { hash: String },
    /// The token generated on first start and stored, hashed, in the database.
    Stored,
}

impl AdminCredential {
    pub fn token(token: &str) -> Self {
        Self::File { hash: hash_token(token) }
    }
}

pub struct AppState {
    pub store: Store,
    pub pipeline: PipelineConfig,
    pub admin: AdminCredential,
    pub door: FrontDoor,
    /// How long a page session lasts.
    pub session_ttl_ms: i64,
    pub reconcile_path: String,
    pub prerequisites_path: String,
    pub metrics: super::metrics::Metrics,
    /// The SHA-256 of the token `/metrics` wants; None serves no metrics.
    pub metrics_token: Option<String>,
    /// How fast anyone may try to sign in.
    pub sign_in_limits: SignInLimits,
    /// The identity provider people sign in with, when `--oidc-issuer` names one.
    pub identity_provider: Option<Arc<IdentityProvider>>,
    /// The audit trail's retention: what `prune` keeps.
    pub audit_retention_ms: i64,
    /// The agents' tunnels this process holds.
    pub tunnels: super::tunnels::Tunnels,
    /// How often a tunnel's token is checked again.
    pub tunnel_recheck: std::time::Duration,
    /// The workspaces' hosts, when `--workspaces-domain` names their domain.
    pub workspace_hosts: Option<Arc<super::workspace_access::WorkspaceHosts>>,
    /// This process as its peers reach it: streams through another process's tunnel.
    pub broker: Arc<super::tunnel_broker::Broker>,
    /// The streams to workspaces, through their hosts and the CLI: limits and activity.
    pub streams: Arc<super::workspace_access::WorkspaceStreams>,
    /// The image new workspaces clone their devfile's projects with.
    pub project_cloner_image: String,
}

/// Sign-in attempts a minute, per client address and for everyone, by default.
pub const SIGN_IN_ATTEMPTS_PER_ADDRESS: u32 = 10;
pub const SIGN_IN_ATTEMPTS_TOTAL: u32 = 120;

impl AppState {
    /// A state on the protocol's standard paths, with a 12-hour session, answering to any Host.
    pub fn new(store: Store, pipeline: PipelineConfig, admin: AdminCredential) -> Self {
        Self {
            pipeline,
            admin,
            door: FrontDoor { allowed_hosts: Vec::new(), scheme: "http", public_origin: None },
            session_ttl_ms: 12 * 3_600_000,
            reconcile_path: crate::protocol::RECONCILE_PATH.into(),
            prerequisites_path: crate::protocol::PREREQUISITES_PATH.into(),
            metrics: super::metrics::Metrics::default(),
            metrics_token: None,
            sign_in_limits: SignInLimits::new(
                NonZeroU32::new(SIGN_IN_ATTEMPTS_PER_ADDRESS).unwrap_or(NonZeroU32::MIN),
                NonZeroU32::new(SIGN_IN_ATTEMPTS_TOTAL).unwrap_or(NonZeroU32::MIN),
            ),
            identity_provider: None,
            audit_retention_ms: 90 * 86_400_000,
            tunnels: super::tunnels::Tunnels::default(),
            tunnel_recheck: std::time::Duration::from_secs(30),
            workspace_hosts: None,
            broker: Arc::new(super::tunnel_broker::Broker::alone()),
            streams: Arc::new(super::workspace_access::WorkspaceStreams::new(
                (512, 256, std::time::Duration::from_secs(3600)),
                std::time::Duration::from_secs(30),
                store.clone(),
            )),
            project_cloner_image: crate::control_plane::decisions::config_builder::DEFAULT_PROJECT_CLONER_IMAGE.into(),
            store,
        }
    }

    /// `path` as the browser should be sent to it: absolute under `--public-url` when given.
    pub fn link(&self, path: &str) -> String {
        match &self.door.public_origin {
            Some(origin) => format!("{origin}{path}"),
            None => path.to_string(),
        }
    }

    /// The client a request is from, as the accept loop decided it ([`ClientAddress`]);
    /// unspecified when the request came in process, with no connection.
    pub fn client(&self, extensions: &axum::http::Extensions) -> IpAddr {
        extensions.get::<ClientAddress>().map_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), |client| client.0)
    }

    /// A sign-in refused by its limits: logged, counted, and how long to wait.
    pub fn refused_sign_in(
        &self,
        refused: TooMany,
        client: IpAddr,
        what: &str,
    ) -> (StatusCode, [(HeaderName, String); 1]) {
        let retry_after = refused.retry_after_seconds();
        tracing::warn!(%client, limit = refused.limit.label(), retry_after, what, "a sign-in was refused: too many attempts");
        self.metrics.sign_in_refused(refused.limit.label());
        (StatusCode::TOO_MANY_REQUESTS, [(axum::http::header::RETRY_AFTER, retry_after.to_string())])
    }

    /// Whether the sign-in page offers an identity provider.
    pub fn signs_in_with_provider(&self) -> bool {
        self.identity_provider.is_some()
    }

    /// Whether `token` is the admin token.
    pub async fn is_admin(&self, token: &str) -> Result<bool, ApiError> {
        Ok(match &self.admin {
            AdminCredential::File { hash } => same_secret(hash, &hash_token(token)),
            AdminCredential::Stored => self.store.is_admin_token(token).await?,
        })
    }
}

/// The largest body of a management request or a page form.
pub const MAX_MANAGEMENT_BODY_BYTES: usize = 64 * 1024;
/// A workspace's creation, which may carry a devfile: room for the largest one accepted
/// ([`crate::yaml::MAX_DEVFILE_BYTES`]) encoded, and for a larger one to be refused in words.
pub const MAX_CREATE_BODY_BYTES: usize = 4 * 1024 * 1024;

pub const API: u8 = 0;
pub const PAGE: u8 = 1;

/// The front door ([`FrontDoor::judge`]) for a router of one [`Route`] kind.
pub async fn front_door<const ROUTE: u8>(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = if ROUTE == PAGE { Route::Page } else { Route::Api };
    let authority = request.uri().authority().map(|a| a.as_str());
    match state.door.judge(route, request.method(), authority, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::info!(method = %request.method(), path = %request.uri().path(), ?refusal, "refused at the front door");
            ApiError(refusal.status(), refusal.message().into()).into_response()
        }
    }
}

/// An error answer: its status and `{"error": …}`.
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(message) => ApiError(StatusCode::CONFLICT, message),
            // Names are shared by everyone on an agent: a taken one says no more than that.
            StoreError::NameTaken(name) => ApiError(
                StatusCode::CONFLICT,
                format!(
                    "the name {name:?} is taken: workspace names are shared by every user of an agent, and of the \
                     agents that share its namespace; choose another"
                ),
            ),
            // Transient for the caller, who retries; /healthz names the cause.
            StoreError::Writer(reason) => {
                tracing::error!(%reason, "the database writer failed");
                ApiError(StatusCode::SERVICE_UNAVAILABLE, "the database writer is unavailable; retry".into())
            }
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
            }
        }
    }
}

pub type ApiResult = Result<Response, ApiError>;

pub fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

pub fn not_found(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, message.into())
}

pub fn no_agent(agent: &str) -> ApiError {
    not_found(format!("no agent {agent:?}"))
}

pub fn unauthorized() -> ApiError {
    ApiError(StatusCode::UNAUTHORIZED, "unauthorized".into())
}

pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid payload: {e}")))
}

pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get("authorization")?.to_str().ok()?.strip_prefix("Bearer ")
}

/// 401 for a missing or unknown token, the same either way: it never says whether an agent exists.
pub async fn authenticate_agent(state: &AppState, headers: &HeaderMap) -> Result<Agent, ApiError> {
    let token = bearer(headers).ok_or_else(unauthorized)?;
    state.store.agent_by_token(token).await?.ok_or_else(unauthorized)
}

pub async fn exists(state: &AppState, agent: &str) -> Result<(), ApiError> {
    if state.store.agent_exists(agent).await? { Ok(()) } else { Err(no_agent(agent)) }
}

/// `?after=<name>&limit=<n>`: one page of workspaces in name order.
#[derive(serde::Deserialize, Default)]
pub struct PageQuery {
    #[serde(default)]
    pub after: String,
    pub limit: Option<usize>,
}
