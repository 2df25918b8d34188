//! Users and their personal API tokens. A user is keyed by issuer and subject; the username
//! is what others see. A disabled or deleted user's sessions and tokens stop at once: every
//! lookup joins the user and asks that they are enabled.

use super::error::{StoreError, StoreResult};
use super::{Store, hash_token, new_token};
use crate::control_plane::decisions::access::{
    MAX_LIVE_TOKENS, PROVIDER_ROLE_FRESH_MS, Role, TokenRef, UserRef, nth_username,
};
use crate::control_plane::model::{ApiToken, LOCAL_ISSUER, User};
use sqlx::Row;
use sqlx::any::AnyRow;

const USER_COLUMNS: &str =
    "id, issuer, subject, username, email, display_name, role, created_at, last_sign_in_at, disabled_at";

/// Names tried for a new identity-provider user before giving up: `alice`, `alice-2`, …
const USERNAME_ATTEMPTS: u32 = 50;

fn role_of(text: &str) -> StoreResult<Role> {
    Role::parse(text).ok_or_else(|| StoreError::Corrupt(format!("unknown role {text:?}")))
}

fn user_from_row(row: &AnyRow) -> StoreResult<User> {
    Ok(User {
        id: row.try_get("id")?,
        issuer: row.try_get("issuer")?,
        subject: row.try_get("subject")?,
        username: row.try_get("username")?,
        email: row.try_get("email")?,
        display_name: row.try_get("display_name")?,
        role: role_of(&row.try_get::<String, _>("role")?)?,
        created_at: row.try_get("created_at")?,
        last_sign_in_at: row.try_get("last_sign_in_at")?,
        disabled_at: row.try_get("disabled_at")?,
    })
}

/// The role column as a lookup reads it: a provider's admin whose last sign-in is older than
/// `$n` (a bound parameter: now minus [`PROVIDER_ROLE_FRESH_MS`]) is a user.
pub(super) fn role_column(n: usize) -> String {
    format!(
        "CASE WHEN u.issuer <> 'local' AND u.role = 'admin' AND (u.last_sign_in_at IS NULL OR u.last_sign_in_at < ${n}) \
         THEN 'user' ELSE u.role END AS role"
    )
}

/// A joined row's user (`username`, `role`, and `token_id`, `token_expires_at` when it came
/// with a personal token), or None when the join found no enabled user.
pub(super) fn user_ref(row: &AnyRow, id: String) -> StoreResult<Option<UserRef>> {
    let Some(username) = row.try_get::<Option<String>, _>("username")? else { return Ok(None) };
    let role = role_of(&row.try_get::<String, _>("role")?)?;
    let token = match row.try_get::<Option<String>, _>("token_id")? {
        Some(id) => Some(TokenRef { id, expires_at: row.try_get("token_expires_at")? }),
        None => None,
    };
    Ok(Some(UserRef { id, username, role, token }))
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl Store {
    /// A user an admin creates (issuer `local`), with a first token for `token_days` printed
    /// once. Workspaces created for this name before users existed become theirs.
    pub async fn create_local_user(
        &self,
        username: &str,
        role: Role,
        token_days: u32,
    ) -> StoreResult<(User, String, u64)> {
        let id = new_token()?;
        let now = self.clock.now();
        let mut tx = self.begin_write().await?;
        sqlx::query(&format!(
            "INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $3, NULL, NULL, $4, $5, NULL, NULL)"
        ))
        .bind(&id)
        .bind(LOCAL_ISSUER)
        .bind(username)
        .bind(role.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StoreError::Conflict(format!("user {username:?} already exists"))
            } else {
                e.into()
            }
        })?;
        // GitLab's usernames are case-insensitive; wsync's are lowercase.
        let claimed = sqlx::query("UPDATE workspaces SET owner_id = $1 WHERE LOWER(owner) = $2 AND owner_id IS NULL")
            .bind(&id)
            .bind(username)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let expires_at = now.saturating_add(i64::from(token_days).saturating_mul(86_400_000));
        let (_, token) = insert_token(&mut *tx, &id, "first token", now, expires_at).await?;
        tx.commit().await?;
        let user = self.user_by_name(username).await?.ok_or_else(|| StoreError::Corrupt("user vanished".into()))?;
        Ok((user, token, claimed))
    }

    /// The user who signed in through the identity provider: created on first sign-in, else
    /// their email, name and role (from the groups claim) brought up to date. A disabled user
    /// is returned as such; the caller refuses them.
    pub async fn sign_in_from_provider(&self, claims: &ProviderClaims<'_>) -> StoreResult<User> {
        let now = self.clock.now();
        let updated = sqlx::query(
            "UPDATE users SET email = $1, display_name = $2, role = $3, last_sign_in_at = $4 \
             WHERE issuer = $5 AND subject = $6 AND disabled_at IS NULL",
        )
        .bind(claims.email.map(String::from))
        .bind(claims.name.map(String::from))
        .bind(claims.role.as_str())
        .bind(now)
        .bind(claims.issuer)
        .bind(claims.subject)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if updated == 0 {
            if let Some(existing) = self.user_by_subject(claims.issuer, claims.subject).await? {
                return Ok(existing);
            }
            self.insert_provider_user(claims, now).await?;
        }
        self.user_by_subject(claims.issuer, claims.subject)
            .await?
            .ok_or_else(|| StoreError::Corrupt("user vanished".into()))
    }

    async fn insert_provider_user(&self, claims: &ProviderClaims<'_>, now: i64) -> StoreResult<()> {
        let id = new_token()?;
        for n in 1..=USERNAME_ATTEMPTS {
            let inserted = sqlx::query(&format!(
                "INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, NULL)"
            ))
            .bind(&id)
            .bind(claims.issuer)
            .bind(claims.subject)
            .bind(nth_username(claims.username, n))
            .bind(claims.email.map(String::from))
            .bind(claims.name.map(String::from))
            .bind(claims.role.as_str())
            .bind(now)
            .execute(&self.pool)
            .await;
            match inserted {
                Ok(_) => return Ok(()),
                // Signed in twice at once: the other attempt made them.
                Err(e)
                    if is_unique_violation(&e)
                        && self.user_by_subject(claims.issuer, claims.subject).await?.is_some() =>
                {
                    return Ok(());
                }
                Err(e) if is_unique_violation(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(StoreError::Conflict(format!("no free username like {:?}", claims.username)))
    }

    pub async fn user_by_name(&self, username: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE username = $1");
        let row = sqlx::query(&sql).bind(username).fetch_optional(&self.pool).await?;
        row.as_ref().map(user_from_row).transpose()
    }

    async fn user_by_subject(&self, issuer: &str, subject: &str) -> StoreResult<Option<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE issuer = $1 AND subject = $2");
        let row = sqlx::query(&sql).bind(issuer).bind(subject).fetch_optional(&self.pool).await?;
        row.as_ref().map(user_from_row).transpose()
    }

    pub async fn users(&self) -> StoreResult<Vec<User>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users ORDER BY username");
        let rows = sqlx::query(&sql).fetch_all(&self.pool).await?;
        rows.iter().map(user_from_row).collect()
    }

    /// Disable (or enable again) a user: their sessions end now, and their tokens are refused
    /// while disabled. None when there is no such user.
    pub async fn set_user_disabled(&self, username: &str, disabled: bool) -> StoreResult<Option<User>> {
        let mut tx = self.begin_write().await?;
        let at = disabled.then(|| self.clock.now());
        let updated = sqlx::query("UPDATE users SET disabled_at = $1 WHERE username = $2")
            .bind(at)
            .bind(username)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if disabled {
            sqlx::query("DELETE FROM admin_sessions WHERE user_id IN (SELECT id FROM users WHERE username = $1)")
                .bind(username)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        if updated == 0 {
            return Ok(None);
        }
        self.user_by_name(username).await
    }

    /// Delete a user, their sessions and their tokens; their workspaces stay, the admins'.
    pub async fn delete_user(&self, username: &str) -> StoreResult<bool> {
        let mut tx = self.begin_write().await?;
        let Some(row) =
            sqlx::query("SELECT id FROM users WHERE username = $1").bind(username).fetch_optional(&mut *tx).await?
        else {
            return Ok(false);
        };
        let id: String = row.try_get("id")?;
        for sql in [
            "DELETE FROM admin_sessions WHERE user_id = $1",
            "DELETE FROM api_tokens WHERE user_id = $1",
            "DELETE FROM users WHERE id = $1",
        ] {
            sqlx::query(sql).bind(&id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// A new personal API token for `days` (no longer than the token `user` asks with),
    /// returned once, stored as its hash. At most [`MAX_LIVE_TOKENS`] live ones a user.
    pub async fn create_api_token(&self, user: &UserRef, name: &str, days: u32) -> StoreResult<(ApiToken, String)> {
        let now = self.clock.now();
        let expires_at = user.bounded(now.saturating_add(i64::from(days).saturating_mul(86_400_000)));
        let user_id = user.id.as_str();
        let (live,): (i64,) = sqlx::query_as(
            "SELECT COUNT(*) FROM api_tokens WHERE user_id = $1 AND revoked_at IS NULL AND expires_at > $2",
        )
        .bind(user_id)
        .bind(now)
        .fetch_one(&self.pool)
        .await?;
        if live >= MAX_LIVE_TOKENS {
            return Err(StoreError::Conflict(format!(
                "you have {MAX_LIVE_TOKENS} live tokens, the most one may have: revoke one first"
            )));
        }
        let (id, secret) = insert_token(&self.pool, user_id, name, now, expires_at).await?;
        Ok((ApiToken { id, name: name.into(), created_at: now, expires_at, revoked_at: None }, secret))
    }

    pub async fn api_tokens(&self, user_id: &str) -> StoreResult<Vec<ApiToken>> {
        let rows = sqlx::query(
            "SELECT id, name, created_at, expires_at, revoked_at FROM api_tokens WHERE user_id = $1 \
             ORDER BY created_at DESC, id",
        )
        .bind(user_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ApiToken {
                    id: row.try_get("id")?,
                    name: row.try_get("name")?,
                    created_at: row.try_get("created_at")?,
                    expires_at: row.try_get("expires_at")?,
                    revoked_at: row.try_get("revoked_at")?,
                })
            })
            .collect()
    }

    /// Revoke one of a user's tokens; false when they have no such live token.
    pub async fn revoke_api_token(&self, user_id: &str, token_id: &str) -> StoreResult<bool> {
        let updated =
            sqlx::query("UPDATE api_tokens SET revoked_at = $1 WHERE id = $2 AND user_id = $3 AND revoked_at IS NULL")
                .bind(self.clock.now())
                .bind(token_id)
                .bind(user_id)
                .execute(&self.pool)
                .await?
                .rows_affected();
        Ok(updated == 1)
    }

    /// The user a personal token belongs to, when it is live and they are enabled.
    pub async fn user_by_api_token(&self, token: &str) -> StoreResult<Option<UserRef>> {
        let now = self.clock.now();
        let sql = format!(
            "SELECT t.user_id, u.username, {}, t.id AS token_id, t.expires_at AS token_expires_at \
             FROM api_tokens t JOIN users u ON u.id = t.user_id \
             WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND t.expires_at > $2 AND u.disabled_at IS NULL",
            role_column(3)
        );
        let row = sqlx::query(&sql)
            .bind(hash_token(token))
            .bind(now)
            .bind(now.saturating_sub(PROVIDER_ROLE_FRESH_MS))
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let id: String = row.try_get("user_id")?;
        user_ref(&row, id)
    }
}

/// Insert a personal token, in a transaction or on the pool; its id and its secret, which
/// only its hash is stored as.
async fn insert_token<'e>(
    executor: impl sqlx::Executor<'e, Database = sqlx::Any>,
    user_id: &str,
    name: &str,
    created_at: i64,
    expires_at: i64,
) -> StoreResult<(String, String)> {
    let (id, secret) = (new_token()?, format!("wsync_{}", new_token()?));
    sqlx::query(
        "INSERT INTO api_tokens (id, user_id, name, token_hash, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&id)
    .bind(user_id)
    .bind(name)
    .bind(hash_token(&secret))
    .bind(created_at)
    .bind(expires_at)
    .execute(executor)
    .await?;
    Ok((id, secret))
}

/// What an identity provider's verified ID token says of a user.
#[derive(Debug, Clone)]
pub struct ProviderClaims<'a> {
    pub issuer: &'a str,
    pub subject: &'a str,
    /// The username to give on first sign-in (`access::username_from_claims`).
    pub username: &'a str,
    pub email: Option<&'a str>,
    pub name: Option<&'a str>,
    pub role: Role,
}
