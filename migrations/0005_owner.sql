-- A workspace's owner (GitLab's user), for workspaces_per_user_quota; NULL when none was named.
ALTER TABLE workspaces ADD COLUMN owner TEXT;
