"""Record a run, and replay it deterministically with no network: how an incident becomes a test.

A *recording* is a JSONL file: one header line (``"type": "recording"``: the run id, the model's
name, the system prompt, the input, the policy and the tool definitions), then every event of
the run, one per line, exactly as ``run_stream`` yielded them. The events already carry every
model request and response and every tool call and result, so the recording is a superset of
the event trace that ``fsm-agent demo --record`` used to write, and ``fsm-agent diagram --trace``
reads both.

:func:`replay` re-runs a recording: a :class:`ReplayModel` answers each model call with the
recorded response (or raises the recorded error), :class:`ReplayedTool` s return the recorded
results, a replayed verifier gives the recorded verdicts, and the clock is virtual. The
replayed events are compared with the recorded ones (text deltas, tool progress, durations and
backoff delays aside); the first difference is the :class:`Divergence`. Replay a recording with
another ``policy`` or real ``tools`` to see exactly where a change alters the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TextIO

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import PydanticSerializationError

from ..diagrams import TraceError
from ..errors import ContextWindowExceededError, ModelError
from ..kernel.plan import plan_of
from ..kernel.states import Verdict
from ..machine.table import Outcome, State
from ..models import Model
from ..models.scripted import Failure, ScriptPlayer, Turn, VirtualClock
from ..persistence.outcomes import RecordedToolError
from ..persistence.storable import storable_data
from ..policy import Policy
from ..run.events import (
    AbortedEvent,
    Event,
    FinalEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    ModelSwitchedEvent,
    PhaseChangedEvent,
    RetryingEvent,
    StateChangedEvent,
    SuspendedEvent,
    ToolResultEvent,
    UsageEvent,
    VerificationFailedEvent,
    event_adapter,
)
from ..tools import Tool, ToolContext, ToolExecution
from ..values.messages import (
    FinishReason,
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolDefinition,
    ToolResult,
)
from .children import ChildHeader, child_headers, child_parts
from .divergence import Divergence, first_divergence

if TYPE_CHECKING:
    from ..kernel.agent import Agent, RunResult
    from ..phases import Phases

__all__ = [
    "Divergence",
    "RecordedFallbackError",
    "Recorder",
    "Recording",
    "RecordingHeader",
    "ReplayModel",
    "ReplayReport",
    "ReplayedTool",
    "compare",
    "is_recording",
    "read_recording",
    "record",
    "replay",
    "replay_stream",
    "replayed_tools",
]

FORMAT = 1
"""The recording format this version writes and reads."""


class RecordingHeader(BaseModel):
    """The first line of a recording: what is needed to run the same agent again."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["recording"] = "recording"
    format: int = FORMAT
    run_id: str
    model: str
    system_prompt: str | None
    input: Message
    history: list[Message] = []
    policy: Policy
    tools: list[ToolDefinition]
    verifier: bool = False
    children: dict[str, ChildHeader] = {}  # the agents it uses as tools


@dataclass(frozen=True, slots=True)
class Recording:
    """A recording read back: its header, its events and the file line of each event."""

    header: RecordingHeader
    events: tuple[Event, ...]
    lines: tuple[int, ...]


class Recorder:
    """Writes a recording of one run: the header when opened, then each event given to
    :meth:`write`. Use as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        agent: Agent[Any, Any],
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        run_id: str | None = None,
    ) -> None:
        header = RecordingHeader(
            run_id=run_id or "",
            model=str(getattr(agent.model, "name", type(agent.model).__name__)),
            system_prompt=agent.system_prompt,
            input=Message.user(prompt) if isinstance(prompt, str) else prompt,
            history=list(history),
            policy=agent.policy,
            tools=list(plan_of(agent).tool_definitions),
            verifier=agent.verifier is not None,
            children=child_headers(agent),
        )
        self.path = os.fspath(path)
        self._header = header
        self._file: TextIO = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 closed in close()
        self._started = False

    def write(self, event: Event) -> None:
        """Append one event (the header goes first, with the run id of the first event)."""
        if not self._started:
            header = self._header.model_copy(update={"run_id": event.run_id})
            try:
                line = header.model_dump_json()
            except PydanticSerializationError:  # text JSON cannot carry: as for events below
                data = storable_data(header.model_dump())
                line = RecordingHeader.model_validate(data).model_dump_json()
            self._file.write(line + "\n")
            self._started = True
        try:
            line = event_adapter.dump_json(event).decode()
        except PydanticSerializationError:
            # A lone surrogate (a model's "\ud800" escape, a file name from os.fsdecode):
            # replaced by U+FFFD, as wherever the text recurs in later events, so that the
            # recording replays to the same events.
            data = storable_data(event_adapter.dump_python(event))
            line = event_adapter.dump_json(event_adapter.validate_python(data)).decode()
        self._file.write(line + "\n")

    def close(self) -> None:
        """Finish the file."""
        self._file.close()

    def __enter__(self) -> Recorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def record(
    agent: Agent[Any, Any],
    prompt: str | Message,
    path: str | os.PathLike[str],
    *,
    history: Sequence[Message] = (),
) -> RunResult:
    """Run ``agent`` on ``prompt``, writing the recording to ``path``; returns the result."""
    from ..kernel.agent import RunHandle

    handle = RunHandle()
    with Recorder(path, agent, prompt, history=history) as recorder:
        async for event in agent.run_stream(prompt, history=history, handle=handle):
            recorder.write(event)
    assert handle.result is not None
    return handle.result


def read_recording(path: str | os.PathLike[str]) -> Recording:
    """Read a recording; raises ``OSError`` when the file cannot be read and
    :class:`~fsm_agent.diagrams.TraceError` when it is not a recording."""
    header: RecordingHeader | None = None
    events: list[Event] = []
    lines: list[int] = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                if header is None:
                    header = RecordingHeader.model_validate_json(line)
                    if header.format > FORMAT:
                        raise TraceError(
                            f"{path}: recording format {header.format} is newer than this "
                            f"fsm_agent reads ({FORMAT}); upgrade fsm_agent"
                        )
                    continue
                events.append(event_adapter.validate_json(line))
                lines.append(number)
            except ValidationError as exc:
                what = "a recording header" if header is None else "an fsm_agent event"
                problem = exc.errors(include_url=False)[0]["msg"]
                raise TraceError(f"{path}:{number}: not {what} ({problem})") from None
    if header is None:
        raise TraceError(f"{path}: the file is empty, not a recording")
    return Recording(header, tuple(events), tuple(lines))


def is_recording(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with a recording header (else it may be a plain event trace)."""
    with open(path, encoding="utf-8") as file:
        for line in file:
            if line.strip():
                try:
                    return bool(json.loads(line).get("type") == "recording")
                except (ValueError, AttributeError):
                    return False
    return False


# --- the doubles that replay a recording ----------------------------------------------------------


class ReplayModel(ScriptPlayer):
    """A model that answers each call with the recording's next response, or raises the error
    the recorded call ended with. Past the last recorded call it raises a non-retryable
    :class:`~fsm_agent.ModelError` (the replay has diverged)."""

    def __init__(self, recording: Recording) -> None:
        super().__init__(name=recording.header.model)
        self.outcomes: deque[ModelResponse | ModelError] = deque(_model_outcomes(recording.events))

    def next_turn(self, index: int) -> Turn:
        """The next recorded outcome."""
        if not self.outcomes:
            return Failure(ModelError("the recording has no more model calls", retryable=False))
        outcome = self.outcomes.popleft()
        return Failure(outcome) if isinstance(outcome, ModelError) else outcome


class RecordedFallbackError(ModelError):
    """A recorded call whose error handed it to the next model of a fallback chain."""


class _ChainMember:
    """One model of a replayed fallback chain: the recorded name, the shared recorded calls."""

    def __init__(self, shared: ReplayModel, name: str) -> None:
        self._shared = shared
        self._name = name

    @property
    def name(self) -> str:
        """The recorded model's name."""
        return self._name

    @property
    def context_window(self) -> int | None:
        """Unknown: the recording does not say."""
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The next recorded outcome."""
        return await self._shared.complete(request)


def _replay_model(recording: Recording) -> Model:
    """The recording's model: a fallback chain of the models the run moved through (whose
    recorded fallback errors hand the call on), or one :class:`ReplayModel`."""
    from ..providers.fallback import FallbackModel

    shared = ReplayModel(recording)
    switched = [e for e in recording.events if isinstance(e, ModelSwitchedEvent)]
    if not switched:
        return shared
    names = [switched[0].from_model, *(e.to_model for e in switched)]
    first, *others = (_ChainMember(shared, name) for name in names)
    return FallbackModel(first, *others, on=(RecordedFallbackError,))


def _model_outcomes(events: Sequence[Event]) -> list[ModelResponse | ModelError]:
    """The outcome of each recorded model call, in order."""
    outcomes: list[ModelResponse | ModelError] = []
    final_output = next((e.output for e in events if isinstance(e, FinalEvent)), "")
    for index, event in enumerate(events):
        if not isinstance(event, ModelRequestEvent):
            continue
        summary = event.request.tool_choice == "none" and not event.request.tools
        error_text = "the recorded model call failed"
        fell_back = False
        outcome: ModelResponse | ModelError | None = None
        for later in events[index + 1 :]:
            if isinstance(later, ModelRequestEvent):
                break
            if isinstance(later, ModelResponseEvent):
                outcome = later.response
                break
            if isinstance(later, UsageEvent) and summary:  # the tools-off summary call
                message = Message.assistant(final_output)
                outcome = ModelResponse(
                    message=message, finish_reason=FinishReason.STOP, usage=later.call
                )
                break
            if isinstance(later, RetryingEvent | ModelSwitchedEvent | AbortedEvent) and later.error:
                error_text = later.error
            elif isinstance(later, StateChangedEvent) and later.source is State.CALLING:
                if later.outcome is Outcome.FALLBACK:
                    fell_back = True  # the error text follows, in model_switched or retrying
                elif later.outcome is Outcome.LENGTH:
                    outcome = ContextWindowExceededError(error_text)
                elif later.outcome is Outcome.FATAL_ERROR:
                    outcome = ModelError(error_text, retryable=False)
                if outcome is not None:
                    break
        failure = RecordedFallbackError if fell_back else ModelError
        outcomes.append(outcome or failure(error_text, retryable=True))
    return outcomes


def _raw(arguments: str) -> str:
    """Replayed: returns the recorded result."""
    return arguments


class ReplayedTool(Tool):
    """A tool that returns the recorded results of its calls (by call id, in order) instead of
    running; its definition is the recorded one, so model requests match."""

    def __init__(
        self, definition: ToolDefinition, results: dict[str, deque[ToolExecution]]
    ) -> None:
        super().__init__(_raw, name=definition.name, raw_arguments=True, idempotent=True)
        self.definition = definition
        self.description = definition.description
        self._results = results

    async def execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        *,
        default_timeout_s: float | None = 30.0,
    ) -> ToolExecution:
        """The recorded outcome of ``call``."""
        await asyncio.sleep(0)
        queue = self._results.get(call.id)
        if not queue:
            content = f"Error: the recording has no result for call {call.id!r} of '{call.name}'"
            return ToolExecution(
                ToolResult(call_id=call.id, name=call.name, content=content, is_error=True)
            )
        return queue.popleft()


def replayed_tools(recording: Recording) -> list[Tool]:
    """A :class:`ReplayedTool` for each tool the recorded agent offered."""
    events = recording.events
    results: dict[str, deque[ToolExecution]] = {}
    sent = _results_sent(events)
    for index, event in enumerate(events):
        if not isinstance(event, ToolResultEvent):
            continue
        done = False
        for later in events[index + 1 :]:
            if isinstance(later, ToolResultEvent):
                break
            if isinstance(later, StateChangedEvent):
                done = later.source is State.DISPATCHING and later.outcome is Outcome.DONE_TOOL
                break
        result = ToolResult(
            call_id=event.call_id,
            name=event.tool_name,
            content=event.content,
            is_error=event.is_error,
        )
        rich = sent.get(event.call_id)
        if rich is not None and (rich.parts or rich.structured is not None or rich.metadata):
            metadata = {k: v for k, v in rich.metadata.items() if k not in _LIMIT_KEYS}
            result = result.model_copy(
                update={"parts": rich.parts, "structured": rich.structured, "metadata": metadata}
            )
        final = event.content if done and event.content != "Task complete." else None
        before = events[index - 1] if index else None
        moved = (
            before.dest if isinstance(before, PhaseChangedEvent) and before.by == "code" else None
        )  # the tool returned MovePhase: the replayed call asks for the same move
        execution = ToolExecution(
            result,
            done=done,
            final_message=final,
            error=RecordedToolError(event.content) if event.is_error else None,
            phase=moved,
        )
        results.setdefault(event.call_id, deque()).append(execution)
    for event in events:
        if isinstance(event, SuspendedEvent):
            for call in event.pending:
                question = event.questions.get(call.id)
                if question is not None:
                    placeholder = ToolResult(call_id=call.id, name=call.name, content="")
                    results.setdefault(call.id, deque()).append(
                        ToolExecution(placeholder, question=question)
                    )
    return [ReplayedTool(definition, results) for definition in recording.header.tools]


_LIMIT_KEYS = frozenset({"cut", "total_chars", "old"})  # the output limit's, set again in replay


def _results_sent(events: Sequence[Event]) -> dict[str, ToolResult]:
    """The tool results as the recorded model requests sent them (with their parts, structured
    values and metadata, which the ``tool_result`` events do not carry), by call id."""
    sent: dict[str, ToolResult] = {}
    for event in events:
        if isinstance(event, ModelRequestEvent):
            for message in event.request.messages:
                for result in message.tool_results:
                    sent.setdefault(result.call_id, result)
    return sent


def _verdicts(events: Sequence[Event]) -> deque[Verdict]:
    verdicts: deque[Verdict] = deque()
    feedback = "The answer was not accepted."
    for event in events:
        if isinstance(event, VerificationFailedEvent):
            feedback = event.feedback
        elif isinstance(event, StateChangedEvent) and event.source is State.VERIFYING:
            if event.outcome is Outcome.VERIFIED:
                verdicts.append(Verdict.accept())
            elif event.outcome is Outcome.REJECTED:
                verdicts.append(Verdict.reject(feedback))
    return verdicts


# --- replay and comparison ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """The outcome of a replay: the replayed events and the first divergence, if any."""

    recording: Recording
    events: tuple[Event, ...]
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        """The replay produced the recorded run."""
        return self.divergence is None


def _agent(
    recording: Recording,
    policy: Policy | None,
    tools: Sequence[Tool] | None,
    phases: Phases | None = None,
    run_ids: Sequence[str] = (),
) -> Agent[None]:
    """The agent that replays ``recording``; ``run_ids``: a child's, one per recorded run."""
    from ..kernel.agent import Agent, Runtime

    header = recording.header
    clock = VirtualClock()
    verdicts = _verdicts(recording.events)

    def verifier(**_: object) -> Verdict:
        return verdicts.popleft() if verdicts else Verdict.accept()

    run_id = header.run_id
    ids = iter(run_ids)
    if tools is None:
        tools = [t for t in replayed_tools(recording) if t.name not in header.children]
        tools += _replayed_children(recording, set(run_ids) or {run_id})
    return Agent(
        _replay_model(recording),
        tools=list(tools),
        system_prompt=header.system_prompt,
        policy=policy or header.policy,
        verifier=verifier if header.verifier else None,
        phases=phases,
        runtime=Runtime(
            sleep=clock.sleep,
            clock=clock.now,
            random=random.Random(0),
            new_id=(lambda: next(ids, run_id)) if run_ids else (lambda: run_id),
        ),
    )


def _replayed_children(recording: Recording, parents: set[str]) -> list[Tool]:
    """An agent tool for each child of the recorded agent, replaying its part of the run."""
    from ..kernel.composition import AgentTool

    tools: list[Tool] = []
    for name, child, events, ids in child_parts(
        recording.header.children, recording.events, parents
    ):
        header = RecordingHeader(
            run_id=ids[0] if ids else "",
            model=recording.header.model,
            system_prompt=child.system_prompt,
            input=Message.user(""),  # each call's task comes from the parent's replayed call
            policy=child.policy,
            tools=child.tools,
            verifier=child.verifier,
            children=child.children,
        )
        part = Recording(header, tuple(events), tuple(0 for _ in events))
        agent = _agent(part, None, None, run_ids=ids)
        tools.append(AgentTool(agent, name=name, description=child.description))
    return tools


async def replay_stream(
    recording: Recording,
    *,
    policy: Policy | None = None,
    tools: Sequence[Tool] | None = None,
    phases: Phases | None = None,
) -> AsyncIterator[Event]:
    """The events of a replay of ``recording``, as they happen (see :func:`replay`)."""
    agent = _agent(recording, policy, tools, phases)
    header = recording.header
    async for event in agent.run_stream(header.input, history=header.history):
        yield event


async def replay(
    path: str | os.PathLike[str] | Recording,
    *,
    policy: Policy | None = None,
    tools: Sequence[Tool] | None = None,
    phases: Phases | None = None,
) -> ReplayReport:
    """Re-run a recording with no network and compare it with what was recorded. ``policy``
    and ``tools`` replace the recorded policy and the replayed tools, to see where a change
    makes the run diverge. A run recorded under phases is replayed with its ``phases`` (a
    phase table is code, so the recording cannot hold it): the replay then makes the same
    phase moves, or diverges where they differ."""
    recording = path if isinstance(path, Recording) else read_recording(path)
    events = tuple(
        [e async for e in replay_stream(recording, policy=policy, tools=tools, phases=phases)]
    )
    return ReplayReport(recording, events, compare(recording, events))


def compare(recording: Recording, replayed: Sequence[Event]) -> Divergence | None:
    """The first difference between the recorded events and ``replayed`` (deltas, tool progress,
    durations and backoff delays are not compared), or ``None``."""
    return first_divergence(zip(recording.events, recording.lines, strict=True), replayed)
