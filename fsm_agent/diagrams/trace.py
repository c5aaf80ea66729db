"""A recorded run's walk over the machine: read from its events (or a JSONL trace file), checked
against the table, and counted per state and row for drawing."""

from __future__ import annotations

import json
import os
from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ..errors import ConfigurationError
from ..machine.table import TABLE, Row, State, StopReason
from ..run.events import AbortedEvent, Event, FinalEvent, StateChangedEvent, event_adapter

if TYPE_CHECKING:
    from ..run.state import RunState

__all__ = ["RunPath", "TraceError", "read_trace"]


class TraceError(ConfigurationError):
    """A recorded run cannot be drawn: not events, several runs, or moves this table lacks."""


@dataclass(frozen=True, slots=True)
class RunPath:
    """A recorded run's walk over the machine: how often it entered each state and took each row,
    and where it ended (``stop_reason`` is the one the run ended with, if it ended)."""

    state_visits: Mapping[State, int]
    row_visits: Mapping[int, int]
    final: State
    stop_reason: StopReason | None = None

    @classmethod
    def of_run(cls, rs: RunState) -> RunPath | None:
        """The walk of a stored run, from its moves (``None`` before its first)."""
        if not rs.trace:
            return None
        states: Tally[State] = Tally({rs.trace[0].source: 1})
        rows: Tally[int] = Tally()
        for move in rs.trace:
            states[move.dest] += 1
            rows[move.row] += 1
        return cls(dict(states), dict(rows), rs.trace[-1].dest, rs.stop_reason)

    @classmethod
    def from_events(cls, events: Iterable[Event], rows: Sequence[Row] = TABLE) -> RunPath:
        """The walk of the ``state_changed`` events of one run; raises :class:`TraceError` when
        they are not one connected run over ``rows``."""
        states: Tally[State] = Tally()
        taken: Tally[int] = Tally()
        run_ids: set[str] = set()
        here: State | None = None
        stop: StopReason | None = None
        for n, event in enumerate(events, 1):
            run_ids.add(event.run_id)
            if len(run_ids) > 1:
                raise TraceError(f"event {n}: the trace holds more than one run ({event.run_id})")
            if isinstance(event, FinalEvent | AbortedEvent):
                stop = event.stop_reason
            if not isinstance(event, StateChangedEvent):
                continue
            _check_move(n, event, rows)
            if here is None:
                states[event.source] += 1
            elif event.source is not here:
                raise TraceError(
                    f"event {n}: the run moves from {event.source.value!r} but was in "
                    f"{here.value!r}; events are missing"
                )
            states[event.dest] += 1
            taken[event.row] += 1
            here = event.dest
            if event.stop_reason is not None:
                stop = event.stop_reason
        if here is None:
            raise TraceError("the trace has no state_changed events")
        return cls(dict(states), dict(taken), here, stop)


def _check_move(n: int, event: StateChangedEvent, rows: Sequence[Row]) -> None:
    move = f"{event.source.value} --{event.outcome.value}--> {event.dest.value}"
    if not 0 <= event.row < len(rows):
        raise TraceError(f"event {n}: row {event.row} does not exist ({move})")
    row = rows[event.row]
    if (row.source, row.outcome, row.dest) != (event.source, event.outcome, event.dest):
        raise TraceError(
            f"event {n}: row {event.row} of this table is not {move}; "
            "the run was recorded with another table"
        )


def read_trace(path: str | os.PathLike[str], rows: Sequence[Row] = TABLE) -> RunPath:
    """The :class:`RunPath` of a recorded run: a JSONL file with one event per line, or a
    recording (what ``fsm-agent demo --record FILE`` writes: the same after one header line).
    Raises ``OSError`` when the file cannot be read and :class:`TraceError` when a line is not an
    event or the run does not fit ``rows``."""
    events: list[Event] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip() or (not events and _is_recording_header(line)):
                continue
            try:
                events.append(event_adapter.validate_json(line))
            except ValidationError as exc:
                problem = exc.errors(include_url=False)[0]["msg"]
                raise TraceError(f"{path}:{number}: not an fsm_agent event ({problem})") from None
    return RunPath.from_events(events, rows)


def _is_recording_header(line: str) -> bool:
    try:
        return bool(json.loads(line).get("type") == "recording")
    except (ValueError, AttributeError):
        return False
