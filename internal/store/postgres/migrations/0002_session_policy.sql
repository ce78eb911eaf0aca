-- The effective sandbox policy of a session (JSON), so that a resumed
-- session runs under exactly the policy it was created with. NULL: the
-- session runs without a sandbox.
ALTER TABLE sessions ADD COLUMN policy bytea;
