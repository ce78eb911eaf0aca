// A daemon on this machine, the way the Go SDK (client/token.go,
// client/client.go) and the Python SDK find it: the token a daemon started
// without one wrote to its data directory, and requests over a unix socket.
// Node only: imported lazily by the client, so the rest runs anywhere fetch does.

import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { Readable } from "node:stream";

/** The file, in its data directory, where a daemon started without a token keeps the one it made. */
export const TOKEN_FILE_NAME = "token";

/** The Host of requests sent over a unix socket (the Go client's). */
export const UNIX_HOST = "agentbox";

/** The token file cannot be used: it is not private, not ours, or holds no token. */
export class TokenFileError extends Error {
	constructor(message) {
		super(message);
		this.name = "TokenFileError";
	}
}

/**
 * The data directory of a daemon started with no --data-dir: $AGENTBOX_DATA_DIR,
 * else $XDG_DATA_HOME/agentbox (absolute only), else $HOME/.local/share/agentbox;
 * undefined when none is set.
 */
export function dataDir(env) {
	if (env.AGENTBOX_DATA_DIR) return env.AGENTBOX_DATA_DIR;
	if (env.XDG_DATA_HOME && path.isAbsolute(env.XDG_DATA_HOME)) return path.join(env.XDG_DATA_HOME, "agentbox");
	if (env.HOME) return path.join(env.HOME, ".local", "share", "agentbox");
	return undefined;
}

/**
 * Reads a daemon's token file, refusing a symbolic link, a file that is not
 * regular, one other users can read or write, and one another user owns:
 * a token others can read is no secret. A missing file throws ENOENT.
 */
export function readTokenFile(file) {
	const fd = fs.openSync(file, fs.constants.O_RDONLY | (fs.constants.O_NOFOLLOW ?? 0));
	try {
		const st = fs.fstatSync(fd);
		if (!st.isFile()) throw new TokenFileError(`token file ${file} is not a regular file`);
		const perm = st.mode & 0o777;
		if (perm & 0o077) {
			throw new TokenFileError(`token file ${file} can be read or written by other users (mode ${perm.toString(8).padStart(4, "0")}); run chmod 600 ${file}`);
		}
		const me = process.geteuid?.();
		if (me !== undefined && st.uid !== me) throw new TokenFileError(`token file ${file} belongs to user ${st.uid}, not to you`);
		const buf = Buffer.alloc(1024);
		const n = fs.readSync(fd, buf, 0, buf.length, 0);
		const tok = buf.subarray(0, n).toString("latin1").trim();
		if (!tok || /[^\x21-\x7e]/.test(tok)) throw new TokenFileError(`token file ${file} does not hold a token`);
		return tok;
	} finally {
		fs.closeSync(fd);
	}
}

/** Whether url names this machine: a unix socket, a loopback or unspecified address, or localhost. */
export function isLocalUrl(url) {
	let u;
	try {
		u = new URL(url);
	} catch {
		return false;
	}
	if (u.protocol === "unix:") return true;
	if (u.protocol !== "http:" && u.protocol !== "https:") return false;
	let host = u.hostname.toLowerCase().replace(/\.$/, "");
	if (host === "localhost") return true;
	if (host.startsWith("[")) {
		host = host.slice(1, -1);
		const mapped = /^::ffff:(.+)$/.exec(host);
		if (!mapped) return host === "::1" || host === "::";
		host = mapped[1];
		// WHATWG URL writes a mapped IPv4 address as hex: ::ffff:7f00:1.
		const hex = /^([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
		if (hex) return (parseInt(hex[1], 16) >> 8) === 127 || (hex[1] === "0" && hex[2] === "0");
	}
	// WHATWG URL has already normalised IPv4 forms (127.1, 0x7f.1) to dotted quads.
	return /^127\.\d+\.\d+\.\d+$/.test(host) || host === "0.0.0.0";
}

/**
 * The token of the daemon at baseUrl when it runs on this machine: the one
 * in the token file of the data directory env names; undefined when baseUrl
 * is not local or there is no token file (a local token is never sent to
 * another host). A file that cannot be used throws TokenFileError.
 */
export function localToken(baseUrl, env) {
	if (!isLocalUrl(baseUrl)) return undefined;
	const dir = dataDir(env);
	if (dir === undefined) return undefined;
	try {
		return readTokenFile(path.join(dir, TOKEN_FILE_NAME));
	} catch (err) {
		if (err?.code === "ENOENT") return undefined;
		if (err?.code === "ELOOP") throw new TokenFileError(`token file ${path.join(dir, TOKEN_FILE_NAME)} is a symbolic link`);
		throw err;
	}
}

/**
 * Refuses to send the data directory's token over the unix socket at sock
 * when the socket belongs to another user than this one or root (one who
 * took its place while the daemon was down). The socket file's owner, read
 * once when the client starts: Node has no peer credentials, which the Go
 * SDK checks on every connection.
 */
export function checkSocketOwner(sock) {
	const me = process.geteuid?.();
	if (me === undefined) return;
	let st;
	try {
		st = fs.statSync(sock);
	} catch {
		return; // nothing there: the request fails on its own, with no token sent
	}
	if (st.uid !== me && st.uid !== 0) {
		throw new TokenFileError(`the token in the data directory is not sent to unix://${sock}: it belongs to user ${st.uid}, not to you or root (pass a token to send one anyway)`);
	}
}

/**
 * Refuses to send the data directory's token to the daemon at a loopback
 * URL u (an http(s) URL object) when the sockets listening where a
 * connection to it lands belong to another user than this one or root, or
 * to two users, read from /proc/net/tcp{,6} once when the client starts
 * (Linux only, as the Python SDK; the Go SDK checks every connection).
 * Nothing listening passes: the request then fails with no token sent.
 */
export function checkTcpOwner(u) {
	const me = process.geteuid?.();
	if (process.platform !== "linux" || me === undefined) return;
	const host = u.hostname.toLowerCase().replace(/\.$/, "");
	const port = Number(u.port || (u.protocol === "https:" ? 443 : 80));
	const dsts = host === "localhost" ? [ipBytes("127.0.0.1"), ipBytes("::1")] : [ipBytes(host)];
	if (dsts.some((d) => d === undefined)) return;
	let owner;
	for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
		let lines;
		try {
			lines = fs.readFileSync(file, "latin1").split("\n").slice(1);
		} catch {
			continue;
		}
		for (const line of lines) {
			const col = line.trim().split(/\s+/);
			if (col.length < 8 || col[3] !== "0A") continue; // 0A: LISTEN
			const [la, lp] = col[1].split(":");
			if (parseInt(lp, 16) !== port) continue;
			const listen = procAddr(la);
			if (!dsts.some((d) => takes(listen, d))) continue;
			const uid = Number(col[7]);
			if (owner !== undefined && uid !== owner) {
				throw new TokenFileError(`the token in the data directory is not sent to ${u.origin}: users ${owner} and ${uid} both listen on port ${port}`);
			}
			owner = uid;
		}
	}
	if (owner !== undefined && owner !== me && owner !== 0) {
		throw new TokenFileError(`the token in the data directory is not sent to ${u.origin}: it belongs to user ${owner}, not to you or root (pass a token to send one anyway)`);
	}
}

/** An address of /proc/net/tcp{,6} (host-order 32-bit words in hex) as bytes, an IPv4-mapped one as 4. */
function procAddr(hex) {
	const raw = Buffer.from(hex, "hex");
	const out = Buffer.alloc(raw.length);
	for (let i = 0; i < raw.length; i += 4) out.writeUInt32BE(os.endianness() === "LE" ? raw.readUInt32LE(i) : raw.readUInt32BE(i), i);
	return unmap(out);
}

/** A URL's IP host (dotted IPv4 or bracketed, WHATWG-serialised IPv6) as bytes, an IPv4-mapped one as 4; undefined for a name. */
function ipBytes(host) {
	if (/^\d+\.\d+\.\d+\.\d+$/.test(host)) return Buffer.from(host.split(".").map(Number));
	const h = host.replace(/^\[|\]$/g, "");
	if (!h.includes(":")) return undefined;
	const [head, tail] = h.split("::");
	const groups = (x) => (x ? x.split(":").map((g) => parseInt(g, 16)) : []);
	const hi = groups(head);
	const lo = tail === undefined ? [] : groups(tail);
	const all = [...hi, ...new Array(8 - hi.length - lo.length).fill(0), ...lo];
	const out = Buffer.alloc(16);
	all.forEach((g, i) => out.writeUInt16BE(g, 2 * i));
	return unmap(out);
}

function unmap(b) {
	if (b.length === 16 && b.subarray(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff) return b.subarray(12);
	return b;
}

/** Whether a socket listening on listen takes a connection to dst. */
function takes(listen, dst) {
	if (listen.equals(dst)) return true;
	if (listen.every((x) => x === 0)) return listen.length === 16 || dst.length === 4;
	return false;
}

/**
 * A fetch over the unix socket at sock (node:http with socketPath), for the
 * client's own requests: url's path and query are sent with Host UNIX_HOST;
 * a network error rejects with TypeError("fetch failed", { cause }) as
 * fetch does; the answer is a standard Response whose body streams.
 */
export function unixFetch(sock) {
	return (url, { method = "GET", headers = {}, body, signal } = {}) => new Promise((resolve, reject) => {
		signal?.throwIfAborted();
		const u = new URL(url);
		const h = { ...Object.fromEntries(new Headers(headers)), host: UNIX_HOST };
		const req = http.request({ socketPath: sock, method, path: u.pathname + u.search, headers: h, signal });
		const fail = (err) => reject(signal?.aborted ? signal.reason : new TypeError("fetch failed", { cause: err }));
		req.on("error", fail);
		req.on("response", (res) => {
			req.off("error", fail);
			req.on("error", () => {}); // later errors reach the body stream
			const rh = new Headers();
			for (let i = 0; i + 1 < res.rawHeaders.length; i += 2) rh.append(res.rawHeaders[i], res.rawHeaders[i + 1]);
			const empty = method === "HEAD" || res.statusCode === 204 || res.statusCode === 304;
			if (empty) res.resume();
			resolve(new Response(empty ? null : Readable.toWeb(res), { status: res.statusCode, statusText: res.statusMessage, headers: rh }));
		});
		writeBody(req, body).catch((err) => req.destroy(err));
	});
}

/** Writes a fetch body (string, bytes, Blob, ReadableStream or async iterable) to req and ends it. */
async function writeBody(req, body) {
	if (body === undefined || body === null) return void req.end();
	if (typeof body === "string" || body instanceof Uint8Array) return void req.end(body);
	if (body instanceof ArrayBuffer) return void req.end(new Uint8Array(body));
	if (ArrayBuffer.isView(body)) return void req.end(new Uint8Array(body.buffer, body.byteOffset, body.byteLength));
	if (typeof Blob !== "undefined" && body instanceof Blob) return void req.end(new Uint8Array(await body.arrayBuffer()));
	const src = body instanceof ReadableStream ? Readable.fromWeb(body) : body;
	if (typeof src?.[Symbol.asyncIterator] !== "function") throw new TypeError("agentbox: unsupported request body");
	for await (const chunk of src) {
		if (!req.write(chunk)) await new Promise((r) => req.once("drain", r));
	}
	req.end();
}
