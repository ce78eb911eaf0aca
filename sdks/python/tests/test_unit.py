"""The clients against scripted answers (httpx.MockTransport): what a real
daemon does not do on demand, such as a seq that jumps ahead, a repeated
event, a 503 while reconnecting, or an answer that is not an event stream."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

import agentbox


def sse(*events: dict) -> bytes:
    out = b"retry: 10\n\n"
    for e in events:
        out += f"id: {e['seq']}\nevent: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()
    return out


def ev(seq: int, typ: str = "item.delta", **data) -> dict:
    return {"id": f"evt_{seq}", "seq": seq, "session_id": "ses_1", "time": "2026-12-02T00:00:00Z", "schema": 1,
            "type": typ, "source": "agent", "turn_id": "turn_1", "data": data}


class Script:
    """Answers stream connections in order, and log reads from a log."""

    def __init__(self, connections: list[httpx.Response]) -> None:
        self.connections = connections
        self.log = {s: ev(s) for s in range(1, 10)}
        self.resume_points: list[str | None] = []
        self.reads: list[str] = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/sessions/ses_1/events/stream":
            self.resume_points.append(req.headers.get("last-event-id"))
            assert req.headers["authorization"] == "Bearer tok"
            return self.connections.pop(0)
        if req.url.path == "/v1/sessions/ses_1/events":
            self.reads.append(str(req.url.query, "ascii"))
            after, limit = int(req.url.params["after"]), int(req.url.params["limit"])
            evs = [self.log[s] for s in range(after + 1, after + 1 + limit) if s in self.log]
            return httpx.Response(200, json={"events": evs, "next_after": evs[-1]["seq"] if evs else after, "has_more": False})
        return httpx.Response(404, json={"type": agentbox.PROBLEM_TYPE_BASE + "not-found", "title": "Not Found",
                                         "status": 404, "detail": "No such route."},
                              headers={"content-type": "application/problem+json"})


def connections() -> list[httpx.Response]:
    h = {"content-type": "text/event-stream"}
    problem = {"content-type": "application/problem+json"}
    return [
        # 2 repeated, then a jump from 2 to 5: 3 and 4 come from the log.
        httpx.Response(200, headers=h, content=sse(ev(1), ev(2), ev(2), ev(5))),
        # The daemon is busy: a temporary problem, retried.
        httpx.Response(503, headers=problem, json={"type": agentbox.PROBLEM_TYPE_BASE + "unavailable",
                                                   "title": "Service Unavailable", "status": 503}),
        httpx.Response(200, headers=h, content=sse(ev(4), ev(5), ev(6, "turn.completed", turn_id="turn_1",
                                                                 stop_reason="end_turn", duration_ms=1))),
    ]


def check(script: Script, seqs: list[int], reconnects: list) -> None:
    assert seqs == [1, 2, 3, 4, 5, 6]
    assert script.reads == ["after=2&limit=2"]
    assert script.resume_points == [None, "5", "5"]
    assert len(reconnects) == 2 and isinstance(reconnects[1], agentbox.APIError)


def test_stream_gaps_duplicates_retries():
    script = Script(connections())
    reconnects: list = []
    with agentbox.Client("http://agentbox.test", "tok", transport=httpx.MockTransport(script)) as ab:
        st = ab.stream("ses_1", until=agentbox.end_of_turn("turn_1"), min_backoff=0.001,
                       on_reconnect=lambda n, err, d: reconnects.append(err))
        seqs = [e["seq"] for e in st]
    check(script, seqs, reconnects)


def test_stream_gaps_duplicates_retries_async():
    script = Script(connections())
    reconnects: list = []

    async def main() -> list[int]:
        async with agentbox.AsyncClient("http://agentbox.test", "tok", transport=httpx.MockTransport(script)) as ab:
            st = ab.stream("ses_1", until=agentbox.end_of_turn("turn_1"), min_backoff=0.001,
                           on_reconnect=lambda n, err, d: reconnects.append(err))
            return [e["seq"] async for e in st]

    check(script, asyncio.run(main()), reconnects)


@pytest.mark.parametrize("answer, error, kind", [
    (httpx.Response(404, json={"type": agentbox.PROBLEM_TYPE_BASE + "not-found", "title": "Not Found", "status": 404},
                    headers={"content-type": "application/problem+json"}), agentbox.APIError, "not-found"),
    (httpx.Response(200, headers={"content-type": "text/html"}, content=b"<html>"), agentbox.StreamError, None),
    (httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"event: item.delta\ndata: {nope\n\n"),
     agentbox.StreamError, None),
])
def test_stream_permanent_errors(answer, error, kind):
    script = Script([answer])
    with agentbox.Client("http://agentbox.test", "tok", transport=httpx.MockTransport(script)) as ab:
        with pytest.raises(error) as ei:
            next(ab.stream("ses_1", min_backoff=0.001))
    if kind:
        assert ei.value.kind == kind
    assert len(script.resume_points) == 1, "a permanent error is not retried"


def test_stream_gives_up():
    script = Script([httpx.Response(502, text="bad gateway")] * 3)
    with agentbox.Client("http://agentbox.test", "tok", transport=httpx.MockTransport(script)) as ab:
        with pytest.raises(agentbox.StreamError, match="giving up after 3 attempts"):
            next(ab.stream("ses_1", min_backoff=0.001, max_attempts=3))


def test_read_file_request():
    seen: list[httpx.Request] = []

    def answer(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, headers={"content-type": "application/octet-stream"}, content=b"\x00\xffbc")

    with agentbox.Client("http://agentbox.test/prefix/", "tok", transport=httpx.MockTransport(answer)) as ab:
        assert ab.read_file("ses_1", "src/a b.go", offset=2, length=3) == b"\x00\xffbc"
    r = seen[0]
    assert r.method == "GET" and r.url.path == "/prefix/v1/sessions/ses_1/files/content"
    assert dict(r.url.params) == {"path": "src/a b.go", "offset": "2", "length": "3"}


def test_error_without_problem_document():
    def answer(req: httpx.Request) -> httpx.Response:
        return httpx.Response(502, headers={"content-type": "text/plain"}, content=b"upstream down\n")

    with agentbox.Client("http://agentbox.test", "tok", transport=httpx.MockTransport(answer)) as ab:
        with pytest.raises(agentbox.APIError) as ei:
            ab.health()
    e = ei.value
    assert (e.status, e.type, e.kind, e.title, e.detail, e.temporary) == (502, "", "other", "Bad Gateway", "upstream down", True)


@pytest.mark.parametrize("url", ["ftp://x", "http://h/?q=1", "http://u:p@h", "unix://host/x.sock", "http://"])
def test_bad_urls(url):
    with pytest.raises(agentbox.ConfigError):
        agentbox.Client(url, "tok")


def test_token_file_checks(tmp_path):
    f = tmp_path / "token"
    f.write_text("secret\n")
    f.chmod(0o644)
    with pytest.raises(agentbox.ConfigError, match="other users"):
        agentbox.read_token_file(str(f))
    f.chmod(0o600)
    assert agentbox.read_token_file(str(f)) == "secret"
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(OSError):
        agentbox.read_token_file(str(link))


NOBODY = 65534

#: A listener run as another user: it prints its address, then waits.
LISTENER = """
import os, socket, sys
if sys.argv[1] == "tcp":
    s = socket.create_server(("127.0.0.1", 0))
    print(s.getsockname()[1], flush=True)
else:
    s = socket.socket(socket.AF_UNIX)
    s.bind(sys.argv[2])
    s.listen()
    print(sys.argv[2], flush=True)
while True:
    c, _ = s.accept()
"""


@pytest.mark.parametrize("kind", ["tcp", "unix"])
def test_local_token_not_sent_to_another_users_daemon(tmp_path, kind):
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("needs root to listen as another user")
    (tmp_path / "token").write_text("secret\n")
    (tmp_path / "token").chmod(0o600)
    # A directory the other user can reach (pytest's are private to us).
    sock_dir = tempfile.mkdtemp(prefix="agentbox-owner-")
    os.chmod(sock_dir, 0o777)
    p = subprocess.Popen([sys.executable, "-c", LISTENER, kind, os.path.join(sock_dir, "d.sock")],
                         stdout=subprocess.PIPE, text=True, user=NOBODY, group=NOBODY)
    try:
        where = p.stdout.readline().strip()
        assert where, "the listener did not start"
        url = f"http://127.0.0.1:{where}" if kind == "tcp" else f"unix://{where}"
        env = {"AGENTBOX_DATA_DIR": str(tmp_path)}
        with pytest.raises(agentbox.ConfigError, match=f"belongs to user {NOBODY}"):
            agentbox.Client(url, env=env)
        # A token given explicitly is sent anyway, as asked.
        agentbox.Client(url, "explicit", env=env).close()
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(sock_dir)
