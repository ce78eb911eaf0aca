-- The lease of a session (store.Leases): the daemon that drives its agent
-- (lease_owner, '' when none), the URL it advertises for forwarded
-- requests, the epoch (one more each time the lease passes to another
-- owner) and when it expires, in unix nanoseconds by the server's clock.
-- Appends and the other writes of a driver carry its epoch and are
-- refused unless it is lease_epoch (fencing), in the statement that
-- writes.
ALTER TABLE sessions
	ADD COLUMN lease_owner   text   NOT NULL DEFAULT '',
	ADD COLUMN lease_addr    text   NOT NULL DEFAULT '',
	ADD COLUMN lease_epoch   bigint NOT NULL DEFAULT 0,
	ADD COLUMN lease_expires bigint NOT NULL DEFAULT 0;
