-- Workspaces an agent reports that the control plane does not know (a database restored from
-- an old backup): shown to the operator, acknowledged to the agent, never sent config, and
-- never deleted without the operator's word (adopt or terminate).
CREATE TABLE IF NOT EXISTS orphans (
    agent_id TEXT NOT NULL REFERENCES agents (id),
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    deployment_resource_version TEXT,
    actual_state TEXT NOT NULL,
    first_seen BIGINT NOT NULL,
    last_seen BIGINT NOT NULL,
    PRIMARY KEY (agent_id, namespace, name)
);
