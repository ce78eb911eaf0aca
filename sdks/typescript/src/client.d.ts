import type {
	CreateSession, EventPage, Health, OperationId, Operations, PermissionAnswer, QuestionAnswer,
	Resolved, SendMessage, Session, SessionList, Turn,
} from "./api.gen.js";
import type { AgentboxEvent, PermissionRequested, TurnCompleted } from "./events.gen.js";

export declare const DEFAULT_URL: "http://127.0.0.1:7777";
export declare const DEFAULT_MIN_BACKOFF: number;
export declare const DEFAULT_MAX_BACKOFF: number;
export declare const DEFAULT_IDLE_TIMEOUT: number;

export interface ClientOptions {
	/** "http://host:port", "https://host/prefix" or "unix:///path/to.sock"; default: $AGENTBOX_URL, else DEFAULT_URL. */
	baseUrl?: string;
	/**
	 * The daemon's bearer token; default: $AGENTBOX_TOKEN, else, for a daemon on this
	 * machine (loopback, localhost or a unix socket), the one in DATA_DIR/token.
	 */
	token?: string;
	/** Read the token file of a local daemon when no token is given (default true; Node only). */
	localToken?: boolean;
	/** The environment the defaults are read from (default: process.env). */
	env?: Record<string, string | undefined>;
	/** A fetch to use instead of the global one (or, for a unix socket, of the SDK's node:http transport). */
	fetch?: typeof globalThis.fetch;
	userAgent?: string;
}

export interface RequestOptions {
	signal?: AbortSignal;
}

/** The arguments of call(): params and body as the operation declares them. */
export type CallOptions<K extends OperationId> = RequestOptions &
	(Operations[K]["params"] extends Record<string, never> ? { params?: Operations[K]["params"] } : { params: Operations[K]["params"] }) &
	([Operations[K]["body"]] extends [never] ? { body?: undefined } :
		Operations[K]["bodyRequired"] extends true ? { body: Operations[K]["body"] } : { body?: Operations[K]["body"] });

export interface StreamOptions extends RequestOptions {
	/** Deliver events with seq greater than this (default 0: the whole log). */
	after?: number;
	/** End the stream, without error, right after the first event for which it returns true. */
	until?: (ev: AgentboxEvent) => boolean;
	/** Reconnect when nothing, not even a heartbeat, arrived for this long (ms); 0 disables. */
	idleTimeout?: number;
	/** Bounds of the jittered exponential backoff between reconnections (ms). */
	minBackoff?: number;
	maxBackoff?: number;
	/** Give up after this many consecutive failures; 0 (default) retries until the signal. */
	maxAttempts?: number;
	/** Called before each reconnection with the attempt number, its cause and the delay (ms). */
	onReconnect?: (attempt: number, err: unknown, delay: number) => void;
}

/** An answer to a permission request: a decision, a full answer, or nothing to leave it open. */
export type PermissionReply = "allow" | "deny" | PermissionAnswer | undefined | null | void;

export interface TurnOptions extends Omit<StreamOptions, "after" | "until"> {
	/** Sees every event of the turn, in order. */
	onEvent?: (ev: AgentboxEvent) => void | Promise<void>;
	/** Answers each permission request of the turn. */
	onPermission?: (req: PermissionRequested, ev: AgentboxEvent) => PermissionReply | Promise<PermissionReply>;
}

export declare class AgentboxClient {
	constructor(opts?: ClientOptions);
	readonly baseUrl: string;
	/** Calls any operation by its id; non-2xx answers throw AgentboxError. */
	call<K extends OperationId>(operationId: K, ...args: Record<string, never> extends CallOptions<K> ? [opts?: CallOptions<K>] : [opts: CallOptions<K>]): Promise<Operations[K]["response"]>;
	health(opts?: RequestOptions): Promise<Health>;
	createSession(req: CreateSession, opts?: RequestOptions): Promise<Session>;
	getSession(id: string, opts?: RequestOptions): Promise<Session>;
	listSessions(query?: Operations["listSessions"]["params"], opts?: RequestOptions): Promise<SessionList>;
	deleteSession(id: string, opts?: RequestOptions & { purge?: boolean }): Promise<void>;
	sendMessage(id: string, message: string | SendMessage, opts?: RequestOptions): Promise<Turn>;
	answerPermission(id: string, permissionId: string, answer: "allow" | "deny" | PermissionAnswer, opts?: RequestOptions): Promise<Resolved>;
	answerQuestion(id: string, questionId: string, answer: QuestionAnswer, opts?: RequestOptions): Promise<Resolved>;
	interrupt(id: string, opts?: RequestOptions): Promise<Turn>;
	/** One page of the log (events typed from the event schema). */
	listEvents(id: string, opts?: RequestOptions & { after?: number; limit?: number }): Promise<Omit<EventPage, "events"> & { events: AgentboxEvent[] | null }>;
	lastSeq(id: string, opts?: RequestOptions): Promise<number>;
	/** A file of the session's workspace (path relative to its root), as bytes. */
	readFile(id: string, path: string, opts?: RequestOptions & { offset?: number; length?: number }): Promise<Uint8Array>;
	readTextFile(id: string, path: string, opts?: RequestOptions & { offset?: number; length?: number }): Promise<string>;
	/** The session's events after opts.after, exactly once each and in seq order, across reconnections. */
	events(id: string, opts?: StreamOptions): AsyncGenerator<AgentboxEvent, void, undefined>;
	waitTurn(id: string, turnId: string, opts?: TurnOptions & { after?: number }): Promise<TurnCompleted>;
	runTurn(id: string, message: string | SendMessage, opts?: TurnOptions): Promise<TurnCompleted>;
}

/** A predicate for events({until}): turnId's turn.completed, or any session.ended. */
export declare function endOfTurn(turnId: string): (ev: AgentboxEvent) => boolean;
