"""How a replay is compared with its recording: event by event, deltas, tool progress,
durations and backoff delays aside; the first difference is a :class:`Divergence`."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import JsonValue

from ..run.events import (
    Event,
    PartialOutputEvent,
    ReasoningDeltaEvent,
    StateChangedEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
    ToolProgressEvent,
    event_adapter,
)
from .children import innermost

__all__ = ["Divergence", "first_divergence"]


def _type_of(cls: type[Event]) -> str:
    """The ``type`` discriminator every event of class ``cls`` carries."""
    return next(str(f.default) for f in dataclasses.fields(cls) if f.name == "type")


_IGNORED = frozenset(
    _type_of(cls)
    for cls in (
        TextDeltaEvent,
        ReasoningDeltaEvent,
        ToolCallDeltaEvent,
        PartialOutputEvent,
        ToolProgressEvent,  # recorded tools report none
    )
)
_IGNORED_FIELDS = frozenset({"duration_s", "delay_s"})


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a replay first differs from its recording: the event number (from 1, deltas
    aside), the recording's line, both events (``None`` past an end) and what differs."""

    index: int
    line: int | None
    recorded: Event | None
    replayed: Event | None
    detail: str

    def __str__(self) -> str:
        where = f"event {self.index}" + (f" (line {self.line})" if self.line else "")
        return f"diverged at {where}: {self.detail}"


def _comparable(event: Event) -> dict[str, JsonValue]:
    data: dict[str, JsonValue] = event_adapter.dump_python(event, mode="json")
    inner: Any = data
    while isinstance(inner, dict):  # a child's event, wrapped, is compared the same way
        for name in _IGNORED_FIELDS:
            inner.pop(name, None)
        inner = inner.get("event")
    return data


def first_divergence(
    recorded: Iterable[tuple[Event, int]], replayed: Sequence[Event]
) -> Divergence | None:
    """The first difference between the ``recorded`` events (each with its line) and
    ``replayed`` (deltas, tool progress, durations and backoff delays are not compared), or
    ``None``."""
    kept = [(event, line) for event, line in recorded if innermost(event).type not in _IGNORED]
    again = [event for event in replayed if innermost(event).type not in _IGNORED]
    for index in range(max(len(kept), len(again))):
        want = kept[index] if index < len(kept) else None
        got = again[index] if index < len(again) else None
        if want is None:
            assert got is not None
            return Divergence(index + 1, None, None, got, f"the replay goes on with {_brief(got)}")
        event, line = want
        if got is None:
            return Divergence(
                index + 1, line, event, None, f"the replay ended; the recording has {_brief(event)}"
            )
        difference = _difference(_comparable(event), _comparable(got), "")
        if difference is not None:
            return Divergence(index + 1, line, event, got, difference)
    return None


def _brief(event: Event) -> str:
    if isinstance(event, StateChangedEvent):
        return f"state_changed {event.source.value} → {event.dest.value} ({event.outcome.value})"
    return event.type


def _difference(want: JsonValue, got: JsonValue, path: str) -> str | None:
    """The first path where two JSON values differ, with both values."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in list(want) + [k for k in got if k not in want]:
            found = _difference(want.get(key), got.get(key), f"{path}.{key}" if path else key)
            if found is not None:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for index, (a, b) in enumerate(zip(want, got, strict=True)):
            found = _difference(a, b, f"{path}[{index}]")
            if found is not None:
                return found
        return None
    if want == got:
        return None
    return f"{path}: recorded {_show(want)}, replayed {_show(got)}"


def _show(value: JsonValue) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"
