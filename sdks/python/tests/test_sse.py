"""The event-stream parser against the cases the WHATWG standard spells out."""

import pytest

from agentbox._sse import Message, SSEParser, SSETooLong


def parse(*chunks: bytes) -> list[Message]:
    p = SSEParser()
    out: list[Message] = []
    for c in chunks:
        out.extend(p.feed(c))
    return out


@pytest.mark.parametrize(
    "chunks, want",
    [
        ([b"id: 1\nevent: x\ndata: {}\n\n"], [Message("1", "x", "{}")]),
        # CRLF, CR and LF line ends, mixed.
        ([b"data: a\r\ndata: b\rdata: c\n\r\n"], [Message("", "message", "a\nb\nc")]),
        # A CR ending one chunk dispatches at once; the LF after it belongs to it.
        ([b"data: a\r\r", b"\ndata: b\n\n"], [Message("", "message", "a"), Message("", "message", "b")]),
        # One leading BOM is dropped, split across chunks too.
        ([b"\xef\xbb", b"\xbfdata: x\n\n"], [Message("", "message", "x")]),
        # Comments, unknown fields, a field without a colon, no space after the colon.
        ([b": ping\nfoo: bar\ndata\ndata:x\n\n"], [Message("", "message", "\nx")]),
        # No data: nothing dispatched; the type does not leak into the next event.
        ([b"event: x\n\ndata: y\n\n"], [Message("", "message", "y")]),
        # An id with NUL is ignored; the last id carries over.
        ([b"id: 7\ndata: a\n\nid: 8\x00\ndata: b\n\n"], [Message("7", "message", "a"), Message("7", "message", "b")]),
        # A multi-byte rune split across chunks, and an invalid byte.
        ([b"data: \xc3", b"\xa9\xff\n\n"], [Message("", "message", "\u00e9\ufffd")]),
        # An unterminated event is never dispatched.
        ([b"data: a\n"], []),
    ],
)
def test_parse(chunks, want):
    assert parse(*chunks) == want


def test_retry():
    p = SSEParser()
    p.feed(b"retry: 3000\n\n")
    assert p.retry == 3.0
    p.feed(b"retry: 12x\n\n")
    assert p.retry == 3.0


def test_too_long():
    p = SSEParser(max_line=16)
    with pytest.raises(SSETooLong):
        p.feed(b"data: " + b"x" * 32)
    p = SSEParser(max_line=16)
    with pytest.raises(SSETooLong):
        p.feed(b"data: 0123456789\ndata: 0123456789\n")
