//! `wsync control-plane`'s flags: serving, or with a subcommand, the database's upkeep.

use super::{decisions, http, maintenance};
use crate::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
use crate::runtime::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Serve (no subcommand), or back the database up or restore it.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ControlPlaneCommand {
    #[command(subcommand)]
    pub maintenance: Option<maintenance::Maintenance>,
    #[command(flatten)]
    pub serve: ControlPlaneArgs,
}

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
