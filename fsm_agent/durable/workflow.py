"""The DBOS workflow that runs one agent, and what goes in and out of it.

A worker process registers agent factories by name; the workflow rebuilds the agent from its
factory on every execution (the first, and any recovery by a worker started under the crashed
one's executor id), makes its model
and tool calls steps (:mod:`fsm_agent.durable.steps`) and drives it on the unchanged kernel. A
recovered execution replays the recorded steps, so it retraces the same moves to where the
crashed one stopped and goes on from there.

While the run goes, its events go out on a DBOS stream in batches, one batch per move. A
suspended run publishes its status as a DBOS event and waits for the human's decisions with a
durable ``recv``: the wait survives restarts of the worker, for as long as the timeout allows.
Everything that crosses the system database is JSON text.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Literal

from dbos import DBOS
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from ..errors import DurableRunError, ResumeError
from ..kernel.agent import Agent, RunHandle, RunResult
from ..machine.table import State, StopReason
from ..run.approval import Approval, Decision, HumanDecision
from ..run.events import Event, StateChangedEvent, event_adapter
from ..run.state import RunState
from ..values.messages import Message, ToolCall
from .steps import on_dbos

AGENT_WORKFLOW = "fsm_agent.run_agent"
"""The registered name of the workflow (what a ``DBOSClient`` enqueues by name)."""
EVENTS_STREAM = "fsm_agent.events"
STATUS_EVENT = "fsm_agent.status"
DECISIONS_TOPIC = "fsm_agent.decisions"
DEFAULT_DECISION_TIMEOUT_S = 7 * 24 * 3600.0

AgentFactory = Callable[[], Agent[Any, Any]]
"""Builds the agent of a run, in whatever worker runs or recovers it."""

factories: dict[str, AgentFactory] = {}


class RunRequest(BaseModel):
    """The workflow's input: what to run and how."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | Message
    history: list[Message] = Field(default_factory=list)
    stream_events: bool = True
    decision_timeout_s: float = DEFAULT_DECISION_TIMEOUT_S


class WireDecision(BaseModel):
    """One human decision as it travels: ``allow``, ``deny`` (with its reason) or ``answer``."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["allow", "deny", "answer"]
    text: str | None = None

    @classmethod
    def of(cls, decision: HumanDecision) -> WireDecision:
        """Encode a decision as :meth:`fsm_agent.Agent.resume` takes it."""
        if isinstance(decision, bool):
            return cls(kind="allow" if decision else "deny")
        if isinstance(decision, str):
            return cls(kind="answer", text=decision)
        if isinstance(decision, Approval) and decision.decision is not Decision.ASK:
            kind: Literal["allow", "deny"] = (
                "allow" if decision.decision is Decision.ALLOW else "deny"
            )
            return cls(kind=kind, text=decision.reason)
        raise ResumeError(
            "a decision is True, False, Approval.allow(), Approval.deny(reason) or an answer's "
            f"text, not {decision!r}"
        )

    def decode(self) -> HumanDecision:
        """The decision as :meth:`fsm_agent.Agent.resume` takes it."""
        if self.kind == "answer":
            return self.text or ""
        if self.kind == "allow":
            return True
        return Approval.deny(self.text) if self.text is not None else False


class DecisionMessage(BaseModel):
    """What :meth:`fsm_agent.durable.DurableRuns.decide` sends to a waiting run."""

    model_config = ConfigDict(extra="forbid")

    decisions: dict[str, WireDecision]


class RunStatus(BaseModel):
    """Where a run on DBOS rests, published when it suspends and when it ends.

    ``pending`` and ``questions`` are what a suspended run waits on; ``rejected`` says why the
    last decisions sent did not fit (the run goes on waiting)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    state: State
    stop_reason: StopReason | None = None
    output: str | None = None
    pending: list[ToolCall] = Field(default_factory=list)
    questions: dict[str, str] = Field(default_factory=dict)
    rejected: str | None = None

    @classmethod
    def of(cls, result: RunResult[Any], rejected: str | None = None) -> RunStatus:
        """The status of a run that rests with ``result``."""
        handle = result.resume_handle
        return cls(
            run_id=result.run_id,
            state=result.state,
            stop_reason=result.stop_reason,
            output=result.output_text,  # the text (a typed agent's JSON): a status is JSON
            pending=list(result.pending),
            questions=handle.questions if handle is not None else {},
            rejected=rejected,
        )


@DBOS.workflow(name=AGENT_WORKFLOW)
async def run_agent(agent_name: str, request_json: str) -> str:
    """Run the agent registered as ``agent_name`` to its end (waiting for humans on the way);
    returns the final run state as JSON."""
    run_id = DBOS.workflow_id
    assert run_id is not None, "DBOS sets the workflow id before the body runs"
    factory = factories.get(agent_name)
    if factory is None:
        raise DurableRunError(
            f"no agent is registered as {agent_name!r} in this worker; call "
            "fsm_agent.durable.register_agent before DBOS.launch()",
            run_id=run_id,
        )
    request = RunRequest.model_validate_json(request_json)
    agent = on_dbos(factory(), run_id)
    handle = RunHandle()
    if request.stream_events:
        await _publish(agent.run_stream(request.prompt, history=request.history, handle=handle))
    else:
        await agent.run(request.prompt, history=request.history, handle=handle)
    result = handle.result
    assert result is not None
    rejected: str | None = None
    while result.resume_handle is not None:
        await DBOS.set_event_async(STATUS_EVENT, RunStatus.of(result, rejected).model_dump_json())
        message = await DBOS.recv_async(DECISIONS_TOPIC, request.decision_timeout_s)
        if message is None:
            break  # nobody decided in time: the run ends suspended
        try:
            decisions = _decisions(message)
            handle = RunHandle()
            if request.stream_events:
                await _publish(agent.resume_stream(result.resume_handle, decisions, handle=handle))
            else:
                await agent.resume(result.resume_handle, decisions, handle=handle)
        except ResumeError as exc:  # nothing ran: wait for decisions that fit
            rejected = str(exc)
            continue
        result = handle.result
        assert result is not None
        rejected = None
    await DBOS.set_event_async(STATUS_EVENT, RunStatus.of(result).model_dump_json())
    if request.stream_events:
        await DBOS.close_stream_async(EVENTS_STREAM)
    assert result.run_state is not None
    return result.run_state.model_dump_json()


def _decisions(message: object) -> Mapping[str, HumanDecision]:
    if not isinstance(message, str):
        raise ResumeError(f"decisions arrive as JSON text, got {type(message).__name__}")
    try:
        wire = DecisionMessage.model_validate_json(message)
    except ValidationError as exc:
        raise ResumeError(f"the decisions do not decode: {exc}") from None
    return {call_id: decision.decode() for call_id, decision in wire.decisions.items()}


async def _publish(events: AsyncIterator[Event]) -> None:
    """Write the run's events to its stream, one batch per move (each write is a step)."""
    batch: list[JsonValue] = []
    async for event in events:
        batch.append(event_adapter.dump_python(event, mode="json"))
        if isinstance(event, StateChangedEvent):
            await DBOS.write_stream_async(EVENTS_STREAM, batch)
            batch = []
    if batch:
        await DBOS.write_stream_async(EVENTS_STREAM, batch)


def result_of(rs: RunState) -> RunResult:
    """The :class:`RunResult` of a run state that came back from a worker."""
    error = DurableRunError(rs.error, run_id=rs.run_id) if rs.error is not None else None
    return RunResult.of(rs, error)
