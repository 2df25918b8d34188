-- GitLab's per-agent workspace settings (#20), as JSON with GitLab's keys. A workspace keeps
-- the settings it was created under (NULL: created before settings existed, built as then).
ALTER TABLE agents ADD COLUMN workspaces_config TEXT NOT NULL DEFAULT '{}';
ALTER TABLE workspaces ADD COLUMN agent_config TEXT;
