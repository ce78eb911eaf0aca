"""What the sync and async clients share: the requests of each call, the
answers' decoding, and the event stream's bookkeeping (resume point,
duplicates, gaps, backoff)."""

from __future__ import annotations

import json
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from ._sse import Message
from .errors import APIError, SessionEndedError, StreamError, api_error
from .events import EVENT_TYPES, AnyEvent, TurnCompleted
from .types import EventPage

USER_AGENT = "agentbox-python"
JSON_ACCEPT = "application/json, application/problem+json"
#: Page size of the log reads that backfill a stream and find its end.
PAGE = 1000

#: Defaults of event streams: the idle timeout must exceed the daemon's
#: heartbeat (15 s) by a wide margin; reconnecting costs one request and
#: loses nothing.
MIN_BACKOFF = 0.25
MAX_BACKOFF = 15.0
IDLE_TIMEOUT = 90.0


def session_path(session_id: str, *more: str) -> str:
    """/v1/sessions/{id}[/more...], each segment escaped."""
    if not session_id:
        raise ValueError("empty session id")
    p = "/v1/sessions/" + quote(session_id, safe="")
    for s in more:
        if not s:
            raise ValueError("empty path segment")
        p += "/" + quote(s, safe="")
    return p


@dataclass
class Call:
    """One request of the API and how to read its answer."""

    method: str
    path: str
    params: dict[str, str] | None = None
    body: Any = None
    #: "json" decodes the answer, "bytes" returns it raw, "none" drops it.
    answer: str = "json"

    def request(self, http: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        headers = {"Accept": JSON_ACCEPT if self.answer != "bytes" else "*/*"}
        kw: dict[str, Any] = {}
        if self.body is not None:
            kw["content"] = json.dumps(self.body).encode()
            headers["Content-Type"] = "application/json"
        return http.build_request(self.method, self.path, params=self.params, headers=headers, **kw)

    def result(self, resp: httpx.Response) -> Any:
        """Decodes a read answer; a non-2xx one raises APIError."""
        if not 200 <= resp.status_code <= 299:
            raise api_error(resp, self.method, self.path, resp.content)
        if self.answer == "bytes":
            return resp.content
        if self.answer == "none" or resp.status_code == 204:
            return None
        try:
            return resp.json()
        except ValueError as e:
            raise APIError(self.method, self.path, resp.status_code,
                           {"type": "", "title": "Bad answer", "status": resp.status_code,
                            "detail": f"decode answer: {e}"}) from e


def end_of_turn(turn_id: str) -> Callable[[AnyEvent], bool]:
    """A predicate, for a stream's until, matching the turn.completed of
    turn_id and any session.ended (after which no turn can complete)."""
    def stop(ev: AnyEvent) -> bool:
        return ev["type"] == "session.ended" or (ev["type"] == "turn.completed" and turn_of(ev) == turn_id)
    return stop


def turn_of(ev: AnyEvent) -> str:
    """The turn id of an event, from its envelope or its turn payload."""
    t = ev.get("turn_id")
    if isinstance(t, str) and t:
        return t
    data = ev.get("data")
    inner = data.get("turn_id") if isinstance(data, dict) else None
    return inner if isinstance(inner, str) else ""


def turn_result(session_id: str, turn_id: str, ev: AnyEvent) -> TurnCompleted | None:
    """The turn's result when ev ends it, None when ev does not concern it;
    raises SessionEndedError for a session.ended."""
    if ev["type"] == "turn.completed" and turn_of(ev) == turn_id:
        return ev["data"]
    if ev["type"] == "session.ended":
        d: dict[str, Any] = ev["data"]  # type: ignore[assignment]
        raise SessionEndedError(session_id, turn_id, str(d.get("reason", "")), str(d.get("message", "")))
    return None


def permission_answer(ans: Any) -> dict[str, Any] | None:
    """What an on_permission callback returned, as a PermissionAnswer:
    "allow", "deny", a PermissionAnswer dict, or None to leave it."""
    if ans is None:
        return None
    if isinstance(ans, str):
        return {"decision": ans}
    if isinstance(ans, dict) and "decision" in ans:
        return dict(ans)
    raise TypeError(f"on_permission returned {ans!r}: want 'allow', 'deny', a PermissionAnswer or None")


def retryable(err: BaseException) -> bool:
    """Whether reconnecting may cure a stream's failure."""
    if isinstance(err, APIError):
        return err.temporary
    return isinstance(err, (httpx.TransportError, EOFError))


@dataclass
class StreamState:
    """The bookkeeping of one event stream, whatever drives its I/O. It
    delivers every event with seq above the starting point once, in seq
    order: duplicates are dropped, and a seq that jumps ahead is a gap to
    read from the log first."""

    session_id: str
    last: int
    until: Callable[[AnyEvent], bool] | None
    min_backoff: float
    max_backoff: float
    max_attempts: int
    queue: deque[AnyEvent] = field(default_factory=deque)
    stop_next: bool = False
    done: bool = False
    failures: int = 0
    last_error: BaseException | None = None
    server_retry: float | None = None

    def connect_call(self) -> tuple[str, dict[str, str], dict[str, str]]:
        """Path, query and headers of the next connection: resume after the
        last seq delivered."""
        path = session_path(self.session_id, "events", "stream")
        params: dict[str, str] = {}
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last > 0:
            params["after"] = str(self.last)
            headers["Last-Event-ID"] = str(self.last)
        return path, params, headers

    def check_answer(self, resp: httpx.Response, path: str, body: bytes | None) -> None:
        """Raises for an answer that is not the event stream."""
        if not 200 <= resp.status_code <= 299:
            raise api_error(resp, "GET", path, body or b"")
        ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
        if resp.status_code != 200 or ctype != "text/event-stream":
            raise StreamError(f"GET {path}: answer is {resp.status_code} {ctype!r}, not 200 text/event-stream")

    def decode(self, msg: Message) -> AnyEvent | None:
        """The event a message carries; None for a message of a kind this
        client does not know (the daemon may add some)."""
        known = msg.event == "message" or msg.event in EVENT_TYPES
        try:
            ev = json.loads(msg.data)
            ok = isinstance(ev, dict) and isinstance(ev.get("seq"), int) and ev["seq"] > 0
        except ValueError:
            ok = False
        if not ok:
            if not known:
                return None
            raise StreamError(f"session {self.session_id}: event stream: bad {msg.event!r} event (id {msg.id!r})")
        return ev  # type: ignore[no-any-return]

    def gap(self, ev: AnyEvent) -> bool:
        return ev["seq"] > self.last + 1

    def deliver(self, ev: AnyEvent) -> AnyEvent:
        self.last, self.failures = ev["seq"], 0
        if self.until is not None and self.until(ev):
            self.stop_next = True
        return ev

    def failed(self, err: BaseException) -> None:
        """Counts a failed attempt; raises when the stream must end."""
        if not retryable(err):
            self.done = True
            raise err
        self.failures += 1
        self.last_error = err
        if self.max_attempts and self.failures >= self.max_attempts:
            self.done = True
            raise StreamError(f"session {self.session_id}: event stream: giving up after "
                              f"{self.failures} attempts: {err}") from err

    def backoff(self) -> float:
        """The delay before the next attempt: exponential in the failures,
        from the server's retry (or the minimum) to the maximum, the upper
        half jittered."""
        d = self.server_retry if self.server_retry else self.min_backoff
        for _ in range(1, self.failures):
            if d >= self.max_backoff:
                break
            d *= 2
        d = min(d, self.max_backoff)
        return d / 2 + random.uniform(0, d / 2)

    def backfill_range(self, ev: AnyEvent) -> tuple[int, int]:
        """The seqs (after, before) the log must fill ahead of ev."""
        return self.last, ev["seq"]


def events_call(session_id: str, after: int, limit: int | None) -> Call:
    params = {"after": str(after)}
    if limit:
        params["limit"] = str(limit)
    return Call("GET", session_path(session_id, "events"), params)


def page_events(page: EventPage, after: int, before: int | None = None) -> list[AnyEvent]:
    """The events of a page with after < seq (< before)."""
    out: list[AnyEvent] = []
    for e in page.get("events") or []:
        if e["seq"] > after and (before is None or e["seq"] < before):
            out.append(e)  # type: ignore[arg-type]  # the API's Event is the envelope AnyEvent details
    return out
