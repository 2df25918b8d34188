-- Portable between SQLite and PostgreSQL: TEXT, BIGINT (milliseconds since the epoch), no serials.
CREATE TABLE IF NOT EXISTS agents (
    id TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL UNIQUE,
    image_pull_secrets TEXT NOT NULL DEFAULT '[]',
    created_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS workspaces (
    agent_id TEXT NOT NULL REFERENCES agents (id),
    name TEXT NOT NULL,
    namespace TEXT NOT NULL,
    image TEXT NOT NULL,
    cpu TEXT,
    memory TEXT,
    env TEXT NOT NULL DEFAULT '{}',
    desired_state TEXT NOT NULL,
    actual_state TEXT NOT NULL,
    desired_state_updated_at BIGINT NOT NULL,
    actual_state_updated_at BIGINT NOT NULL,
    deployment_resource_version TEXT,
    responded_to_agent_at BIGINT,
    force_include_all_resources BIGINT NOT NULL DEFAULT 0,
    last_reported_at BIGINT,
    error_type TEXT,
    error_message TEXT,
    error_first_seen BIGINT,
    error_last_seen BIGINT,
    error_desired_state TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, name)
);
