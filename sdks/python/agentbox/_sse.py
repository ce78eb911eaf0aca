"""An incremental parser of text/event-stream, as the WHATWG HTML standard
defines it ("Server-sent events", "Interpreting an event stream").

- the stream is UTF-8: one leading BOM is dropped, invalid bytes become U+FFFD;
- lines end with CRLF, LF or CR; a CR at the end of a chunk is a whole line
  ending, so an event is dispatched without waiting for the next chunk;
- a line starting with ":" is a comment; "field: value" drops one space after
  the colon; a line without a colon is a field with an empty value;
- "data" appends to the data buffer, "event" sets the type, "id" sets the last
  event id unless it holds NUL, "retry" with only ASCII digits sets the
  reconnection time; other fields are ignored;
- an empty line dispatches the event unless the data buffer is empty.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass

#: Bound of one line, and of one event's data: events carry whole tool
#: outputs and diffs on one line, so it is generous.
MAX_LINE = 64 << 20


class SSETooLong(Exception):
    """A line or an event is larger than the parser accepts."""


@dataclass(frozen=True)
class Message:
    """One dispatched event."""

    #: The stream's last event id when the event was dispatched.
    id: str
    #: The event type; "message" when the event named none.
    event: str
    #: The data lines joined with LF.
    data: str


class SSEParser:
    """Feed it bytes as they arrive; it returns the events they complete."""

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._max = max_line
        self._pending = ""  # text of an unfinished line
        self._skip_lf = False  # the last line ended with CR
        self._bom_checked = False
        self._data: list[str] = []
        self._data_len = 0
        self._event = ""
        self.last_id = ""
        #: The reconnection time the stream asked for, in seconds, if any.
        self.retry: float | None = None

    def feed(self, chunk: bytes) -> list[Message]:
        """Parses chunk and returns the events it completes."""
        text = self._decoder.decode(chunk)
        if not self._bom_checked:
            if not text:
                return []
            self._bom_checked = True
            if text.startswith("\ufeff"):
                text = text[1:]
        out: list[Message] = []
        i = 0
        n = len(text)
        while i < n:
            if self._skip_lf:
                self._skip_lf = False
                if text[i] == "\n":
                    i += 1
                    continue
            j = _line_end(text, i)
            if j < 0:
                self._pending += text[i:]
                if len(self._pending) > self._max:
                    raise SSETooLong("event stream: line too long")
                break
            line = self._pending + text[i:j]
            self._pending = ""
            self._skip_lf = text[j] == "\r"
            i = j + 1
            msg = self._line(line)
            if msg is not None:
                out.append(msg)
        return out

    def _line(self, line: str) -> Message | None:
        if line == "":
            return self._dispatch()
        if line[0] == ":":
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data_len += len(value) + 1
            if self._data_len > self._max:
                raise SSETooLong("event stream: event too long")
            self._data.append(value)
        elif name == "id":
            if "\x00" not in value:
                self.last_id = value
        elif name == "retry":
            if value and value.isascii() and value.isdigit():
                self.retry = int(value) / 1000
        return None

    def _dispatch(self) -> Message | None:
        if not self._data:
            self._event = ""
            return None
        msg = Message(id=self.last_id, event=self._event or "message", data="\n".join(self._data))
        self._data, self._data_len, self._event = [], 0, ""
        return msg


def _line_end(text: str, start: int) -> int:
    """Index of the first CR or LF at or after start, or -1."""
    cr = text.find("\r", start)
    lf = text.find("\n", start)
    if cr < 0:
        return lf
    if lf < 0:
        return cr
    return min(cr, lf)
