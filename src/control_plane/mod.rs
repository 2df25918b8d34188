//! The reference control plane (DESIGN §3): it plays GitLab Rails' part of the protocol.

pub mod decisions;
pub mod error;
pub mod http;
pub mod identity_provider;
pub mod model;
pub mod store;

use crate::protocol::Settings;
use crate::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
use crate::runtime::{parse_duration, read_secret_token_file, shutdown_signal};
use error::Error;
use identity_provider::IdentityProvider;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug, Clone)]
pub struct ControlPlaneArgs {
    /// Address to listen on.
    #[arg(long, env = "WSYNC_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// `sqlite://<path>` (created if missing) or `postgres://…`.
    #[arg(long, env = "WSYNC_DATABASE_URL", default_value = "sqlite://wsync-control-plane.db")]
    pub database_url: String,

    /// File holding the token that the management API and the page's sign-in require.
    /// Without it, the control plane generates one on first start, stores it hashed in its
    /// database, and prints it once.
    #[arg(long, env = "WSYNC_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    /// Replace the stored admin token with a new one, print it, and sign every session out:
    /// the way back in after losing it. (With --admin-token-file, replace the file's token:
    /// the next start signs every session out.)
    #[arg(long, conflicts_with = "admin_token_file")]
    pub new_admin_token: bool,

    /// PEM certificate chain to serve TLS with (with --tls-key-file).
    #[arg(long, env = "WSYNC_TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file.
    #[arg(long, env = "WSYNC_TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,

    /// Serve plain HTTP on an address that is not loopback (behind a proxy that terminates TLS).
    #[arg(long, env = "WSYNC_ALLOW_INSECURE_HTTP")]
    pub allow_insecure_http: bool,

    /// The URL browsers open, when a reverse proxy stands in front (one that terminates TLS,
    /// say): the page's origin, the session cookie's `Secure`, redirects and links follow it,
    /// and its host is one the control plane answers to.
    #[arg(long, env = "WSYNC_PUBLIC_URL")]
    pub public_url: Option<String>,

    /// `host[:port]` the page and the management API answer to, besides the loopback names
    /// when listening on loopback; repeatable. Without any, a non-loopback server answers to
    /// every Host.
    #[arg(long = "allowed-host", env = "WSYNC_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// Sign-in attempts a minute from one client address; an address whose attempts keep
    /// failing also waits longer after each failure, until one succeeds.
    #[arg(long, env = "WSYNC_SIGN_IN_ATTEMPTS_PER_MINUTE", default_value_t = http::state::SIGN_IN_ATTEMPTS_PER_ADDRESS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sign_in_attempts_per_minute: u32,

    /// Sign-in attempts a minute from everyone together.
    #[arg(long, env = "WSYNC_SIGN_IN_ATTEMPTS_PER_MINUTE_TOTAL", default_value_t = http::state::SIGN_IN_ATTEMPTS_TOTAL,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sign_in_attempts_per_minute_total: u32,

    /// The address of a reverse proxy in front of the control plane, whose X-Forwarded-For
    /// names the client (for the sign-in limits and the logs); repeatable.
    #[arg(long = "trusted-proxy", env = "WSYNC_TRUSTED_PROXIES", value_delimiter = ',')]
    pub trusted_proxies: Vec<std::net::IpAddr>,

    /// How long a signed-in page session lasts.
    #[arg(long, env = "WSYNC_SESSION_TTL", default_value = "12h", value_parser = parse_duration)]
    pub session_ttl: std::time::Duration,

    /// A request's head must arrive within this, and a kept-alive connection closes after
    /// this long idle; a TLS handshake too.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_timeout: std::time::Duration,

    /// An HTTP/2 connection (TLS only) with no request open closes, with a GOAWAY, after this
    /// long: answering the server's keep-alive pings does not hold it. Longer than any agent's
    /// partial interval, so that an agent's connection is not closed under its next request.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub http2_idle_timeout: std::time::Duration,

    /// A request's body must arrive within this.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub body_timeout: std::time::Duration,

    /// Open connections at most, shared by everyone; more wait in the listen backlog (past
    /// the agents' own, `--agent-connections`).
    #[arg(long, default_value_t = 1024)]
    pub max_connections: usize,

    /// Connections kept for agents beyond `--max-connections`: when everyone else holds the
    /// shared ones, a new connection serves only the agents' requests.
    #[arg(long, default_value_t = 64)]
    pub agent_connections: usize,

    /// Open connections one client address may hold, in the shared pool and in the agents'.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_address: u32,

    /// Requests one client address may have in flight, its agents' requests counted apart.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_requests_per_address: u32,

    /// The share of an agent's workspaces the lifecycle rules may terminate in one reconcile,
    /// in percent (at least one is always allowed); the rest wait for later reconciles.
    #[arg(long, env = "WSYNC_LIFECYCLE_MAX_TERMINATED_PERCENT", default_value_t = 10,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub lifecycle_max_terminated_percent: u8,

    #[arg(long, env = "WSYNC_FULL_RECONCILIATION_INTERVAL_SECONDS", default_value_t = 3600)]
    pub full_reconciliation_interval_seconds: u64,

    #[arg(long, env = "WSYNC_PARTIAL_RECONCILIATION_INTERVAL_SECONDS", default_value_t = 10)]
    pub partial_reconciliation_interval_seconds: u64,

    /// Stop a workspace that has run this long since its desired state last changed.
    #[arg(long, env = "WSYNC_MAX_RUNNING", default_value = "36h", value_parser = parse_duration)]
    pub max_running: std::time::Duration,

    /// Terminate a workspace that has been stopped this long.
    #[arg(long, env = "WSYNC_MAX_STOPPED", default_value = "744h", value_parser = parse_duration)]
    pub max_stopped: std::time::Duration,

    /// Label key that marks a workspace's objects with its agent id.
    #[arg(long, env = "WSYNC_WORKSPACE_LABEL_KEY", default_value = DEFAULT_WORKSPACE_LABEL_KEY)]
    pub workspace_label_key: String,

    /// A token Prometheus sends as its bearer token to scrape `/metrics`; without it, the
    /// control plane serves no metrics (they name every agent).
    #[arg(long, env = "WSYNC_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,

    /// The OpenID Provider people sign in with (its issuer URL, as its discovery document
    /// names it). Without it, an admin creates users (`wsync users create`).
    #[arg(long, env = "WSYNC_OIDC_ISSUER", requires_all = ["oidc_client_id", "oidc_client_secret_file"])]
    pub oidc_issuer: Option<String>,

    /// This control plane's client id at the provider. Its redirect URI there is
    /// `<--public-url, or http(s)://<--listen>>/sign-in/oidc/callback`.
    #[arg(long, env = "WSYNC_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,

    /// File holding the client secret.
    #[arg(long, env = "WSYNC_OIDC_CLIENT_SECRET_FILE")]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Scopes to ask for besides `openid`, `email` and `profile`; repeatable (the one that
    /// releases the groups claim, if the provider has one).
    #[arg(long = "oidc-scope", env = "WSYNC_OIDC_SCOPES", value_delimiter = ',')]
    pub oidc_scopes: Vec<String>,

    /// The ID token's claim that lists the user's groups.
    #[arg(long, env = "WSYNC_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,

    /// A group (a value of the groups claim) whose members are admins; decided at each
    /// sign-in. Without it, nobody signing in through the provider is an admin.
    #[arg(long, env = "WSYNC_OIDC_ADMIN_GROUP")]
    pub oidc_admin_group: Option<String>,

    /// How often an agent's tunnel checks that the token it opened with still signs for the
    /// agent, and a stream to a workspace that its caller still may open it: a revoked token,
    /// a sign-out or a disabled user closes them within this.
    #[arg(long, env = "WSYNC_TUNNEL_RECHECK", default_value = "30s", value_parser = parse_duration)]
    pub tunnel_recheck: std::time::Duration,

    /// The domain whose wildcard points at this control plane: port P of workspace W of
    /// agent A is served at `P-W-<tag of A>.<domain>` (#39), e.g. `workspaces.example.com`
    /// (TLS from a wildcard certificate given with --tls-cert-file), or `ws.localhost` on one
    /// machine. Without it, workspaces are not opened through the control plane.
    #[arg(long, env = "WSYNC_WORKSPACES_DOMAIN")]
    pub workspaces_domain: Option<String>,

    /// Where the other control-plane processes on this database reach this one (e.g.
    /// `http://$(POD_IP):8080`): a process without an agent's tunnel forwards a stream
    /// through the one that holds it. Without it, this process forwards nothing.
    #[arg(long, env = "WSYNC_ADVERTISE_URL")]
    pub advertise_url: Option<String>,

    /// The secret every control-plane process on this database shares (a mounted Secret),
    /// which signs the streams they forward to each other; with --advertise-url.
    #[arg(long, env = "WSYNC_FORWARD_SECRET_FILE")]
    pub forward_secret_file: Option<PathBuf>,

    /// Streams to workspaces one user may hold open at once, in this process (requests in
    /// flight, WebSockets, SSH and port-forward connections).
    #[arg(long, env = "WSYNC_STREAMS_PER_USER", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams_per_user: u32,

    /// Streams one workspace may have open at once, in this process.
    #[arg(long, env = "WSYNC_STREAMS_PER_WORKSPACE", default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams_per_workspace: u32,

    /// A stream to a workspace that moves no byte either way for this long is closed.
    #[arg(long, env = "WSYNC_STREAM_IDLE_TIMEOUT", default_value = "1h", value_parser = parse_duration)]
    pub stream_idle_timeout: std::time::Duration,

    /// The image that clones a devfile's projects into a new workspace: any image with `git`
    /// and a shell. Frozen into each workspace when it is created.
    #[arg(long, env = "WSYNC_PROJECT_CLONER_IMAGE", default_value = decisions::config_builder::DEFAULT_PROJECT_CLONER_IMAGE)]
    pub project_cloner_image: String,

    /// How long the audit trail keeps an entry; older ones are pruned every hour.
    #[arg(long, env = "WSYNC_AUDIT_RETENTION", default_value = "2160h", value_parser = parse_duration)]
    pub audit_retention: std::time::Duration,

    /// Test builds only: arm this failpoint (`runtime::failpoint`).
    #[arg(long, hide = true)]
    pub failpoint: Option<String>,
}

pub async fn run(args: ControlPlaneArgs) -> Result<(), Error> {
    if let Some(name) = &args.failpoint {
        crate::runtime::failpoint::arm(name);
    }
    let settings = Settings {
        full_reconciliation_interval_seconds: args.full_reconciliation_interval_seconds,
        partial_reconciliation_interval_seconds: args.partial_reconciliation_interval_seconds,
    };
    settings.validate().map_err(Error::Settings)?;
    let tls = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => Some(http::server::tls_config(cert, key)?),
        _ => None,
    };
    if tls.is_none() && !args.listen.ip().is_loopback() && !args.allow_insecure_http {
        return Err(Error::InsecureListen { address: args.listen });
    }
    let store = store::Store::connect(&args.database_url)
        .await
        .map_err(|source| Error::Database { url: redact(&args.database_url), source })?;
    let admin = match args.admin_token_file.as_deref() {
        Some(path) => http::AdminCredential::token(&read_secret_token_file(path)?),
        None => {
            let generated = store
                .ensure_admin_token(args.new_admin_token)
                .await
                .map_err(|source| Error::Database { url: redact(&args.database_url), source })?;
            if let Some(token) = generated {
                // On stdout, once, as `agents register` shows an agent's token; never logged.
                println!("admin token (shown once; sign in with it, or give it to the CLI): {token}");
            }
            http::AdminCredential::Stored
        }
    };
    let file_token_hash = match &admin {
        http::AdminCredential::File { hash } => Some(hash.as_str()),
        http::AdminCredential::Stored => None,
    };
    let signed_out = store
        .admin_credential_in_use(file_token_hash)
        .await
        .map_err(|source| Error::Database { url: redact(&args.database_url), source })?;
    if signed_out {
        tracing::info!("the admin credential changed since the last start; its sessions are signed out");
    }
    let millis = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let public_url =
        args.public_url.as_deref().map(http::front_door::PublicUrl::parse).transpose().map_err(Error::PublicUrl)?;
    let mut allowed_hosts = http::front_door::loopback_hosts(args.listen);
    allowed_hosts.extend(args.allowed_hosts.iter().map(|h| h.to_ascii_lowercase()));
    allowed_hosts.extend(public_url.as_ref().map(|public| public.authority.clone()));
    let pipeline = decisions::pipeline::PipelineConfig {
        settings,
        lifecycle: decisions::rules::Lifecycle {
            max_running_ms: millis(args.max_running),
            max_stopped_ms: millis(args.max_stopped),
            max_terminated_percent: args.lifecycle_max_terminated_percent,
        },
        label_key: args.workspace_label_key.clone(),
    };
    let own_origin = match &public_url {
        Some(public) => public.origin.clone(),
        None => format!("{scheme}://{}", args.listen),
    };
    let identity_provider = identity_provider(&args, &own_origin)?;
    let workspace_hosts =
        args.workspaces_domain.as_deref().map(|d| http::workspace_access::WorkspaceHosts::new(d, &own_origin));
    let workspace_hosts = workspace_hosts.transpose().map_err(Error::WorkspacesDomain)?.map(Arc::new);
    let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    let limits = (count(args.streams_per_user), count(args.streams_per_workspace), args.stream_idle_timeout);
    let streams = http::workspace_access::WorkspaceStreams::new(limits, args.tunnel_recheck, store.clone());
    let state = Arc::new(http::AppState {
        identity_provider,
        audit_retention_ms: millis(args.audit_retention),
        project_cloner_image: args.project_cloner_image.clone(),
        tunnel_recheck: args.tunnel_recheck.max(std::time::Duration::from_millis(100)),
        workspace_hosts,
        streams: Arc::new(streams),
        broker: Arc::new(
            http::tunnel_broker::Broker::configured(args.advertise_url.clone(), args.forward_secret_file.as_deref())
                .map_err(Error::AdvertiseUrl)?,
        ),
        door: http::front_door::FrontDoor {
            allowed_hosts,
            scheme,
            public_origin: public_url.as_ref().map(|public| public.origin.clone()),
        },
        session_ttl_ms: millis(args.session_ttl),
        sign_in_limits: http::sign_in_limits::SignInLimits::new(
            std::num::NonZeroU32::new(args.sign_in_attempts_per_minute).unwrap_or(std::num::NonZeroU32::MIN),
            std::num::NonZeroU32::new(args.sign_in_attempts_per_minute_total).unwrap_or(std::num::NonZeroU32::MIN),
        ),
        metrics_token: match args.metrics_token_file.as_deref() {
            Some(path) => Some(store::hash_token(&read_secret_token_file(path).map_err(Error::MetricsToken)?)),
            None => None,
        },
        ..http::AppState::new(store, pipeline, admin)
    });
    tokio::spawn(state.store.clone().prune_every_hour(state.audit_retention_ms));
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Error::Listen { address: args.listen, source })?;
    tracing::info!(listen = %args.listen, %scheme, database = %redact(&args.database_url), "control plane serving");
    let options = http::server::ServeOptions {
        tls,
        header_timeout: args.header_timeout,
        http2_idle_timeout: args.http2_idle_timeout,
        limits: http::connection_limits::Limits {
            max_connections: args.max_connections,
            agent_connections: args.agent_connections,
            connections_per_address: usize::try_from(args.max_connections_per_address).unwrap_or(usize::MAX),
            requests_per_address: usize::try_from(args.max_requests_per_address).unwrap_or(usize::MAX),
        },
        agent_paths: vec![
            state.reconcile_path.clone(),
            state.prerequisites_path.clone(),
            crate::tunnel::TUNNEL_PATH.to_string(),
        ],
        trusted_proxies: args.trusted_proxies.clone(),
        workspaces_domain: state.workspace_hosts.as_ref().map(|hosts| hosts.domain.clone()),
    };
    http::server::serve(listener, http::router(state, args.body_timeout), options, shutdown_signal()).await
}

/// The identity provider `--oidc-*` configure, if any. Its discovery waits for the first
/// sign-in: a provider that is down does not stop the control plane.
fn identity_provider(args: &ControlPlaneArgs, own_origin: &str) -> Result<Option<Arc<IdentityProvider>>, Error> {
    let (Some(issuer), Some(client_id), Some(secret_file)) =
        (&args.oidc_issuer, &args.oidc_client_id, &args.oidc_client_secret_file)
    else {
        return Ok(None);
    };
    let client_secret = crate::runtime::read_token_file(secret_file)
        .map_err(|e| Error::IdentityProvider(format!("--oidc-client-secret-file: {e}")))?;
    // The provider sends browsers back to one URL; without --public-url that is the listen
    // address, which must be one a browser can open.
    if args.public_url.is_none() && !(args.listen.ip().is_loopback()) {
        return Err(Error::IdentityProvider(
            "--oidc-issuer needs --public-url (the URL browsers open) when not listening on loopback".into(),
        ));
    }
    let issuer_url = url::Url::parse(issuer).map_err(|e| Error::IdentityProvider(format!("--oidc-issuer: {e}")))?;
    let loopback = matches!(issuer_url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    if issuer_url.scheme() != "https" && !loopback {
        return Err(Error::IdentityProvider(format!(
            "--oidc-issuer {issuer}: the client secret and codes would cross the network in clear; use https"
        )));
    }
    let mut scopes = vec!["email".to_string(), "profile".to_string()];
    for scope in &args.oidc_scopes {
        if scope != "openid" && !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    let config = identity_provider::ProviderConfig {
        issuer: issuer.clone(),
        client_id: client_id.clone(),
        client_secret,
        redirect_url: format!("{own_origin}{}", http::sign_in_oidc::CALLBACK_PATH),
        scopes,
        groups_claim: args.oidc_groups_claim.clone(),
        admin_group: args.oidc_admin_group.clone(),
    };
    tracing::info!(issuer = %config.issuer, redirect = %config.redirect_url, "signing people in through the identity provider");
    let provider = IdentityProvider::new(config).map_err(|e| Error::IdentityProvider(e.to_string()))?;
    Ok(Some(Arc::new(provider)))
}

/// A database URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_string(),
    }
}
