-- Sessions, their append-only event logs and their permission and question
-- requests: the same versions as the SQLite store's migrations, in
-- PostgreSQL's terms. Times are unix nanoseconds in UTC (int8: timestamptz
-- keeps only microseconds); JSON the store does not look into is bytea,
-- kept byte for byte.
--
-- sessions.last_seq is the seq of the session's last event: an append
-- updates it in the transaction that inserts the events, so the row lock
-- orders concurrent writers, in this process or another, and seqs stay
-- gapless.

CREATE TABLE sessions (
	id                text   NOT NULL PRIMARY KEY,
	agent             text   NOT NULL,
	model             text   NOT NULL,
	mode              text   NOT NULL,
	permission_mode   text   NOT NULL,
	cwd               text   NOT NULL,
	metadata          text,
	status            text   NOT NULL,
	native_session_id text   NOT NULL,
	current_turn_id   text   NOT NULL,
	created_at        bigint NOT NULL,
	updated_at        bigint NOT NULL,
	ended_at          bigint,
	last_seq          bigint NOT NULL DEFAULT 0
);

CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_status ON sessions (status, created_at, id);

CREATE TABLE events (
	session_id        text   NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq               bigint NOT NULL,
	id                text   NOT NULL,
	time              bigint NOT NULL,
	schema            bigint NOT NULL,
	type              text   NOT NULL,
	source            text   NOT NULL,
	native_session_id text   NOT NULL,
	turn_id           text   NOT NULL,
	data              bytea,
	raw               bytea,
	PRIMARY KEY (session_id, seq)
);

-- seq is the seq of the requested event, which gives the creation order.
CREATE TABLE requests (
	session_id  text   NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	id          text   NOT NULL,
	seq         bigint NOT NULL,
	kind        text   NOT NULL,
	state       text   NOT NULL,
	payload     bytea,
	resolution  bytea,
	created_at  bigint NOT NULL,
	resolved_at bigint,
	PRIMARY KEY (session_id, id)
);

CREATE INDEX requests_by_seq ON requests (session_id, seq);
