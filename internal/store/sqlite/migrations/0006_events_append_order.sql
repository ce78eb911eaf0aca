-- Events in append order, with the per-session order kept apart and
-- written less often (see index.go).
--
-- Before, events carried PRIMARY KEY (session_id, seq): every commit
-- wrote one leaf of that index per session it appended to, so a batch
-- over 16 sessions wrote about 30 pages to the log where its rows fill 5.
-- Now events is ordered by pos alone, which the writer assigns in append
-- order (a batch's rows grouped by session), so a batch's rows fill the
-- last pages of one b-tree, and event_runs maps each session's runs of
-- rows (consecutive seqs at consecutive pos) to where they start, for
-- every row up to the 'indexed' pos of meta. The writer adds the runs
-- after it to event_runs in bulk (one leaf per session for many batches,
-- not for each); readers find those few rows by scanning events after
-- 'indexed'. pos is an INTEGER PRIMARY KEY so that VACUUM keeps it.
CREATE TABLE events_by_pos (
	pos               INTEGER PRIMARY KEY,
	session_id        TEXT    NOT NULL,
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
	batch             INTEGER NOT NULL
) STRICT;

-- The old rows keep their order (rowid: the order they were appended in).
INSERT INTO events_by_pos (session_id, seq, id, time, schema, type, source, native_session_id, turn_id, data, raw, batch)
	SELECT session_id, seq, id, time, schema, type, source, native_session_id, turn_id, data, raw, batch
	FROM events ORDER BY rowid;

DROP TABLE events;
ALTER TABLE events_by_pos RENAME TO events;

CREATE TABLE event_runs (
	session_id TEXT    NOT NULL,
	last_seq   INTEGER NOT NULL,
	first_seq  INTEGER NOT NULL,
	first_pos  INTEGER NOT NULL,
	PRIMARY KEY (session_id, last_seq)
) STRICT, WITHOUT ROWID;

-- A run per old row: they were appended interleaved, and a run of one is
-- right whatever the rows hold.
INSERT INTO event_runs (session_id, last_seq, first_seq, first_pos)
	SELECT session_id, seq, seq, pos FROM events ORDER BY session_id, seq;

INSERT INTO meta (key, value) VALUES ('indexed', (SELECT COALESCE(MAX(pos), 0) FROM events));
