-- Sessions, their append-only event logs and their permission and question
-- requests. Times are unix nanoseconds in UTC; JSON is stored as text.
-- batch columns hold the number of the write batch that wrote the row, so
-- that readers can skip rows that are committed but not yet synced (see
-- durable.go).

CREATE TABLE meta (
	key   TEXT    NOT NULL PRIMARY KEY,
	value INTEGER NOT NULL
) STRICT;

INSERT INTO meta (key, value) VALUES ('epoch', 0);

CREATE TABLE sessions (
	id                TEXT    NOT NULL PRIMARY KEY,
	agent             TEXT    NOT NULL,
	model             TEXT    NOT NULL,
	mode              TEXT    NOT NULL,
	permission_mode   TEXT    NOT NULL,
	cwd               TEXT    NOT NULL,
	metadata          TEXT,
	status            TEXT    NOT NULL,
	native_session_id TEXT    NOT NULL,
	current_turn_id   TEXT    NOT NULL,
	created_at        INTEGER NOT NULL,
	updated_at        INTEGER NOT NULL,
	ended_at          INTEGER
) STRICT;

CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_status ON sessions (status, created_at, id);

-- Events are a rowid table, not WITHOUT ROWID: rows of all sessions are
-- appended at its end and only the primary key index is ordered by session,
-- which keeps the pages a commit writes to the log few.
CREATE TABLE events (
	session_id        TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	seq               INTEGER NOT NULL,
	id                TEXT    NOT NULL,
	time              INTEGER NOT NULL,
	schema            INTEGER NOT NULL,
	type              TEXT    NOT NULL,
	source            TEXT    NOT NULL,
	native_session_id TEXT    NOT NULL,
	turn_id           TEXT    NOT NULL,
	data              TEXT,
	raw               TEXT,
	batch             INTEGER NOT NULL,
	PRIMARY KEY (session_id, seq)
) STRICT;

-- seq is the seq of the requested event, which gives the creation order.
CREATE TABLE requests (
	session_id     TEXT    NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
	id             TEXT    NOT NULL,
	seq            INTEGER NOT NULL,
	kind           TEXT    NOT NULL,
	state          TEXT    NOT NULL,
	payload        TEXT,
	resolution     TEXT,
	created_at     INTEGER NOT NULL,
	resolved_at    INTEGER,
	batch          INTEGER NOT NULL,
	resolved_batch INTEGER,
	PRIMARY KEY (session_id, id)
) STRICT;

CREATE INDEX requests_by_seq ON requests (session_id, seq);
