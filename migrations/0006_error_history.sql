-- A workspace's earlier errors (#21): one row per error the agent reported, first sighting
-- kept; the store keeps the newest few per workspace.
CREATE TABLE IF NOT EXISTS workspace_errors (
    agent_id TEXT NOT NULL,
    name TEXT NOT NULL,
    error_type TEXT NOT NULL,
    message TEXT NOT NULL,
    first_seen BIGINT NOT NULL,
    PRIMARY KEY (agent_id, name, first_seen)
);
