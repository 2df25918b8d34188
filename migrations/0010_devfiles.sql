-- Workspaces from devfiles (#40): the devfile as its user wrote it (shown back, never built
-- from), and flattened, as it was accepted: what its config is built from, frozen at creation.
-- A workspace created from an image has neither.
ALTER TABLE workspaces ADD COLUMN devfile TEXT;
ALTER TABLE workspaces ADD COLUMN processed_devfile TEXT;
