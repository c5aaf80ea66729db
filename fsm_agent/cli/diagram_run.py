"""``fsm-agent diagram --trace STORE#RUN_ID`` of a composed run: the run's path on the machine
with, inside ``dispatching``, the path of each child run its agent-tool calls started, linked
to that child's run drawn on its own machine (written beside it, and so on for its children)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .. import diagrams
from ..diagrams.composition import ChildRunBox, composed_run_dot, composed_run_mermaid
from ..errors import FsmAgentError
from ..persistence import Checkpointer
from ..run.state import RunState

__all__ = ["child_runs_of", "run_drawings"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def child_runs_of(store: Checkpointer, rs: RunState) -> dict[str, RunState]:
    """``rs`` and every run it started through an agent tool, its children's too, by run id
    (a child the store no longer holds, or cannot read, is left out)."""
    found = {rs.run_id: rs}
    waiting = [rs]
    while waiting:
        for child_id in waiting.pop().child_runs.values():
            if child_id in found:
                continue
            try:
                child = store.load(child_id).state
            except FsmAgentError:  # gone, or unreadable: the parent is drawn without it
                continue
            found[child_id] = child
            waiting.append(child)
    return found


def run_drawings(
    runs: Mapping[str, RunState], run_id: str, name: str | None, fmt: str, title: str
) -> dict[str | None, str]:
    """The DOT (or, for ``fmt="mermaid"``, Mermaid) text of the run ``run_id`` of ``runs``
    drawn as the file ``name``, with its child runs inside ``dispatching``; and, when ``name``
    is given, each child's run drawn beside it as ``STEM-CALL_ID`` with the same suffix (linked
    from its box), by file name."""
    rs = runs[run_id]
    files: dict[str | None, str] = {}
    boxes = []
    for call_id, child_id in rs.child_runs.items():
        child = runs.get(child_id)
        if child is None:
            continue
        tool = _tool_name(rs, call_id)
        link = None
        if name is not None:
            path = Path(name)
            drawn = path.with_name(f"{path.stem}-{_UNSAFE.sub('_', call_id)}{path.suffix}")
            files |= run_drawings(
                runs, child_id, str(drawn), fmt, f"fsm_agent: run of '{tool}' (call {call_id})"
            )
            link = drawn.name  # beside the parent's file: a relative link
        boxes.append(
            ChildRunBox(tool, call_id, _visits(child), _ending(child), child.model_calls, link)
        )
    drawing = diagrams.plan(run=diagrams.RunPath.of_run(rs), title=title)
    draw = composed_run_mermaid if fmt == "mermaid" else composed_run_dot
    return {name: draw(drawing, boxes), **files}


def _tool_name(rs: RunState, call_id: str) -> str:
    """The name of the tool the call ``call_id`` of ``rs`` called."""
    for message in rs.messages:
        for call in message.tool_calls:
            if call.id == call_id:
                return call.name
    for call in rs.pending_tool_calls:
        if call.id == call_id:
            return call.name
    return "?"


def _visits(rs: RunState) -> tuple[tuple[str, int], ...]:
    """The states the run entered, each with how often, in the order it first entered them."""
    counts: dict[str, int] = {}
    for move in rs.trace:
        counts[move.dest.value] = counts.get(move.dest.value, 0) + 1
    return tuple(counts.items())


def _ending(rs: RunState) -> str:
    """How the run ended (its stop reason), or the state it rests in."""
    if rs.stop_reason is not None:
        return f"{rs.state.value}: {rs.stop_reason.value}"
    return f"now in {rs.state.value}"
