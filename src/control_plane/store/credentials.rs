//! Credentials: agent tokens (rotated with a grace period, revoked), the admin token generated
//! on first start, and the page's sessions (a user's, or the admin token's holder's). Every secret is stored as its SHA-256 only.

use super::error::{StoreError, StoreResult};
use super::people::role_column;
use super::{Backend, Store, hash_token, new_token};
use crate::control_plane::decisions::access::{Caller, PROVIDER_ROLE_FRESH_MS, UserRef};
use crate::control_plane::model::{Agent, Session};
use sqlx::Row;

impl Store {
    /// The agent a token belongs to: its current token, or its previous one within the grace
    /// period of a rotation. A revoked agent has none.
    pub async fn agent_by_token(&self, token: &str) -> StoreResult<Option<Agent>> {
        let row = sqlx::query(
            "SELECT id, image_pull_secrets FROM agents WHERE revoked_at IS NULL \
             AND (token_hash = $1 OR (previous_token_hash = $1 AND previous_token_expires_at > $2))",
        )
        .bind(hash_token(token))
        .bind(self.clock.now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            let secrets: String = row.try_get("image_pull_secrets")?;
            Ok(Agent {
                id: row.try_get("id")?,
                image_pull_secrets: serde_json::from_str(&secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            })
        })
        .transpose()
    }

    /// A new token for an agent, returned once. The one it replaces keeps working for
    /// `grace_ms`, unless the agent was revoked: rotating re-enables it with the new token only.
    /// None when there is no such agent.
    pub async fn rotate_agent_token(&self, id: &str, grace_ms: i64) -> StoreResult<Option<String>> {
        let token = new_token()?;
        let expires = self.clock.now().saturating_add(grace_ms.max(0));
        let updated = sqlx::query(
            "UPDATE agents SET \
             previous_token_hash = CASE WHEN revoked_at IS NULL THEN token_hash ELSE NULL END, \
             previous_token_expires_at = CASE WHEN revoked_at IS NULL THEN $1 ELSE NULL END, \
             token_hash = $2, revoked_at = NULL WHERE id = $3",
        )
        .bind(expires)
        .bind(hash_token(&token))
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok((updated == 1).then_some(token))
    }

    /// Refuse every token of an agent from now on; false when there is no such agent.
    pub async fn revoke_agent(&self, id: &str) -> StoreResult<bool> {
        let updated = sqlx::query(
            "UPDATE agents SET revoked_at = $1, previous_token_hash = NULL, previous_token_expires_at = NULL \
             WHERE id = $2",
        )
        .bind(self.clock.now())
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(updated == 1)
    }

    /// Generate the admin token if there is none (first start) and return it, once; None when
    /// one exists already, here or from another control plane on the same database.
    /// `replace` makes a new one whatever exists: the way back in after losing it.
    pub async fn ensure_admin_token(&self, replace: bool) -> StoreResult<Option<String>> {
        let token = new_token()?;
        let upsert = if replace {
            "INSERT INTO admin_tokens (id, token_hash, created_at) VALUES ('admin', $1, $2) \
             ON CONFLICT (id) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at"
        } else {
            "INSERT INTO admin_tokens (id, token_hash, created_at) VALUES ('admin', $1, $2) ON CONFLICT (id) DO NOTHING"
        };
        let inserted = sqlx::query(upsert).bind(hash_token(&token)).bind(self.clock.now()).execute(&self.pool).await?;
        if replace {
            // Whoever held the old token is signed out with it; users stay signed in.
            sqlx::query("DELETE FROM admin_sessions WHERE user_id IS NULL").execute(&self.pool).await?;
        }
        Ok((inserted.rows_affected() == 1).then_some(token))
    }

    /// Record which credential signs the admin in: the hash of `--admin-token-file`'s token,
    /// or None for the stored one. When it differs from the last start's, every session ends:
    /// replacing a leaked token file and restarting signs its holder out. True when they ended.
    pub async fn admin_credential_in_use(&self, file_token_hash: Option<&str>) -> StoreResult<bool> {
        let changed = match file_token_hash {
            Some(hash) => sqlx::query(
                "INSERT INTO admin_tokens (id, token_hash, created_at) VALUES ('file', $1, $2) \
                 ON CONFLICT (id) DO UPDATE SET token_hash = excluded.token_hash, created_at = excluded.created_at \
                 WHERE admin_tokens.token_hash <> excluded.token_hash",
            )
            .bind(hash)
            .bind(self.clock.now())
            .execute(&self.pool)
            .await?
            .rows_affected(),
            None => {
                sqlx::query("DELETE FROM admin_tokens WHERE id = 'file'").execute(&self.pool).await?.rows_affected()
            }
        } == 1;
        if changed {
            sqlx::query("DELETE FROM admin_sessions WHERE user_id IS NULL").execute(&self.pool).await?;
        }
        Ok(changed)
    }

    /// Whether `token` is the generated admin token.
    pub async fn is_admin_token(&self, token: &str) -> StoreResult<bool> {
        let row =
            sqlx::query("SELECT token_hash FROM admin_tokens WHERE id = 'admin'").fetch_optional(&self.pool).await?;
        let Some(row) = row else { return Ok(false) };
        let stored: String = row.try_get("token_hash")?;
        Ok(super::same_secret(&stored, &hash_token(token)))
    }

    /// Open a session for `ttl_ms`, for a user or (None) the admin token's holder; returns
    /// the cookie value (shown once) and the session. One opened with a personal token ends
    /// with it: when it expires, or is revoked.
    pub async fn open_session(&self, ttl_ms: i64, user: Option<&UserRef>) -> StoreResult<(String, Session)> {
        let now = self.clock.now();
        // Expired sessions go whenever a new one comes: the table stays as small as its use.
        sqlx::query("DELETE FROM admin_sessions WHERE expires_at <= $1").bind(now).execute(&self.pool).await?;
        let (cookie, csrf_token) = (new_token()?, new_token()?);
        let expires_at = user.map_or(now.saturating_add(ttl_ms), |u| u.bounded(now.saturating_add(ttl_ms)));
        sqlx::query(
            "INSERT INTO admin_sessions (session_hash, csrf_token, expires_at, user_id, api_token_id) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(hash_token(&cookie))
        .bind(&csrf_token)
        .bind(expires_at)
        .bind(user.map(|u| u.id.clone()))
        .bind(user.and_then(|u| u.token.as_ref()).map(|t| t.id.clone()))
        .execute(&self.pool)
        .await?;
        let caller = user.map_or(Caller::AdminToken, |u| Caller::User(u.clone()));
        Ok((cookie, Session { csrf_token, expires_at, caller }))
    }

    /// The live session a cookie names, if any: a disabled or deleted user's is none, at once,
    /// and so is one opened with a personal token that is revoked or expired.
    pub async fn session(&self, cookie: &str) -> StoreResult<Option<Session>> {
        self.session_by_hash(&hash_token(cookie)).await
    }

    /// [`Store::session`], by the hash of its cookie.
    pub(super) async fn session_by_hash(&self, session_hash: &str) -> StoreResult<Option<Session>> {
        let sql = session_sql("admin_sessions s", "s.session_hash = $1");
        let now = self.clock.now();
        let query = sqlx::query(&sql).bind(session_hash).bind(now).bind(now.saturating_sub(PROVIDER_ROLE_FRESH_MS));
        session_from_row(query.fetch_optional(&self.pool).await?)
    }

    pub async fn close_session(&self, cookie: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM admin_sessions WHERE session_hash = $1")
            .bind(hash_token(cookie))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// On PostgreSQL, take the agent's row lock in `tx`, the lock a reconcile holds: a write
    /// to its workspaces then never interleaves with a reconcile that would write back what it
    /// read before. SQLite has one writer at a time and needs none.
    /// A transaction that will write. On SQLite it takes the write lock at BEGIN (IMMEDIATE):
    /// a deferred one that read first could not upgrade once the reconcile writer committed
    /// meanwhile, and SQLite answers that at once with "database is locked", whatever the
    /// busy timeout.
    pub(super) async fn begin_write(&self) -> StoreResult<sqlx::Transaction<'static, sqlx::Any>> {
        Ok(match self.backend {
            Backend::Sqlite(_) => self.pool.begin_with("BEGIN IMMEDIATE").await?,
            Backend::Postgres => self.pool.begin().await?,
        })
    }

    pub(super) async fn lock_agent(&self, tx: &mut sqlx::Transaction<'_, sqlx::Any>, id: &str) -> StoreResult<()> {
        if matches!(self.backend, Backend::Postgres) {
            // The lock, and a new revision: an optimistic reconcile that read the old one writes nothing.
            sqlx::query("UPDATE agents SET revision = revision + 1 WHERE id = $1").bind(id).execute(&mut **tx).await?;
        }
        Ok(())
    }
}

/// A live session and whom it is for, read from `from` (which names `admin_sessions` as `s`)
/// where `filter` holds; binds `$1` (the filter's), `$2` now, `$3` when a provider's role is
/// fresh, and any after.
pub(super) fn session_sql(from: &str, filter: &str) -> String {
    format!(
        "SELECT s.csrf_token, s.expires_at, s.user_id, u.username, {}, t.id AS token_id, \
         t.expires_at AS token_expires_at FROM {from} \
         LEFT JOIN users u ON u.id = s.user_id AND u.disabled_at IS NULL \
         LEFT JOIN api_tokens t ON t.id = s.api_token_id AND t.revoked_at IS NULL AND t.expires_at > $2 \
         WHERE {filter} AND s.expires_at > $2 AND (s.api_token_id IS NULL OR t.id IS NOT NULL)",
        role_column(3)
    )
}

/// The session a [`session_sql`] row holds, unless its user is gone or disabled.
pub(super) fn session_from_row(row: Option<sqlx::any::AnyRow>) -> StoreResult<Option<Session>> {
    let Some(row) = row else { return Ok(None) };
    let caller = match row.try_get::<Option<String>, _>("user_id")? {
        None => Caller::AdminToken,
        Some(id) => match super::people::user_ref(&row, id)? {
            Some(user) => Caller::User(user),
            None => return Ok(None),
        },
    };
    Ok(Some(Session { csrf_token: row.try_get("csrf_token")?, expires_at: row.try_get("expires_at")?, caller }))
}
