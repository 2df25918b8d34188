//! Sign-ins in flight at the identity provider: their state, nonce and PKCE verifier, found
//! by the hash of their own short-lived cookie, and taken once: a second callback with the
//! same cookie finds nothing.

use super::error::StoreResult;
use super::{Store, hash_token, new_token};
use sqlx::Row;

/// What a sign-in keeps across the trip to the provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingSignIn {
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
    /// Where to go once signed in: a local path.
    pub next_path: String,
}

impl Store {
    /// Keep a sign-in for `ttl_ms`; returns its cookie's value, shown once, to the browser.
    pub async fn begin_sign_in(&self, pending: &PendingSignIn, ttl_ms: i64) -> StoreResult<String> {
        let now = self.clock.now();
        sqlx::query("DELETE FROM oidc_sign_ins WHERE expires_at <= $1").bind(now).execute(&self.pool).await?;
        let cookie = new_token()?;
        sqlx::query(
            "INSERT INTO oidc_sign_ins (cookie_hash, state, nonce, pkce_verifier, next_path, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(hash_token(&cookie))
        .bind(&pending.state)
        .bind(&pending.nonce)
        .bind(&pending.pkce_verifier)
        .bind(&pending.next_path)
        .bind(now.saturating_add(ttl_ms))
        .execute(&self.pool)
        .await?;
        Ok(cookie)
    }

    /// Take the sign-in a cookie names, once, when `state` is its own: it is deleted as it is
    /// read, and only the caller whose DELETE removed it gets it. Another state leaves it (a
    /// second tab's sign-in that replaced the cookie still finishes).
    pub async fn take_sign_in(&self, cookie: &str, state: &str) -> StoreResult<Taken> {
        let hash = hash_token(cookie);
        let row = sqlx::query(
            "SELECT state, nonce, pkce_verifier, next_path FROM oidc_sign_ins WHERE cookie_hash = $1 AND expires_at > $2",
        )
        .bind(&hash)
        .bind(self.clock.now())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(Taken::Missing) };
        let kept: String = row.try_get("state")?;
        if !super::same_secret(&hash_token(&kept), &hash_token(state)) {
            return Ok(Taken::OtherState);
        }
        let deleted = sqlx::query("DELETE FROM oidc_sign_ins WHERE cookie_hash = $1")
            .bind(&hash)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if deleted != 1 {
            return Ok(Taken::Missing);
        }
        Ok(Taken::Pending(PendingSignIn {
            state: row.try_get("state")?,
            nonce: row.try_get("nonce")?,
            pkce_verifier: row.try_get("pkce_verifier")?,
            next_path: row.try_get("next_path")?,
        }))
    }
}

/// What a callback's cookie and state find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// No sign-in in flight under that cookie: never started here, taken already, or expired.
    Missing,
    /// One is, with another state: forged, or another tab's.
    OtherState,
    Pending(PendingSignIn),
}
