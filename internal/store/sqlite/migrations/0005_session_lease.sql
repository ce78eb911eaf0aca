-- Leases of sessions (store.Leases) are kept in memory by the SQLite
-- store: one daemon opens a database file at a time (its lock), so a
-- lease never outlives the process holding it. The version exists so that
-- both stores keep the same numbering.
SELECT 1;
