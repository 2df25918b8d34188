-- Who may talk to the control plane (#19). An agent's old token keeps working until
-- previous_token_expires_at after a rotation; a revoked agent is refused every call.
ALTER TABLE agents ADD COLUMN previous_token_hash TEXT;
ALTER TABLE agents ADD COLUMN previous_token_expires_at BIGINT;
ALTER TABLE agents ADD COLUMN revoked_at BIGINT;
CREATE INDEX IF NOT EXISTS agents_previous_token_hash ON agents (previous_token_hash);

-- The admin token generated on first start, as its SHA-256; one row, id 'admin'.
CREATE TABLE IF NOT EXISTS admin_tokens (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- Signed-in browsers: the session cookie's SHA-256, its CSRF token, and when it ends.
CREATE TABLE IF NOT EXISTS admin_sessions (
    session_hash TEXT PRIMARY KEY,
    csrf_token TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
