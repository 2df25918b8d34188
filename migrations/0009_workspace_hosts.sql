-- Opening a workspace (#39). A browser signed in to the control plane is handed a one-time
-- code for one workspace host, bound to a state the host gave that browser in a cookie (so a
-- code cannot be planted in another browser); the host trades it for a session of its own, which lives no
-- longer than the page session it came from (signing out, a disabled user or a revoked
-- token end both). Each workspace's last activity through its hosts, the CLI or SSH.
CREATE TABLE IF NOT EXISTS workspace_host_codes (
    code_hash TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    page_session_hash TEXT NOT NULL,
    state_hash TEXT NOT NULL,
    next_path TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE IF NOT EXISTS workspace_host_sessions (
    session_hash TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    page_session_hash TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);

ALTER TABLE workspaces ADD COLUMN last_activity_at BIGINT;

-- Which process holds each agent's tunnel (and which of its tunnels), and where its peers
-- reach it: a process without the tunnel forwards a stream through the one that has it,
-- signed with the secret the processes share (never in the database).
CREATE TABLE IF NOT EXISTS agent_tunnels (
    agent_id TEXT PRIMARY KEY,
    process_id TEXT NOT NULL,
    tunnel_id TEXT NOT NULL,
    advertise_url TEXT NOT NULL,
    held_at BIGINT NOT NULL
);
