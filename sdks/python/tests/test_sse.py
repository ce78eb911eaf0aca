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


#: Pieces of hostile or awkward streams: line ends of every kind, fields,
#: comments, a BOM, a rune split across pieces, invalid UTF-8, NUL.
PIECES = [b"\r", b"\n", b"\r\n", b"data:", b"data: x", b"data", b"id: 1", b"id: \x00", b"event: e", b": c",
          b"retry: 5", b"retry: x", b"\xef\xbb\xbf", b"\xc3", b"\xa9", b"\xff", b" ", b"x", b"\x00"]


def test_chunking_does_not_matter():
    """However a stream is cut into chunks, the same events come out: every
    single cut of 300 seeded random streams, and random multi-cuts."""
    import random

    rnd = random.Random(15)
    for _ in range(300):
        stream = b"".join(rnd.choice(PIECES) for _ in range(rnd.randint(1, 40)))
        whole = SSEParser()
        want = whole.feed(stream)
        for cut in range(1, len(stream)):
            p = SSEParser()
            assert p.feed(stream[:cut]) + p.feed(stream[cut:]) == want, (stream, cut)
            assert (p.last_id, p.retry) == (whole.last_id, whole.retry)
        cuts = sorted(rnd.sample(range(1, len(stream) + 1), k=min(len(stream), 5)))
        p, got, prev = SSEParser(), [], 0
        for c in cuts:
            got += p.feed(stream[prev:c])
            prev = c
        got += p.feed(stream[prev:])
        assert got == want, (stream, cuts)
