"""The asynchronous client against a real daemon: the same flow, resume
after a cut and errors."""

from __future__ import annotations

import asyncio
import json

import pytest

import agentbox
from agentbox.events import AnyEvent

from test_daemon import CUT_SCRIPT, MOCK_CONTENT


def test_flow_async(daemon_env):
    async def main() -> bytes | None:
        async with agentbox.AsyncClient() as ab:
            s = await ab.create_session("mock")
            turn = await ab.send(s["id"], "/scenario permission-write hello.txt")
            seen: list[AnyEvent] = []
            async for ev in ab.stream(s["id"], until=agentbox.end_of_turn(turn["turn_id"])):
                seen.append(ev)
                if ev["type"] == "permission.requested":
                    await ab.answer_permission(s["id"], ev["data"]["id"], "allow")
            assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
            assert seen[-1]["type"] == "turn.completed" and seen[-1]["data"]["stop_reason"] == "end_turn"
            assert (await ab.events(s["id"]))["events"] == seen

            # The same through run_turn, with a coroutine answering.
            async def allow(req):
                await asyncio.sleep(0)
                return {"decision": "allow"}
            done = await ab.run_turn(s["id"], "/scenario permission-write again.txt", on_permission=allow)
            assert done["stop_reason"] == "end_turn"
            return await ab.read_file(s["id"], "again.txt")

    got = asyncio.run(main())
    assert got == MOCK_CONTENT


def test_resume_after_cut_async(daemon_env, cut_proxy):
    async def main() -> None:
        async with agentbox.AsyncClient(daemon_env["url"], daemon_env["token"]) as direct, \
                agentbox.AsyncClient(cut_proxy.url, daemon_env["token"]) as ab:
            s = await direct.create_session("mock")
            turn = await direct.send(s["id"], "/mock " + json.dumps(CUT_SCRIPT))
            reconnects: list[BaseException] = []
            seen: list[int] = []
            async with ab.stream(s["id"], until=agentbox.end_of_turn(turn["turn_id"]), min_backoff=0.05,
                                 on_reconnect=lambda n, err, d: reconnects.append(err)) as st:
                async for ev in st:
                    seen.append(ev["seq"])
                    if len(seen) == 20:
                        cut_proxy.cut()
                    if ev["type"] == "permission.requested":
                        cut_proxy.cut()
                        await direct.answer_permission(s["id"], ev["data"]["id"], "allow")
            assert len(reconnects) >= 2, reconnects
            assert seen == list(range(1, len(seen) + 1))
            log = [e["seq"] for e in (await direct.events(s["id"], limit=1000))["events"]]
            assert seen == log

    asyncio.run(main())


def test_problem_errors_async(daemon_env):
    async def main() -> None:
        async with agentbox.AsyncClient(daemon_env["url"], daemon_env["token"]) as ab:
            with pytest.raises(agentbox.APIError) as ei:
                await ab.create_session("no-such-agent")
            assert (ei.value.status, ei.value.kind) == (422, "unknown-agent")
            with pytest.raises(agentbox.SessionEndedError):
                s = await ab.create_session("mock")
                await ab.delete_session(s["id"])
                await ab.wait_turn(s["id"], "turn_never")

    asyncio.run(main())
