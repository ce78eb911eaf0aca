// Errors of the agentbox client: every non-2xx answer of the API becomes an
// AgentboxError carrying the RFC 7807 problem document the daemon sent.

/** Prefix of every problem type URI the daemon sends. */
export const PROBLEM_TYPE_BASE = "https://agentbox.dev/problems/";

/** The short kind the daemon uses for each status, for answers without an agentbox problem type (a proxy's error page). */
const kindByStatus = new Map([
	[400, "bad-request"], [401, "unauthorized"], [403, "forbidden"], [404, "not-found"],
	[405, "method-not-allowed"], [406, "not-acceptable"], [408, "request-timeout"],
	[409, "conflict"], [413, "payload-too-large"], [415, "unsupported-media-type"],
	[422, "validation"], [429, "too-many-requests"], [500, "internal"], [503, "unavailable"],
	[504, "timeout"], [507, "storage-full"],
]);

/** At most this much of an error answer is read. */
const maxErrorBody = 1 << 20;

/** A non-2xx answer of the API. */
export class AgentboxError extends Error {
	constructor(problem, method, path, retryAfter) {
		const p = problem ?? {};
		let msg = `${method} ${path}: ${p.status}${p.title ? " " + p.title : ""}${p.detail ? ": " + p.detail : ""}`;
		for (const [i, f] of (p.errors ?? []).entries()) {
			if (i === 3) {
				msg += ` (and ${p.errors.length - i} more)`;
				break;
			}
			msg += "; " + (f.location ? f.location + ": " : "") + (f.message ?? "");
		}
		super(msg);
		this.name = "AgentboxError";
		this.type = p.type ?? "";
		this.title = p.title ?? "";
		this.status = p.status;
		this.detail = p.detail ?? "";
		this.instance = p.instance ?? "";
		this.errors = p.errors ?? [];
		this.method = method;
		this.path = path;
		this.retryAfter = retryAfter;
	}

	/** The problem type's short name ("not-found", "busy", ...), derived from the status when the answer had no agentbox type. */
	get kind() {
		if (this.type.startsWith(PROBLEM_TYPE_BASE) && this.type.length > PROBLEM_TYPE_BASE.length) {
			return this.type.slice(PROBLEM_TYPE_BASE.length);
		}
		return kindByStatus.get(this.status) ?? "other";
	}

	/** Whether the same request may succeed later: 408, 429 and 5xx other than 501. */
	get temporary() {
		return this.status === 408 || this.status === 429 || (this.status >= 500 && this.status !== 501);
	}
}

/**
 * Turns a non-2xx Response into an AgentboxError. The status line wins over
 * the body's status; a body that is not problem+json only gives a detail.
 */
export async function errorFrom(resp, method, path) {
	let text = "";
	try {
		text = await readLimited(resp, maxErrorBody);
	} catch {
		// a broken body still yields the status below
	}
	const mt = (resp.headers.get("content-type") ?? "").split(";")[0].trim().toLowerCase();
	let problem = {};
	if (mt === "application/problem+json" || mt === "application/json") {
		try {
			const v = JSON.parse(text);
			if (v && typeof v === "object" && !Array.isArray(v)) problem = v;
		} catch {
			// keep the synthesised problem
		}
	}
	if (typeof problem.type !== "string" || problem.type === "about:blank") problem.type = "";
	problem.status = resp.status;
	if (!problem.title) problem.title = resp.statusText || `HTTP ${resp.status}`;
	if (!problem.detail && mt === "text/plain") problem.detail = text.slice(0, 512).trim();
	const ra = resp.headers.get("retry-after");
	const retryAfter = ra && /^\d+$/.test(ra) ? Number(ra) : undefined;
	return new AgentboxError(problem, method, path, retryAfter);
}

/** Reads at most limit bytes of resp's body as text, then cancels the rest. */
async function readLimited(resp, limit) {
	if (!resp.body) return "";
	const reader = resp.body.getReader();
	const chunks = [];
	let n = 0;
	try {
		while (n < limit) {
			const { done, value } = await reader.read();
			if (done) break;
			chunks.push(value);
			n += value.byteLength;
		}
	} finally {
		reader.cancel().catch(() => {});
	}
	const all = new Uint8Array(Math.min(n, limit));
	let off = 0;
	for (const c of chunks) {
		const part = c.subarray(0, all.length - off);
		all.set(part, off);
		off += part.length;
		if (off === all.length) break;
	}
	return new TextDecoder().decode(all);
}

/** The session ended before the turn being waited for completed. */
export class SessionEndedError extends Error {
	constructor(sessionId, turnId, ended) {
		const why = ended?.reason ? ended.reason + (ended.message ? ": " + ended.message : "") : "ended";
		super(`session ${sessionId}: turn ${turnId}: session ended (${why})`);
		this.name = "SessionEndedError";
		this.sessionId = sessionId;
		this.turnId = turnId;
		this.ended = ended;
	}
}

/** An event stream that reconnecting cannot cure: malformed data, or an answer that is not an event stream. */
export class StreamError extends Error {
	constructor(message, options) {
		super(message, options);
		this.name = "StreamError";
	}
}
