"""The flow with the real Claude Code CLI against the fake LLM (scenario
"write": the model calls Write for hello.txt with "hi"). Run by
internal/sdkgen/python's TestPythonSDKClaude, which sets the fake LLM's base
URL and key in AGENTBOX_TEST_LLM_URL and AGENTBOX_TEST_LLM_KEY."""

from __future__ import annotations

import asyncio
import os

import pytest

import agentbox
from agentbox.events import AnyEvent



@pytest.fixture
def llm_env(daemon_env: dict[str, str]) -> dict[str, str]:
    url, key = os.environ.get("AGENTBOX_TEST_LLM_URL"), os.environ.get("AGENTBOX_TEST_LLM_KEY")
    if not url or not key:
        pytest.skip("no fake LLM: AGENTBOX_TEST_LLM_URL and AGENTBOX_TEST_LLM_KEY are unset (TestPythonSDKClaude sets them)")
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": key}


def test_claude_flow(llm_env):
    with agentbox.Client() as ab:
        s = ab.create_session("claude", env=llm_env)
        turn = ab.send(s["id"], "Write hello.txt")
        seen: list[AnyEvent] = []
        for ev in ab.stream(s["id"], until=agentbox.end_of_turn(turn["turn_id"])):
            seen.append(ev)
            if ev["type"] == "permission.requested":
                ab.answer_permission(s["id"], ev["data"]["id"], "allow")
        types = [e["type"] for e in seen]
        assert "permission.requested" in types and "permission.resolved" in types, types
        assert seen[-1]["type"] == "turn.completed" and seen[-1]["data"]["stop_reason"] == "end_turn", seen[-1]
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
        assert ab.read_file(s["id"], "hello.txt") == b"hi"
        ab.delete_session(s["id"])


def test_claude_run_turn_async(llm_env):
    async def main() -> None:
        async with agentbox.AsyncClient() as ab:
            s = await ab.create_session("claude", env=llm_env)
            asked: list[str] = []

            async def allow(req):
                asked.append(req["kind"])
                return "allow"

            done = await ab.run_turn(s["id"], "Write hello.txt", on_permission=allow)
            assert done["stop_reason"] == "end_turn"
            assert asked, "claude asked for no permission"
            await ab.delete_session(s["id"])

    asyncio.run(main())
