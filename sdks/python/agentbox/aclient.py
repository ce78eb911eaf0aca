"""The asynchronous client (asyncio, through httpx)."""

from __future__ import annotations

import asyncio
import inspect
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Literal

import httpx

from . import _calls as calls
from ._config import resolve
from ._core import (IDLE_TIMEOUT, MAX_BACKOFF, MIN_BACKOFF, PAGE, USER_AGENT, Call, StreamState,
                    end_of_turn, events_call, page_events, permission_answer, turn_result)
from ._sse import Message, SSEParser
from .errors import APIError, StreamError
from .events import AnyEvent, PermissionRequested, TurnCompleted
from .types import (AgentDetail, AgentList, EventPage, Health, RequestList, Resolved,
                    SendMessage, Session, SessionList, Turn)

from .client import PermissionDecision


class AsyncClient:
    """An asyncio client of one agentbox daemon: the calls of Client, as
    coroutines.

    ``url`` defaults to $AGENTBOX_URL, else http://127.0.0.1:7777 (also
    unix:///path.sock); ``token`` to $AGENTBOX_TOKEN, else, for a daemon on
    this machine, the token it wrote to its data directory (with
    ``local_token``). Use it as an async context manager, or await aclose().
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 300.0,
                 local_token: bool = True, env: Mapping[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, user_agent: str = USER_AGENT) -> None:
        ep = resolve(url, token, env, local_token)
        headers = {"User-Agent": user_agent}
        if ep.token:
            headers["Authorization"] = "Bearer " + ep.token
        if transport is None and ep.uds is not None:
            transport = httpx.AsyncHTTPTransport(uds=ep.uds)
        # A token from the data directory never goes through a proxy from
        # the environment, which would see it (as in the Go SDK).
        self._http = httpx.AsyncClient(base_url=ep.base_url, headers=headers, timeout=timeout,
                                  transport=transport, trust_env=not ep.token_from_file)
        self.base_url = ep.base_url

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _do(self, call: Call) -> Any:
        resp = await self._http.send(call.request(self._http))
        return call.result(resp)

    # Sessions.

    async def health(self) -> Health:
        return await self._do(calls.health())

    async def agents(self) -> AgentList:
        return await self._do(calls.agents())

    async def agent(self, name: str) -> AgentDetail:
        return await self._do(calls.agent(name))

    async def create_session(self, agent: str, **fields: Any) -> Session:
        """Starts a session (fields of CreateSession: cwd, env, policy, ...);
        it returns once the agent is ready."""
        return await self._do(calls.create_session(agent, fields))

    async def list_sessions(self, status: str | None = None, limit: int | None = None,
                      before: str | None = None) -> SessionList:
        return await self._do(calls.list_sessions(status, limit, before))

    async def get_session(self, session_id: str) -> Session:
        return await self._do(calls.get_session(session_id))

    async def update_session(self, session_id: str, **fields: Any) -> Session:
        return await self._do(calls.update_session(session_id, fields))

    async def delete_session(self, session_id: str, purge: bool = False) -> None:
        await self._do(calls.delete_session(session_id, purge))

    async def resume(self, session_id: str, **fields: Any) -> Session:
        return await self._do(calls.resume(session_id, fields))

    # Turns.

    async def send(self, session_id: str, text: str) -> Turn:
        """Starts a turn with a text message and returns its id at once."""
        return await self._do(calls.send_message(session_id, {"text": text}))

    async def send_message(self, session_id: str, message: SendMessage) -> Turn:
        return await self._do(calls.send_message(session_id, dict(message)))

    async def interrupt(self, session_id: str) -> Turn:
        return await self._do(calls.interrupt(session_id))

    async def answer_permission(self, session_id: str, permission_id: str, decision: Literal["allow", "deny"],
                          *, option_id: str | None = None, message: str | None = None,
                          by: Literal["user", "policy"] | None = None) -> Resolved:
        return await self._do(calls.answer_permission(session_id, permission_id,
                                                calls.permission_body(decision, option_id, message, by)))

    async def answer_question(self, session_id: str, question_id: str, **answer: Any) -> Resolved:
        return await self._do(calls.answer_question(session_id, question_id, answer))

    async def requests(self, session_id: str, state: Literal["pending", "resolved"] | None = None) -> RequestList:
        return await self._do(calls.requests(session_id, state))

    # Events.

    async def events(self, session_id: str, after: int = 0, limit: int | None = None) -> EventPage:
        """One page of the session's log: events with seq above after."""
        return await self._do(events_call(session_id, after, limit))

    async def last_seq(self, session_id: str) -> int:
        """The seq of the log's last event (0 when empty): pass it as after
        to stream or wait_turn before sending a message to an existing
        session, so that only what follows is seen."""
        last = 0
        while True:
            page = await self.events(session_id, last, PAGE)
            evs = page_events(page, last)
            if evs:
                last = evs[-1]["seq"]
            if not page.get("has_more") or not evs:
                return last

    def stream(self, session_id: str, after: int = 0, *, until: Callable[[AnyEvent], bool] | None = None,
               min_backoff: float = MIN_BACKOFF, max_backoff: float = MAX_BACKOFF,
               idle_timeout: float = IDLE_TIMEOUT, max_attempts: int = 0,
               on_reconnect: Callable[[int, BaseException, float], None] | None = None) -> AsyncEventStream:
        """Follows the session's events with seq above after (see AsyncEventStream)."""
        st = StreamState(session_id, max(after, 0), until, min_backoff, max(max_backoff, min_backoff), max_attempts)
        return AsyncEventStream(self, st, idle_timeout, on_reconnect)

    async def wait_turn(self, session_id: str, turn_id: str, after: int = 0, *,
                  on_event: Callable[[AnyEvent], Awaitable[None] | None] | None = None,
                  on_permission: Callable[[PermissionRequested], Awaitable[PermissionDecision] | PermissionDecision] | None = None,
                  **stream_options: Any) -> TurnCompleted:
        """Follows the events after ``after`` until turn_id completes and
        returns its turn.completed payload. on_event sees every event;
        on_permission answers each permission.requested (its answer is sent
        unless it returns None); either may be a coroutine function. Raises SessionEndedError if the session
        ends first."""
        async with self.stream(session_id, after, until=end_of_turn(turn_id), **stream_options) as st:
            async for ev in st:
                if on_event is not None:
                    r = on_event(ev)
                    if inspect.isawaitable(r):
                        await r
                if ev["type"] == "permission.requested" and on_permission is not None:
                    req: PermissionRequested = ev["data"]
                    got = on_permission(req)
                    if inspect.isawaitable(got):
                        got = await got
                    ans = permission_answer(got)
                    if ans is not None:
                        try:
                            await self._do(calls.answer_permission(session_id, req["id"], ans))
                        except APIError as e:
                            if e.kind != "already-resolved":
                                raise
                done = turn_result(session_id, turn_id, ev)
                if done is not None:
                    return done
        raise StreamError(f"session {session_id}: event stream ended before turn {turn_id} completed")

    async def run_turn(self, session_id: str, text: str | SendMessage, **wait_options: Any) -> TurnCompleted:
        """Sends a message and waits for its turn to end (see wait_turn),
        seeing every event that follows the message."""
        after = await self.last_seq(session_id)
        msg: dict[str, Any] = {"text": text} if isinstance(text, str) else dict(text)
        turn = await self._do(calls.send_message(session_id, msg))
        return await self.wait_turn(session_id, turn["turn_id"], after, **wait_options)

    # Files.

    async def read_file(self, session_id: str, path: str, *, offset: int | None = None,
                  length: int | None = None) -> bytes:
        """The bytes of a file of the session's workspace (path relative to
        its root), or of the range offset, length."""
        return await self._do(calls.read_file(session_id, path, offset, length))


class AsyncEventStream:
    """A session's events through the SSE endpoint, as an async iterator. Every
    event with seq above the starting point comes once and in seq order,
    whatever happens to the connection: after a drop, an idle timeout, a 5xx
    or 429 it reconnects with jittered exponential backoff and resumes after
    the last seq delivered; repeated events are dropped; a seq that jumps
    ahead is backfilled from the log first. It ends with until, close(), a
    permanent error (4xx, a malformed stream: raised), or max_attempts
    consecutive failures (StreamError). Use it from one task."""

    def __init__(self, client: AsyncClient, state: StreamState, idle_timeout: float,
                 on_reconnect: Callable[[int, BaseException, float], None] | None) -> None:
        self._c = client
        self._s = state
        self._idle = idle_timeout
        self._on_reconnect = on_reconnect
        self._resp: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._parser: SSEParser | None = None
        self._msgs: deque[Message] = deque()

    @property
    def last_seq(self) -> int:
        """The seq of the last event delivered, or the starting point."""
        return self._s.last

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def aclose(self) -> None:
        self._s.done = True
        await self._disconnect()

    async def __anext__(self) -> AnyEvent:
        s = self._s
        if s.done:
            raise StopAsyncIteration
        if s.stop_next:
            await self.aclose()
            raise StopAsyncIteration
        try:
            return await self._next()
        except BaseException:
            await self.aclose()
            raise

    async def _next(self) -> AnyEvent:
        s = self._s
        while True:
            while s.queue:
                ev = s.queue.popleft()
                if ev["seq"] > s.last:
                    return s.deliver(ev)
            while self._msgs:
                ev2 = s.decode(self._msgs.popleft())
                if ev2 is None or ev2["seq"] <= s.last:
                    continue  # not an event, or one already delivered
                if s.gap(ev2):
                    try:
                        await self._backfill(ev2)
                    except (APIError, httpx.TransportError) as e:
                        await self._drop(e)
                    break
                return s.deliver(ev2)
            if s.queue:
                continue
            if self._chunks is None:
                await self._connect()
                continue
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                await self._drop(EOFError("event stream ended"))  # the daemon never ends one on purpose
                continue
            except httpx.TransportError as e:  # includes the idle read timeout
                await self._drop(e)
                continue
            assert self._parser is not None
            self._msgs.extend(self._parser.feed(chunk))
            if self._parser.retry is not None:
                s.server_retry = self._parser.retry

    async def _drop(self, err: BaseException) -> None:
        await self._disconnect()
        self._s.failed(err)

    async def _disconnect(self) -> None:
        self._msgs.clear()
        self._chunks, self._parser = None, None
        if self._resp is not None:
            await self._resp.aclose()
            self._resp = None

    async def _connect(self) -> None:
        """Connects after the backoff the failures so far call for; a failed
        attempt is counted and left for the next round."""
        s = self._s
        if s.failures:
            d = s.backoff()
            if self._on_reconnect is not None:
                assert s.last_error is not None
                self._on_reconnect(s.failures, s.last_error, d)
            await asyncio.sleep(d)
        path, params, headers = s.connect_call()
        timeout = httpx.Timeout(30.0, read=self._idle or None)
        req = self._c._http.build_request("GET", path, params=params, headers=headers, timeout=timeout)
        try:
            resp = await self._c._http.send(req, stream=True)
        except httpx.TransportError as e:
            s.failed(e)
            return
        try:
            body = await resp.aread() if resp.status_code != 200 else None
            s.check_answer(resp, path, body)
        except APIError as e:
            await resp.aclose()
            s.failed(e)
            return
        except BaseException:
            await resp.aclose()
            raise
        self._resp, self._parser = resp, SSEParser()
        self._chunks = resp.aiter_bytes()

    async def _backfill(self, ev: AnyEvent) -> None:
        after, before = self._s.backfill_range(ev)
        got: list[AnyEvent] = []
        while after < before - 1:
            page = await self._c.events(self._s.session_id, after, min(before - 1 - after, PAGE))
            evs = page_events(page, after, before)
            if not evs:
                break  # a range the log cannot fill: the daemon promises there is none
            got.extend(evs)
            after = evs[-1]["seq"]
        self._s.queue.extend(got)
        self._s.queue.append(ev)
