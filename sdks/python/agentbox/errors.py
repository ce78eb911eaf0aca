"""Errors of the agentbox client: APIError for the daemon's problem+json
answers (RFC 7807), and the errors of event streams and turns."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx

from .types import Problem, ProblemField

#: Prefix of every problem type URI the daemon sends.
PROBLEM_TYPE_BASE = "https://agentbox.dev/problems/"

# The kind of an answer that carries no agentbox problem type (a proxy's
# error page), from its status, as the daemon maps them.
_KIND_BY_STATUS = {
    400: "bad-request",
    401: "unauthorized",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    408: "request-timeout",
    409: "conflict",
    413: "payload-too-large",
    415: "unsupported-media-type",
    422: "validation",
    429: "too-many-requests",
    500: "internal",
    503: "unavailable",
    504: "timeout",
}

_MAX_BODY = 1 << 20


class AgentboxError(Exception):
    """Base of every error this package raises on purpose."""


class APIError(AgentboxError):
    """A non-2xx answer of the API, with its problem document.

    Switch on ``kind`` (the problem type's short name: "not-found", "busy",
    "validation", ...). When the body was not problem+json, the problem is
    made from the status line and ``type`` is empty.
    """

    def __init__(self, method: str, path: str, status: int, problem: Problem | None = None,
                 retry_after: str | None = None) -> None:
        p: dict[str, Any] = dict(problem or {})
        self.method = method
        #: The request's path, without its query.
        self.path = path
        #: The HTTP status; the status line wins over the document's.
        self.status = status
        t = p.get("type") if isinstance(p.get("type"), str) else ""
        self.type: str = "" if t == "about:blank" else (t or "")
        self.title: str = str(p.get("title") or _reason(status))
        self.detail: str = str(p.get("detail") or "")
        self.instance: str = str(p.get("instance") or "")
        errs = p.get("errors")
        self.errors: list[ProblemField] = [cast(ProblemField, e) for e in errs if isinstance(e, dict)] \
            if isinstance(errs, list) else []
        #: The Retry-After header, when the daemon sent one (429, 503, 507).
        self.retry_after = retry_after
        super().__init__(self._message())

    @property
    def kind(self) -> str:
        """The problem type's short name, or one derived from the status."""
        if self.type.startswith(PROBLEM_TYPE_BASE) and len(self.type) > len(PROBLEM_TYPE_BASE):
            return self.type[len(PROBLEM_TYPE_BASE):]
        return _KIND_BY_STATUS.get(self.status, "other")

    @property
    def temporary(self) -> bool:
        """Whether the same request may succeed later (5xx, 408, 429)."""
        if self.status in (408, 429):
            return True
        if self.status in (501, 505):
            return False
        return self.status >= 500

    def _message(self) -> str:
        s = f"{self.method} {self.path}: {self.status} {self.title}"
        if self.detail:
            s += ": " + self.detail
        for i, f in enumerate(self.errors):
            if i == 3:
                s += f" (and {len(self.errors) - i} more)"
                break
            s += "; " + (f"{f.get('location')}: " if f.get("location") else "") + str(f.get("message", ""))
        return s


def _reason(status: int) -> str:
    try:
        from http import HTTPStatus
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def api_error(resp: httpx.Response, method: str, path: str, body: bytes) -> APIError:
    """Turns a non-2xx answer, whose body (up to 1 MiB) was read, into an APIError."""
    ctype = resp.headers.get("content-type", "").split(";")[0].strip().lower()
    problem: Problem | None = None
    body = body[:_MAX_BODY]
    if ctype in ("application/problem+json", "application/json"):
        try:
            doc = json.loads(body)
            if isinstance(doc, dict):
                problem = doc  # type: ignore[assignment]
        except ValueError:
            pass  # a broken body still yields the status
    err = APIError(method, path, resp.status_code, problem, resp.headers.get("retry-after"))
    if not err.detail and ctype == "text/plain":
        err.detail = body[:512].decode("utf-8", "replace").strip()
        err.args = (err._message(),)
    return err


class StreamError(AgentboxError):
    """An event stream that cannot go on: a malformed stream, an answer that
    is not an event stream, or too many failed reconnections."""


class SessionEndedError(AgentboxError):
    """The session ended before the awaited turn completed."""

    def __init__(self, session_id: str, turn_id: str, reason: str, message: str = "") -> None:
        self.session_id = session_id
        self.turn_id = turn_id
        #: The session.ended event's reason ("error", "terminated", ...).
        self.reason = reason
        super().__init__(f"session {session_id} ended before turn {turn_id} completed: {reason}"
                         + (f": {message}" if message else ""))
