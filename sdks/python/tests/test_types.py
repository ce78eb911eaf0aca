"""The generated modules at run time: every TypedDict's annotations
resolve, and required keys are the schemas' (what validators of TypedDicts,
such as pydantic's, read)."""

from __future__ import annotations

import json
import pathlib
import typing

import pytest

from agentbox import events, types

REPO = pathlib.Path(__file__).resolve().parents[3]


def typed_dicts(module):
    return [o for o in vars(module).values() if isinstance(o, type) and hasattr(o, "__required_keys__")]


@pytest.mark.parametrize("module, source, defs", [
    (types, "api/openapi.json", lambda d: d["components"]["schemas"]),
    (events, "event/schema/event.v1.json", lambda d: d["$defs"]),
])
def test_required_keys(module, source, defs):
    schemas = defs(json.loads((REPO / source).read_text()))
    checked = 0
    for td in typed_dicts(module):
        typing.get_type_hints(td)  # every forward reference resolves
        s = schemas.get(td.__name__)
        if s is None:
            continue
        assert td.__required_keys__ == frozenset(s.get("required", [])), td.__name__
        assert td.__required_keys__ | td.__optional_keys__ == frozenset(s.get("properties", {})), td.__name__
        checked += 1
    assert checked == sum(1 for s in schemas.values() if s.get("type") == "object")


def test_event_union():
    members = typing.get_args(events.AnyEvent)
    assert [typing.get_args(typing.get_type_hints(m)["type"])[0] for m in members] == list(events.EVENT_TYPES)
    assert events.PermissionRequestedEvent.__required_keys__ >= {"seq", "type", "data"}
