/** One dispatched server-sent event. */
export interface SSEMessage {
	/** The stream's last event ID when the event was dispatched. */
	id: string;
	/** The event type; "message" when the event named none. */
	event: string;
	/** The data lines joined with LF. */
	data: string;
}

export declare const DEFAULT_MAX_LINE: number;
export declare const DEFAULT_MAX_DATA: number;

/** A line or an event larger than the parser accepts. */
export declare class SSETooLongError extends Error {}

/** A WHATWG text/event-stream parser over decoded text. */
export declare class SSEParser {
	constructor(opts?: { maxLine?: number; maxData?: number });
	/** The last reconnection time (ms) the stream asked for, if any. */
	readonly retry: number | undefined;
	readonly lastEventId: string;
	/** Parses one more chunk and returns the events it completed. */
	push(text: string): SSEMessage[];
	/** Ends the stream, discarding an undispatched event. */
	end(): void;
}
