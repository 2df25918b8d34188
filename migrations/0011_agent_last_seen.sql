-- When the agent last reconciled (ms since the epoch); NULL until it does. Nullable, so that a
-- control plane of the release before keeps writing agents while a rollout runs (ARCHITECTURE.md).
ALTER TABLE agents ADD COLUMN last_seen_at BIGINT;
