-- The names (never the values) of the environment variables a client gave
-- a session at create, as a JSON array, so that a resume after a daemon
-- restart can say which of them to send again. NULL: none.
ALTER TABLE sessions ADD COLUMN env_names text;
