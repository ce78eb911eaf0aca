// Unit tests of the SSE parser: the framing cases of the WHATWG standard.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SSEParser, SSETooLongError } from "../src/index.js";

function parseChunks(chunks, opts) {
	const p = new SSEParser(opts);
	const out = [];
	for (const c of chunks) out.push(...p.push(c));
	p.end();
	return { out, p };
}

const cases = [
	{ name: "LF", in: ["id: 1\nevent: a\ndata: x\n\n"], want: [{ id: "1", event: "a", data: "x" }] },
	{ name: "CRLF", in: ["id: 1\r\ndata: x\r\n\r\n"], want: [{ id: "1", event: "message", data: "x" }] },
	{ name: "CR", in: ["data: x\rdata: y\r\r"], want: [{ id: "", event: "message", data: "x\ny" }] },
	{ name: "CRLF split across chunks", in: ["data: x\r", "\n\r", "\n"], want: [{ id: "", event: "message", data: "x" }] },
	{ name: "CR at chunk end dispatches at once", in: ["data: x\r\r"], want: [{ id: "", event: "message", data: "x" }] },
	{ name: "comment and unknown field", in: [": ping\nfoo: bar\ndata: x\n\n"], want: [{ id: "", event: "message", data: "x" }] },
	{ name: "no space after colon, only one dropped", in: ["data:x\ndata:  y\n\n"], want: [{ id: "", event: "message", data: "x\n y" }] },
	{ name: "field without colon", in: ["data\n\n"], want: [{ id: "", event: "message", data: "" }] },
	{ name: "empty data buffer is not dispatched, type resets", in: ["event: a\n\ndata: x\n\n"], want: [{ id: "", event: "message", data: "x" }] },
	{ name: "id with NUL ignored, id carries over", in: ["id: 7\ndata: a\n\nid: 8\0\ndata: b\n\n"], want: [{ id: "7", event: "message", data: "a" }, { id: "7", event: "message", data: "b" }] },
	{ name: "unterminated event discarded", in: ["data: a\n\ndata: b\n"], want: [{ id: "", event: "message", data: "a" }] },
	{ name: "byte by byte", in: [..."id: 3\nevent: e\ndata: {\"a\":1}\n\n"], want: [{ id: "3", event: "e", data: "{\"a\":1}" }] },
];

for (const c of cases) {
	test(`sse: ${c.name}`, () => {
		assert.deepEqual(parseChunks(c.in).out, c.want);
	});
}

test("sse: retry takes digits only", () => {
	const { p } = parseChunks(["retry: 1500\n\nretry: 2x\n\n"]);
	assert.equal(p.retry, 1500);
});

test("sse: a line longer than the bound fails", () => {
	assert.throws(() => parseChunks(["data: " + "x".repeat(100)], { maxLine: 50 }), SSETooLongError);
	assert.throws(() => parseChunks(["data: xxxxxxxx\ndata: xxxxxxxx\n"], { maxData: 12 }), SSETooLongError);
});
