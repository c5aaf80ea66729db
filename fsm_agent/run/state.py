"""The run state: the one JSON-serialisable value that holds everything about a run.

It includes the machine's position (``state``), so saving it after a move saves where the run
is. The kernel mutates one instance in place as the run goes; ``model_copy``
or ``model_dump_json`` take a snapshot. The types here are slotted dataclasses (see
:mod:`fsm_agent.values.record`): built without validation, validated and encoded through their
``TypeAdapter`` when a checkpoint is written or read.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import field, fields
from itertools import compress
from typing import Annotated, Any, Literal

from ..errors import SchemaVersionError
from ..machine.agent_machine import Move
from ..machine.table import Counters, State, StopReason
from ..values.define import record
from ..values.messages import (
    NO_USAGE,
    Message,
    ModelResponse,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from ..values.record import Record, adapter
from ..values.schema import Stored

__all__ = [
    "AgentUsage",
    "HandoffChange",
    "HumanRequest",
    "PhaseChange",
    "RunState",
    "StoredCounters",
    "StoredMove",
    "build_run_validators",
    "explained",
    "moves_json",
]

# -- counters and moves by name ----------------------------------------------------------------
# Stored positionally, a counter added or reordered would silently change what every older
# checkpoint means; by name, a counter an older checkpoint lacks reads 0. Checkpoints written in
# the positional format still load, through the field order it had.
_POSITIONAL_COUNTERS = (
    "steps",
    "retries",
    "total_errors",
    "consecutive_error_turns",
    "compactions",
    "verifications",
    "repeated_turns",
)
_POSITIONAL_MOVE = ("source", "outcome", "dest", "row", "counters", "stop")


def _counters_in(value: object) -> object:
    if isinstance(value, list | tuple) and not isinstance(value, Counters):
        if len(value) != len(_POSITIONAL_COUNTERS):
            raise ValueError(
                f"positional counters hold {len(_POSITIONAL_COUNTERS)} values in the older "
                f"checkpoint format, not {len(value)}"
            )
        return dict(zip(_POSITIONAL_COUNTERS, value, strict=True))
    if isinstance(value, dict):
        unknown = sorted(set(value) - set(Counters._fields))
        if unknown:  # not a ValueError: pydantic lets it through, unwrapped
            raise SchemaVersionError(
                f"unknown counter(s) {', '.join(unknown)}: the checkpoint was written by a "
                "newer fsm_agent; upgrade to read it"
            )
    return value


def _move_in(value: object) -> object:
    if isinstance(value, list | tuple) and not isinstance(value, Move):
        if len(value) not in (len(_POSITIONAL_MOVE) - 1, len(_POSITIONAL_MOVE)):
            raise ValueError(f"a positional move holds 5 or 6 values, not {len(value)}")
        value = dict(zip(_POSITIONAL_MOVE, value, strict=False))
    if isinstance(value, dict) and "counters" in value:
        value = {**value, "counters": _counters_in(value["counters"])}
    return value


def _counters_out(counters: Counters) -> dict[str, int]:
    """The counters that are not 0, by name (a missing counter reads 0)."""
    return dict(compress(zip(_COUNTER_NAMES, counters, strict=True), counters))


_COUNTER_NAMES = Counters._fields


def _move_out(move: Move) -> dict[str, Any]:
    # ``_value_``: the member's value as a plain attribute (``value`` is a Python property).
    stored: dict[str, Any] = {
        "source": move.source._value_,
        "outcome": move.outcome._value_,
        "dest": move.dest._value_,
        "row": move.row,
        "counters": _counters_out(move.counters),
    }
    if move.stop is not None:
        stored["stop"] = move.stop._value_
    return stored


def moves_json(moves: Sequence[Move]) -> str:
    """``moves`` in their stored form (:data:`StoredMove`) as JSON text, written directly: what
    their serialiser writes, for under a third of its work. A move is a closed shape of enum values,
    which are lowercase names JSON needs no escape for, and whole numbers."""
    return "[" + ",".join([_move_json(move) for move in moves]) + "]"


@functools.lru_cache(maxsize=4096)
def _move_json(move: Move) -> str:
    # Remembered: the machine hands out one Move per (state, outcome, counters), so the same
    # few recur across steps and runs, and a lookup costs a tenth of writing one.
    counters = ",".join(
        [
            f'"{name}":{value}'
            for name, value in zip(_COUNTER_NAMES, move.counters, strict=True)
            if value
        ]
    )
    stop = "" if move.stop is None else f',"stop":"{move.stop._value_}"'
    return (
        f'{{"source":"{move.source._value_}","outcome":"{move.outcome._value_}",'
        f'"dest":"{move.dest._value_}","row":{move.row},"counters":{{{counters}}}{stop}}}'
    )


StoredCounters = Annotated[Counters, Stored(_counters_in, _counters_out)]
"""The run's counters as stored: an object of the counters that are not 0, by name (older
positional lists load)."""

StoredMove = Annotated[Move, Stored(_move_in, _move_out)]
"""One move as stored: an object by field name, its counters by name (older positional lists
load)."""

_NO_COUNTERS = Counters()  # immutable: every new run may share it


@record(frozen=False)
class HumanRequest(Record):
    """A tool call a suspended run waits on: an ``approval`` asked by the permission hook, or a
    ``question`` the tool asked with ``ToolContext.ask_human``. ``resume`` fills ``decision``
    (``allow``, ``deny`` or ``answer``) and ``reply`` (the denial reason or the answer)."""

    kind: Literal["approval", "question"]
    call: ToolCall
    question: str | None = None  # the tool's question, or the hook's reason for asking
    decision: Literal["allow", "deny", "answer"] | None = None
    reply: str | None = None


@record
class PhaseChange(Record):
    """One move of the task machine, as the run state's ``phase_trace`` keeps it: from
    ``source`` (``None`` at the start) to ``dest``, made ``by`` the model (the move tool), by
    code (a tool that returned :class:`~fsm_agent.phases.MovePhase`), by a spent budget, or
    at the ``start``; ``step`` is the run's steps then and ``move`` the index in ``trace`` of
    the loop move that followed (the two traces line up)."""

    source: str | None
    dest: str
    by: Literal["start", "model", "code", "budget"]
    step: int
    move: int


@record
class AgentUsage(Record):
    """What one agent of a composed run used by itself: its children's use is in their own
    entries (see ``RunResult.children``), so the entries of a run add up to its totals."""

    run_id: str
    model: str | None = None  # by name (a fallback chain's, joined by " | ")
    usage: Usage = NO_USAGE
    model_calls: int = 0
    tool_executions: int = 0


@record
class HandoffChange(Record):
    """One handoff, as the run state's ``handoff_trace`` keeps it: the conversation went from
    the agent named ``source`` (``None``: the agent the run started with) to the one named
    ``dest`` (a :class:`~fsm_agent.Handoff`'s name), by the call ``call_id``; ``step`` is the
    run's steps then and ``move`` the index in ``trace`` of the loop move that followed (the
    ``dispatching`` move of the handoff's turn)."""

    source: str | None
    dest: str
    call_id: str
    step: int
    move: int


@record(frozen=False)
class RunState(Record):
    """Everything a run knows: position, counters, usage, thread, pending work, the ending.

    A slotted dataclass: the kernel's writes are plain attribute writes, and a write to a name
    that is not a field (a misspelt one, by a hook) raises ``AttributeError`` where it is made.
    The constructor validates nothing; ``model_validate``/``model_validate_json`` do (a
    checkpoint is read that way), and ``model_dump_json`` writes the stored shape."""

    run_id: str
    conversation_id: str | None = None  # the Conversation the run belongs to, if any
    state: State = State.IDLE
    counters: StoredCounters = _NO_COUNTERS
    usage: Usage = NO_USAGE
    messages: list[Message] = field(default_factory=list)
    context_tokens: int = 0  # estimate for ``messages``, kept up to date as they change
    pending_tool_calls: list[ToolCall] = field(default_factory=list)
    last_text: str = ""  # the text of the last model answer, the output candidate
    feedback: str | None = None  # verifier feedback waiting to be injected
    done_message: str | None = None  # what the done tool asked to be the output
    model_calls: int = 0  # attempts, failed ones included
    active_s: float = 0.0  # seconds spent running over all invocations (max_wall_clock_s)
    tool_executions: int = 0
    stop_reason: StopReason | None = None
    output: str | None = None
    error: str | None = None  # the error that ended the run, as text
    stop_detail: str | None = None  # what a stop condition that fired returned, when a string
    raw_finish_reason: str | None = None  # the provider's own reason for an ``other`` finish
    trace: list[StoredMove] = field(default_factory=list)
    # The current tool turn and human input (empty between turns). Tuples: an empty one is
    # shared, and the collector stops tracking a tuple of strings, so a run in flight holds no
    # container here for the garbage collector to walk.
    tool_results: tuple[ToolResult, ...] = ()  # finished, not yet in messages
    approved_calls: tuple[str, ...] = ()  # pending call ids already approved
    human_requests: tuple[HumanRequest, ...] = ()  # what a suspension awaits
    resume_token: str | None = None  # the valid resume handle's token while suspended
    suspensions: int = 0
    tool_outputs: dict[str, str] = field(default_factory=dict)  # full text of cut outputs by id
    recent_turns: tuple[str, ...] = ()  # the last two turns' calls (loop guard)
    definition: str | None = None  # a stored run's agent fingerprint (kernel.definition)
    model: str | None = None  # a stored run's model by name (a fallback chain's, joined by " | ")
    answered_by: dict[str, int] = field(default_factory=dict)  # a fallback chain's answers by model
    # The task machine (an agent with phases): the current phase, the steps when it was
    # entered, and every phase move (None and () without phases).
    phase: str | None = None
    phase_since: int = 0
    phase_trace: tuple[PhaseChange, ...] = ()
    # A fork (``Agent.fork``): the run and the move (its trace's length) it started from.
    forked_from: str | None = None
    forked_at: int | None = None
    # Composition under a durable parent: a child run's parent run and call; a parent's child
    # runs by the id of the call that started each.
    parent_run_id: str | None = None
    parent_call_id: str | None = None
    child_runs: dict[str, str] = field(default_factory=dict)
    # Handoffs: the agent holding the conversation (a Handoff's name; None: the agent the run
    # started with) and every handoff of the run.
    agent: str | None = None
    handoff_trace: tuple[HandoffChange, ...] = ()
    # What each descendant run used by itself, by its path from this run: one
    # ``tool_name:step.call_id`` per level (the parent's step of the call), joined by "/".
    children: dict[str, AgentUsage] = field(default_factory=dict)


_FIELD_NAMES = tuple(f.name for f in fields(RunState))
_NO_ATTRIBUTE = re.compile(r"'RunState' object has no attribute '([^']+)'")


def explained(exc: Exception) -> Exception:
    """``exc``, or, when it is the ``AttributeError`` of a name the run state has no field for
    (a hook, verifier or stop condition that misspelt one), an ``AttributeError`` caused by it
    whose message names the run state's fields: what the hook-failure report says."""
    if not isinstance(exc, AttributeError):
        return exc
    # A slot write to an unknown name sets no ``exc.name`` (Python 3.11): read the message.
    found = _NO_ATTRIBUTE.fullmatch(str(exc))
    name = exc.name if exc.name is not None else (found.group(1) if found else None)
    if found is None or name in _FIELD_NAMES:
        return exc
    clear = AttributeError(
        f"the run state has no field {name!r} (a misspelt name?); its fields are: "
        f"{', '.join(_FIELD_NAMES)}"
    )
    clear.__cause__ = exc
    return clear


def build_run_validators(*, durable: bool) -> None:
    """Build the validators of the types every run makes (and, for a ``durable`` agent, of the
    run state its checkpoints encode). Import leaves them to first use; an agent builds them
    when it is built, so that the first run of a service does not spend milliseconds building
    them on its event loop, where every other run waits. Each is built once per process."""
    for value_type in (Message, ModelResponse, ToolCall, ToolResult, TextPart, Usage):
        adapter(value_type)
    if durable:
        adapter(RunState)
