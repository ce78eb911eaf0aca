-- The MCP servers a client gave a session at create, as a JSON array,
-- without their env and header values (never stored), so that a resume
-- starts the agent with them again and says which values to send. NULL:
-- none.
ALTER TABLE sessions ADD COLUMN mcp_servers bytea;
