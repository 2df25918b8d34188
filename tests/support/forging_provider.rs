//! A hostile OpenID Provider: a real discovery document and key set, and ID tokens with one
//! flaw each, made by the `openidconnect` crate (signed by another key, for another issuer or
//! audience, expired, with another nonce, or not signed at all). The real provider
//! (`identity_provider`) proves the happy path; this one proves each refusal.

use axum::Json;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use openidconnect::core::{CoreIdToken, CoreIdTokenClaims, CoreJwsSigningAlgorithm, CoreRsaPrivateSigningKey};
use openidconnect::{
    Audience, EmptyAdditionalClaims, EndUserEmail, IssuerUrl, JsonWebKeyId, Nonce, PrivateSigningKey, StandardClaims,
    SubjectIdentifier,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// What is wrong with the next ID token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// Signed by a key the provider's key set does not hold.
    Signature,
    Issuer,
    Audience,
    Expired,
    Nonce,
    /// `alg: none`.
    Unsigned,
    /// The callback names another issuer (RFC 9207's `iss`): a mix-up.
    IssParameter,
    /// The provider answers an error, with markup in its description.
    ProviderError,
}

struct Shared {
    issuer: String,
    client_id: String,
    flaw: Mutex<Flaw>,
    /// The nonce of the last authorization request.
    nonce: Mutex<String>,
    key: CoreRsaPrivateSigningKey,
    other_key: CoreRsaPrivateSigningKey,
}

pub struct ForgingProvider {
    pub issuer: String,
    shared: Arc<Shared>,
}

/// A 2048-bit RSA key as PKCS#1 PEM, from openssl (the prerequisites' own).
fn rsa_pem() -> String {
    let out = std::process::Command::new("openssl")
        .args(["genrsa", "-traditional", "2048"])
        .stderr(std::process::Stdio::null())
        .output()
        .expect("openssl");
    String::from_utf8(out.stdout).expect("PEM")
}

impl ForgingProvider {
    pub async fn start(client_id: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let issuer = format!("http://localhost:{}", listener.local_addr().expect("address").port());
        let key = CoreRsaPrivateSigningKey::from_pem(&rsa_pem(), Some(JsonWebKeyId::new("k1".into()))).expect("key");
        let other_key =
            CoreRsaPrivateSigningKey::from_pem(&rsa_pem(), Some(JsonWebKeyId::new("k1".into()))).expect("key");
        let shared = Arc::new(Shared {
            issuer: issuer.clone(),
            client_id: client_id.into(),
            flaw: Mutex::new(Flaw::None),
            nonce: Mutex::new(String::new()),
            key,
            other_key,
        });
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        Self { issuer, shared }
    }

    pub fn next_token(&self, flaw: Flaw) {
        *self.shared.flaw.lock().unwrap_or_else(|e| e.into_inner()) = flaw;
    }
}

async fn discovery(State(shared): State<Arc<Shared>>) -> Json<Value> {
    let issuer = &shared.issuer;
    Json(json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "jwks_uri": format!("{issuer}/jwks"),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }))
}

async fn jwks(State(shared): State<Arc<Shared>>) -> Json<Value> {
    Json(json!({ "keys": [shared.key.as_verification_key()] }))
}

/// Straight back to the client with a code, as if the user had signed in.
async fn authorize(
    State(shared): State<Arc<Shared>>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Redirect {
    *shared.nonce.lock().unwrap_or_else(|e| e.into_inner()) = query.get("nonce").cloned().unwrap_or_default();
    let redirect = query.get("redirect_uri").cloned().unwrap_or_default();
    let state = query.get("state").cloned().unwrap_or_default();
    let extra = match *shared.flaw.lock().unwrap_or_else(|e| e.into_inner()) {
        Flaw::IssParameter => "&iss=http%3A%2F%2Fevil.example",
        Flaw::ProviderError => "&error=access_denied&error_description=%3Cscript%3Ealert(1)%3C%2Fscript%3E",
        _ => "",
    };
    Redirect::to(&format!("{redirect}?code=the-code&state={state}{extra}"))
}

async fn token(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let flaw = *shared.flaw.lock().unwrap_or_else(|e| e.into_inner());
    let nonce = shared.nonce.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let now = chrono::Utc::now();
    let (issuer, audience, expires, nonce) = match flaw {
        Flaw::Issuer => {
            ("http://evil.example".to_string(), shared.client_id.clone(), now + chrono::Duration::hours(1), nonce)
        }
        Flaw::Audience => (shared.issuer.clone(), "someone-else".to_string(), now + chrono::Duration::hours(1), nonce),
        Flaw::Expired => (shared.issuer.clone(), shared.client_id.clone(), now - chrono::Duration::hours(1), nonce),
        Flaw::Nonce => {
            (shared.issuer.clone(), shared.client_id.clone(), now + chrono::Duration::hours(1), "not-it".into())
        }
        _ => (shared.issuer.clone(), shared.client_id.clone(), now + chrono::Duration::hours(1), nonce),
    };
    let claims = CoreIdTokenClaims::new(
        IssuerUrl::new(issuer).expect("issuer"),
        vec![Audience::new(audience)],
        expires,
        now - chrono::Duration::minutes(1),
        StandardClaims::new(SubjectIdentifier::new("mallory".into()))
            .set_email(Some(EndUserEmail::new("mallory@example.com".into()))),
        EmptyAdditionalClaims {},
    )
    .set_nonce(Some(Nonce::new(nonce)));
    let key = if flaw == Flaw::Signature { &shared.other_key } else { &shared.key };
    let signed = CoreIdToken::new(claims, key, CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256, None, None)
        .expect("sign")
        .to_string();
    let id_token = if flaw == Flaw::Unsigned {
        // The same claims, with `alg: none` and no signature.
        use base64::Engine;
        let payload = signed.split('.').nth(1).unwrap_or_default();
        let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
        format!("{header}.{payload}.")
    } else {
        signed
    };
    Json(json!({ "access_token": "at", "token_type": "bearer", "expires_in": 3600, "id_token": id_token }))
}
