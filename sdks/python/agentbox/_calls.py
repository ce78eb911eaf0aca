"""The API's calls as requests, one function each, for both clients."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ._core import Call, session_path


def health() -> Call:
    return Call("GET", "/v1/health")


def agents() -> Call:
    return Call("GET", "/v1/agents")


def agent(name: str) -> Call:
    return Call("GET", "/v1/agents/" + quote(name, safe=""))


def create_session(agent: str, fields: dict[str, Any]) -> Call:
    return Call("POST", "/v1/sessions", body={"agent": agent, **fields})


def list_sessions(status: str | None, limit: int | None, before: str | None) -> Call:
    q = {}
    if status:
        q["status"] = status
    if limit:
        q["limit"] = str(limit)
    if before:
        q["before"] = before
    return Call("GET", "/v1/sessions", q or None)


def get_session(session_id: str) -> Call:
    return Call("GET", session_path(session_id))


def update_session(session_id: str, fields: dict[str, Any]) -> Call:
    return Call("PATCH", session_path(session_id), body=fields)


def delete_session(session_id: str, purge: bool) -> Call:
    return Call("DELETE", session_path(session_id), {"purge": "true" if purge else "false"}, answer="none")


def send_message(session_id: str, message: dict[str, Any]) -> Call:
    return Call("POST", session_path(session_id, "messages"), body=message)


def interrupt(session_id: str) -> Call:
    return Call("POST", session_path(session_id, "interrupt"), body={})


def resume(session_id: str, fields: dict[str, Any]) -> Call:
    return Call("POST", session_path(session_id, "resume"), body=fields)


def answer_permission(session_id: str, permission_id: str, answer: dict[str, Any]) -> Call:
    return Call("POST", session_path(session_id, "permissions", permission_id), body=answer)


def answer_question(session_id: str, question_id: str, answer: dict[str, Any]) -> Call:
    return Call("POST", session_path(session_id, "questions", question_id), body=answer)


def requests(session_id: str, state: str | None) -> Call:
    return Call("GET", session_path(session_id, "requests"), {"state": state} if state else None)


def read_file(session_id: str, path: str, offset: int | None, length: int | None) -> Call:
    q = {"path": path}
    if offset is not None:
        q["offset"] = str(offset)
    if length is not None:
        q["length"] = str(length)
    return Call("GET", session_path(session_id, "files", "content"), q, answer="bytes")


def permission_body(decision: str, option_id: str | None, message: str | None, by: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"decision": decision}
    if option_id:
        body["option_id"] = option_id
    if message:
        body["message"] = message
    if by:
        body["by"] = by
    return body
