// The agentbox client for JavaScript and TypeScript: see README.md.
export { AgentboxClient, DEFAULT_URL, DEFAULT_MIN_BACKOFF, DEFAULT_MAX_BACKOFF, DEFAULT_IDLE_TIMEOUT, endOfTurn } from "./client.js";
export { AgentboxError, SessionEndedError, StreamError, PROBLEM_TYPE_BASE } from "./errors.js";
export { SSEParser, SSETooLongError } from "./sse.js";
export { operations } from "./api.gen.js";
export { EVENT_TYPES, SCHEMA_VERSION } from "./events.gen.js";
