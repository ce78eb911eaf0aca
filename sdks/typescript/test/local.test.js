// A daemon on this machine without a daemon: the token file of its data
// directory (found, refused when others can read it or it is no token,
// never sent to another host) and requests over a unix socket, against a
// node:http server that records what it gets.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { AgentboxClient, AgentboxError } from "../src/index.js";
import { TokenFileError, checkTcpOwner, dataDir, isLocalUrl, localToken, readTokenFile } from "../src/local.js";

function tempDir(t) {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), "agentbox-local-"));
	t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
	return dir;
}

function writeToken(dir, tok, mode) {
	const file = path.join(dir, "token");
	fs.writeFileSync(file, tok);
	fs.chmodSync(file, mode);
	return file;
}

/** A server on a unix socket in dir that records each request's method, URL, headers and body. */
async function unixServer(t, dir, handler) {
	const seen = [];
	const server = http.createServer(async (req, res) => {
		const chunks = [];
		for await (const c of req) chunks.push(c);
		seen.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() });
		handler(req, res);
	});
	const sock = path.join(dir, "d.sock");
	await new Promise((resolve) => server.listen(sock, resolve));
	t.after(() => new Promise((resolve) => {
		server.closeAllConnections();
		server.close(resolve);
	}));
	return { url: "unix://" + sock, seen };
}

test("dataDir: AGENTBOX_DATA_DIR, else XDG_DATA_HOME/agentbox, else HOME/.local/share/agentbox", () => {
	const cases = [
		[{ AGENTBOX_DATA_DIR: "/d", XDG_DATA_HOME: "/x", HOME: "/h" }, "/d"],
		[{ XDG_DATA_HOME: "/x", HOME: "/h" }, "/x/agentbox"],
		[{ XDG_DATA_HOME: "relative", HOME: "/h" }, "/h/.local/share/agentbox"],
		[{ HOME: "/h" }, "/h/.local/share/agentbox"],
		[{}, undefined],
	];
	for (const [env, want] of cases) assert.equal(dataDir(env), want, JSON.stringify(env));
});

test("readTokenFile: a private file of ours, else a clear error", (t) => {
	const good = writeToken(tempDir(t), "tok-123\n", 0o600);
	assert.equal(readTokenFile(good), "tok-123");
	const cases = [
		["readable by others", (d) => writeToken(d, "tok", 0o644), /can be read or written by other users \(mode 0644\); run chmod 600/],
		["writable by group", (d) => writeToken(d, "tok", 0o620), /mode 0620/],
		["empty", (d) => writeToken(d, "\n", 0o600), /does not hold a token/],
		["spaces in it", (d) => writeToken(d, "a b", 0o600), /does not hold a token/],
		["a directory", (d) => d, /not a regular file/],
	];
	for (const [name, setup, want] of cases) {
		assert.throws(() => readTokenFile(setup(tempDir(t))), (err) => err instanceof TokenFileError && want.test(err.message), name);
	}
	const link = path.join(tempDir(t), "link");
	fs.symlinkSync(good, link);
	assert.throws(() => readTokenFile(link), { code: "ELOOP" });
	assert.throws(() => readTokenFile(path.join(tempDir(t), "none")), { code: "ENOENT" });
});

test("localToken: read for a daemon on this machine, never for another host", (t) => {
	const dir = tempDir(t);
	writeToken(dir, "local-tok", 0o600);
	const env = { AGENTBOX_DATA_DIR: dir };
	const cases = {
		"http://127.0.0.1:7777": "local-tok",
		"http://localhost:7777": "local-tok",
		"http://[::1]:7777": "local-tok",
		"http://127.8.9.1": "local-tok",
		"http://0.0.0.0:7777": "local-tok",
		"http://[::]:7777": "local-tok",
		"http://[::ffff:127.0.0.1]:7777": "local-tok",
		"unix:///run/agentbox.sock": "local-tok",
		"https://agentbox.example.com": undefined,
		"http://10.0.0.5:7777": undefined,
		"http://[::ffff:10.0.0.5]:7777": undefined,
		"http://localhost.example:1": undefined,
		"http://127.0.0.1.nip.io:7777": undefined,
	};
	for (const [url, want] of Object.entries(cases)) {
		assert.equal(localToken(url, env), want, url);
		assert.equal(isLocalUrl(url), want !== undefined, url);
	}
	assert.equal(localToken("http://127.0.0.1:1", { AGENTBOX_DATA_DIR: path.join(dir, "none") }), undefined);
});

test("unix socket: JSON requests, bodies and problems over the socket, Host agentbox, the token file's token", async (t) => {
	const dir = tempDir(t);
	writeToken(dir, "from-file", 0o600);
	const srv = await unixServer(t, dir, (req, res) => {
		if (req.url.startsWith("/v1/sessions/nope")) {
			res.writeHead(404, { "content-type": "application/problem+json" });
			return void res.end(JSON.stringify({ type: "https://agentbox.dev/problems/not-found", title: "Not found", status: 404 }));
		}
		res.writeHead(200, { "content-type": "application/json" });
		res.end(JSON.stringify({ status: "ok", version: "test" }));
	});
	const client = new AgentboxClient({ baseUrl: srv.url, env: { AGENTBOX_DATA_DIR: dir } });
	assert.equal(client.baseUrl, "http://agentbox");
	assert.deepEqual(await client.health(), { status: "ok", version: "test" });
	await client.sendMessage("s1", "hi");
	await assert.rejects(client.getSession("nope"), (err) => err instanceof AgentboxError && err.status === 404 && err.kind === "not-found");
	assert.deepEqual(srv.seen.map((r) => [r.method, r.url, r.headers.host, r.headers.authorization]), [
		["GET", "/v1/health", "agentbox", "Bearer from-file"],
		["POST", "/v1/sessions/s1/messages", "agentbox", "Bearer from-file"],
		["GET", "/v1/sessions/nope", "agentbox", "Bearer from-file"],
	]);
	assert.deepEqual(JSON.parse(srv.seen[1].body), { text: "hi" });

	// An explicit token, then AGENTBOX_TOKEN, win over the file; localToken: false sends none.
	for (const [opts, want] of [
		[{ token: "given" }, "Bearer given"],
		[{ env: { AGENTBOX_DATA_DIR: dir, AGENTBOX_TOKEN: "from-env" } }, "Bearer from-env"],
		[{ localToken: false, env: { AGENTBOX_DATA_DIR: dir } }, undefined],
	]) {
		await new AgentboxClient({ baseUrl: srv.url, env: {}, ...opts }).health();
		assert.equal(srv.seen.at(-1).headers.authorization, want, JSON.stringify(opts));
	}
});

test("a token file others can read is refused with a clear error, and nothing is sent", async (t) => {
	const dir = tempDir(t);
	const file = writeToken(dir, "leaked", 0o644);
	const srv = await unixServer(t, dir, (req, res) => res.end("{}"));
	const client = new AgentboxClient({ baseUrl: srv.url, env: { AGENTBOX_DATA_DIR: dir } });
	await assert.rejects(client.health(), (err) => err instanceof TokenFileError &&
		err.message === `token file ${file} can be read or written by other users (mode 0644); run chmod 600 ${file}`);
	// An event stream gives up at once: no retry cures the file.
	await assert.rejects((async () => { for await (const _ of client.events("s1")) break; })(), TokenFileError);
	assert.equal(srv.seen.length, 0);
});

test("unix socket: nothing listening is a network error", async (t) => {
	const client = new AgentboxClient({ baseUrl: "unix://" + path.join(tempDir(t), "none.sock"), env: {} });
	await assert.rejects(client.health(), (err) => err instanceof TypeError && err.message === "fetch failed" && err.cause?.code === "ENOENT");
});

test("base URLs: unix needs an absolute path, other schemes are refused", () => {
	for (const bad of ["unix://host/x.sock", "ftp://x", "unix:relative.sock"]) {
		assert.throws(() => new AgentboxClient({ baseUrl: bad, env: {} }), TypeError, bad);
	}
});

// Root can play another user: the token file's token is not sent to a
// daemon socket another user owns (as another user, these checks need a
// second account and are left to the Go SDK's tests).
test("the token file's token is not sent to a socket of another user", async (t) => {
	if (process.geteuid?.() !== 0) return;
	const dir = tempDir(t);
	writeToken(dir, "from-file", 0o600);
	const srv = await unixServer(t, dir, (req, res) => res.end("{}"));
	fs.chownSync(path.join(dir, "d.sock"), 12345, 12345);
	await assert.rejects(new AgentboxClient({ baseUrl: srv.url, env: { AGENTBOX_DATA_DIR: dir } }).health(),
		(err) => err instanceof TokenFileError && /belongs to user 12345, not to you or root/.test(err.message));
	await new AgentboxClient({ baseUrl: srv.url, token: "given", env: {} }).health();
	assert.deepEqual(srv.seen.map((r) => r.headers.authorization), ["Bearer given"]);

	// A loopback port another user listens on.
	const child = spawn(process.execPath, ["-e", `const s = require("node:net").createServer().listen(0, "127.0.0.1", () => console.log(s.address().port));`], { uid: 12345, gid: 12345, stdio: ["ignore", "pipe", "inherit"] });
	t.after(() => child.kill());
	const [line] = await once(child.stdout, "data");
	const url = `http://127.0.0.1:${Number(line.toString())}`;
	assert.throws(() => checkTcpOwner(new URL(url)), (err) => err instanceof TokenFileError && /belongs to user 12345/.test(err.message));
	await assert.rejects(new AgentboxClient({ baseUrl: url, env: { AGENTBOX_DATA_DIR: dir } }).health(), TokenFileError);
	// One of ours passes.
	const ours = http.createServer((req, res) => res.end("{}"));
	await new Promise((resolve) => ours.listen(0, "127.0.0.1", resolve));
	t.after(() => new Promise((resolve) => ours.close(resolve)));
	checkTcpOwner(new URL(`http://127.0.0.1:${ours.address().port}`));
	checkTcpOwner(new URL(`http://localhost:${ours.address().port}`));
});
