"""The synchronous client against a real daemon and its mock agent: the
flow of the README (create, send, stream, answer a permission, read a file),
resume after a cut, problem+json errors and the local token."""

from __future__ import annotations

import json

import pytest

import agentbox
from agentbox.events import AnyEvent


#: What the mock's write scenarios put in the file.
MOCK_CONTENT = b"Hello from the mock agent.\nThis file was written by the write scenario.\n"

#: A turn for the cut tests: bursts of deltas, each followed by a
#: permission the test answers after cutting the connection. The turn waits
#: for each answer, so what follows a cut can only come through a new
#: connection: every cut at a permission is a reconnection. (A cut elsewhere
#: may find the rest of the turn already buffered on the client's side.)
CUT_SCRIPT = [
    {"kind": "long", "count": 200},
    {"kind": "permission"},
    {"kind": "write", "path": "cut1.txt", "content": "cut\n"},
    {"kind": "long", "count": 200},
    {"kind": "permission"},
    {"kind": "write", "path": "cut2.txt", "content": "cut\n"},
    {"kind": "long", "count": 200},
]


def read_file(ab: agentbox.Client, session_id: str, path: str) -> bytes:
    """Reads a file through the files API."""
    return ab.read_file(session_id, path)


def test_flow(daemon_env):
    # Address and token from AGENTBOX_URL and AGENTBOX_TOKEN.
    with agentbox.Client() as ab:
        assert ab.health()["status"] == "ok"
        s = ab.create_session("mock")
        assert s["agent"] == "mock" and s["status"] == "idle"
        turn = ab.send(s["id"], "/scenario permission-write hello.txt")
        seen: list[AnyEvent] = []
        for ev in ab.stream(s["id"], until=agentbox.end_of_turn(turn["turn_id"])):
            seen.append(ev)
            if ev["type"] == "permission.requested":
                assert ev["data"]["kind"] == "file_write"
                r = ab.answer_permission(s["id"], ev["data"]["id"], "allow")
                assert r["event"]["type"] == "permission.resolved"
                # A second answer is a conflict, told apart by its problem type.
                with pytest.raises(agentbox.APIError) as ei:
                    ab.answer_permission(s["id"], ev["data"]["id"], "deny")
                assert (ei.value.status, ei.value.kind) == (409, "already-resolved")
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
        types = [e["type"] for e in seen]
        assert types[0] == "session.started"
        assert "permission.resolved" in types
        done = seen[-1]
        assert done["type"] == "turn.completed" and done["data"]["stop_reason"] == "end_turn"
        changes = [e["data"]["item"] for e in seen if e["type"] == "item.completed" and e["data"]["item"]["kind"] == "file_change"]
        assert changes and changes[0]["status"] == "completed" and changes[0]["changes"][0]["path"] == "hello.txt"
        # The stream saw exactly what the log holds.
        assert ab.events(s["id"])["events"] == seen
        assert read_file(ab, s["id"], "hello.txt") == MOCK_CONTENT


def test_run_turn_permission_denied(daemon_env):
    with agentbox.Client(daemon_env["url"], daemon_env["token"]) as ab:
        s = ab.create_session("mock")
        ab.run_turn(s["id"], "/scenario text")  # a first turn, so the next starts after seq 1
        asked: list[str] = []
        events: list[AnyEvent] = []
        done = ab.run_turn(s["id"], "/scenario permission-write denied.txt",
                           on_event=events.append,
                           on_permission=lambda req: asked.append(req["id"]) or "deny")
        assert done["stop_reason"] == "end_turn"
        assert len(asked) == 1
        assert events[0]["type"] == "turn.started", "run_turn sees only what follows its message"
        resolved = [e for e in events if e["type"] == "permission.resolved"]
        assert resolved[0]["data"]["decision"] == "deny"
        declined = [e["data"]["item"] for e in events if e["type"] == "item.completed" and e["data"]["item"]["kind"] == "file_change"]
        assert declined[0]["status"] == "declined"


def test_resume_after_cut(daemon_env, cut_proxy):
    with agentbox.Client(daemon_env["url"], daemon_env["token"]) as direct, \
            agentbox.Client(cut_proxy.url, daemon_env["token"]) as ab:
        s = direct.create_session("mock")
        turn = direct.send(s["id"], "/mock " + json.dumps(CUT_SCRIPT))
        reconnects: list[BaseException] = []
        seen: list[int] = []
        st = ab.stream(s["id"], until=agentbox.end_of_turn(turn["turn_id"]), min_backoff=0.05,
                       on_reconnect=lambda n, err, d: reconnects.append(err))
        for ev in st:
            seen.append(ev["seq"])
            if len(seen) == 20:
                cut_proxy.cut()
            if ev["type"] == "permission.requested":
                cut_proxy.cut()
                direct.answer_permission(s["id"], ev["data"]["id"], "allow")
        assert len(reconnects) >= 2, reconnects
        assert cut_proxy.accepted >= 3
        # No gap, no duplicate, and the same events as the log.
        assert seen == list(range(1, len(seen) + 1))
        log = [e["seq"] for e in direct.events(s["id"], limit=1000)["events"]]
        assert seen == log


def test_resume_from_seq(daemon_env):
    with agentbox.Client(daemon_env["url"], daemon_env["token"]) as ab:
        s = ab.create_session("mock")
        ab.run_turn(s["id"], "/scenario text")
        last = ab.last_seq(s["id"])
        assert last > 3
        # A stream from a seq sees only what follows it, resuming where a
        # previous reader left off.
        with ab.stream(s["id"], after=2) as st:
            first = next(st)
        assert first["seq"] == 3 and st.last_seq == 3


def test_problem_errors(daemon_env):
    with agentbox.Client(daemon_env["url"], daemon_env["token"]) as ab:
        with pytest.raises(agentbox.APIError) as ei:
            ab.get_session("ses_0190c0ffee0000000000000000000000")
        e = ei.value
        assert (e.status, e.kind, e.type) == (404, "not-found", agentbox.PROBLEM_TYPE_BASE + "not-found")
        assert e.title and e.method == "GET" and e.path.startswith("/v1/sessions/")

        with pytest.raises(agentbox.APIError) as ei:
            ab.create_session("no-such-agent")
        assert (ei.value.status, ei.value.kind) == (422, "unknown-agent")

        with pytest.raises(agentbox.APIError) as ei:
            ab.create_session("mock", permission_mode="sometimes")
        assert (ei.value.status, ei.value.kind) == (422, "validation")
        assert any(f.get("location") == "body.permission_mode" for f in ei.value.errors), ei.value.errors

        # A stream of an unknown session ends at once with the problem.
        with pytest.raises(agentbox.APIError) as ei:
            next(ab.stream("ses_0190c0ffee0000000000000000000000"))
        assert ei.value.kind == "not-found"

    with agentbox.Client(daemon_env["url"], "wrong-token") as bad:
        with pytest.raises(agentbox.APIError) as ei:
            bad.agents()
        assert (ei.value.status, ei.value.kind) == (401, "unauthorized")


def test_local_token(daemon_env):
    if not daemon_env["data_dir"]:
        pytest.skip("AGENTBOX_TEST_DATA_DIR is unset")
    # No token given: a daemon on this machine gets the one in its data dir.
    with agentbox.Client(daemon_env["url"], env={"AGENTBOX_DATA_DIR": daemon_env["data_dir"]}) as ab:
        assert ab.agents()["agents"]
    ep = agentbox._config.resolve(daemon_env["url"], None, {"AGENTBOX_DATA_DIR": daemon_env["data_dir"]})
    assert ep.token == daemon_env["token"] and ep.token_from_file
    # Never sent to another host.
    ep = agentbox._config.resolve("http://example.com:7777", None, {"AGENTBOX_DATA_DIR": daemon_env["data_dir"]})
    assert ep.token is None
