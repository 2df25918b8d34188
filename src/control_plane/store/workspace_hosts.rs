//! Signing a browser in to a workspace's host (#39): a one-time code, bound to one host and
//! to the page session that asked for it, traded once for the host's own session. Both are
//! kept hashed; the host's session is live only while its page session is.

use super::error::StoreResult;
use super::rows::{SELECT_COLUMNS, workspace_from_row};
use super::{Store, hash_token, new_token};
use crate::control_plane::decisions::workspace_hosts::WorkspaceHost;
use crate::control_plane::model::{Session, Workspace};
use sqlx::Row;

impl Store {
    /// A code for `host`, good once for `ttl_ms`, on behalf of the page session `page_cookie`,
    /// for the browser that holds `state` in the host's state cookie.
    pub async fn issue_host_code(
        &self,
        page_cookie: &str,
        host: &str,
        state: &str,
        next_path: &str,
        ttl_ms: i64,
    ) -> StoreResult<String> {
        let now = self.clock.now();
        sqlx::query("DELETE FROM workspace_host_codes WHERE expires_at <= $1").bind(now).execute(&self.pool).await?;
        let code = new_token()?;
        sqlx::query(
            "INSERT INTO workspace_host_codes (code_hash, host, page_session_hash, state_hash, next_path, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(hash_token(&code))
        .bind(host)
        .bind(hash_token(page_cookie))
        .bind(hash_token(state))
        .bind(next_path)
        .bind(now.saturating_add(ttl_ms))
        .execute(&self.pool)
        .await?;
        Ok(code)
    }

    /// Trade a code for a session on `host`, lasting `ttl_ms` at most, when the browser holds
    /// the code's state (one of `states`, its state cookies): the code is deleted as it is
    /// read, and only the caller whose DELETE removed it gets the session. A code of another
    /// host or another browser, an expired one or one already used finds nothing. Returns the
    /// host session's cookie value and the path to go on to.
    pub async fn redeem_host_code(
        &self,
        code: &str,
        host: &str,
        states: &[&str],
        ttl_ms: i64,
    ) -> StoreResult<Option<(String, String)>> {
        let now = self.clock.now();
        let code_hash = hash_token(code);
        let row = sqlx::query(
            "SELECT page_session_hash, state_hash, next_path FROM workspace_host_codes \
             WHERE code_hash = $1 AND host = $2 AND expires_at > $3",
        )
        .bind(&code_hash)
        .bind(host)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let state_hash: String = row.try_get("state_hash")?;
        if !states.iter().any(|state| super::same_secret(&hash_token(state), &state_hash)) {
            return Ok(None);
        }
        let deleted = sqlx::query("DELETE FROM workspace_host_codes WHERE code_hash = $1")
            .bind(&code_hash)
            .execute(&self.pool)
            .await?
            .rows_affected();
        if deleted != 1 {
            return Ok(None);
        }
        let page_session_hash: String = row.try_get("page_session_hash")?;
        sqlx::query("DELETE FROM workspace_host_sessions WHERE expires_at <= $1").bind(now).execute(&self.pool).await?;
        let cookie = new_token()?;
        sqlx::query(
            "INSERT INTO workspace_host_sessions (session_hash, host, page_session_hash, expires_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(hash_token(&cookie))
        .bind(host)
        .bind(&page_session_hash)
        .bind(now.saturating_add(ttl_ms))
        .execute(&self.pool)
        .await?;
        Ok(Some((cookie, row.try_get("next_path")?)))
    }

    /// The page session behind a host's cookie, when the cookie is that host's, both are
    /// live, and its user is not disabled.
    pub async fn host_session(&self, cookie: &str, host: &str) -> StoreResult<Option<Session>> {
        // One query, the host's session joined to its page session: each is a trip to the
        // database's thread on every request to a workspace's host.
        let sql = super::credentials::session_sql(
            "workspace_host_sessions h JOIN admin_sessions s ON s.session_hash = h.page_session_hash",
            "h.session_hash = $1 AND h.host = $4 AND h.expires_at > $2",
        );
        let now = self.clock.now();
        let query = sqlx::query(&sql).bind(hash_token(cookie)).bind(now);
        let query =
            query.bind(now.saturating_sub(crate::control_plane::decisions::access::PROVIDER_ROLE_FRESH_MS)).bind(host);
        super::credentials::session_from_row(query.fetch_optional(&self.pool).await?)
    }

    /// The workspace a host names: of that name, on the agent whose tag the host carries.
    pub async fn workspace_at(&self, host: &WorkspaceHost) -> StoreResult<Option<Workspace>> {
        let sql = format!("SELECT {} FROM workspaces WHERE name = $1 ORDER BY agent_id", *SELECT_COLUMNS);
        let rows = sqlx::query(&sql).bind(&host.workspace).fetch_all(&self.pool).await?;
        for row in &rows {
            let agent: String = row.try_get("agent_id")?;
            if host.is_for_agent(&agent) {
                return workspace_from_row(row).map(Some);
            }
        }
        Ok(None)
    }

    /// Record activity on a workspace (a request, a WebSocket frame, SSH bytes), at `at`.
    pub async fn record_activity(&self, agent_id: &str, name: &str, at: i64) -> StoreResult<()> {
        sqlx::query(
            "UPDATE workspaces SET last_activity_at = $3 WHERE agent_id = $1 AND name = $2 \
             AND (last_activity_at IS NULL OR last_activity_at < $3)",
        )
        .bind(agent_id)
        .bind(name)
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
