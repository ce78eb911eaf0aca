// Compile-only checks of the SDK's types (tsc -p sdks/typescript, see
// README.md): the README's flow typed, and what the types must refuse.
import { AgentboxClient, AgentboxError, type AgentboxEvent, type Session, type events } from "../src/index.js";

async function flow(): Promise<void> {
	const client = new AgentboxClient({ baseUrl: "http://127.0.0.1:7777", token: "t" });
	const session: Session = await client.createSession({ agent: "mock" });
	const done = await client.runTurn(session.id, "write hello.txt", {
		onEvent: (ev) => {
			if (ev.type === "item.delta") {
				const d: string = ev.data.delta; // narrowed by type
				void d;
			}
		},
		onPermission: (req: events.PermissionRequested) => (req.kind === "file_write" ? "allow" : "deny"),
	});
	const reason: events.StopReason = done.stop_reason;
	void reason;
	const text: string = await client.readTextFile(session.id, "hello.txt");
	void text;
	for await (const ev of client.events(session.id, { after: 0 })) {
		switch (ev.type) {
			case "permission.requested":
				await client.answerPermission(session.id, ev.data.id, "allow");
				break;
			case "turn.completed": {
				const ms: number = ev.data.duration_ms;
				void ms;
				break;
			}
		}
	}
	// The generated operation table, typed by operation id.
	const page = await client.call("listEvents", { params: { id: session.id, after: 0 } });
	const next: number | undefined = page.next_after;
	void next;
	// The named method types the page's events by the event schema.
	const typed = await client.listEvents(session.id, { after: 0 });
	const first: AgentboxEvent | undefined = typed.events?.[0];
	if (first?.type === "session.started") {
		const agent: string | undefined = first.data.agent;
		void agent;
	}
	try {
		await client.getSession("nope");
	} catch (err) {
		if (err instanceof AgentboxError && err.kind === "not-found") return;
	}
	// @ts-expect-error createSession needs an agent.
	await client.createSession({});
	// @ts-expect-error a path parameter is required.
	await client.call("getSession", { params: {} });
	// @ts-expect-error no such operation.
	await client.call("noSuchOperation");
	// @ts-expect-error decisions are allow or deny.
	await client.answerPermission(session.id, "p", "maybe");
}
void flow;
