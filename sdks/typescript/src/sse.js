// A parser for text/event-stream as the WHATWG HTML standard defines it
// ("Server-sent events", "Interpreting an event stream"), fed with text that
// a TextDecoder made from the bytes (it drops the BOM and replaces invalid
// UTF-8 with U+FFFD, as the standard asks):
//
//   - lines end with CRLF, LF or CR, and a CR at the end of a chunk is a
//     whole line ending: the parser never waits for the next chunk to
//     dispatch;
//   - a line starting with ':' is a comment; "field: value" drops one space
//     after the colon; a line without a colon is a field with an empty value;
//   - "data" lines append to the data buffer with a LF, "event" sets the
//     type, "id" sets the last event ID unless the value holds NUL, "retry"
//     with only ASCII digits sets the reconnection time, other fields are
//     ignored;
//   - an empty line dispatches the event, unless the data buffer is empty;
//     an event not ended by an empty line before the end is discarded.

/** Default bounds of one line and of one event's data, in UTF-16 code units. */
export const DEFAULT_MAX_LINE = 64 << 20;
export const DEFAULT_MAX_DATA = 64 << 20;

/** A line or an event larger than the parser accepts. */
export class SSETooLongError extends Error {
	constructor() {
		super("event stream: line or event too long");
		this.name = "SSETooLongError";
	}
}

export class SSEParser {
	#maxLine;
	#maxData;
	#buf = ""; // text of an unfinished line
	#scanned = 0; // chars of #buf already searched for a line end (all of it)
	#skipLF = false; // the last line ended with CR: a LF right after belongs to it
	#data = [];
	#dataLen = 0;
	#hasData = false;
	#event = "";
	#lastId = "";
	#retry = undefined;

	constructor({ maxLine = DEFAULT_MAX_LINE, maxData = DEFAULT_MAX_DATA } = {}) {
		this.#maxLine = maxLine;
		this.#maxData = maxData;
	}

	/** The last reconnection time (ms) the stream asked for, if any. */
	get retry() {
		return this.#retry;
	}

	/** The stream's last event ID. */
	get lastEventId() {
		return this.#lastId;
	}

	/** Parses one more chunk of text and returns the events it completed. */
	push(text) {
		const out = [];
		const buf = this.#buf + text;
		let pos = 0; // start of the unread text
		for (;;) {
			if (this.#skipLF && pos < buf.length) {
				if (buf.charCodeAt(pos) === 10) pos++;
				this.#skipLF = false;
			}
			let i = -1;
			for (let k = pos + this.#scanned; k < buf.length; k++) {
				const c = buf.charCodeAt(k);
				if (c === 10 || c === 13) {
					i = k;
					break;
				}
			}
			if (i < 0) {
				this.#buf = buf.slice(pos);
				this.#scanned = this.#buf.length;
				if (this.#scanned > this.#maxLine) throw new SSETooLongError();
				return out;
			}
			const line = buf.slice(pos, i);
			this.#skipLF = buf.charCodeAt(i) === 13;
			pos = i + 1;
			this.#scanned = 0;
			if (line.length > this.#maxLine) throw new SSETooLongError();
			if (line === "") {
				const msg = this.#dispatch();
				if (msg) out.push(msg);
			} else {
				this.#field(line);
			}
		}
	}

	/** Ends the stream: an event not yet dispatched is discarded. */
	end() {
		this.#buf = "";
		this.#scanned = 0;
		this.#data = [];
		this.#dataLen = 0;
		this.#hasData = false;
		this.#event = "";
	}

	#field(line) {
		if (line.charCodeAt(0) === 58) return; // ':' comment
		let name = line;
		let value = "";
		const colon = line.indexOf(":");
		if (colon >= 0) {
			name = line.slice(0, colon);
			value = line.slice(colon + 1);
			if (value.charCodeAt(0) === 32) value = value.slice(1);
		}
		switch (name) {
			case "event":
				this.#event = value;
				break;
			case "data":
				this.#dataLen += value.length + 1;
				if (this.#dataLen > this.#maxData) throw new SSETooLongError();
				this.#data.push(value);
				this.#hasData = true;
				break;
			case "id":
				if (!value.includes("\0")) this.#lastId = value;
				break;
			case "retry":
				if (/^[0-9]+$/.test(value)) this.#retry = Number(value);
				break;
		}
	}

	#dispatch() {
		const event = this.#event || "message";
		this.#event = "";
		if (!this.#hasData) return undefined;
		const msg = { id: this.#lastId, event, data: this.#data.join("\n") };
		this.#data = [];
		this.#dataLen = 0;
		this.#hasData = false;
		return msg;
	}
}
