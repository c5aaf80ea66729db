"""How the commands that run an agent show it: a readable trace of its events, one line per
move or effect, and the recording written beside it."""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, TextIO

from .. import diagrams
from ..policy import Policy
from ..run.events import (
    AbortedEvent,
    CompactedEvent,
    Event,
    FinalEvent,
    HookErrorEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    ModelSwitchedEvent,
    RetryingEvent,
    StateChangedEvent,
    SuspendedEvent,
    TextDeltaEvent,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    VerificationFailedEvent,
)
from .args import UsageError, writable_file

if TYPE_CHECKING:
    from ..kernel.agent import Agent
    from ..replay import Recorder

__all__ = ["Trace", "add_record_option", "drive", "ended_ok", "labels", "open_recording"]


def add_record_option(parser: argparse.ArgumentParser) -> None:
    """The ``--record FILE`` option of a command that runs an agent."""
    parser.add_argument(
        "--record",
        metavar="FILE",
        type=writable_file,
        help="write the run's recording to FILE (JSONL; 'fsm-agent replay FILE' re-runs it)",
    )


def open_recording(path: str | None, agent: Agent[None], prompt: str) -> Recorder | None:
    """The recorder writing the run's recording to ``path`` (a header line, then its events as
    JSONL; see :mod:`fsm_agent.replay`), or ``None`` when no file was asked for."""
    if path is None:
        return None
    from ..replay import Recorder  # only a recorded run needs it

    try:
        return Recorder(path, agent, prompt)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror}") from None


def _call(event: ToolCallEvent) -> str:
    args = ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in event.args.items()
    )
    return f"{event.tool_name}({args})"


def _read_from_text(event: ModelResponseEvent) -> int:
    """The calls of the response that ``TextToolCalls`` read from its text (its mark, checked
    here without importing the providers into the command line's start)."""
    calls = event.response.message.tool_calls
    return sum((c.provider_data or {}).get("recovered_from") == "text" for c in calls)


def _short(value: str, limit: int = 100) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


class Trace:
    """Prints a run's events as a readable trace, one line per move or effect."""

    def __init__(self, out: TextIO, labels: Sequence[str], *, stream_text: bool) -> None:
        self.out = out
        self.labels = labels
        self.stream_text = stream_text
        self.streamed = False  # text deltas of the current model call were printed

    def show(self, event: Event) -> None:
        """Print what ``event`` says (deltas only when streaming text)."""
        line: str | None = None
        match event:
            case StateChangedEvent():
                self._end_stream()
                move = f"{event.source.value} → {event.dest.value}"
                line = f"  {move:<26} {self.labels[event.row]}"
            case ModelRequestEvent():
                self.streamed = False
            case TextDeltaEvent() if self.stream_text:
                if not self.streamed:
                    self.out.write("      model  ")
                    self.streamed = True
                self.out.write(event.text)
                self.out.flush()
            case TextEvent() if not self.streamed:
                line = f"      model  {_short(event.text)}"
            case ModelResponseEvent() if read := _read_from_text(event):
                self._end_stream()
                line = f"      model  wrote {read} tool call(s) as text, read by TextToolCalls"
            case ToolCallEvent():
                self._end_stream()
                line = f"      tool   {_call(event)}"
            case ToolResultEvent():
                mark = "error" if event.is_error else "→"
                line = f"             {mark} {_short(event.content)}"
            case RetryingEvent():
                line = (
                    f"      retry  {_short(event.error)}: retry {event.attempt} "
                    f"after {event.delay_s:.1f} s"
                )
            case ModelSwitchedEvent():
                line = (
                    f"      model  {event.from_model} failed ({_short(event.error)}): "
                    f"{event.to_model} takes the call"
                )
            case VerificationFailedEvent():
                line = f"      verify rejected: {_short(event.feedback)}"
            case CompactedEvent():
                line = f"      compacted {event.messages_removed} message(s) ({event.strategy})"
            case HookErrorEvent():
                line = f"      hook   {event.hook} failed: {_short(event.error)}"
            case FinalEvent():
                self._end_stream()
                line = f"final ({event.stop_reason.value}): {event.output}"
            case AbortedEvent():
                self._end_stream()
                line = f"aborted ({event.stop_reason.value}): {event.error or ''}".rstrip(": ")
            case SuspendedEvent():
                line = f"suspended: {len(event.pending)} tool call(s) wait for a human"
        if line is not None:
            print(line, file=self.out, flush=True)

    def _end_stream(self) -> None:
        if self.streamed:
            self.out.write("\n")
            self.streamed = False


async def drive(
    events: AsyncIterator[Event], trace: Trace | None, recorder: Recorder | None = None
) -> list[Event]:
    """Consume a run's ``events``, showing each on ``trace`` and recording it; the events."""
    seen: list[Event] = []
    try:
        async for event in events:
            seen.append(event)
            if recorder is not None:
                recorder.write(event)
            if trace is not None:
                trace.show(event)
    finally:
        if recorder is not None:
            recorder.close()
    return seen


def labels(policy: Policy, *, verifier: bool) -> list[str]:
    """The label of each row of the table, with ``policy``'s numbers in its guards."""
    scope = diagrams.Scope.of(policy, verifier=verifier)
    return [edge.label for edge in diagrams.plan(scope=scope).edges]


def ended_ok(events: Sequence[Event]) -> bool:
    """Whether the run these events tell ended in ``done``."""
    return bool(events) and isinstance(events[-1], FinalEvent)
