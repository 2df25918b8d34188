//! The reference control plane (DESIGN §3): it plays GitLab Rails' part of the protocol.

mod args;
pub mod decisions;
pub mod error;
pub mod http;
pub mod identity_provider;
pub mod maintenance;
pub mod model;
pub mod store;

use crate::protocol::Settings;
use crate::runtime::{read_secret_token_file, shutdown_signal};
pub use args::{ControlPlaneArgs, ControlPlaneCommand};
use error::Error;
use identity_provider::IdentityProvider;
use std::sync::Arc;

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
    // Held while serving: one process per SQLite file, and no restore under it.
    let _sqlite_lock = store::backup::ProcessLock::for_url(&args.database_url)
        .map_err(|source| Error::Database { url: redact(&args.database_url), source })?;
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
