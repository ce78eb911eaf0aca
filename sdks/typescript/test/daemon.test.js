// The SDK against a real daemon: AGENTBOX_URL and AGENTBOX_TOKEN name it
// (internal/sdkgen/typescript's TestNodeSDK starts one and runs this file;
// TestNodeSDKUnix runs it again against a daemon on a unix socket, with no
// AGENTBOX_TOKEN: the client reads the daemon's token file).
// Without AGENTBOX_URL these tests skip.
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { AgentboxClient, AgentboxError, endOfTurn } from "../src/index.js";

const url = process.env.AGENTBOX_URL;
const skip = url ? false : "AGENTBOX_URL is not set: no daemon to test against";

/** The text that makes the mock agent run steps. */
const mock = (...steps) => "/mock " + JSON.stringify(steps);

/** Asserts that events have the seqs from..from+n-1, each once, in order. */
function assertContiguous(events, from) {
	events.forEach((ev, i) => assert.equal(ev.seq, from + i, `event ${i} has seq ${ev.seq}, want ${from + i}`));
}

test("flow: create a session, send a message, stream events, answer a permission, read a file", { skip }, async (t) => {
	const client = new AgentboxClient(); // AGENTBOX_URL, AGENTBOX_TOKEN
	assert.equal((await client.health()).status, "ok");
	const session = await client.createSession({ agent: "mock" });
	assert.equal(session.agent, "mock");

	const content = "hello from the typescript sdk\n";
	const seen = [];
	const asked = [];
	const done = await client.runTurn(session.id, mock(
		{ kind: "permission", text: "write hello.txt" },
		{ kind: "write", path: "hello.txt", content },
		{ kind: "text", text: "wrote it" },
	), {
		onEvent: (ev) => { seen.push(ev); },
		onPermission: (req) => {
			asked.push(req);
			return "allow";
		},
	});
	assert.equal(done.stop_reason, "end_turn");
	assert.equal(asked.length, 1);
	assert.equal(asked[0].title, "write hello.txt");
	assertContiguous(seen, seen[0].seq);
	const types = seen.map((ev) => ev.type);
	assert.equal(types[0], "turn.started");
	assert.equal(types.at(-1), "turn.completed");
	const resolved = seen.find((ev) => ev.type === "permission.resolved");
	assert.deepEqual([resolved.data.id, resolved.data.decision, resolved.data.by], [asked[0].id, "allow", "user"]);
	const change = seen.find((ev) => ev.type === "item.completed" && ev.data.item.kind === "file_change");
	assert.equal(change.data.item.changes[0].path, "hello.txt");
	const text = seen.filter((ev) => ev.type === "item.delta" && ev.data.field === "text").map((ev) => ev.data.delta).join("");
	assert.match(text, /wrote it/);

	// The same events from the log, through the generated operation table.
	const page = await client.call("listEvents", { params: { id: session.id, after: seen[0].seq - 1, limit: seen.length } });
	assert.deepEqual(page.events.map((ev) => ev.id), seen.map((ev) => ev.id));

	await t.test("read the file", async (t) => {
		assert.equal(await client.readTextFile(session.id, "hello.txt"), content);
		const range = await client.readFile(session.id, "hello.txt", { offset: 6, length: 4 });
		assert.equal(new TextDecoder().decode(range), "from");
		await assert.rejects(client.readFile(session.id, "../outside"), (err) => err instanceof AgentboxError && err.status >= 400 && err.status < 500);
	});
	await client.deleteSession(session.id);
});

test("a denied permission: the write does not happen and the item is declined", { skip }, async () => {
	const client = new AgentboxClient();
	const session = await client.createSession({ agent: "mock" });
	const seen = [];
	const done = await client.runTurn(session.id, mock(
		{ kind: "permission" },
		{ kind: "write", path: "no.txt", content: "x" },
	), { onEvent: (ev) => { seen.push(ev); }, onPermission: () => ({ decision: "deny", message: "not now" }) });
	assert.equal(done.stop_reason, "end_turn");
	const resolved = seen.find((ev) => ev.type === "permission.resolved");
	assert.equal(resolved.data.decision, "deny");
	const item = seen.find((ev) => ev.type === "item.completed" && ev.data.item.kind === "file_change");
	assert.equal(item.data.item.status, "declined");
	await client.deleteSession(session.id);
});

/**
 * A proxy to the daemon (TCP, or a unix socket for one on a unix socket) that cuts every connection carrying an event
 * stream after a few kilobytes (anywhere, often inside an event), abruptly
 * or cleanly in turn, the way networks and proxies do. It forwards request
 * heads whole as they come in one read, which holds for the small requests
 * of this test.
 */
async function cuttingProxy(target) {
	const { protocol, hostname, port, pathname } = new URL(target);
	const unix = protocol === "unix:";
	let cuts = 0;
	const sockets = new Set();
	const server = net.createServer((down) => {
		const up = unix ? net.connect(pathname) : net.connect(Number(port), hostname);
		sockets.add(down).add(up);
		let streaming = false;
		let budget = 0;
		down.on("data", (b) => {
			let req = b.toString("latin1");
			if (req.includes("/events/stream")) {
				streaming = true;
				budget = 2048 + Math.floor(Math.random() * 6144);
			}
			// The daemon answers only to its own name (DNS rebinding): name it,
			// as a reverse proxy configured for it does.
			if (!unix) req = req.replace(/\r\nhost: [^\r]*/i, `\r\nhost: ${hostname}:${port}`);
			up.write(Buffer.from(req, "latin1"));
		});
		up.on("data", (b) => {
			if (!streaming) return void down.write(b);
			if (b.length < budget) {
				budget -= b.length;
				return void down.write(b);
			}
			down.write(b.subarray(0, budget));
			cuts++;
			// A unix socket has no reset: destroying it is the abrupt cut.
			if (cuts % 2 === 0) down.end();
			else if (unix) down.destroy();
			else down.resetAndDestroy();
			up.destroy();
		});
		const close = () => {
			down.destroy();
			up.destroy();
		};
		down.on("error", close).on("close", close);
		up.on("error", close).on("close", close);
	});
	let proxyUrl, dir;
	if (unix) {
		dir = fs.mkdtempSync(path.join(os.tmpdir(), "agentbox-proxy-"));
		const sock = path.join(dir, "p.sock");
		await new Promise((resolve) => server.listen(sock, resolve));
		proxyUrl = "unix://" + sock;
	} else {
		await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
		proxyUrl = `http://127.0.0.1:${server.address().port}`;
	}
	return {
		url: proxyUrl,
		get cuts() {
			return cuts;
		},
		close() {
			for (const s of sockets) s.destroy();
			return new Promise((resolve) => server.close(resolve)).then(() => dir && fs.rmSync(dir, { recursive: true, force: true }));
		},
	};
}

test("the event stream resumes after cuts without gaps or repeats", { skip }, async () => {
	const direct = new AgentboxClient();
	const proxy = await cuttingProxy(url);
	try {
		const client = new AgentboxClient({ baseUrl: proxy.url });
		const session = await direct.createSession({ agent: "mock" });
		const after = await direct.lastSeq(session.id);
		const { turn_id: turnId } = await direct.sendMessage(session.id, mock({ kind: "long", count: 600, delay: "1ms", chunk: 1 }));
		const got = [];
		let reconnects = 0;
		for await (const ev of client.events(session.id, {
			after, until: endOfTurn(turnId), minBackoff: 5, maxBackoff: 50,
			onReconnect: () => { reconnects++; },
		})) {
			got.push(ev);
		}
		assert.ok(proxy.cuts >= 3, `only ${proxy.cuts} cuts`);
		assert.ok(reconnects >= proxy.cuts, `${reconnects} reconnections for ${proxy.cuts} cuts`);
		assertContiguous(got, after + 1);
		assert.equal(got.at(-1).type, "turn.completed");
		// Exactly the log, event for event.
		const log = [];
		for (let a = after; ;) {
			const page = await direct.listEvents(session.id, { after: a, limit: 1000 });
			log.push(...page.events);
			if (!page.has_more) break;
			a = page.next_after;
		}
		assert.deepEqual(got, log.filter((ev) => ev.seq <= got.at(-1).seq));
		await direct.deleteSession(session.id);
	} finally {
		await proxy.close();
	}
});

test("resume by seq: a new stream starts right after the given seq", { skip }, async () => {
	const client = new AgentboxClient();
	const session = await client.createSession({ agent: "mock" });
	const first = await client.runTurn(session.id, mock({ kind: "text", text: "one two three four", chunk: 4 }));
	assert.equal(first.stop_reason, "end_turn");
	const all = [];
	const last = await client.lastSeq(session.id);
	for await (const ev of client.events(session.id, { until: (ev) => ev.seq === last })) all.push(ev);
	assertContiguous(all, 1);
	const mid = all[Math.floor(all.length / 2)].seq;
	const rest = [];
	for await (const ev of client.events(session.id, { after: mid, until: (ev) => ev.seq === last })) rest.push(ev);
	assert.deepEqual(rest, all.filter((ev) => ev.seq > mid));
	await client.deleteSession(session.id);
});

test("errors are problem+json documents", { skip }, async () => {
	const client = new AgentboxClient();
	const cases = [
		{ name: "unknown session", call: () => client.getSession("ses_nope"), status: 404, kind: "not-found" },
		{ name: "unknown agent", call: () => client.createSession({ agent: "no-such-agent" }), status: 422, kind: "unknown-agent" },
		{ name: "bad input", call: () => client.call("createSession", { body: { agent: "" } }), status: 422, kind: "validation" },
		{ name: "bad token", call: () => new AgentboxClient({ token: "wrong" }).listSessions(), status: 401, kind: "unauthorized" },
		{ name: "stream of an unknown session", call: async () => { for await (const _ of client.events("ses_nope")) break; }, status: 404, kind: "not-found" },
	];
	for (const c of cases) {
		await assert.rejects(c.call(), (err) => {
			assert.ok(err instanceof AgentboxError, `${c.name}: ${err}`);
			assert.equal(err.status, c.status, c.name);
			assert.equal(err.kind, c.kind, c.name);
			assert.ok(err.type.startsWith("https://agentbox.dev/problems/"), c.name);
			assert.ok(err.title, c.name);
			return true;
		}, c.name);
	}
	const err = await client.call("createSession", { body: { agent: "" } }).catch((e) => e);
	assert.ok(err.errors.length > 0 && err.errors[0].location, "validation problems name the invalid input");
});

// The claude CLI against internal/fakellm: TestNodeSDKClaude sets
// AGENTBOX_FAKELLM_URL to the fake model's permission scenario (one shell
// call, `printf approved > approved.txt`, then "done").
const llm = process.env.AGENTBOX_FAKELLM_URL;
const skipClaude = skip || (llm ? false : "AGENTBOX_FAKELLM_URL is not set: internal/sdkgen/typescript TestNodeSDKClaude runs this one");

test("claude: the same flow with the real CLI against the fake LLM", { skip: skipClaude }, async (t) => {
	const client = new AgentboxClient();
	const session = await client.createSession({
		agent: "claude", permission_mode: "default",
		env: { ANTHROPIC_BASE_URL: llm, ANTHROPIC_API_KEY: "sk-fake-sdk" },
	});
	const seen = [];
	const asked = [];
	const done = await client.runTurn(session.id, "Write the approval file please", {
		onEvent: (ev) => { seen.push(ev); },
		onPermission: (req) => {
			asked.push(req);
			return "allow";
		},
	});
	assert.equal(done.stop_reason, "end_turn", JSON.stringify(seen.filter((ev) => ev.type === "error")));
	assert.ok(asked.length >= 1, "claude asked no permission");
	assertContiguous(seen, seen[0].seq);
	const cmd = seen.find((ev) => ev.type === "item.completed" && ev.data.item.kind === "command");
	assert.ok(cmd, "no command item");
	await t.test("read the file", async (t) => {
		assert.equal(await client.readTextFile(session.id, "approved.txt"), "approved");
	});
	await client.deleteSession(session.id);
});
