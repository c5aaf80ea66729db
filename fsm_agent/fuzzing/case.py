"""Fuzz cases: one generated run of the real kernel, as plain data that prints as Python.

A :class:`FuzzCase` holds a model script and everything around it (policy, verifier answers,
hook behaviours, human decisions, where to cancel or pause). :func:`run_case` runs it on the
real kernel with a virtual clock and returns a :class:`~fsm_agent.fuzzing.invariants.RunRecord`;
:meth:`FuzzCase.source` prints it back as the constructor call that rebuilds it. Nothing here
imports hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import count
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel

from ..errors import MCPServerError
from ..hooks import MockResult, SkipTool
from ..kernel.agent import Agent, RunHandle, RunResult, Runtime
from ..kernel.composition import agent_bounds, agent_tools
from ..kernel.plan import plan_of
from ..kernel.states import Verdict
from ..machine.table import TERMINAL, State
from ..models import Model
from ..models.scripted import (
    ScriptExhaustedError,
    ScriptPlayer,
    StreamingScriptPlayer,
    Turn,
    VirtualClock,
)
from ..policy import Policy
from ..run.approval import Approval, HumanDecision, ResumeHandle
from ..run.events import Event, StateChangedEvent
from ..run.state import RunState
from ..tools import TaskComplete, Tool, ToolContext, done_tool, tool
from ..values.messages import (
    FinishReason,
    Message,
    ModelResponse,
    ToolCall,
    ToolResult,
    Usage,
)
from ..values.record import Record
from .invariants import RunRecord
from .primary import FailingPrimary
from .source import model_source, turn_source

__all__ = [
    "DEFAULT_TOOLS",
    "RUNAWAY_MOVES",
    "AgentFactory",
    "FuzzAnswer",
    "FuzzCase",
    "FuzzDeps",
    "FuzzModel",
    "HookAnswer",
    "HookPlan",
    "PlannedHooks",
    "StreamingFuzzModel",
    "VerifierAnswer",
    "case_source",
    "model_source",
    "run_case",
    "turn_source",
]

AgentFactory: TypeAlias = Callable[[Model], "Agent[Any, Any]"]
"""A user's agent under test: takes the (fuzzed) model, returns the agent built around it."""

RUNAWAY_MOVES = 200
"""Moves after which a run whose policy gives no bound is stopped and reported as runaway."""

HookAnswer = Literal[
    "none", "raise", "hang", "bad", "respond", "mock", "skip", "args", "allow", "deny", "ask"
]
"""What a planned hook does on one call (each point accepts the answers its protocol allows:
``respond`` for ``before_model_call``; ``mock``/``skip``/``args`` for ``before_tool``;
``allow``/``deny``/``ask`` for ``approve_tool``; ``args`` also rewrites an ``after_tool``
result)."""


# -- the scripted model ---------------------------------------------------------------------------
class FuzzModel(ScriptPlayer):
    """Replays a script like :class:`~fsm_agent.testing.ScriptedModel`; with ``cycle`` the script
    starts over when it runs out, so a run that never stops keeps getting answers."""

    def __init__(self, turns: Sequence[Turn], *, cycle: bool = False, name: str = "fuzz") -> None:
        super().__init__(name=name)
        self.turns = list(turns)
        self.cycle = cycle and bool(self.turns)
        self.played: list[Turn] = []  # the turn answered to each request, in order

    def next_turn(self, index: int) -> Turn:
        """The script's turn ``index`` (cycling, if the case says so); a fallback chain's failing
        primary records its calls in ``requests`` without using a turn."""
        if index >= len(self.turns) and not self.cycle:
            raise ScriptExhaustedError(f"the script has {len(self.turns)} turn(s)")
        turn = self.turns[index % len(self.turns)]
        self.played.append(turn)
        return turn


class StreamingFuzzModel(StreamingScriptPlayer, FuzzModel):
    """A :class:`FuzzModel` that also streams: text in ``chunk_size`` fragments, each tool
    call's id and name, then its arguments in two fragments."""

    argument_fragments = 2

    def __init__(self, turns: Sequence[Turn], *, cycle: bool = False, chunk_size: int = 8) -> None:
        super().__init__(turns, cycle=cycle)
        self.chunk_size = chunk_size


# -- the default agent's tools: one per behaviour -------------------------------------------------
@dataclass(slots=True)
class FuzzDeps:
    """What the default agent's tools reach: the virtual clock and the run's cancel."""

    clock: VirtualClock
    cancel: Callable[[], None] = lambda: None


@tool
def add(a: int, b: int) -> int:
    """Add two integers (a tool that succeeds)."""
    return a + b


@tool
def boom(reason: str) -> str:
    """Always fails (a tool that raises)."""
    raise RuntimeError(reason)


@tool(timeout_s=0.001)
async def hang() -> str:
    """Never answers: its 1 ms timeout ends it."""
    await asyncio.Event().wait()
    return "unreachable"


@tool
async def wait(seconds: float, ctx: ToolContext[FuzzDeps]) -> str:
    """Take ``seconds`` of virtual time (a slow tool, for the wall-clock limit)."""
    await ctx.deps.clock.sleep(seconds)
    return f"waited {seconds:g} s"


@tool(timeout_s=0.001)
async def mcp_lookup(query: str) -> str:
    """Behaves as a tool of an MCP server does when the server misbehaves: an empty query goes
    quiet (its 1 ms timeout ends it), ``"ok"`` and ``"a"`` answer, anything else is a result
    the server marked ``isError`` (an :class:`~fsm_agent.MCPServerError`)."""
    if not query:
        await asyncio.Event().wait()
    if query in ("ok", "a"):
        return f"found {query}"
    raise MCPServerError(
        f"MCP server 'fuzz': tool 'lookup' failed: no entry for {query!r}",
        server="fuzz",
        tool="lookup",
    )


@tool
def huge() -> str:
    """Return 60,000 characters (cut by the output limit, then paged)."""
    return "x" * 60_000


@tool
def finish_task(message: str) -> str:
    """End the run (raises TaskComplete)."""
    raise TaskComplete(message)


@tool
def ask(question: str, ctx: ToolContext[FuzzDeps]) -> str:
    """Ask a human (the run suspends until the fuzzer resumes it)."""
    ctx.ask_human(question or "?")


@tool(needs_approval=True)
def guarded(x: int) -> int:
    """A tool that a human must approve when no hook decides."""
    return x


@tool
async def interrupt(ctx: ToolContext[FuzzDeps]) -> str:
    """Cancel the run from inside a tool call (an interrupt while an effect is in flight)."""
    ctx.deps.cancel()
    await asyncio.sleep(0)
    return "cancel requested"


DEFAULT_TOOLS: tuple[Tool, ...] = (
    add,
    boom,
    hang,
    wait,
    huge,
    finish_task,
    ask,
    guarded,
    interrupt,
    mcp_lookup,
    done_tool(),  # built once: the agent would build one per run under require_done_tool
)
"""The default agent's tools: ok, raise, hang, slow, huge output, done (two ways), ask a
human, needs approval, cancel, and an MCP-style tool that fails or hangs."""


class FuzzAnswer(BaseModel):
    """The output type of a typed case's agent (``FuzzCase.typed``)."""

    answer: str


# -- hooks -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class HookPlan:
    """What a hook at each point answers, call after call (``"none"`` once the answers run out).

    Only the points with answers are registered. ``hang`` overruns the hook's 1 ms timeout.
    """

    before_run: tuple[HookAnswer, ...] = ()
    after_run: tuple[HookAnswer, ...] = ()
    before_model_call: tuple[HookAnswer, ...] = ()
    after_model_call: tuple[HookAnswer, ...] = ()
    before_tool: tuple[HookAnswer, ...] = ()
    approve_tool: tuple[HookAnswer, ...] = ()
    after_tool: tuple[HookAnswer, ...] = ()
    on_transition: tuple[HookAnswer, ...] = ()

    def __bool__(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def source(self) -> str:
        """The constructor call that rebuilds this plan."""
        args = [
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name)
        ]
        return f"HookPlan({', '.join(args)})"

    def build(self) -> list[object]:
        """The hook object (empty when nothing is planned)."""
        if not self:
            return []
        return [PlannedHooks(self)]


class PlannedHooks:
    """Hook methods that play a :class:`HookPlan`; only the planned points exist.
    ``failed_gates`` lists the calls whose ``approve_tool`` answer raised, hung or was not a
    verdict: calls that must not run."""

    timeout_s = 0.001
    __name__ = "fuzz_hooks"

    def __init__(self, plan: HookPlan) -> None:
        self.failed_gates: list[str] = []
        self._answers = {f.name: list(getattr(plan, f.name)) for f in fields(plan)}
        for point, answers in self._answers.items():
            if answers:
                setattr(self, point, self._method(point))

    def _method(self, point: str) -> Callable[..., object]:
        answers = self._answers[point]

        async def hook(**kwargs: Any) -> object:
            answer = answers.pop(0) if answers else "none"
            if point == "approve_tool" and answer in ("raise", "hang", "bad"):
                self.failed_gates.append(kwargs["call"].id)
            return await _answer(point, answer, kwargs)

        return hook


async def _answer(point: str, answer: str, kwargs: dict[str, Any]) -> object:
    """Play one answer of a planned hook."""
    if answer == "raise":
        raise RuntimeError(f"{point} failed")
    if answer == "hang":
        await asyncio.Event().wait()
    if answer == "bad":
        return 42
    call: ToolCall | None = kwargs.get("call")
    if point == "before_model_call" and answer == "respond":
        return ModelResponse(
            message=Message.assistant("supplied by a hook"),
            finish_reason=FinishReason.STOP,
            usage=Usage(requests=0, input_tokens=3, output_tokens=2),
        )
    if point == "before_tool" and call is not None:
        if answer == "mock":
            return MockResult("mocked")
        if answer == "skip":
            return SkipTool("skipped by a hook")
        if answer == "args":
            return call.model_copy(update={"arguments": {}, "arguments_json": "{}"})
    if point == "approve_tool" and answer in ("allow", "deny", "ask"):
        return getattr(Approval, answer)()
    if point == "after_tool" and answer == "args":
        result: ToolResult = kwargs["result"]
        return result.model_copy(update={"content": result.content[:10] + " (edited)"})
    return None


# -- the case --------------------------------------------------------------------------------------
VerifierAnswer = Literal["accept", "reject", "raise"]
"""What the planned verifier says about one answer."""


@dataclass(frozen=True, slots=True)
class FuzzCase:
    """One fuzzed run. ``policy``, ``verifier``, ``hooks`` and ``stop_at_step`` configure the
    default agent (a target agent brings its own). ``decisions`` answer approvals in order
    (``True`` allows; a tool's question gets a text answer) over at most ``max_resumes``
    resumes. ``cancel_after``/``pause_after`` cancel or pause the run after that many events;
    a paused run is checkpointed as JSON, reloaded and resumed (invariant 10; this resume is
    not one of the ``max_resumes``). With ``fallback`` the default agent's model is a
    :class:`~fsm_agent.FallbackModel` whose primary fails (a :class:`FailingPrimary`) before the
    script's model takes the call. With ``typed`` the default agent's output type is
    :class:`FuzzAnswer`: the script's plain answers that are not its JSON fail validation."""

    script: tuple[Turn, ...] = ()
    cycle: bool = False
    stream: bool = True
    chunk_size: int = 8
    policy: Policy | None = None
    verifier: tuple[VerifierAnswer, ...] | None = None
    hooks: HookPlan = field(default_factory=HookPlan)
    stop_at_step: int | None = None
    decisions: tuple[bool, ...] = ()
    max_resumes: int = 2
    cancel_after: int | None = None
    pause_after: int | None = None
    fallback: bool = False
    typed: bool = False

    def source(self, indent: str = "") -> str:
        """The constructor call that rebuilds this case (non-default fields only)."""
        return case_source(self, FuzzCase(), indent)


def case_source(case: Any, defaults: Any, indent: str = "") -> str:
    """The constructor call that rebuilds the dataclass ``case``: its script turn by turn, then
    each field that differs from ``defaults`` (an instance built with no arguments)."""
    inner = indent + "    "
    name = type(case).__name__
    lines = [f"{name}("]
    if case.script:
        lines.append(f"{inner}script=(")
        lines.extend(f"{inner}    {turn_source(t)}," for t in case.script)
        lines.append(f"{inner}),")
    for f in fields(case):
        value = getattr(case, f.name)
        if f.name == "script" or value == getattr(defaults, f.name):
            continue
        if isinstance(value, BaseModel | Record):
            text = model_source(value)
        elif isinstance(value, HookPlan):
            text = value.source()
        else:
            text = repr(value)
        lines.append(f"{inner}{f.name}={text},")
    lines.append(f"{indent})")
    return "\n".join(lines) if len(lines) > 2 else f"{name}()"


def _verifier(answers: tuple[VerifierAnswer, ...]) -> Callable[..., Verdict]:
    pending = list(answers)

    def verifier(*, output: str, run_state: RunState) -> Verdict:
        answer = pending.pop(0) if pending else "accept"
        if answer == "raise":
            raise RuntimeError("the verifier failed")
        return Verdict.accept() if answer == "accept" else Verdict.reject(f"not yet: {output[:8]}")

    return verifier


def _default_agent(case: FuzzCase, model: Model, deps: FuzzDeps) -> Agent[FuzzDeps, Any]:
    step = case.stop_at_step
    done_required = case.policy is not None and case.policy.require_done_tool
    return Agent(
        model,
        tools=DEFAULT_TOOLS,
        system_prompt="You are fuzzed.",
        policy=case.policy,
        # The agent refuses a verifier that the done tool would bypass.
        verifier=(
            None
            if case.verifier is None or (case.policy is not None and case.policy.require_done_tool)
            else _verifier(case.verifier)
        ),
        stop_conditions=() if step is None else (lambda rs: rs.counters.steps >= step,),
        hooks=case.hooks.build(),
        deps=deps,
        # The agent refuses an output type that the done tool would bypass, too.
        output_type=FuzzAnswer if case.typed and not done_required else None,
    )


# -- running ---------------------------------------------------------------------------------------
def run_case(
    case: FuzzCase,
    make_agent: AgentFactory | None = None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> RunRecord:
    """Run ``case`` on the real kernel (the default agent, or ``make_agent``'s) with a virtual
    clock (on ``loop``, or a new event loop), resuming suspensions, and record what happened.
    With ``pause_after`` (and no cancel, and no hooks that run per invocation) the run is
    repeated without the pause, as the reference of invariant 10."""
    record = _run_once(case, make_agent, loop)
    hooks = case.hooks
    if (
        case.pause_after is not None
        and case.cancel_after is None
        and not (hooks.before_run or hooks.after_run or hooks.on_transition)  # per invocation
    ):
        record.reference = _run_once(replace(case, pause_after=None), make_agent, loop).result
    return record


def _on_virtual_time(agent: Agent[Any, Any], clock: VirtualClock) -> None:
    """Give ``agent``, and every agent it uses as a tool at any depth, ``clock``'s time: their
    backoff and slow tools take no real time, and a child's deadline is read on the clock its
    parent's share was computed on. The jitter is seeded: the paused-and-resumed run and its
    reference must draw the same backoff delays, or a deadline falls between different retries
    (invariant 10). The run's own id is fixed; its children's are numbered in the order they
    start."""
    agent.runtime = Runtime(
        sleep=clock.sleep, clock=clock.now, random=random.Random(0), new_id=lambda: "run_fuzz"
    )
    numbers = count(1)
    below = [found.agent for found in agent_tools(agent)]
    seen = {id(agent)}
    while below:
        child = below.pop()
        if id(child) in seen:
            continue
        seen.add(id(child))
        child.runtime = Runtime(
            sleep=clock.sleep,
            clock=clock.now,
            random=random.Random(len(seen)),
            new_id=lambda: f"run_fuzz_child_{next(numbers)}",
        )
        below.extend(found.agent for found in agent_tools(child))


def _run_once(
    case: FuzzCase, make_agent: AgentFactory | None, loop: asyncio.AbstractEventLoop | None
) -> RunRecord:
    clock = VirtualClock()
    model: FuzzModel = (
        StreamingFuzzModel(case.script, cycle=case.cycle, chunk_size=case.chunk_size)
        if case.stream
        else FuzzModel(case.script, cycle=case.cycle)
    )
    deps = FuzzDeps(clock)
    if make_agent is not None:
        agent = make_agent(model)
    elif case.fallback:
        from ..providers.fallback import FallbackModel

        agent = _default_agent(case, FallbackModel(FailingPrimary(model), model), deps)
    else:
        agent = _default_agent(case, model, deps)
    if not isinstance(agent, Agent):
        raise TypeError(f"the agent factory returned {type(agent).__name__}, not an Agent")
    _on_virtual_time(agent, clock)
    # Its children (agents it uses as tools) and the agents it hands off to share the fuzzed
    # model; its phases' budgets bound its turns.
    computed = agent_bounds(agent)
    calls, turns = computed.max_model_calls, computed.max_tool_turns
    cap = (
        RUNAWAY_MOVES
        if calls is None or turns is None
        else 6 * (calls + turns) + 8 * (case.max_resumes + 1) + 20
    )
    control = _Control(case, model, cap, calls)
    deps.cancel = control.cancel
    if loop is not None:
        result = loop.run_until_complete(control.main(agent))
    else:
        with contextlib.closing(asyncio.new_event_loop()) as own:
            result = own.run_until_complete(control.main(agent))
    return RunRecord(
        result=result,
        events=control.events,
        model=model,
        policy=agent.policy,
        limits=plan_of(agent).limits,
        cancelled_at=control.cancelled_at,
        invocations=control.invocations,
        machine=agent.machine,
        bounds=computed,
        runaway=control.runaway,
        played=list(model.played),
        paused=control.paused,
    )


class _Control:
    """Drives one case: consumes the events, cancels or pauses where the case says, stops a
    runaway run, and resumes suspensions."""

    def __init__(self, case: FuzzCase, model: FuzzModel, cap: int, calls: int | None) -> None:
        self.case = case
        self.model = model
        self.cap = cap  # moves
        self.calls = calls  # the model-call bound: a run past it is stopped at once
        self.handle = RunHandle()
        self.events: list[Event] = []
        self.invocations: list[list[Event]] = []
        self.moves = 0
        self.runaway: str | None = None
        self.cancelled_at: tuple[int, int] | None = None
        self.paused = False  # the pause took effect: the run was checkpointed and resumed

    def cancel(self) -> None:
        """Cancel the run, recording how much work had started."""
        handle = self.handle
        if self.cancelled_at is None and not handle.cancel_requested:
            rs = handle._rs
            executions = rs.tool_executions if rs is not None else 0
            self.cancelled_at = (len(self.model.requests), executions)
        handle.cancel()

    async def consume(self, stream: AsyncIterator[Event]) -> None:
        """Collect one invocation's events, acting on the case's cancel and pause points."""
        invocation: list[Event] = []
        self.invocations.append(invocation)
        case = self.case
        rested = False  # the run moved into a state it rests in: too late to cancel or pause
        async for event in stream:
            invocation.append(event)
            self.events.append(event)
            count = len(self.events)
            if isinstance(event, StateChangedEvent):
                rested = event.dest in TERMINAL or event.dest is State.SUSPENDED
                self.moves += 1
                over = self.calls is not None and len(self.model.requests) > self.calls
                if (over or self.moves > self.cap) and self.runaway is None:
                    self.runaway = (
                        f"the run made {self.moves} moves ({len(self.model.requests)} model "
                        "calls) without ending"
                    )
                    self.cancel()
            if count == case.cancel_after and not rested:
                self.cancel()
            if count == case.pause_after and not rested:
                self.handle.pause()

    async def main(self, agent: Agent[Any, Any]) -> RunResult[Any]:
        """Run, then resume each suspension (a pause through a JSON checkpoint)."""
        await self.consume(agent.run_stream("Do the task.", handle=self.handle))
        decisions = list(self.case.decisions)
        resumes = self.case.max_resumes  # resuming the pause does not count
        while True:
            result = self.handle.result
            if result is None or result.resume_handle is None:
                break
            resume = result.resume_handle
            if resume.requests:
                if resumes == 0:
                    break
                resumes -= 1
            else:  # the pause: checkpoint, reload, resume the copy
                self.paused = True
                copy = RunState.model_validate_json(resume.run_state.model_dump_json())
                resume = ResumeHandle.of(copy)
                fresh = RunHandle()  # a handle controls one run state
                if self.handle.cancel_requested:
                    fresh.cancel()
                self.handle = fresh
            answers: dict[str, HumanDecision] = {}
            for request in resume.requests:
                if request.kind == "question":
                    answers[request.call.id] = f"answer to {request.question}"
                else:
                    answers[request.call.id] = decisions.pop(0) if decisions else True
            await self.consume(agent.resume_stream(resume, answers, handle=self.handle))
        result = self.handle.result
        assert result is not None, "the driver records the result when the run rests"
        return result
