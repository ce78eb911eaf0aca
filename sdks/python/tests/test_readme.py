"""The README's first example, run as written against the daemon."""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

import agentbox


README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_flow(daemon_env):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README.md has no python example"
    flow = blocks[0]
    # Five steps: create, send, stream, answer, read.
    for step in ("create_session(", "send(", "stream(", "answer_permission(", "read_file("):
        assert step in flow, step
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(flow, str(README), "exec"), {})
    assert out.getvalue() == "Hello from the mock agent.\nThis file was written by the write scenario.\n\n"
