"""What the inspector shows, as plain JSON-ready data read from a checkpoint store: the run list,
one run's detail (task, ending, timed moves, messages, tool calls, usage, pending questions), its
path over the machine and each state's detail. Every string that leaves here has been through
:func:`~fsm_agent.redaction.redact_data`: credential-shaped text is masked, and so is the
whole value of a field named like a secret (a tool call's ``password`` argument)."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import JsonValue

from ..diagrams import RunPath, overview_dot, plan, render, state_dot
from ..machine.table import ANSWERED, TERMINAL, Counters, State, StopReason
from ..persistence import Checkpoint, RunSummary
from ..persistence.lineage import by_origin
from ..redaction import redact, redact_data
from ..run.state import RunState
from ..values.messages import (
    ImagePart,
    Message,
    ReasoningPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
)

__all__ = [
    "decided",
    "diagram_svg",
    "forks_of",
    "gave_up",
    "grouped",
    "redact",
    "run_detail",
    "run_path",
    "run_row",
    "state_svg",
    "task_of",
]


def _counters(counters: Counters) -> dict[str, int]:
    return dict(counters._asdict())


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def task_of(rs: RunState) -> str:
    """The run's task: the first line of its first user message (``""`` when it has none)."""
    for message in rs.messages:
        if message.role is Role.USER:
            return _first_line(message.text)
    return ""


def _ending(rs: RunState) -> str | None:
    """A one-line preview of how the run ended: its answer, else its error."""
    if rs.output is not None:
        return _first_line(rs.output)
    if rs.error is not None:
        return _first_line(rs.error)
    return None


def gave_up(state: State | None, stop_reason: StopReason | None) -> bool:
    """Whether a run ended ``done`` without a clean answer: a limit or a budget ended it
    (``max_steps``, ``unverified``, ...), and its output, if any, is the best it had."""
    return state is State.DONE and stop_reason not in ANSWERED


def _origin(rs: RunState | None) -> dict[str, JsonValue]:
    """Where a run came from: the parent run and call it ran for, the run and move it was
    forked from (``None`` each when it did not)."""
    if rs is None:
        return {"parent": None, "forked_from": None}
    return {
        "parent": None
        if rs.parent_run_id is None
        else {"run_id": rs.parent_run_id, "call_id": rs.parent_call_id},
        "forked_from": None
        if rs.forked_from is None
        else {"run_id": rs.forked_from, "move": rs.forked_at},
    }


def grouped(rows: list[dict[str, JsonValue]]) -> list[dict[str, JsonValue]]:
    """The run list's ``rows`` (from :func:`run_row`) with each child run under its parent's
    and each fork under its original, when those are listed (in the list's order otherwise),
    each row's ``depth`` saying how far under."""
    nested = by_origin(rows, lambda row: str(row["run_id"]), _origin_id)
    return [{**row, "depth": depth} for row, depth in nested]


def forks_of(forks: Iterable[Checkpoint]) -> list[JsonValue]:
    """The rows of a run's fork list, one per checkpoint of ``forks`` (the latest of each fork,
    as the app selects them): its run id, the move it was forked after, its state and stop
    reason."""
    rows: list[JsonValue] = []
    for checkpoint in forks:
        rs = checkpoint.state
        rows.append(
            {
                "run_id": rs.run_id,
                "move": rs.forked_at,
                "state": rs.state.value,
                "stop_reason": rs.stop_reason.value if rs.stop_reason else None,
                "gave_up": gave_up(rs.state, rs.stop_reason),
            }
        )
    cleaned: list[JsonValue] = redact_data(rows)
    return cleaned


def _origin_id(row: Mapping[str, JsonValue]) -> str | None:
    for key in ("parent", "forked_from"):
        origin = row.get(key)
        if isinstance(origin, dict):
            return str(origin.get("run_id"))
    return None


def _span(times: Iterable[float | None]) -> tuple[float | None, float | None]:
    """The first and last known of ``times``."""
    known = [t for t in times if t is not None]
    return (known[0], known[-1]) if known else (None, None)


def run_row(summary: RunSummary, checkpoint: Checkpoint | None) -> dict[str, JsonValue]:
    """One line of the run list; ``checkpoint`` (the latest, when it could be read) adds the
    task, model, times, usage, ending and pending questions. A row the store could not read
    whole carries its ``problem``."""
    rs = checkpoint.state if checkpoint is not None else None
    started, last = _span(checkpoint.move_times) if checkpoint is not None else (None, None)
    row: dict[str, Any] = {
        "run_id": summary.run_id,
        "state": summary.state.value if summary.state is not None else None,
        "stop_reason": summary.stop_reason.value if summary.stop_reason else None,
        "steps": summary.steps,
        "version": summary.version,
        "updated_at": summary.updated_at,
        "age_s": max(0.0, time.time() - summary.updated_at),
        "task": task_of(rs) if rs is not None else None,
        "model": rs.model if rs is not None else None,
        "started_at": started,
        "duration_s": None if started is None or last is None else last - started,
        "ending": _ending(rs) if rs is not None else None,
        "usage": rs.usage.model_dump() if rs is not None else None,
        "waiting": len(rs.human_requests) if rs is not None else 0,
        "gave_up": gave_up(summary.state, summary.stop_reason),
        **_origin(rs),
        "problem": summary.problem,
    }
    cleaned: dict[str, JsonValue] = redact_data(row)
    return cleaned


def run_path(rs: RunState) -> RunPath | None:
    """The run's walk over the machine, from its stored moves (``None`` before its first)."""
    return RunPath.of_run(rs)


def _state_link(state: State) -> str:
    return f"/states/{state.value}"


def diagram_svg(rs: RunState) -> bytes:
    """The machine's overview as SVG with the run's path and counts drawn on it, each state
    linked to its page (needs Graphviz, the ``[diagrams]`` extra). A run still moving, or
    waiting for a human, has not ended: no state is marked as its end (the page lights up the
    state it is in instead)."""
    drawn = plan(run=run_path(rs), title="fsm_agent")
    if rs.state not in TERMINAL:
        drawn = replace(drawn, nodes=tuple(replace(node, final=False) for node in drawn.nodes))
    return render(overview_dot(drawn, link=_state_link), "svg")


def state_svg(state: State) -> bytes:
    """The detail of one state as SVG: its rows, in the order they are tried, with guards,
    stop reasons and counter updates (needs Graphviz, the ``[diagrams]`` extra). A terminal
    state has none: :class:`~fsm_agent.ConfigurationError`."""
    return render(state_dot(state), "svg")


def _arguments(call: ToolCall) -> JsonValue:
    return call.arguments if call.arguments is not None else call.arguments_json


def _part(part: object) -> dict[str, JsonValue]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ReasoningPart):
        return {"type": "reasoning", "text": "" if part.redacted else part.text}
    if isinstance(part, ToolCall):
        return {
            "type": "tool_call",
            "id": part.id,
            "name": part.name,
            "arguments": _arguments(part),
        }
    if isinstance(part, ToolResult):
        return {
            "type": "tool_result",
            "call_id": part.call_id,
            "name": part.name,
            "content": part.content,
            "is_error": part.is_error,
        }
    if isinstance(part, ImagePart):
        return {"type": "image", "text": f"[image {part.media_type}]"}
    return {"type": "other", "text": f"[{type(part).__name__}]"}


def _message(message: Message) -> dict[str, JsonValue]:
    return {"role": message.role.value, "parts": [_part(p) for p in message.parts]}


def _tool_calls(
    messages: list[Message], results: Mapping[str, ToolResult], children: Mapping[str, str]
) -> list[Any]:
    """Each tool call of the thread with its result (``None`` while it has none) and the run
    of the agent it called, for an agent tool of a durable run."""
    found: dict[str, ToolResult] = dict(results)
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolResult):
                found[part.call_id] = part
    calls = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCall):
                result = found.get(part.id)
                calls.append(
                    {
                        "id": part.id,
                        "name": part.name,
                        "arguments": _arguments(part),
                        "result": None if result is None else result.content,
                        "is_error": bool(result and result.is_error),
                        "child_run_id": children.get(part.id),
                    }
                )
    return calls


def _moves(rs: RunState, times: tuple[float | None, ...]) -> list[dict[str, Any]]:
    """The timeline: each move with when it was saved and how long after the previous one."""
    moves = []
    previous: float | None = None
    for n, m in enumerate(rs.trace, 1):
        at = times[n - 1] if n <= len(times) else None
        moves.append(
            {
                "n": n,
                "source": m.source.value,
                "outcome": m.outcome.value,
                "dest": m.dest.value,
                "row": m.row,
                "stop": m.stop.value if m.stop else None,
                "counters": _counters(m.counters),
                "at": at,
                "took_s": None if at is None or previous is None else max(0.0, at - previous),
            }
        )
        previous = at
    return moves


def _asked_by(messages: list[Message], call_id: str) -> str | None:
    """The text of the model's message that made the call ``call_id``."""
    for message in reversed(messages):
        if any(isinstance(p, ToolCall) and p.id == call_id for p in message.parts):
            return message.text or None
    return None


def run_detail(checkpoint: Checkpoint, *, can_answer: bool) -> dict[str, JsonValue]:
    """Everything the run page shows about the latest checkpoint of a run: with the run it was
    forked from, and for an agent used as a tool its parent's run and call; ``can_answer``
    says whether this inspector can resume it or fork it (it was given an agent)."""
    rs = checkpoint.state
    path = run_path(rs)
    started, last = _span(checkpoint.move_times)
    detail: dict[str, Any] = {
        "run_id": rs.run_id,
        "version": checkpoint.version,
        "saved_at": checkpoint.saved_at,
        "task": task_of(rs),
        "model": rs.model,
        "started_at": started,
        "duration_s": None if started is None or last is None else last - started,
        "state": rs.state.value,
        "stop_reason": rs.stop_reason.value if rs.stop_reason else None,
        "output": rs.output,
        "error": rs.error,
        "counters": _counters(rs.counters),
        "usage": rs.usage.model_dump(),
        "model_calls": rs.model_calls,
        "tool_executions": rs.tool_executions,
        "moves": _moves(rs, checkpoint.move_times),
        "state_visits": {} if path is None else {s.value: n for s, n in path.state_visits.items()},
        "row_visits": {} if path is None else {str(r): n for r, n in path.row_visits.items()},
        "messages": [_message(m) for m in rs.messages],
        "tool_calls": _tool_calls(
            rs.messages, {r.call_id: r for r in rs.tool_results}, rs.child_runs
        ),
        **_origin(rs),
        "gave_up": gave_up(rs.state, rs.stop_reason),
        "can_fork": can_answer,
        "questions": [
            {
                "call_id": r.call.id,
                "kind": r.kind,
                "tool": r.call.name,
                "arguments": _arguments(r.call),
                "question": r.question,
                "asked_by": _asked_by(rs.messages, r.call.id),
            }
            for r in rs.human_requests
            if r.decision is None
        ],
        "suspended": rs.state is State.SUSPENDED,
        "can_answer": can_answer and rs.state is State.SUSPENDED,
    }
    cleaned: dict[str, JsonValue] = redact_data(detail)
    return cleaned


def decided(rs: RunState, calls: Collection[str]) -> dict[str, JsonValue]:
    """What the run ``rs`` holds as decided for each of ``calls`` (call ids): the recorded
    decision and its text while the run has not used it, else the call's result."""
    found: dict[str, Any] = {}
    for request in rs.human_requests:
        if request.call.id in calls and request.decision is not None:
            found[request.call.id] = request.decision + (
                f" ({request.reply})" if request.reply else ""
            )
    results = {r.call_id: r for r in rs.tool_results}
    for message in rs.messages:
        results.update((p.call_id, p) for p in message.parts if isinstance(p, ToolResult))
    for call_id in calls:
        if call_id not in found and call_id in results:
            result = results[call_id]
            kind = "error result" if result.is_error else "result"
            found[call_id] = f"settled with the {kind} {_first_line(result.content, 80)!r}"
    cleaned: dict[str, JsonValue] = redact_data(found)
    return cleaned
