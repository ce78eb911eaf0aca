// The agentbox client: requests through the generated operation table,
// event streams that resume by seq, and the turn/permission flow.

import { operations } from "./api.gen.js";
import { EVENT_TYPES } from "./events.gen.js";
import { AgentboxError, SessionEndedError, StreamError, errorFrom } from "./errors.js";
import { SSEParser, SSETooLongError } from "./sse.js";

/** The daemon address used when neither baseUrl nor AGENTBOX_URL is set. */
export const DEFAULT_URL = "http://127.0.0.1:7777";
/** Stream defaults (ms). The idle timeout must exceed the server's heartbeat by a wide margin. */
export const DEFAULT_MIN_BACKOFF = 250;
export const DEFAULT_MAX_BACKOFF = 15_000;
export const DEFAULT_IDLE_TIMEOUT = 90_000;
/** The page size lastSeq and the stream's gap filling ask for; the server may answer with less. */
const PAGE = 1000;

export class AgentboxClient {
	#base;
	#token;
	#fetch;
	#userAgent;
	/** Resolves the token from the data directory and the unix transport, once, on the first request. */
	#ready;

	/**
	 * baseUrl: "http://host:port", "https://host/prefix" or "unix:///path/to.sock"
	 * (default: AGENTBOX_URL, else DEFAULT_URL).
	 * token: the bearer token (default: AGENTBOX_TOKEN, else, for a daemon on this
	 * machine and unless localToken is false, the one in its data directory's token file).
	 * env: the environment read for those defaults (default: process.env).
	 */
	constructor({ baseUrl, token, fetch: fetchFn, userAgent, localToken = true, env: environ } = {}) {
		const e = environ ?? globalThis.process?.env ?? {};
		const raw = baseUrl ?? (e.AGENTBOX_URL || undefined) ?? DEFAULT_URL;
		const u = new URL(raw);
		if (u.protocol !== "http:" && u.protocol !== "https:" && u.protocol !== "unix:") {
			throw new TypeError(`agentbox: base URL ${raw}: scheme must be http, https or unix`);
		}
		if (u.search || u.hash || u.username || u.password) {
			throw new TypeError(`agentbox: base URL ${raw}: no query, fragment or credentials allowed`);
		}
		let sock;
		if (u.protocol === "unix:") {
			sock = decodeURIComponent(u.pathname);
			if (u.host || !sock.startsWith("/")) throw new TypeError(`agentbox: base URL ${raw}: want unix:///absolute/path.sock`);
			this.#base = "http://agentbox";
		} else {
			this.#base = u.origin + u.pathname.replace(/\/+$/, "");
		}
		this.#token = token ?? (e.AGENTBOX_TOKEN || undefined);
		this.#userAgent = userAgent;
		const fromFile = this.#token === undefined && localToken;
		if (!sock && !fromFile) {
			this.#fetch = fetchFn ?? globalThis.fetch.bind(globalThis);
			this.#ready = Promise.resolve();
			return;
		}
		this.#ready = import("./local.js").then((local) => {
			const tok = fromFile ? local.localToken(raw, e) : undefined;
			if (tok !== undefined && sock) local.checkSocketOwner(sock);
			else if (tok !== undefined) local.checkTcpOwner(u);
			if (tok !== undefined) this.#token = tok;
			this.#fetch = fetchFn ?? (sock ? local.unixFetch(sock) : globalThis.fetch.bind(globalThis));
		});
		this.#ready.catch(() => {}); // reported by each request
	}

	/** The base URL requests go to, without a trailing slash ("http://agentbox" for a unix socket). */
	get baseUrl() {
		return this.#base;
	}

	/** Sends one HTTP request to path (already escaped) with the client's headers. */
	async #send(method, path, { query, headers = {}, body, signal } = {}) {
		await this.#ready;
		let url = this.#base + path;
		const q = new URLSearchParams();
		for (const [k, v] of Object.entries(query ?? {})) {
			if (v !== undefined && v !== null) q.set(k, String(v));
		}
		if (q.size > 0) url += "?" + q.toString();
		const h = { ...headers };
		if (this.#token) h.authorization = "Bearer " + this.#token;
		if (this.#userAgent) h["user-agent"] = this.#userAgent;
		// The daemon never redirects: following one could carry the token elsewhere.
		return this.#fetch(url, { method, headers: h, body, signal, redirect: "error" });
	}

	/**
	 * Calls any operation of the API by its id (see Operations in api.gen.d.ts):
	 * params fills the path and query parameters, body is the request body.
	 * Non-2xx answers throw AgentboxError. Event streams have their own methods.
	 */
	async call(operationId, { params = {}, body, signal } = {}) {
		const op = operations[operationId];
		if (!op) throw new TypeError(`agentbox: unknown operation ${operationId}`);
		const path = op.path.replace(/\{([^}]+)\}/g, (_, name) => {
			const v = params[name];
			if (v === undefined || v === null || v === "") {
				throw new TypeError(`agentbox: ${operationId}: missing path parameter ${name}`);
			}
			return encodeURIComponent(String(v));
		});
		const query = {};
		for (const name of op.query) query[name] = params[name];
		const headers = {};
		let payload;
		if (op.body === "json" && body !== undefined) {
			headers["content-type"] = "application/json";
			payload = JSON.stringify(body);
		} else if (op.body !== "none" && body !== undefined) {
			headers["content-type"] = op.body === "text" ? "text/plain; charset=utf-8" : "application/octet-stream";
			payload = body;
		}
		headers.accept = {
			json: "application/json, application/problem+json",
			sse: "text/event-stream",
			raw: "*/*",
			text: "text/plain, */*",
			none: "application/problem+json",
		}[op.response];
		if (op.response === "sse") {
			throw new TypeError(`agentbox: ${operationId} is an event stream: use events()`);
		}
		const resp = await this.#send(op.method, path, { query, headers, body: payload, signal });
		if (!resp.ok) throw await errorFrom(resp, op.method, op.path);
		switch (op.response) {
			case "json":
				return resp.json();
			case "text":
				return resp.text();
			case "raw":
				return new Uint8Array(await resp.arrayBuffer());
			default:
				await resp.body?.cancel();
				return undefined;
		}
	}

	health(opts) {
		return this.call("getHealth", opts);
	}

	/** Starts a session; it returns once the agent is ready. */
	createSession(req, opts = {}) {
		return this.call("createSession", { ...opts, body: req });
	}

	getSession(id, opts = {}) {
		return this.call("getSession", { ...opts, params: { id } });
	}

	listSessions(query = {}, opts = {}) {
		return this.call("listSessions", { ...opts, params: query });
	}

	/** Terminates a session; with purge its log is removed too. */
	deleteSession(id, { purge = false, ...opts } = {}) {
		return this.call("deleteSession", { ...opts, params: { id, purge } });
	}

	/** Starts a turn (message: text or a SendMessage) and returns its id at once. */
	sendMessage(id, message, opts = {}) {
		const body = typeof message === "string" ? { text: message } : message;
		return this.call("sendMessage", { ...opts, params: { id }, body });
	}

	/** Allows or denies one permission request (answer: "allow", "deny" or a PermissionAnswer). */
	answerPermission(id, permissionId, answer, opts = {}) {
		const body = typeof answer === "string" ? { decision: answer } : answer;
		return this.call("answerPermission", { ...opts, params: { id, pid: permissionId }, body });
	}

	answerQuestion(id, questionId, answer, opts = {}) {
		return this.call("answerQuestion", { ...opts, params: { id, qid: questionId }, body: answer });
	}

	interrupt(id, opts = {}) {
		return this.call("interruptTurn", { ...opts, params: { id }, body: {} });
	}

	/** One page of a session's log: events with seq greater than after. */
	listEvents(id, { after = 0, limit, ...opts } = {}) {
		return this.call("listEvents", { ...opts, params: { id, after, limit } });
	}

	/** The seq of the last event of a session's log (0 when empty): pass it as after before sending a message. */
	async lastSeq(id, opts = {}) {
		let after = 0;
		for (;;) {
			const page = await this.listEvents(id, { ...opts, after, limit: PAGE });
			for (const ev of page.events ?? []) after = Math.max(after, ev.seq);
			if (!page.has_more || !page.events?.length) return after;
			after = Math.max(after, page.next_after ?? 0);
		}
	}

	/**
	 * Reads a file of a session's workspace (path relative to its root) as
	 * bytes; offset and length read a range.
	 */
	async readFile(id, path, { offset, length, signal } = {}) {
		if (!id) throw new TypeError("agentbox: empty session id");
		const p = `/v1/sessions/${encodeURIComponent(id)}/files/content`;
		const resp = await this.#send("GET", p, {
			query: { path, offset, length },
			headers: { accept: "application/octet-stream, application/problem+json" },
			signal,
		});
		if (!resp.ok) throw await errorFrom(resp, "GET", "/v1/sessions/{id}/files/content");
		return new Uint8Array(await resp.arrayBuffer());
	}

	/** readFile decoded as UTF-8. */
	async readTextFile(id, path, opts) {
		return new TextDecoder().decode(await this.readFile(id, path, opts));
	}

	/**
	 * Follows a session's events, as an async iterable of every event with
	 * seq greater than after, each exactly once and in seq order, whatever
	 * happens to the connection: after a drop (network error, the server
	 * ending the stream, the idle timeout, 408, 429, 5xx) it reconnects with
	 * jittered exponential backoff and Last-Event-ID set to the last seq
	 * delivered; a seq already delivered is dropped; a gap is filled from the
	 * log. It ends when until(event) is true (after yielding that event), on
	 * the signal, after maxAttempts consecutive failures, or with a permanent
	 * error (another 4xx, a malformed stream). Breaking out of the loop closes
	 * the connection.
	 */
	events(id, opts = {}) {
		return this.#events(id, opts);
	}

	async *#events(id, {
		after = 0, until, signal, idleTimeout = DEFAULT_IDLE_TIMEOUT,
		minBackoff = DEFAULT_MIN_BACKOFF, maxBackoff = DEFAULT_MAX_BACKOFF, maxAttempts = 0, onReconnect,
	} = {}) {
		if (!id) throw new TypeError("agentbox: empty session id");
		const path = `/v1/sessions/${encodeURIComponent(id)}/events/stream`;
		let last = Math.max(0, after);
		let failures = 0;
		let lastErr;
		let serverRetry = 0;
		for (;;) {
			signal?.throwIfAborted();
			if (failures > 0) {
				if (maxAttempts > 0 && failures >= maxAttempts) {
					throw new StreamError(`session ${id}: event stream: giving up after ${failures} attempts`, { cause: lastErr });
				}
				let d = serverRetry > 0 ? serverRetry : minBackoff;
				for (let i = 1; i < failures && d < maxBackoff; i++) d *= 2;
				d = Math.min(d, maxBackoff);
				d = d / 2 + Math.random() * (d / 2);
				onReconnect?.(failures, lastErr, d);
				await sleep(d, signal);
			}
			const conn = new AbortController();
			let idle = false;
			let timer;
			const arm = () => {
				if (idleTimeout <= 0) return;
				clearTimeout(timer);
				timer = setTimeout(() => {
					idle = true;
					conn.abort(new Error("event stream idle for too long"));
				}, idleTimeout);
			};
			const connSignal = signal ? AbortSignal.any([signal, conn.signal]) : conn.signal;
			let openedAt = 0; // when the stream answered, if it did
			try {
				const headers = { accept: "text/event-stream", "cache-control": "no-cache" };
				if (last > 0) headers["last-event-id"] = String(last);
				arm();
				const resp = await this.#send("GET", path, { query: { after: last > 0 ? last : undefined }, headers, signal: connSignal });
				if (!resp.ok) throw await errorFrom(resp, "GET", "/v1/sessions/{id}/events/stream");
				const ct = (resp.headers.get("content-type") ?? "").split(";")[0].trim();
				if (resp.status !== 200 || ct !== "text/event-stream" || !resp.body) {
					await resp.body?.cancel();
					throw new StreamError(`GET ${path}: answer is ${resp.status} ${JSON.stringify(ct)}, not 200 text/event-stream`);
				}
				openedAt = Date.now();
				const parser = new SSEParser();
				const decoder = new TextDecoder();
				const reader = resp.body.getReader();
				try {
					for (;;) {
						arm();
						const { done, value } = await reader.read();
						if (done) break;
						const msgs = parser.push(decoder.decode(value, { stream: true }));
						if (parser.retry !== undefined) serverRetry = Math.min(parser.retry, maxBackoff);
						for (const msg of msgs) {
							const ev = decodeEvent(msg);
							if (!ev || ev.seq <= last) continue; // not an event, or one already delivered
							const batch = ev.seq > last + 1 ? [...await this.#gap(id, last, ev.seq, signal), ev] : [ev];
							for (const e of batch) {
								if (e.seq <= last) continue;
								last = e.seq;
								failures = 0;
								yield e;
								if (until?.(e)) return;
							}
						}
					}
				} finally {
					reader.cancel().catch(() => {});
				}
				throw new Error("event stream ended"); // the server never ends one on purpose
			} catch (err) {
				if (signal?.aborted) throw signal.reason;
				if (!retryable(err)) throw err;
				if (openedAt > 0 && Date.now() - openedAt >= maxBackoff) failures = 0; // a long-lived stream was healthy: back off afresh
				failures++;
				lastErr = idle ? new Error("event stream idle for too long", { cause: err }) : err;
			} finally {
				clearTimeout(timer);
				conn.abort();
			}
		}
	}

	/** Reads the events between from and to (both excluded) from the log. */
	async #gap(id, from, to, signal) {
		const got = [];
		while (from < to - 1) {
			const page = await this.listEvents(id, { after: from, limit: Math.min(to - 1 - from, PAGE), signal });
			let n = 0;
			for (const e of page.events ?? []) {
				if (e.seq > from && e.seq < to) {
					got.push(e);
					from = e.seq;
					n++;
				}
			}
			if (n === 0) break; // a range the log cannot fill: the server promises there is none
		}
		return got;
	}

	/**
	 * Follows the session's events after the given seq until turnId's
	 * turn.completed, whose payload it returns; onEvent sees every event.
	 * Throws SessionEndedError when the session ends first.
	 */
	async waitTurn(id, turnId, { after = 0, onEvent, ...opts } = {}) {
		for await (const ev of this.events(id, { ...opts, after, until: endOfTurn(turnId) })) {
			await onEvent?.(ev);
			if (ev.type === "turn.completed" && turnOf(ev) === turnId) return ev.data;
			if (ev.type === "session.ended") throw new SessionEndedError(id, turnId, ev.data);
		}
		throw new StreamError(`session ${id}: event stream ended before turn ${turnId} completed`);
	}

	/**
	 * Runs one turn: sends message, follows its events, answers each
	 * permission request of the turn with what onPermission returns ("allow",
	 * "deny", a PermissionAnswer, or nothing to leave it to someone else),
	 * and returns the turn.completed payload.
	 */
	async runTurn(id, message, { onPermission, onEvent, signal, ...opts } = {}) {
		const after = await this.lastSeq(id, { signal });
		const { turn_id: turnId } = await this.sendMessage(id, message, { signal });
		return this.waitTurn(id, turnId, {
			...opts, after, signal,
			onEvent: async (ev) => {
				await onEvent?.(ev);
				if (ev.type !== "permission.requested" || !onPermission || (ev.turn_id && ev.turn_id !== turnId)) return;
				const answer = await onPermission(ev.data, ev);
				if (!answer) return;
				try {
					await this.answerPermission(id, ev.data.id, answer, { signal });
				} catch (err) {
					// Settled meanwhile (a timeout, the turn ended): its permission.resolved tells how.
					if (!(err instanceof AgentboxError && err.kind === "already-resolved")) throw err;
				}
			},
		});
	}
}

/** A predicate for events({until}): turnId's turn.completed, or any session.ended. */
export function endOfTurn(turnId) {
	return (ev) => ev.type === "session.ended" || (ev.type === "turn.completed" && turnOf(ev) === turnId);
}

function turnOf(ev) {
	return ev.turn_id || ev.data?.turn_id;
}

/**
 * Decodes one SSE message into an event; undefined for a message that is
 * not a universal event (an SSE event name this client does not know), so
 * that the server may add message kinds.
 */
function decodeEvent(msg) {
	const known = msg.event === "message" || EVENT_TYPES.includes(msg.event);
	let ev;
	try {
		ev = JSON.parse(msg.data);
	} catch (err) {
		if (!known) return undefined;
		throw new StreamError(`event stream: bad ${JSON.stringify(msg.event)} event (id ${JSON.stringify(msg.id)})`, { cause: err });
	}
	if (!ev || typeof ev !== "object" || !Number.isSafeInteger(ev.seq) || ev.seq <= 0) {
		if (!known) return undefined;
		throw new StreamError(`event stream: bad ${JSON.stringify(msg.event)} event (id ${JSON.stringify(msg.id)}): no seq`);
	}
	return ev;
}

/** Whether reconnecting may cure err. */
function retryable(err) {
	if (err instanceof AgentboxError) return err.temporary;
	if (err instanceof StreamError || err instanceof SSETooLongError || err?.name === "TokenFileError") return false;
	return !(err instanceof TypeError) || isNetworkError(err);
}

/** fetch rejects with a TypeError ("fetch failed") for network errors; other TypeErrors are bugs. */
function isNetworkError(err) {
	return err instanceof TypeError && (err.message === "fetch failed" || err.cause !== undefined || /terminated|network/i.test(err.message));
}

function sleep(ms, signal) {
	return new Promise((resolve, reject) => {
		if (signal?.aborted) return reject(signal.reason);
		const t = setTimeout(() => {
			signal?.removeEventListener("abort", onAbort);
			resolve();
		}, ms);
		const onAbort = () => {
			clearTimeout(t);
			reject(signal.reason);
		};
		signal?.addEventListener("abort", onAbort, { once: true });
	});
}
