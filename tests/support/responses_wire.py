"""Wire fixtures for OpenAI's Responses API, written from the API's documented shapes.

A :class:`~provider_server.Turn` becomes a ``response`` object (non-streaming) or the event
sequence of a stream: ``response.created``, ``response.in_progress``, then per output item
``response.output_item.added``, its deltas (``response.reasoning_summary_text.delta``,
``response.output_text.delta``, ``response.function_call_arguments.delta``) and
``response.output_item.done``, and the terminal ``response.completed`` (or
``response.incomplete``), every event named and numbered. ``Turn.finish`` is the raw
``incomplete_details.reason`` (``None``: a completed response); ``Turn.signature`` is a reasoning
item's ``encrypted_content``.
"""

from __future__ import annotations

import json
from typing import Any

from provider_server import Turn, sse

__all__ = ["responses_events", "responses_json", "responses_sse"]


def _usage(turn: Turn) -> dict[str, Any]:
    i, o = turn.usage
    return {
        "input_tokens": i,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": o,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": i + o,
    }


def _items(turn: Turn) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if turn.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": turn.reasoning}],
                "encrypted_content": turn.signature,
            }
        )
    if turn.text or not turn.calls:
        items.append(
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    items += [
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": call_id,
            "name": name,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        for n, (call_id, name, arguments) in enumerate(turn.calls)
    ]
    return items


def responses_json(turn: Turn, model: str = "gpt-test", status: str | None = None) -> dict:
    """A ``response`` object, as the non-streaming call returns it (and the terminal event
    carries it)."""
    incomplete = turn.finish is not None
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": status or ("incomplete" if incomplete else "completed"),
        "model": model,
        "output": _items(turn),
        "error": None,
        "incomplete_details": {"reason": turn.finish} if incomplete else None,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage(turn),
    }


def _split(text: str, pieces: int) -> list[str]:
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)] if text else []


def responses_events(turn: Turn, *, stop: bool = True) -> list[dict[str, Any]]:
    """The events of a streamed turn (``stop=False`` leaves out the terminal event)."""
    final = responses_json(turn)
    pending = {**final, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
    ]
    for index, item in enumerate(final["output"]):
        kind = item["type"]
        where = {"item_id": item["id"], "output_index": index}
        if kind == "reasoning":
            opened = {**item, "summary": []}
            text = item["summary"][0]["text"]
            deltas = [
                {"type": "response.reasoning_summary_text.delta", **where, "delta": p}
                for p in _split(text, turn.pieces)
            ]
        elif kind == "message":
            opened = {**item, "status": "in_progress", "content": []}
            text = item["content"][0]["text"]
            deltas = [
                {"type": "response.output_text.delta", **where, "content_index": 0, "delta": p}
                for p in _split(text, turn.pieces)
            ]
        else:
            opened = {**item, "arguments": "", "status": "in_progress"}
            deltas = [
                {"type": "response.function_call_arguments.delta", **where, "delta": p}
                for p in _split(item["arguments"], turn.pieces)
            ]
        events.append({"type": "response.output_item.added", "output_index": index, "item": opened})
        events += deltas
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if stop:
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        events.append({"type": kind, "response": final})
    return [{**e, "sequence_number": n} for n, e in enumerate(events)]


def responses_sse(turn: Turn) -> list[bytes]:
    """A whole streamed turn, each event named by its type."""
    events = responses_events(turn)
    return sse(*events, names=[e["type"] for e in events])
