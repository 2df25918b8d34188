//! Sign-in through an OpenID Provider, with the `openidconnect` crate: discovery (kept for
//! ten minutes, so that rotated keys are found), the authorization code flow with PKCE, and
//! the ID token checked for its signature, issuer, audience, expiry and nonce. Talking to
//! the provider is bounded: no redirects, a timeout, a capped answer.

use openidconnect::core::{
    CoreAuthDisplay, CoreAuthPrompt, CoreErrorResponseType, CoreGenderClaim, CoreJsonWebKey,
    CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm, CoreProviderMetadata, CoreResponseType,
    CoreRevocableToken, CoreRevocationErrorResponse, CoreTokenIntrospectionResponse, CoreTokenType,
};
use openidconnect::{
    AdditionalClaims, AuthenticationFlow, AuthorizationCode, Client, ClientId, ClientSecret, CsrfToken,
    EmptyExtraTokenFields, EndpointMaybeSet, EndpointNotSet, EndpointSet, HttpRequest, HttpResponse, IdTokenFields,
    IssuerUrl, Nonce, OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, Scope,
    StandardErrorResponse, StandardTokenResponse, TokenResponse,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a discovery document (and its keys) is used before it is fetched again.
const DISCOVERY_FRESH_FOR: Duration = Duration::from_secs(600);
/// A discovery that failed is not tried again sooner: sign-ins fail fast meanwhile instead
/// of queueing behind a provider that does not answer. Also the least time between two
/// discoveries a key rotation forces.
const RETRY_DISCOVERY_AFTER: Duration = Duration::from_secs(30);
/// The largest answer read from the provider.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(10);

/// Every claim the ID token carries beyond the standard ones, so that the groups claim can be
/// named by a flag.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ExtraClaims(BTreeMap<String, serde_json::Value>);
impl AdditionalClaims for ExtraClaims {}

type IdTokenFieldsWithExtras = IdTokenFields<
    ExtraClaims,
    EmptyExtraTokenFields,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJwsSigningAlgorithm,
>;
type OidcClient = Client<
    ExtraClaims,
    CoreAuthDisplay,
    CoreGenderClaim,
    CoreJweContentEncryptionAlgorithm,
    CoreJsonWebKey,
    CoreAuthPrompt,
    StandardErrorResponse<CoreErrorResponseType>,
    StandardTokenResponse<IdTokenFieldsWithExtras, CoreTokenType>,
    CoreTokenIntrospectionResponse,
    CoreRevocableToken,
    CoreRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// What `--oidc-*` configure.
#[derive(Clone)]
pub struct ProviderConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Where the provider sends the browser back: `<public origin>/sign-in/oidc/callback`.
    pub redirect_url: String,
    /// Scopes besides `openid`.
    pub scopes: Vec<String>,
    pub groups_claim: String,
    pub admin_group: Option<String>,
}

impl std::fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("redirect_url", &self.redirect_url)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Why a sign-in through the provider failed: logged in full, and said on the page.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("the identity provider at {issuer} does not answer: {reason}")]
    Unreachable { issuer: String, reason: String },
    #[error("the identity provider refused the code (used already, or expired): {0}")]
    CodeRefused(String),
    #[error("the identity provider sent no ID token")]
    NoIdToken,
    #[error("the ID token was refused: {0}")]
    IdTokenRefused(String),
    #[error("the configuration is wrong: {0}")]
    Configuration(String),
}

/// A sign-in started: where to send the browser, and what to keep until it comes back.
pub struct Started {
    pub authorize_url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// What a verified ID token says of its user.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedUser {
    pub issuer: String,
    pub subject: String,
    pub preferred_username: Option<String>,
    pub email: Option<String>,
    /// Whether the provider vouches for the email: only then may it name the user.
    pub email_verified: bool,
    pub name: Option<String>,
    pub groups: Vec<String>,
}

pub struct IdentityProvider {
    pub config: ProviderConfig,
    http: reqwest::Client,
    discovered: tokio::sync::Mutex<Discovered>,
}

/// The last discovery, and when the last one failed.
#[derive(Default)]
struct Discovered {
    client: Option<(OidcClient, Instant)>,
    failed_at: Option<(Instant, String)>,
}

impl IdentityProvider {
    pub fn new(config: ProviderConfig) -> Result<Self, ProviderError> {
        IssuerUrl::new(config.issuer.clone())
            .map_err(|e| ProviderError::Configuration(format!("--oidc-issuer: {e}")))?;
        RedirectUrl::new(config.redirect_url.clone())
            .map_err(|e| ProviderError::Configuration(format!("the redirect URL: {e}")))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .build()
            .map_err(|e| ProviderError::Configuration(format!("the HTTP client: {e}")))?;
        Ok(Self { config, http, discovered: tokio::sync::Mutex::new(Discovered::default()) })
    }

    /// The provider's client: the last discovery while it is fresh (or `force` asks again
    /// and the last is older than [`RETRY_DISCOVERY_AFTER`]), else a new one. A discovery
    /// that fails keeps the last good one in use, and is not retried for a while.
    async fn client(&self, force: bool) -> Result<OidcClient, ProviderError> {
        let mut discovered = self.discovered.lock().await;
        if let Some((client, at)) = &discovered.client {
            let age = at.elapsed();
            if age < DISCOVERY_FRESH_FOR && !(force && age >= RETRY_DISCOVERY_AFTER) {
                return Ok(client.clone());
            }
        }
        let unreachable = |reason: String| ProviderError::Unreachable { issuer: self.config.issuer.clone(), reason };
        if let Some((at, reason)) = &discovered.failed_at
            && at.elapsed() < RETRY_DISCOVERY_AFTER
        {
            return match &discovered.client {
                Some((client, _)) => Ok(client.clone()),
                None => Err(unreachable(reason.clone())),
            };
        }
        match self.discover().await {
            Ok(client) => {
                *discovered = Discovered { client: Some((client.clone(), Instant::now())), failed_at: None };
                Ok(client)
            }
            Err(error) => {
                tracing::warn!(%error, "discovering the identity provider failed");
                discovered.failed_at = Some((Instant::now(), error.to_string()));
                match &discovered.client {
                    Some((client, _)) => Ok(client.clone()),
                    None => Err(error),
                }
            }
        }
    }

    async fn discover(&self) -> Result<OidcClient, ProviderError> {
        let unreachable = |reason: String| ProviderError::Unreachable { issuer: self.config.issuer.clone(), reason };
        let issuer = IssuerUrl::new(self.config.issuer.clone()).map_err(|e| unreachable(e.to_string()))?;
        let http = ProviderHttp(&self.http);
        let metadata = CoreProviderMetadata::discover_async(issuer, &http).await.map_err(|e| match e {
            // It answered, with another issuer than --oidc-issuer names: a setting to fix.
            openidconnect::DiscoveryError::Validation(reason) => {
                ProviderError::Configuration(format!("the provider's discovery document: {reason}"))
            }
            other => unreachable(error_chain(&other)),
        })?;
        let redirect = RedirectUrl::new(self.config.redirect_url.clone())
            .map_err(|e| ProviderError::Configuration(e.to_string()))?;
        Ok(OidcClient::from_provider_metadata(
            metadata,
            ClientId::new(self.config.client_id.clone()),
            Some(ClientSecret::new(self.config.client_secret.clone())),
        )
        .set_redirect_uri(redirect))
    }

    /// Start a sign-in: a fresh state, nonce and PKCE verifier (S256).
    pub async fn start(&self) -> Result<Started, ProviderError> {
        let client = self.client(false).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            AuthenticationFlow::<CoreResponseType>::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in &self.config.scopes {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        Ok(Started {
            authorize_url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        })
    }

    /// Finish one: the code exchanged with its verifier, the ID token checked against the
    /// nonce this sign-in began with (against keys discovered again, once, when none
    /// matched: the provider rotated them), the claims the token lacks read from userinfo.
    pub async fn finish(&self, code: &str, pkce_verifier: &str, nonce: &str) -> Result<VerifiedUser, ProviderError> {
        let mut client = self.client(false).await?;
        let http = ProviderHttp(&self.http);
        let answer = client
            .exchange_code(AuthorizationCode::new(code.to_string()))
            .map_err(|e| ProviderError::Configuration(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_string()))
            .request_async(&http)
            .await
            .map_err(|e| match e {
                openidconnect::RequestTokenError::Request(cause) => {
                    ProviderError::Unreachable { issuer: self.config.issuer.clone(), reason: error_chain(&cause) }
                }
                other => ProviderError::CodeRefused(error_chain(&other)),
            })?;
        let id_token = answer.id_token().ok_or(ProviderError::NoIdToken)?;
        let nonce = Nonce::new(nonce.to_string());
        let no_key = matches!(
            id_token.claims(&client.id_token_verifier(), &nonce),
            Err(openidconnect::ClaimsVerificationError::SignatureVerification(
                openidconnect::SignatureVerificationError::NoMatchingKey
            ))
        );
        if no_key {
            client = self.client(true).await?;
        }
        let claims = id_token
            .claims(&client.id_token_verifier(), &nonce)
            .map_err(|e| ProviderError::IdTokenRefused(error_chain(&e)))?;
        let mut user = VerifiedUser {
            issuer: claims.issuer().to_string(),
            subject: claims.subject().to_string(),
            preferred_username: claims.preferred_username().map(|u| u.to_string()),
            email: claims.email().map(|e| e.to_string()),
            email_verified: claims.email_verified().unwrap_or(false),
            name: claims.name().and_then(|n| n.get(None)).map(|n| n.to_string()),
            groups: groups(&claims.additional_claims().0, &self.config.groups_claim),
        };
        // A conformant provider releases the scopes' claims at userinfo, not in the ID token.
        if user.email.is_none() || user.groups.is_empty() || user.preferred_username.is_none() {
            self.add_userinfo(&client, answer.access_token().clone(), &mut user).await;
        }
        Ok(user)
    }

    /// The claims userinfo adds (for the same subject); a userinfo that fails leaves the
    /// ID token's alone, logged.
    async fn add_userinfo(
        &self,
        client: &OidcClient,
        access_token: openidconnect::AccessToken,
        user: &mut VerifiedUser,
    ) {
        let http = ProviderHttp(&self.http);
        let subject = openidconnect::SubjectIdentifier::new(user.subject.clone());
        let Ok(request) = client.user_info(access_token, Some(subject)) else { return };
        let info: openidconnect::UserInfoClaims<ExtraClaims, CoreGenderClaim> = match request.request_async(&http).await
        {
            Ok(info) => info,
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "the identity provider's userinfo failed; the ID token's claims alone");
                return;
            }
        };
        if user.email.is_none() {
            user.email = info.email().map(|e| e.to_string());
            user.email_verified = info.email_verified().unwrap_or(false);
        }
        user.preferred_username =
            user.preferred_username.take().or_else(|| info.preferred_username().map(|u| u.to_string()));
        user.name = user.name.take().or_else(|| info.name().and_then(|n| n.get(None)).map(|n| n.to_string()));
        if user.groups.is_empty() {
            user.groups = groups(&info.additional_claims().0, &self.config.groups_claim);
        }
    }
}

/// The groups claim's values: a list of strings, or one string.
fn groups(claims: &BTreeMap<String, serde_json::Value>, name: &str) -> Vec<String> {
    match claims.get(name) {
        Some(serde_json::Value::Array(values)) => values.iter().filter_map(|v| v.as_str()).map(String::from).collect(),
        Some(serde_json::Value::String(one)) => vec![one.clone()],
        _ => Vec::new(),
    }
}

/// The control plane's client as the crate calls it: a named type, so that its future is
/// `Send` for every lifetime (a closure's is not, and axum needs it).
struct ProviderHttp<'a>(&'a reqwest::Client);

impl<'c> openidconnect::AsyncHttpClient<'c> for ProviderHttp<'_> {
    type Error = ProviderHttpError;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<HttpResponse, ProviderHttpError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(send(self.0, request))
    }
}

/// One request to the provider with the control plane's client: no redirect followed, the
/// answer read up to its cap.
async fn send(http: &reqwest::Client, request: HttpRequest) -> Result<HttpResponse, ProviderHttpError> {
    let (parts, body) = request.into_parts();
    let url = parts.uri.to_string();
    let mut answer = http.request(parts.method, url).headers(parts.headers).body(body).send().await?;
    let mut response = HttpResponse::new(Vec::new());
    *response.status_mut() = answer.status();
    *response.headers_mut() = answer.headers().clone();
    while let Some(chunk) = answer.chunk().await? {
        if response.body().len().saturating_add(chunk.len()) > MAX_ANSWER_BYTES {
            return Err(ProviderHttpError::TooLarge);
        }
        response.body_mut().extend_from_slice(&chunk);
    }
    Ok(response)
}

#[derive(Debug, thiserror::Error)]
pub enum ProviderHttpError {
    #[error(transparent)]
    Http(#[from] reqwest::Error),
    #[error("the answer is larger than 1 MiB")]
    TooLarge,
}

/// An error with its causes, one line: the crate's top-level messages are short.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}
