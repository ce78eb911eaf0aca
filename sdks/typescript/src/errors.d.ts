import type { Problem, ProblemField } from "./api.gen.js";
import type { SessionEnded } from "./events.gen.js";

/** Prefix of every problem type URI the daemon sends. */
export declare const PROBLEM_TYPE_BASE: "https://agentbox.dev/problems/";

/** An RFC 7807 problem document as the daemon sends it. */
export type ProblemDocument = Problem;

/** A non-2xx answer of the API, with the problem document the daemon sent. */
export declare class AgentboxError extends Error {
	readonly name: "AgentboxError";
	/** The problem type URI; "" when the answer was not an agentbox problem. */
	readonly type: string;
	readonly title: string;
	/** The HTTP status (the status line wins over the document). */
	readonly status: number;
	readonly detail: string;
	readonly instance: string;
	/** Each invalid input, for validation problems. */
	readonly errors: ProblemField[];
	/** The request: method and path template (no query, no credentials). */
	readonly method: string;
	readonly path: string;
	/** Retry-After in seconds, when the answer had one. */
	readonly retryAfter: number | undefined;
	/** The problem type's short name: "not-found", "busy", "validation", ... */
	get kind(): string;
	/** Whether the same request may succeed later (408, 429, 5xx but 501). */
	get temporary(): boolean;
}

/** The session ended before the turn being waited for completed. */
export declare class SessionEndedError extends Error {
	readonly name: "SessionEndedError";
	readonly sessionId: string;
	readonly turnId: string;
	readonly ended: SessionEnded;
}

/** An event stream that reconnecting cannot cure. */
export declare class StreamError extends Error {
	readonly name: "StreamError";
}

export declare function errorFrom(resp: Response, method: string, path: string): Promise<AgentboxError>;
