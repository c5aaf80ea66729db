"""Seam cases: a run attacked where user code, the clock, the caller's task and the store meet
the machine.

A :class:`SeamCase` is a model script plus the attacks around it: a short wall-clock limit on
the real clock, a ``task.cancel()`` from outside at a random moment, an ``asyncio.timeout``
around the run, a listener of ``run_stream`` that stalls, hooks, a verifier and stop conditions
that raise, hang or return garbage, approval gates that fail, and a SQLite checkpoint store
whose chosen writes fail. :func:`run_seam_case` plays it and returns a :class:`SeamRecord`;
:mod:`fsm_agent.fuzzing.seam_checks` judges it. Nothing here imports hypothesis.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal, cast

from ..errors import CheckpointError
from ..kernel.agent import Agent, RunHandle, RunResult, Runtime
from ..kernel.states import Verdict
from ..models.scripted import Turn, VirtualClock
from ..persistence.sqlite import SQLiteCheckpointer
from ..policy import HookFailureMode, Policy, RetryPolicy
from ..run.events import Event
from ..run.state import RunState
from ..tools import Tool, ToolContext, ToolExecution
from ..values.messages import ModelResponse, ToolCall, ToolDefinition
from .case import (
    DEFAULT_TOOLS,
    AgentFactory,
    FuzzDeps,
    FuzzModel,
    HookPlan,
    PlannedHooks,
    StreamingFuzzModel,
    case_source,
)
from .decoding import Choices, read_hook_plan, read_policy, read_script

__all__ = [
    "ALL_ATTACKS",
    "Attack",
    "FailingStore",
    "SeamCase",
    "SeamRecord",
    "StopAnswer",
    "UserAnswer",
    "read_seam_case",
    "run_seam_case",
]

UserAnswer = Literal["accept", "reject", "raise", "hang", "bad"]
"""What the planned verifier says about one answer (``bad``: something that is not a verdict)."""
StopAnswer = Literal["no", "yes", "text", "raise", "bad"]
"""What a planned stop condition returns at one check (``bad``: a value whose truth raises)."""

GRACE_S = 3.0
"""Real seconds a case may take before it counts as hung."""


# -- the failing store -----------------------------------------------------------------------------
class FailingStore(SQLiteCheckpointer):
    """An in-memory SQLite checkpointer whose writes numbered in ``fail_at`` (from 1: saves,
    intents and results alike) raise :class:`~fsm_agent.CheckpointError` before writing."""

    def __init__(self, fail_at: Iterable[int] = ()) -> None:
        super().__init__(":memory:")
        self.fail_at = frozenset(fail_at)
        self.writes = 0
        self.failed = 0

    def _count(self) -> None:
        self.writes += 1
        if self.writes in self.fail_at:
            self.failed += 1
            raise CheckpointError(f"the store failed at write {self.writes} (planted)")

    def save(self, state: RunState, *, version: int) -> None:
        """Save, unless this write is planted to fail."""
        self._count()
        super().save(state, version=version)

    def record_intent(
        self, run_id: str, key: str, kind: Literal["model", "tool"], *, version: int
    ) -> None:
        """Record an intent, unless this write is planted to fail."""
        self._count()
        super().record_intent(run_id, key, kind, version=version)

    def record_result(self, run_id: str, key: str, result: str, *, version: int) -> None:
        """Record a result, unless this write is planted to fail."""
        self._count()
        super().record_result(run_id, key, result, version=version)


# -- the case --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SeamCase:
    """One attacked run. ``deadline_s`` is the policy's wall-clock limit (real seconds);
    ``cancel_at_s`` cancels the caller's task from outside, ``timeout_s`` wraps the run in
    ``asyncio.timeout``; the listener stalls ``stall_s`` after event ``stall_after`` (``listen``
    false: ``run()``, no listener). ``verifier`` and ``stop`` answer call after call; with
    ``store`` the run is checkpointed, and the store's writes in ``fail_writes`` fail."""

    script: tuple[Turn, ...] = ()
    cycle: bool = False
    stream: bool = True
    policy: Policy | None = None
    hooks: HookPlan = field(default_factory=HookPlan)
    verifier: tuple[UserAnswer, ...] | None = None
    stop: tuple[StopAnswer, ...] = ()
    deadline_s: float | None = None
    cancel_at_s: float | None = None
    timeout_s: float | None = None
    listen: bool = True
    stall_after: int | None = None
    stall_s: float = 0.0
    store: bool = False
    fail_writes: tuple[int, ...] = ()

    def source(self, indent: str = "") -> str:
        """The constructor call that rebuilds this case (non-default fields only)."""
        return case_source(self, SeamCase(), indent)


# -- decoding --------------------------------------------------------------------------------------
_SECONDS = (0.0, 0.001, 0.003, 0.01, 0.03)


def _unnamed(turn: Turn) -> Turn:
    """``turn`` with its tool calls unnamed, so each gets an id no other call of the run has
    (the gate check follows calls by id)."""
    if isinstance(turn, ModelResponse) and turn.message.tool_calls:
        parts = tuple(
            p.model_copy(update={"id": ""}) if isinstance(p, ToolCall) else p
            for p in turn.message.parts
        )
        return turn.model_copy(update={"message": turn.message.model_copy(update={"parts": parts})})
    return turn


def _seam_policy(c: Choices, deadline_s: float | None) -> Policy:
    """A small policy (as the other modes draw it) on the real clock: a short deadline, and
    retries that wait a millisecond."""
    policy = read_policy(c)
    return policy.model_copy(
        update={
            "max_wall_clock_s": deadline_s,
            "retry": RetryPolicy(
                max_retries=policy.retry.max_retries, base_delay_s=0.001, max_delay_s=0.002
            ),
            "hook_failure_mode": HookFailureMode.FAIL if c.chance(3) else HookFailureMode.CONTINUE,
        }
    )


class Attack(StrEnum):
    """A family of attacks a seam case may draw (all of them by default)."""

    DEADLINE = "deadline"  # a short wall-clock limit on the real clock
    CANCEL = "cancel"  # task.cancel() from outside
    TIMEOUT = "timeout"  # asyncio.timeout around the run
    LISTENER = "listener"  # a listener that stalls, or run() with no listener
    HOOKS = "hooks"  # hooks (but approval) that raise, hang, return garbage
    GATES = "gates"  # approve_tool hooks that raise, hang, return garbage
    VERIFIER = "verifier"  # a verifier that raises, hangs, returns garbage
    STOP = "stop"  # stop conditions that raise or return garbage
    STORE = "store"  # a checkpoint store whose chosen writes fail


ALL_ATTACKS = frozenset(Attack)
"""Every attack family."""
_FROM_OUTSIDE = frozenset({Attack.CANCEL, Attack.TIMEOUT, Attack.LISTENER, Attack.STORE})


def _hooks(c: Choices, attacks: frozenset[Attack]) -> HookPlan:
    plan = read_hook_plan(c)
    if Attack.HOOKS not in attacks:
        plan = HookPlan(approve_tool=plan.approve_tool)
    if Attack.GATES not in attacks:
        plan = replace(plan, approve_tool=())
    return plan


def read_seam_case(
    c: Choices,
    definitions: Iterable[ToolDefinition] | None = None,
    attacks: frozenset[Attack] = ALL_ATTACKS,
) -> SeamCase:
    """A seam case drawing the ``attacks`` families: for the built-in agent
    (``definitions=None``) all of them; for a target agent (its tools, its policy, its user
    code), the attacks from outside only (cancel, timeout, listener, store)."""
    if definitions is not None:
        attacks = attacks & _FROM_OUTSIDE
    tools = list(definitions) if definitions is not None else [t.definition for t in DEFAULT_TOOLS]
    on = attacks.__contains__
    deadline = c.maybe(_SECONDS[1:]) if on(Attack.DEADLINE) else None
    cancel_at = c.maybe(_SECONDS) if on(Attack.CANCEL) else None
    timeout = c.maybe(_SECONDS[1:]) if on(Attack.TIMEOUT) else None
    # A hanging verifier must be ended by a deadline, a cancel or a timeout.
    can_hang = deadline is not None or cancel_at is not None or timeout is not None
    verifier_answers: tuple[UserAnswer, ...] = ("accept", "reject", "raise", "bad") + (
        ("hang",) if can_hang else ()
    )
    stop_answers: tuple[StopAnswer, ...] = ("no", "yes", "text", "raise", "bad")
    listen = not (on(Attack.LISTENER) and c.chance(4))
    stall_after = 1 + c.below(30) if listen and on(Attack.LISTENER) and c.chance(3) else None
    store = on(Attack.STORE) and c.chance(3)
    return SeamCase(
        cycle=c.chance(4),
        stream=not c.chance(2),
        policy=None if definitions is not None else _seam_policy(c, deadline),
        hooks=_hooks(c, attacks) if attacks & {Attack.HOOKS, Attack.GATES} else HookPlan(),
        verifier=tuple(c.pick(verifier_answers) for _ in range(1 + c.below(3)))
        if on(Attack.VERIFIER) and c.chance(3)
        else None,
        stop=tuple(c.pick(stop_answers) for _ in range(c.below(4))) if on(Attack.STOP) else (),
        deadline_s=deadline,
        cancel_at_s=cancel_at,
        timeout_s=timeout,
        listen=listen,
        stall_after=stall_after,
        stall_s=c.pick(_SECONDS) if stall_after is not None else 0.0,
        store=store,
        fail_writes=tuple(sorted({1 + c.below(12) for _ in range(c.below(3))})) if store else (),
        script=tuple(_unnamed(t) for t in read_script(c, tools)),
    )


# -- the planned user code -------------------------------------------------------------------------
class _Unjudgeable:
    """Garbage from a stop condition: its truth cannot be told."""

    def __bool__(self) -> bool:
        raise ValueError("this value has no truth")


def _stop_condition(answers: tuple[StopAnswer, ...]) -> Callable[[RunState], Any]:
    pending = list(answers)

    def condition(run_state: RunState) -> Any:
        answer = pending.pop(0) if pending else "no"
        if answer == "raise":
            raise RuntimeError("the stop condition failed")
        if answer == "bad":
            return _Unjudgeable()
        if answer == "text":
            return "enough (planned)"
        return answer == "yes"

    return condition


def _verifier(answers: tuple[UserAnswer, ...]) -> Callable[..., Any]:
    pending = list(answers)

    async def verifier(*, output: str, run_state: RunState) -> object:
        answer = pending.pop(0) if pending else "accept"
        if answer == "raise":
            raise RuntimeError("the verifier failed")
        if answer == "hang":
            await asyncio.Event().wait()
        if answer == "bad":
            return "not a verdict"
        return Verdict.accept() if answer == "accept" else Verdict.reject("not yet (planned)")

    return verifier


class _AfterRun:
    """Counts ``after_run`` calls; registered after the planned hooks, so it also sees whether
    every hook of the point runs after another one failed."""

    __name__ = "seam_audit"

    def __init__(self) -> None:
        self.calls = 0

    def after_run(self, **future_kwargs: Any) -> None:
        self.calls += 1


class _Witnessed(Tool):
    """A view of a tool that notes the id of every call let through to it."""

    def __init__(self, inner: Tool, ran: list[str]) -> None:
        self.__dict__.update(inner.__dict__)
        self.inner = inner
        self.ran = ran

    async def execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        *,
        default_timeout_s: float | None = 30.0,
    ) -> ToolExecution:
        """Note the call, then run the tool."""
        self.ran.append(call.id)
        return await self.inner.execute(call, context, default_timeout_s=default_timeout_s)


class _RealClock(VirtualClock):
    """The ``wait`` tool's clock on the real one: a short real sleep."""

    async def sleep(self, seconds: float) -> None:
        """Sleep for real, at most 10 ms."""
        self.sleeps.append(seconds)
        await asyncio.sleep(min(max(0.0, seconds), 0.01))


async def _short_sleep(seconds: float) -> None:
    """Retry backoff on the real clock, at most 2 ms."""
    await asyncio.sleep(min(max(0.0, seconds), 0.002))


# -- the record ------------------------------------------------------------------------------------
@dataclass
class SeamRecord:
    """What an attacked run did, as the seam checks need it.

    ``ending`` is how the caller's task ended: ``"returned"``, ``"cancelled"``, ``"timeout"``
    (the ``asyncio.timeout`` raised ``TimeoutError``), ``"store"`` (the planted store failure
    was raised), ``"hung"``, or ``"raised <type>: <message>"``. ``cancel_delivered``: the
    caller's ``task.cancel()`` (or the timeout's) reached a task that had not finished;
    ``abandoned``: it landed in the listener, outside the run.
    """

    case: SeamCase
    ending: str = "returned"
    events: list[Event] = field(default_factory=list)
    result: RunResult[Any] | None = None
    run_state: RunState | None = None
    model: FuzzModel | None = None
    cancel_delivered: bool = False
    timeout_expired: bool = False
    cancelling_at_return: int = 0
    abandoned: bool = False
    after_run_calls: int | None = None
    failed_gates: list[str] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    store: FailingStore | None = None
    agent: Agent[Any, Any] | None = None
    elapsed_s: float = 0.0

    def close(self) -> None:
        """Release the planted store (its I/O thread) once the checks are done with it: a
        session plays tens of thousands of cases, and each store's thread would outlive it."""
        if self.store is not None:
            self.store.close()


# -- running ---------------------------------------------------------------------------------------
def _agent(
    case: SeamCase, model: FuzzModel, make_agent: AgentFactory | None
) -> tuple[Agent[Any, Any], _AfterRun | None, PlannedHooks | None]:
    """The agent under attack, with the audit hook and the planned hooks (built-in agent)."""
    if make_agent is not None:
        agent = make_agent(model)
        if not isinstance(agent, Agent):
            raise TypeError(f"the agent factory returned {type(agent).__name__}, not an Agent")
        return agent, None, None
    planned = PlannedHooks(case.hooks) if case.hooks else None
    audit = _AfterRun()
    agent = Agent(
        model,
        tools=DEFAULT_TOOLS,
        system_prompt="You are attacked at the seams.",
        policy=case.policy,
        # The agent refuses a verifier that the done tool would bypass.
        verifier=(
            None
            if case.verifier is None or (case.policy is not None and case.policy.require_done_tool)
            else _verifier(case.verifier)
        ),
        stop_conditions=() if not case.stop else (_stop_condition(case.stop),),
        hooks=[audit] if planned is None else [planned, audit],
        deps=FuzzDeps(_RealClock()),
    )
    return agent, audit, planned


def run_seam_case(
    case: SeamCase,
    make_agent: AgentFactory | None = None,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> SeamRecord:
    """Play ``case`` on the real kernel and the real clock (on ``loop``, or a new event loop)
    and record what happened."""
    model: FuzzModel = (
        StreamingFuzzModel(case.script, cycle=case.cycle)
        if case.stream
        else FuzzModel(case.script, cycle=case.cycle)
    )
    agent, audit, planned = _agent(case, model, make_agent)
    record = SeamRecord(case, model=model)
    agent.runtime = Runtime(sleep=_short_sleep, new_id=lambda: "run_seams")
    if case.store:
        record.store = FailingStore(case.fail_writes)
        agent.checkpointer = record.store
    agent = agent.with_effects(wrap_tool=lambda tool: _Witnessed(tool, record.ran))
    record.agent = agent
    began = time.perf_counter()
    try:
        if loop is not None:
            loop.run_until_complete(_play(case, agent, record))
        else:
            with contextlib.closing(asyncio.new_event_loop()) as own:
                own.run_until_complete(_play(case, agent, record))
    finally:
        if record.store is not None:
            record.store.fail_at = frozenset()  # healed: the checks read and resume from it
    record.elapsed_s = time.perf_counter() - began
    record.after_run_calls = None if audit is None else audit.calls
    record.failed_gates = [] if planned is None else list(planned.failed_gates)
    return record


async def _play(case: SeamCase, agent: Agent[Any, Any], record: SeamRecord) -> None:
    handle = RunHandle()
    task = asyncio.create_task(_caller(case, agent, record, handle))

    def cancel_from_outside() -> None:
        if not task.done():
            record.cancel_delivered = True
            task.cancel()

    timer = None
    if case.cancel_at_s is not None:
        timer = asyncio.get_running_loop().call_later(case.cancel_at_s, cancel_from_outside)
    done, _ = await asyncio.wait({task}, timeout=GRACE_S)
    if timer is not None:
        timer.cancel()
    if not done:
        record.ending = "hung"
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    elif task.cancelled():
        record.ending = "cancelled"
    elif (error := task.exception()) is not None:
        record.ending = _raised(error, record)
    if record.timeout_expired:
        record.cancel_delivered = True
    record.result = handle.result
    record.run_state = handle._rs


async def _caller(
    case: SeamCase, agent: Agent[Any, Any], record: SeamRecord, handle: RunHandle
) -> None:
    """The caller's task: consume the run, under the case's timeout if it has one, and note
    whether the task is still being cancelled when it returns."""
    task = asyncio.current_task()
    assert task is not None
    if case.timeout_s is None:
        await _consume(case, agent, record, handle)
    else:
        scope = asyncio.timeout(case.timeout_s)
        try:
            async with scope:
                await _consume(case, agent, record, handle)
        finally:
            record.timeout_expired = scope.expired()
    record.cancelling_at_return = task.cancelling()


async def _consume(
    case: SeamCase, agent: Agent[Any, Any], record: SeamRecord, handle: RunHandle
) -> None:
    """Run the agent, or listen to its run and stall after the case's event (a consumer that
    stops reading)."""
    if not case.listen:
        await agent.run("Do the task.", handle=handle)
        return
    stream = cast("AsyncGenerator[Event, None]", agent.run_stream("Do the task.", handle=handle))
    async with contextlib.aclosing(stream) as events:
        async for event in events:
            record.events.append(event)
            if len(record.events) == case.stall_after:
                try:
                    await asyncio.sleep(case.stall_s)
                except asyncio.CancelledError:
                    record.abandoned = True
                    raise


def _raised(error: BaseException, record: SeamRecord) -> str:
    """How a run whose caller raised ``error`` ended: its timeout, a store failure the case
    planned, or anything else (named)."""
    if isinstance(error, TimeoutError) and record.timeout_expired:
        record.cancel_delivered = True
        return "timeout"
    if isinstance(error, CheckpointError) and record.store is not None and record.store.failed:
        return "store"
    return f"raised {type(error).__qualname__}: {error}"
