"""A byte-level Server-Sent Events decoder that follows the WHATWG SSE parsing rules.

Lines end at CR, LF or CRLF only. ``str.splitlines()`` and ``httpx.Response.aiter_lines()`` are
not used because they also break on U+2028, U+2029, U+0085, VT, FF and FS/GS/RS, all of which are
legal unescaped inside a JSON string. Lines are cut on bytes and each complete line is decoded
as a whole, so a multi-byte UTF-8 character split across network chunks is decoded intact
(CR and LF never occur inside a multi-byte UTF-8 sequence). There is no line or event size limit,
and each byte is scanned for a line ending once, so a 64 MiB event costs linear time.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

__all__ = ["SSEDecoder", "ServerSentEvent", "aiter_sse"]

_LINE_END = re.compile(rb"[\r\n]")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    """One dispatched event: its ``event`` type (``"message"`` when unnamed), ``data``,
    the last event ``id`` seen, and the ``retry`` reconnection time when one was given."""

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SSEDecoder:
    """Incremental decoder: feed it byte chunks, get back the events they complete.

    An event still being assembled when the stream ends is dropped, as the spec requires.
    With ``keep_unknown_lines`` the lines that are not SSE fields (for example a bare JSON error
    object a server wrote without a ``data:`` prefix) are kept in :attr:`unknown_lines`.
    """

    def __init__(self, *, keep_unknown_lines: bool = False) -> None:
        self._buffer = bytearray()
        self._scan_from = 0
        self._skip_lf = False
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None
        self._keep_unknown = keep_unknown_lines
        self.unknown_lines: list[str] = []

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume ``chunk`` and return the events it completes, in order."""
        if not chunk:
            return []
        buffer = self._buffer
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buffer += chunk
        events: list[ServerSentEvent] = []
        start = 0
        search = _LINE_END.search
        match = search(buffer, self._scan_from)
        while match is not None:
            end = match.start()
            line = buffer[start:end].decode("utf-8", "replace")
            next_start = end + 1
            if buffer[end] == 0x0D:  # CR: swallow a following LF, possibly in the next chunk
                if next_start < len(buffer):
                    if buffer[next_start] == 0x0A:
                        next_start += 1
                else:
                    self._skip_lf = True
            event = self._line(line)
            if event is not None:
                events.append(event)
            start = next_start
            match = search(buffer, start)
        if start:
            del buffer[:start]
        self._scan_from = len(buffer)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None
        field, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\0" not in value:
                self._last_id = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
        elif self._keep_unknown:
            self.unknown_lines.append(line)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = ServerSentEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._event = ""
        return event


async def aiter_sse(
    chunks: AsyncIterator[bytes], decoder: SSEDecoder | None = None
) -> AsyncIterator[ServerSentEvent]:
    """Decode an async iterator of byte chunks into events."""
    decoder = decoder or SSEDecoder()
    async for chunk in chunks:
        for event in decoder.feed(chunk):
            yield event
