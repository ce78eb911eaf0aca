-- The SQLite store keeps its events in append order with the per-session
-- order in a separate index written in bulk (its 0006). PostgreSQL keeps
-- its layout: the version exists so that both stores keep the same
-- numbering.
SELECT 1;
