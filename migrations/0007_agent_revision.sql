-- Bumped by every write to an agent's workspaces, under the agent's row lock: a reconcile on
-- PostgreSQL reads it with the rows and writes only while it is unchanged (optimistic).
ALTER TABLE agents ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
