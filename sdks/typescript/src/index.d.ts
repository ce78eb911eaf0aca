export { AgentboxClient, DEFAULT_URL, DEFAULT_MIN_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_IDLE_TIMEOUT, endOfTurn } from "./client.js";
export type { ClientOptions, CallOptions, RequestOptions, StreamOptions, TurnOptions, PermissionReply } from "./client.js";
export { AgentboxError, SessionEndedError, StreamError, PROBLEM_TYPE_BASE } from "./errors.js";
export type { ProblemDocument } from "./errors.js";
export { SSEParser, SSETooLongError } from "./sse.js";
export type { SSEMessage } from "./sse.js";
export * from "./api.gen.js";
export { EVENT_TYPES, SCHEMA_VERSION } from "./events.gen.js";
export type { AgentboxEvent, Envelope, EventDataMap, Type as EventType } from "./events.gen.js";
/** Every type of the event schema (payloads, items, enums), by its schema name. */
export type * as events from "./events.gen.js";
