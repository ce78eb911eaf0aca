// The event stream's recovery from what the real daemon never does but a
// network or a proxy in between may: repeated events, gaps, a 503 before
// the stream, an answer that is not an event stream. A small HTTP server
// here plays the daemon's two routes, each case scripted per connection.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { AgentboxClient, AgentboxError, StreamError } from "../src/index.js";

const ev = (seq) => ({ id: `evt_${seq}`, seq, session_id: "s1", time: "2026-12-02T00:00:00Z", schema: 1, type: "native", source: "agent", data: { native_type: "n" } });
const frame = (seq) => `id: ${seq}\nevent: native\ndata: ${JSON.stringify(ev(seq))}\n\n`;

/** Serves the scripted stream connections in turn, and the log for gap filling; records each request. */
async function fakeDaemon(connections) {
	const requests = [];
	const server = http.createServer((req, res) => {
		const u = new URL(req.url, "http://x");
		requests.push({ path: u.pathname, query: Object.fromEntries(u.searchParams), lastEventId: req.headers["last-event-id"], auth: req.headers.authorization });
		if (u.pathname === "/v1/sessions/s1/events") {
			const after = Number(u.searchParams.get("after"));
			const limit = Number(u.searchParams.get("limit"));
			const events = [];
			for (let s = after + 1; s <= after + limit; s++) events.push(ev(s));
			res.writeHead(200, { "content-type": "application/json" });
			return res.end(JSON.stringify({ events, has_more: false, next_after: after + limit }));
		}
		const script = connections.shift();
		if (!script) return res.destroy();
		script(res);
	});
	await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
	return {
		url: `http://127.0.0.1:${server.address().port}`,
		requests,
		close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); }),
	};
}

const sse = (res, body, end) => {
	res.writeHead(200, { "content-type": "text/event-stream" });
	res.write("retry: 1\n\n" + body);
	if (end) res.end();
};

test("stream: repeats are dropped, a gap is filled from the log, a cut resumes from the last seq", async () => {
	const d = await fakeDaemon([
		(res) => sse(res, frame(1) + frame(2) + frame(2) + frame(1) + frame(5), true),
		(res) => sse(res, frame(5) + frame(6), false),
	]);
	try {
		const c = new AgentboxClient({ baseUrl: d.url, token: "tok" });
		const got = [];
		for await (const e of c.events("s1", { until: (e) => e.seq === 6, minBackoff: 1, maxBackoff: 5 })) got.push(e.seq);
		assert.deepEqual(got, [1, 2, 3, 4, 5, 6]);
		const streams = d.requests.filter((r) => r.path.endsWith("/stream"));
		assert.equal(streams.length, 2);
		assert.deepEqual([streams[0].lastEventId, streams[0].query.after], [undefined, undefined]);
		assert.deepEqual([streams[1].lastEventId, streams[1].query.after], ["5", "5"]);
		const fill = d.requests.find((r) => r.path === "/v1/sessions/s1/events");
		assert.deepEqual(fill.query, { after: "2", limit: "2" });
		assert.ok(d.requests.every((r) => r.auth === "Bearer tok"));
	} finally {
		await d.close();
	}
});

test("stream: a 503 is retried, a 404 ends the stream at once with its problem", async () => {
	const problem = (status, kind) => (res) => {
		res.writeHead(status, { "content-type": "application/problem+json" });
		res.end(JSON.stringify({ type: `https://agentbox.dev/problems/${kind}`, title: kind, status }));
	};
	const d = await fakeDaemon([problem(503, "unavailable"), problem(404, "not-found")]);
	try {
		const c = new AgentboxClient({ baseUrl: d.url });
		let reconnects = 0;
		await assert.rejects(async () => {
			for await (const _ of c.events("s1", { minBackoff: 1, maxBackoff: 5, onReconnect: () => { reconnects++; } })) break;
		}, (err) => err instanceof AgentboxError && err.kind === "not-found");
		assert.equal(reconnects, 1);
	} finally {
		await d.close();
	}
});

test("stream: an answer that is not an event stream, or a malformed event, is permanent", async () => {
	const d = await fakeDaemon([
		(res) => {
			res.writeHead(200, { "content-type": "text/html" });
			res.end("<html>");
		},
		(res) => sse(res, "event: native\ndata: {not json\n\n", false),
	]);
	try {
		const c = new AgentboxClient({ baseUrl: d.url });
		for (let i = 0; i < 2; i++) {
			await assert.rejects(async () => {
				for await (const _ of c.events("s1", { minBackoff: 1 })) break;
			}, StreamError);
		}
	} finally {
		await d.close();
	}
});

test("stream: maxAttempts gives up after that many failures in a row", async () => {
	const d = await fakeDaemon([(res) => res.destroy(), (res) => res.destroy(), (res) => res.destroy()]);
	try {
		const c = new AgentboxClient({ baseUrl: d.url });
		await assert.rejects(async () => {
			for await (const _ of c.events("s1", { minBackoff: 1, maxBackoff: 2, maxAttempts: 3 })) break;
		}, (err) => err instanceof StreamError && /giving up after 3 attempts/.test(err.message));
		assert.equal(d.requests.length, 3);
	} finally {
		await d.close();
	}
});
