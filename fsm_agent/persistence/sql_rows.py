"""The SQL stores' schema and rows: the migrations, how a run state is encoded into a
checkpoint row, and how rows are decoded back into run states and run summaries (see
:mod:`fsm_agent.persistence.sql` for the tables)."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, SchemaSerializer

from ..errors import CorruptCheckpointError
from ..machine.agent_machine import Move
from ..machine.table import State, StopReason
from ..run.state import RunState, StoredMove, moves_json
from ..values.messages import Message
from ..values.record import adapter
from . import RunSummary
from .storable import storable_state

__all__ = [
    "MESSAGES",
    "MIGRATIONS",
    "MOVES",
    "SEPARATE",
    "body_json",
    "corrupt",
    "encoded",
    "replayed",
    "row_json",
    "state_of",
    "summaries",
]

SEPARATE = {"messages", "trace", "tool_outputs"}  # stored in their own columns and table
"""The run state's fields a checkpoint row stores apart from its body."""
MESSAGES = TypeAdapter(list[Message])
MOVES = TypeAdapter(list[StoredMove])  # by name: see fsm_agent.run.state
_V = TypeVar("_V")

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: the tables
    (
        "CREATE TABLE {t}runs (run_id TEXT PRIMARY KEY, version INTEGER NOT NULL, "
        "state TEXT NOT NULL, stop_reason TEXT, steps INTEGER NOT NULL, "
        "updated_at {real} NOT NULL)",
        "CREATE TABLE {t}checkpoints (run_id TEXT NOT NULL, version INTEGER NOT NULL, "
        "saved_at {real} NOT NULL, body TEXT NOT NULL, messages_from INTEGER NOT NULL, "
        "messages TEXT NOT NULL, trace_from INTEGER NOT NULL, trace TEXT NOT NULL, "
        "PRIMARY KEY (run_id, version))",
        "CREATE TABLE {t}effects (run_id TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, "
        "result TEXT, recorded_at {real} NOT NULL, PRIMARY KEY (run_id, key))",
    ),
    # 2: list runs by recency without a scan
    ("CREATE INDEX runs_by_time ON {t}runs (updated_at)",),
    # 3: the full text of cut tool outputs, written once each instead of with every checkpoint
    (
        "CREATE TABLE {t}outputs (run_id TEXT NOT NULL, output_id TEXT NOT NULL, "
        "text TEXT NOT NULL, PRIMARY KEY (run_id, output_id))",
    ),
    # 4: an output whose text the journal holds refers to its record instead of a second copy
    ("ALTER TABLE {t}outputs ADD COLUMN journal_key TEXT",),
)
"""The schema, one tuple of statements per version; a store at version ``n`` gets the rest."""


def encoded(
    encode: Callable[[], str], state: RunState, again: Callable[[RunState], str] | None
) -> str:
    """``encode()``; for a state holding text JSON cannot carry, the same part of a copy with
    that text replaced (see :func:`~fsm_agent.persistence.storable.storable_state`). Kept for
    its import path: a checkpoint row is encoded by :func:`row_json`."""
    try:
        return encode()
    except PydanticSerializationError:
        clean = storable_state(state)
        if again is None:
            return body_json(clean)
        return again(clean)


def body_json(state: RunState) -> str:
    """What a checkpoint row's body holds: the run state without the fields stored apart."""
    body = _body_serializer()
    if body is None:
        return adapter(RunState).serializer.to_json(state, exclude=SEPARATE).decode()
    return body.to_json(state).decode()


@functools.cache
def _body_serializer() -> SchemaSerializer | None:
    """The run state's serialiser with the fields stored apart left out by its schema: a fifth
    cheaper than the same serialiser given them to exclude on each call, which it checks field
    by field. ``None`` when the schema is not the dataclass this expects."""
    schema: Any = copy.deepcopy(adapter(RunState).core_schema)
    inner = schema["schema"] if schema.get("type") == "definitions" else schema
    if inner.get("type") != "dataclass" or inner["schema"].get("type") != "dataclass-args":
        return None
    fields = inner["schema"]["fields"]
    if not {f["name"] for f in fields} >= SEPARATE:
        return None
    for f in fields:
        if f["name"] in SEPARATE:
            f["serialization_exclude"] = True
    return SchemaSerializer(schema)


def row_json(state: RunState, messages_from: int, trace_from: int) -> tuple[str, str, str]:
    """What a checkpoint row holds of ``state``, as JSON text: its body (the run state without
    the fields stored apart), its messages from ``messages_from`` and its moves from
    ``trace_from``. For a state holding text JSON cannot carry, those of a copy with that text
    replaced (see :func:`~fsm_agent.persistence.storable.storable_state`)."""
    try:
        return _row_json(state, messages_from, trace_from)
    except PydanticSerializationError:
        return _row_json(storable_state(state), messages_from, trace_from)


def _row_json(state: RunState, messages_from: int, trace_from: int) -> tuple[str, str, str]:
    # The serialisers themselves (a TypeAdapter's dump_json is a Python layer over them), and
    # the moves written directly; most checkpoints add one move and a message or none.
    messages, trace = state.messages, state.trace
    return (
        body_json(state),
        MESSAGES.serializer.to_json(messages[messages_from:]).decode()
        if len(messages) > messages_from
        else "[]",
        moves_json(trace[trace_from:]) if len(trace) > trace_from else "[]",
    )


def replayed(
    run_id: str, rows: list[Any]
) -> Iterator[tuple[int, float, str, list[Message], list[Move]]]:
    """Each checkpoint row's version, time and body, with the message thread and the trace as
    of that row: each row holds what changed since the one before it."""
    messages: list[Message] = []
    trace: list[Move] = []
    for version, saved_at, body, messages_from, new_messages, trace_from, new_moves in rows:
        try:
            if messages_from > len(messages) or trace_from > len(trace):
                raise ValueError("it continues rows that are missing")
            messages = messages[:messages_from] + MESSAGES.validate_json(new_messages)
            trace = trace[:trace_from] + MOVES.validate_json(new_moves)
        except (ValidationError, ValueError, TypeError) as exc:
            raise corrupt(run_id, version, exc) from None
        yield version, float(saved_at), body, messages, trace


def state_of(
    run_id: str,
    version: int,
    body: str,
    messages: list[Message],
    trace: list[Move],
    outputs: dict[str, str],
) -> RunState:
    """The run state of a checkpoint row, with its thread, trace and stored outputs."""
    try:
        state = RunState.model_validate_json(body)
    except (ValidationError, ValueError, TypeError) as exc:
        raise corrupt(run_id, version, exc) from None
    state.messages = list(messages)
    state.trace = list(trace)
    if outputs or state.tool_outputs:
        state.tool_outputs = {**state.tool_outputs, **outputs}  # older rows kept them inline
    return state


def summaries(rows: list[Any]) -> Iterator[RunSummary]:
    """The runs rows as summaries; a row holding a value this version does not know (a state a
    newer fsm_agent wrote, say) is listed with that field ``None`` and a ``problem``, so one
    such run does not hide the others."""
    for run_id, version, state, stop, steps, updated_at in rows:
        problems: list[str] = []
        yield RunSummary(
            str(run_id),
            _decoded(int, version, "checkpoint version", problems) or 0,
            _decoded(State, state, "state", problems),
            None if stop is None else _decoded(StopReason, stop, "stop reason", problems),
            _decoded(int, steps, "steps", problems) or 0,
            _decoded(float, updated_at, "update time", problems) or 0.0,
            "; ".join(problems) or None,
        )


def _decoded(kind: Callable[[Any], _V], value: object, name: str, problems: list[str]) -> _V | None:
    """``kind(value)``, or ``None`` with a line in ``problems`` when it does not decode."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        problems.append(
            f"unknown {name} {value!r} (written by a newer fsm_agent, or changed by hand)"
        )
        return None


def corrupt(run_id: str, version: int, exc: BaseException) -> CorruptCheckpointError:
    if isinstance(exc, ValidationError):
        problem = exc.errors(include_url=False)[0]["msg"]
    else:
        problem = str(exc)
    return CorruptCheckpointError(
        f"checkpoint {version} of run {run_id!r} does not decode ({problem}); the row is damaged "
        "or truncated and was left as it is"
    )
