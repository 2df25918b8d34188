-- People (#38): users keyed by their identity provider's issuer and subject ('local' and the
-- username for users an admin creates), their personal API tokens (hashed), who a session
-- and a workspace belong to, and the audit trail of every write.
CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    username TEXT NOT NULL UNIQUE,
    email TEXT,
    display_name TEXT,
    role TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_sign_in_at BIGINT,
    disabled_at BIGINT,
    UNIQUE (issuer, subject)
);

CREATE TABLE IF NOT EXISTS api_tokens (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    token_hash TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    revoked_at BIGINT,
    last_used_at BIGINT
);
CREATE INDEX IF NOT EXISTS api_tokens_user ON api_tokens (user_id);

-- NULL: signed in with the admin token (break-glass).
ALTER TABLE admin_sessions ADD COLUMN user_id TEXT;
-- The personal token a session was opened with: revoking it ends the session.
ALTER TABLE admin_sessions ADD COLUMN api_token_id TEXT;

-- The owning user's id; `owner` keeps the name the workspace was created for. A workspace
-- whose owner names no user stays the admins' until an admin creates a user of that name.
ALTER TABLE workspaces ADD COLUMN owner_id TEXT;
CREATE INDEX IF NOT EXISTS workspaces_owner ON workspaces (owner_id, agent_id, name);

CREATE TABLE IF NOT EXISTS audit_events (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor_id TEXT,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    outcome TEXT NOT NULL,
    agent_id TEXT,
    workspace TEXT,
    client TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_at ON audit_events (at, id);
CREATE INDEX IF NOT EXISTS audit_events_actor ON audit_events (actor_id, at);

-- Sign-ins in flight at an identity provider: state, nonce and PKCE verifier, found by the
-- hash of a short-lived cookie of their own and taken once.
CREATE TABLE IF NOT EXISTS oidc_sign_ins (
    cookie_hash TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    nonce TEXT NOT NULL,
    pkce_verifier TEXT NOT NULL,
    next_path TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
