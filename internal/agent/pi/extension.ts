// agentbox's pi extension. pi runs every tool it is given without asking;
// this extension is the approval gate agentbox puts in front of them, and
// it tells agentbox what a file looked like before pi changes it (for the
// diff of a file_change item).
//
// It talks to agentbox only through pi's RPC extension UI sub-protocol:
//
//   - a tool named in AGENTBOX_PI_ASK (comma-separated) is confirmed first:
//     ctx.ui.confirm("agentbox.permission", JSON {toolCallId, toolName,
//     input}); a false answer blocks the call;
//   - a tool named in AGENTBOX_PI_DENY is blocked without asking (plan mode);
//   - before a write or edit runs, ctx.ui.notify("agentbox.before " + JSON
//     {toolCallId, path, exists, content}) reports the file's old content
//     (left out when the file is larger than 1 MiB).
//
// It imports nothing from pi, so that it loads whatever pi's module layout.
import * as fs from "node:fs";
import * as path from "node:path";

const MAX_BEFORE = 1 << 20;

function list(name: string): Set<string> {
	return new Set(
		(process.env[name] ?? "")
			.split(",")
			.map((s) => s.trim())
			.filter((s) => s !== ""),
	);
}

function before(cwd: string, p: unknown): { path: string; exists: boolean; content?: string } | undefined {
	if (typeof p !== "string" || p === "") return undefined;
	const abs = path.resolve(cwd, p);
	try {
		const st = fs.statSync(abs);
		if (!st.isFile()) return { path: abs, exists: true };
		if (st.size > MAX_BEFORE) return { path: abs, exists: true };
		return { path: abs, exists: true, content: fs.readFileSync(abs, "utf8") };
	} catch {
		return { path: abs, exists: false };
	}
}

export default function (pi: any) {
	const ask = list("AGENTBOX_PI_ASK");
	const deny = list("AGENTBOX_PI_DENY");

	pi.on("tool_call", async (event: any, ctx: any) => {
		const name: string = event.toolName;
		if (deny.has(name)) {
			return { block: true, reason: `agentbox: the session's permission mode does not allow ${name}` };
		}
		if (ask.has(name)) {
			const req = JSON.stringify({ toolCallId: event.toolCallId, toolName: name, input: event.input });
			const ok = await ctx.ui.confirm("agentbox.permission", req, { signal: ctx.signal });
			if (!ok) {
				return { block: true, reason: "Denied by the user" };
			}
		}
		if (name === "write" || name === "edit") {
			const b = before(ctx.cwd ?? process.cwd(), event.input?.path);
			if (b) ctx.ui.notify("agentbox.before " + JSON.stringify({ toolCallId: event.toolCallId, ...b }), "info");
		}
		return undefined;
	});
}
