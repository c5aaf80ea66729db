"""The byte-level SSE decoder against the framing cases of the fault catalogue (section B)."""

from __future__ import annotations

import json

from conftest_network import no_external_network  # noqa: F401
from fsm_agent.providers import ServerSentEvent, SSEDecoder


def decode(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    return [event for chunk in chunks for event in decoder.feed(chunk)]


STREAM = (
    b'id: 7\r\nevent: delta\r\ndata: {"text": "h\xc3\xa9llo \xe2\x80\xa8 x"}\r\n\r\n'
    b": keep-alive\n\ndata: a\ndata:\ndata: b\n\n"
    b"event: ping\rdata: p\r\r"
    b"data: last\n"
)


def test_every_chunk_boundary_gives_the_same_events() -> None:
    """Splitting the stream at every byte offset (incl. between CR and LF) changes nothing."""
    expected = decode(STREAM)
    assert [e.data for e in expected] == ['{"text": "h\u00e9llo \u2028 x"}', "a\n\nb", "p"]
    for cut in range(len(STREAM) + 1):
        assert decode(STREAM[:cut], b"", STREAM[cut:]) == expected


def test_every_byte_separately() -> None:
    """Feeding one byte at a time decodes split multi-byte UTF-8 characters exactly."""
    assert decode(*(STREAM[i : i + 1] for i in range(len(STREAM)))) == decode(STREAM)


def test_unicode_line_separators_are_not_line_breaks() -> None:
    """U+2028, U+2029, U+0085, VT and FF inside data stay in the JSON string."""
    text = "a\u2028b\u2029c\u0085d\x0be\x0cf\x1cg"
    [event] = decode(b"data: " + json.dumps(text, ensure_ascii=False).encode() + b"\n\n")
    assert json.loads(event.data) == text


def test_fields_ids_and_event_names() -> None:
    """``event`` names the event, ``id`` persists to later events, unnamed events are messages."""
    first, second, third = decode(STREAM)
    assert (first.event, first.id) == ("delta", "7")
    assert (second.event, second.id) == ("message", "7")
    assert third.event == "ping"


def test_unterminated_final_event_is_dropped() -> None:
    """An event without its blank line at EOF is never dispatched."""
    assert [e.data for e in decode(STREAM)][-1] == "p"


def test_ignored_lines() -> None:
    """Comments, unknown fields, ``retry: abc`` and an event with no data produce nothing."""
    assert decode(b": c\nfoo: bar\nretry: abc\nevent: x\n\n") == []
    [event] = decode(b"retry: 1500\nid: a\x00b\ndata: d\n\n")
    assert (event.retry, event.id) == (1500, "")


def test_data_without_space_and_empty_data_lines() -> None:
    """``data:x`` keeps ``x``; empty ``data:`` lines join as empty lines."""
    [event] = decode(b"data:x\ndata:\ndata:  y\n\n")
    assert event.data == "x\n\n y"


def test_twenty_megabyte_event_in_small_chunks() -> None:
    """A 20 MB event split into 64 KiB chunks decodes whole (no size limit, linear time)."""
    payload = "x" * (20 * 1024 * 1024)
    raw = b"data: " + payload.encode() + b"\n\n"
    decoder = SSEDecoder()
    events = []
    for start in range(0, len(raw), 65536):
        events += decoder.feed(raw[start : start + 65536])
    assert len(events) == 1
    assert events[0].data == payload


def test_unknown_lines_are_kept_on_request() -> None:
    """With ``keep_unknown_lines`` a bare JSON error object is kept for the provider."""
    decoder = SSEDecoder(keep_unknown_lines=True)
    decoder.feed(b'{"error": {\n  "code": 500}}\n')
    assert json.loads("\n".join(decoder.unknown_lines)) == {"error": {"code": 500}}
