"""The driver: handler → outcome → decide → apply → events, until the run rests.

:class:`Agent` is the public entry point. ``run_stream`` is the one code path; ``run`` drives the
same generator without building events (nobody listens), and ``run_sync`` is ``asyncio.run``
around ``run``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from asyncio import current_task
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Generic

from typing_extensions import TypeVar

from ..approval import HumanDecision, ResumeHandle, apply_decisions
from ..compaction import Compactor
from ..errors import (
    CheckpointError,
    ConfigurationError,
    InvalidInputError,
    ResumeError,
    RunFinishedError,
)
from ..events import AbortedEvent, Event, FinalEvent, StateChangedEvent, SuspendedEvent
from ..hooks import HookSet
from ..machine.agent_machine import AgentMachine, default_machine
from ..machine.table import TERMINAL, Outcome, State
from ..messages import Message, ToolDefinition, Usage, validate_history
from ..models import Model
from ..persistence import Checkpoint, Checkpointer, Durability
from ..persistence.definition import check_definition, definition_fingerprint
from ..persistence.run_log import RunLog, UnknownOutcome, load_checkpoint
from ..persistence.storable import storable_message
from ..policy import Policy, limits_of
from ..run_state import RunState
from ..tool_output import PAGER_NAME, pager_tool
from ..tools import Tool, ToolRegistry, done_tool
from .abandon import abandon_run
from .checks import check_user_code
from .context import Emitted, Interrupted, LoopSettings
from .run import RunHandle, RunResult, Runtime
from .states import FAST_PATHS, HANDLERS, RunContext, Verdict

__all__ = ["Agent", "RunHandle", "RunResult", "Runtime", "StopCondition", "Verifier"]


DepsT = TypeVar("DepsT", default=None)
"""The type of the ``deps`` an agent hands its tools; an agent built without ``deps`` is an
``Agent[None]``."""

# Enum members read on every step, bound once: on Python 3.11 each read of one
# (``State.DONE``) goes through ``EnumType.__getattr__``, about ten global reads.
_SUSPENDED, _FINALIZING, _ABORTED, _DONE = (
    State.SUSPENDED,
    State.FINALIZING,
    State.ABORTED,
    State.DONE,
)
_CANCEL = Outcome.CANCEL

_DEFAULT_RUNTIME = Runtime()
"""The real clock, sleep and ids, shared by the agents given no runtime (its random
generator holds 2.5 KiB of state: one per agent would weigh on every agent built)."""

Verifier = Callable[..., Verdict | bool | Awaitable[Verdict | bool]]
"""Called as ``verifier(output=..., run_state=...)``; returns a :class:`Verdict` or a bool."""

StopCondition = Callable[[RunState], "bool | str | None"]
"""Called between iterations with the run state; a truthy value stops the run [S002]."""


class Agent(Generic[DepsT]):
    """An agent: a model, tools, a policy, and the machine that drives them.

    ``hooks`` are objects implementing hook methods (see :mod:`fsm_agent.hooks`), run in
    order. ``verifier`` checks no-tool answers (feedback goes back to the model when it rejects);
    ``stop_conditions`` are evaluated between iterations; ``deps`` reach tools through
    :class:`~fsm_agent.ToolContext`; ``compactor`` sets the compaction strategies and the
    tokenizer of the context budget (default: those the policy's compaction settings name).

    With a ``checkpointer`` the run state is saved after every move and each model and tool
    call is journaled, so ``resume(run_id)`` continues the run in any process; ``durability``
    says when the writes happen (see :class:`~fsm_agent.persistence.Durability` and
    ``docs/durability.md``). ``unknown_outcome`` says who settles a non-idempotent tool call
    that a crash cut short: the ``"model"`` (told the outcome is unknown) or a ``"human"``.
    """

    def __init__(
        self,
        model: Model,
        *,
        tools: Iterable[Tool | Callable[..., Any]] = (),
        system_prompt: str | None = None,
        policy: Policy | None = None,
        verifier: Verifier | None = None,
        stop_conditions: Sequence[StopCondition] = (),
        deps: DepsT | None = None,
        runtime: Runtime | None = None,
        machine: AgentMachine = default_machine,
        compactor: Compactor | None = None,
        hooks: Iterable[object] = (),
        checkpointer: Checkpointer | None = None,
        durability: Durability | str = Durability.SYNC,
        unknown_outcome: UnknownOutcome = "model",
    ) -> None:
        complete = getattr(model, "complete", None)
        if not callable(complete) or not asyncio.iscoroutinefunction(complete):
            raise ConfigurationError(
                f"model must implement fsm_agent.Model (an object with 'async def "
                f"complete(request)'); got {type(model).__name__}"
            )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigurationError("system_prompt must be a string")
        if policy is not None and not isinstance(policy, Policy):
            raise ConfigurationError(
                f"policy must be a fsm_agent.Policy, got {type(policy).__name__}"
            )
        if verifier is not None and not callable(verifier):
            raise ConfigurationError("verifier must be callable")
        for condition in stop_conditions:
            if not callable(condition):
                raise ConfigurationError("every stop condition must be callable")
        check_user_code(tools=tools, verifier=verifier, stop_conditions=stop_conditions)
        if checkpointer is not None and not isinstance(checkpointer, Checkpointer):
            raise ConfigurationError(
                f"checkpointer must implement fsm_agent.persistence.Checkpointer, got "
                f"{type(checkpointer).__name__}"
            )
        try:
            self.durability = Durability(durability)
        except ValueError:
            raise ConfigurationError(
                f"durability must be 'sync', 'async' or 'exit', got {durability!r}"
            ) from None
        if unknown_outcome not in ("model", "human"):
            raise ConfigurationError(
                f"unknown_outcome must be 'model' or 'human', got {unknown_outcome!r}"
            )
        self.checkpointer = checkpointer
        self.unknown_outcome: UnknownOutcome = unknown_outcome
        self.model = model
        self.policy = policy or Policy()
        self.system_prompt = system_prompt
        # Built once: messages are immutable, so every run's history may share it.
        self.system_message = None if system_prompt is None else Message.system(system_prompt)
        tool_list = list(tools)
        if self.policy.require_done_tool and not any(
            (t.name if isinstance(t, Tool) else getattr(t, "__name__", "")) == "done"
            for t in tool_list
        ):
            tool_list.append(done_tool())
        self.tools = ToolRegistry(tool_list)
        self.tool_definitions: tuple[ToolDefinition, ...] = self.tools.definitions
        self.hooks = HookSet(hooks)
        self.approval_needed = any(t.needs_approval for t in self.tools.values())
        output = self.policy.tool_output
        self.pager: Tool | None = None  # offered to the model once an output was cut
        if (output.max_chars is not None or output.keep_recent is not None) and (
            PAGER_NAME not in self.tools
        ):
            self.pager = pager_tool((output.max_chars or 10_000) - 200)
        self.verifier = verifier
        self.stop_conditions = tuple(stop_conditions)
        self.deps = deps
        self.runtime = runtime or _DEFAULT_RUNTIME
        self.machine = machine
        self.limits = limits_of(self.policy, verification=verifier is not None)
        self._decide = machine.deciding(self.limits)
        self.streams = callable(getattr(model, "stream", None))
        self.context_window: int | None = getattr(model, "context_window", None)
        self.settings = LoopSettings.of(self.policy, self.context_window)
        self.compactor = compactor or Compactor.from_settings(self.policy.compaction)
        self._usage_limited = any(
            value is not None for value in self.policy.usage_limits.model_dump().values()
        )
        self._limit_states = frozenset(
            s for s in State if Outcome.DEADLINE in machine.outcomes_by_state[s]
        )

    # -- public API -------------------------------------------------------------------------
    def with_effects(
        self,
        *,
        model: Model | None = None,
        wrap_tool: Callable[[Tool], Tool] | None = None,
        runtime: Runtime | None = None,
        streams: bool | None = None,
    ) -> Agent[DepsT]:
        """A copy of this agent whose model calls, tools or runtime go through adapters (the
        recorded steps of a durable-execution engine, say); the policy, hooks, verifier and
        machine are shared. ``wrap_tool`` must keep each tool's name, schema and approval
        flag. ``streams`` (default: whether ``model`` has ``stream``) says whether listened
        runs stream the model's answer."""
        clone = copy.copy(self)
        if model is not None:
            clone.model = model
            clone.streams = callable(getattr(model, "stream", None)) if streams is None else streams
        elif streams is not None:
            clone.streams = streams
        if wrap_tool is not None:
            clone.tools = ToolRegistry(wrap_tool(t) for t in self.tools.values())
            clone.tool_definitions = clone.tools.definitions
            clone.approval_needed = any(t.needs_approval for t in clone.tools.values())
            if self.pager is not None:
                clone.pager = wrap_tool(self.pager)
        if runtime is not None:
            clone.runtime = runtime
        return clone

    async def run(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
    ) -> RunResult:
        """Run to the end and return the :class:`RunResult` (events are not built)."""
        ctx = self._context(prompt, history, handle, deps, listening=False)
        await self._drive(ctx)
        return _result_of(ctx)

    async def run_stream(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
    ) -> AsyncIterator[Event]:
        """Run, yielding every event as it happens; the last one is the terminal event.
        Pass a :class:`RunHandle` to read the :class:`RunResult` afterwards."""
        ctx = self._context(prompt, history, handle, deps, listening=True)
        async with contextlib.aclosing(_listened(ctx, self._drive(ctx))) as events:
            async for event in events:
                yield event

    def run_sync(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
    ) -> RunResult:
        """``run`` for code without an event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(prompt, history=history, handle=handle, deps=deps))
        raise ConfigurationError(
            "run_sync cannot be called from a running event loop; use 'await agent.run(...)'"
        )

    async def resume(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None = None,
        /,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        allow_changed_definition: bool = False,
    ) -> RunResult:
        """Continue a suspended run from ``dispatching``: ``decisions`` maps the call id of each
        pending call to the human's decision (see :mod:`fsm_agent.approval`). Approved calls
        run, denied ones get their reason, answers become results; nothing runs twice. Raises
        :class:`~fsm_agent.ResumeError`, running nothing, for an unknown or used handle or
        decisions that do not fit.

        With a checkpointer, ``resume`` may be a run id: the run continues from its latest
        checkpoint in whatever state it was saved (a crashed run, or a suspended one, which
        then takes ``decisions``). Raises :class:`~fsm_agent.UnknownRunError` for a run the
        store does not hold, :class:`~fsm_agent.RunFinishedError` for one that ended, and
        :class:`~fsm_agent.CheckpointConflictError` when another worker resumed it first, and
        :class:`~fsm_agent.DefinitionChangedError` when this agent's tools, system prompt or
        policy differ from those of the agent that started the run (unless
        ``allow_changed_definition``)."""
        ctx = await self._resume_context(
            resume, decisions, handle, deps, listening=False, allow_changed=allow_changed_definition
        )
        await self._drive(ctx)
        return _result_of(ctx)

    async def abandon(self, run_id: str, *, reason: str = "abandoned") -> RunResult:
        """End a stored run for good: it is saved ``aborted`` with ``cancelled`` (every call
        still waiting gets an error result), so that it can no longer be resumed. A cancelled
        durable run stays resumable until this is called. Raises
        :class:`~fsm_agent.UnknownRunError`, :class:`~fsm_agent.RunFinishedError` for a run
        that already ended, and :class:`~fsm_agent.CheckpointConflictError` when a worker
        wrote the run meanwhile (it is still running: cancel it there first)."""
        return await abandon_run(self, run_id, reason)

    async def resume_stream(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None = None,
        /,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        allow_changed_definition: bool = False,
    ) -> AsyncIterator[Event]:
        """``resume``, yielding every event as it happens (like ``run_stream``)."""
        ctx = await self._resume_context(
            resume, decisions, handle, deps, listening=True, allow_changed=allow_changed_definition
        )
        async with contextlib.aclosing(_listened(ctx, self._drive(ctx))) as events:
            async for event in events:
                yield event

    # -- the driver -------------------------------------------------------------------------
    async def _resume_context(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None,
        handle: RunHandle | None,
        deps: DepsT | None,
        *,
        listening: bool,
        allow_changed: bool = False,
    ) -> RunContext:
        if self.checkpointer is not None:
            return await self._durable_resume_context(
                resume, decisions, handle, deps, listening, allow_changed
            )
        if isinstance(resume, str):
            raise ResumeError(
                f"resume needs the ResumeHandle of a result; resuming run {resume!r} by its id "
                "needs an agent with a checkpointer"
            )
        handle = handle or RunHandle()
        if handle._ctx is not None and handle._ctx.rs is not getattr(resume, "run_state", None):
            raise InvalidInputError("a RunHandle controls one run; create a new one per run")
        rs = apply_decisions(resume, decisions if decisions is not None else {})
        return self._new_context(rs, handle, deps, listening)

    async def _durable_resume_context(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None,
        handle: RunHandle | None,
        deps: DepsT | None,
        listening: bool,
        allow_changed: bool,
    ) -> RunContext:
        """Load the run's latest checkpoint, apply the human's decisions if it waits for them,
        claim the run with the next checkpoint, then read its journal, before anything runs
        (claimed first, no other worker can add to the journal after it is read)."""
        store = self.checkpointer
        assert store is not None
        if isinstance(resume, ResumeHandle):
            run_id, token = resume.run_id, resume.token
        elif isinstance(resume, str):
            run_id, token = resume, None
        else:
            raise ResumeError(
                f"resume needs a run id or the ResumeHandle of a result, got "
                f"{type(resume).__name__}"
            )
        checkpoint = await load_checkpoint(store, run_id)
        log = RunLog(
            store,
            run_id,
            version=checkpoint.version,
            mode=self.durability,
            unknown_outcome=self.unknown_outcome,
        )
        try:
            rs = await self._claim(log, checkpoint, token, decisions, allow_changed)
        except BaseException:
            log.close()  # the store keeps nothing for a run that was not resumed
            raise
        handle = handle or RunHandle()
        if handle._ctx is not None and handle._ctx.rs.run_id == run_id:
            handle._ctx = None  # the same run, resumed from its checkpoint
            handle._pause_requested = False
        ctx = self._new_context(rs, handle, deps, listening, log)
        if rs.trace and rs.state is not State.SUSPENDED:
            ctx.last_move = rs.trace[-1]  # a retry's backoff and a forced compaction need it
        return ctx

    async def _claim(
        self,
        log: RunLog,
        checkpoint: Checkpoint,
        token: str | None,
        decisions: Mapping[str, HumanDecision] | None,
        allow_changed: bool,
    ) -> RunState:
        """Check a loaded run, apply the human's decisions, claim it and read its journal."""
        run_id = log.run_id
        rs = checkpoint.state
        if rs.state in TERMINAL:
            raise RunFinishedError(
                f"run {run_id!r} already ended ({rs.state.value}, {rs.stop_reason}); there is "
                "nothing to resume",
                run_id=run_id,
            )
        fingerprint = self._definition()
        if not allow_changed:
            check_definition(run_id, rs.definition, fingerprint)
        rs.definition = fingerprint
        if rs.state is State.SUSPENDED and rs.resume_token is not None:
            waiting = ResumeHandle(run_id, token or rs.resume_token, tuple(rs.human_requests), rs)
            rs = apply_decisions(waiting, decisions if decisions is not None else {})
        elif decisions or token is not None:
            raise ResumeError(
                f"run {run_id!r} does not wait for a human (it is {rs.state.value!r}, and any "
                "decisions were already recorded); resume it by its id without decisions"
            )
        await log.claim(rs, checkpoint)
        await log.read_journal()
        return rs

    def _context(
        self,
        prompt: str | Message,
        history: Sequence[Message],
        handle: RunHandle | None,
        deps: DepsT | None,
        *,
        listening: bool,
    ) -> RunContext:
        if isinstance(prompt, str):
            if not prompt or prompt.isspace():
                raise InvalidInputError("the prompt is empty; pass the task as text")
            message = Message.user(prompt)
        elif isinstance(prompt, Message):
            message = prompt
        else:
            raise InvalidInputError(
                f"the prompt must be a str or a Message, got {type(prompt).__name__}"
            )
        validate_history(history)
        rs = RunState.start(self.runtime.new_id())
        log = None
        if self.checkpointer is not None:
            rs.definition = self._definition()
            message = storable_message(message)
            log = RunLog(
                self.checkpointer,
                rs.run_id,
                version=0,
                mode=self.durability,
                unknown_outcome=self.unknown_outcome,
            )
        ctx = self._new_context(rs, handle or RunHandle(), deps, listening, log)
        ctx.input = message
        if history:
            ctx.history = list(history)
        return ctx

    def _new_context(
        self,
        rs: RunState,
        handle: RunHandle,
        deps: DepsT | None,
        listening: bool,
        durable: RunLog | None = None,
    ) -> RunContext:
        """The context of a started or resumed run, attached to its handle."""
        ctx = RunContext(self, rs, listening=listening, handle=handle)
        ctx.deps = deps if deps is not None else self.deps
        ctx.durable = durable
        handle._attach(ctx)
        return ctx

    def _interrupt(self, ctx: RunContext, state: State, deadline: float | None) -> Outcome | None:
        """The interrupt outcome that replaces ``state``'s handler, if any."""
        interrupt = ctx.interrupt
        if interrupt is Outcome.CANCEL or interrupt is Outcome.HOOK_ERROR:
            return interrupt
        if state not in self._limit_states:
            return None
        if ctx.interrupt is Outcome.DEADLINE or (
            deadline is not None and self.runtime.clock() >= deadline
        ):
            return Outcome.DEADLINE
        if (
            self._usage_limited and (state is State.COMPACTING or state is State.CALLING)
        ) and _usage_exceeded(self.policy, ctx.rs.usage, ctx.rs.model_calls):
            return Outcome.USAGE_EXCEEDED
        if state is State.COMPACTING:
            for condition in self.stop_conditions:
                if condition(ctx.rs):
                    return Outcome.STOP_CONDITION
        return None

    async def _drive(self, ctx: RunContext) -> None:
        """Run ``ctx``'s run until it rests, emitting its events when someone listens."""
        rs = ctx.rs
        decide = self._decide
        listening = ctx.listening
        # max_wall_clock_s bounds the run's active time over all its invocations (a suspended
        # run's wait for a human does not count): a resumed run continues the same budget.
        wall = self.policy.max_wall_clock_s
        clock = self.runtime.clock
        started = clock()
        spent = rs.active_s
        deadline = ctx.deadline = None if wall is None else started + wall - spent
        timer = None
        if deadline is not None:
            timer = asyncio.get_running_loop().call_later(
                max(0.0, deadline - started), ctx.request_interrupt, Outcome.DEADLINE
            )
        hooks = self.hooks
        # Without a deadline, usage limits or stop conditions only ctx.interrupt can interrupt.
        unlimited = deadline is None and not self._usage_limited and not self.stop_conditions
        on_transition = hooks.on_transition
        durable = ctx.durable
        ctx.task = current_task()
        try:
            if hooks.before_run:
                await _notify(ctx, hooks.before_run, run_state=rs)
                if listening:
                    await ctx.emit_all(ctx.take_events())
            while True:
                state = rs.state
                if state in TERMINAL or (state is _SUSPENDED and ctx.last_move is not None):
                    return
                if unlimited and ctx.interrupt is None:
                    outcome = None
                else:
                    outcome = self._interrupt(ctx, state, deadline)
                if outcome is None and (fast := FAST_PATHS.get(state)) is not None:
                    outcome = fast(ctx)
                if outcome is None:
                    outcome = await HANDLERS[state](ctx)
                    if ctx.interrupt is _CANCEL:
                        outcome = _CANCEL  # cancelled while the handler's events went out
                move = decide(state, outcome, rs.counters)
                rs.counters = move.counters
                rs.state = move.dest
                rs.trace.append(move)
                ctx.last_move = move
                if move.stop is not None:
                    rs.stop_reason = move.stop
                dest = move.dest
                if (dest is _FINALIZING or dest is _ABORTED) and rs.pending_tool_calls:
                    ctx.close_pending_calls(f"the run stopped ({rs.stop_reason})")
                if dest is _ABORTED and ctx.error is not None:
                    rs.error = str(ctx.error)
                if deadline is not None:
                    rs.active_s = spent + (clock() - started)
                if durable is not None:
                    await durable.moved(rs)  # the checkpoint, before anyone hears of the move
                if on_transition:
                    await _notify(ctx, on_transition, move=move, run_state=rs)
                if listening:
                    await ctx.emit(
                        StateChangedEvent(
                            run_id=rs.run_id,
                            source=move.source,
                            outcome=move.outcome,
                            dest=dest,
                            row=move.row,
                            stop_reason=move.stop,
                        )
                    )
                if dest in TERMINAL or dest is _SUSPENDED:
                    result = self._result(ctx)
                    if hooks.after_run:
                        await _notify(ctx, hooks.after_run, result=result, run_state=rs)
                if listening:
                    await ctx.emit_all(ctx.take_events())
                    if dest is _DONE:
                        assert rs.stop_reason is not None
                        await ctx.emit(
                            FinalEvent(
                                run_id=rs.run_id, output=rs.output or "", stop_reason=rs.stop_reason
                            )
                        )
                    elif dest is _ABORTED:
                        assert rs.stop_reason is not None
                        await ctx.emit(
                            AbortedEvent(
                                run_id=rs.run_id, stop_reason=rs.stop_reason, error=rs.error
                            )
                        )
                    elif dest is _SUSPENDED:
                        await ctx.emit(
                            SuspendedEvent(
                                run_id=rs.run_id,
                                pending=tuple(r.call for r in rs.human_requests),
                                questions={
                                    r.call.id: r.question
                                    for r in rs.human_requests
                                    if r.question is not None
                                },
                            )
                        )
        except asyncio.CancelledError:
            # The caller's task was cancelled: record the ending, then let the cancel go on. A
            # durable run stores nothing more, so it resumes from its latest checkpoint.
            if durable is not None:
                with contextlib.suppress(CheckpointError):  # the cancel goes on regardless
                    await durable.interrupted()
            if rs.state not in TERMINAL:
                move = decide(rs.state, _CANCEL, rs.counters)
                rs.state = move.dest
                rs.stop_reason = move.stop
                rs.trace.append(move)
                if rs.pending_tool_calls:
                    ctx.close_pending_calls("the run was cancelled")
                rs.error = "the task running the agent was cancelled"
            raise
        finally:
            if timer is not None:
                timer.cancel()
            if durable is not None:
                durable.close()

    def _definition(self) -> str:
        """The fingerprint of this agent's definition, computed again when one of its parts
        was replaced."""
        key = (id(self.tools), self.system_prompt, id(self.policy))
        cached = self.__dict__.get("_fingerprint")
        if cached is None or cached[0] != key:
            cached = self._fingerprint = (key, definition_fingerprint(self))
        return cached[1]

    def _result(self, ctx: RunContext) -> RunResult:
        result = ctx.handle.result = RunResult.of(ctx.rs, ctx.error)
        return result


class _Suspension:
    """Awaiting it suspends the awaiting coroutine with ``signal`` (what a handler's coroutine
    suspended with: an asyncio future, or ``None`` for a bare yield), so the task sees it as
    if the handler had suspended there itself."""

    __slots__ = ("signal",)

    def __init__(self, signal: object) -> None:
        self.signal = signal

    def __await__(self) -> Generator[object, None, None]:
        yield self.signal


class _ListenerLeft(BaseException):
    """Thrown into a handler whose listener closed the stream. GeneratorExit would close every
    coroutine it passes, forbidding the awaits of their cleanup (closing an HTTP stream
    awaits); this one unwinds them like any exception."""


async def _listened(
    ctx: RunContext, drive: Coroutine[object, object, None]
) -> AsyncGenerator[Event, None]:
    """Step the driver's coroutine for a listened run: yield each event it (or a handler it
    awaits) emits (see :class:`~fsm_agent.kernel.context.Emitted`) and hand every other suspension
    to the task. What is thrown in here (a cancel) is thrown into the run; when the listener
    closes the stream, the run unwinds where it stands and emits nothing more."""
    thrown: BaseException | None = None
    closing = False
    try:
        while True:
            signal = drive.send(None) if thrown is None else drive.throw(thrown)
            thrown = None
            if type(signal) is not Emitted:
                try:
                    await _Suspension(signal)
                except BaseException as exc:
                    thrown = exc
            elif not closing:
                try:
                    yield signal.event
                except GeneratorExit:
                    closing, thrown = True, _ListenerLeft()
                except BaseException as exc:
                    thrown = exc
                ctx.task = current_task()  # the listener may read on from another task
    except (StopIteration, _ListenerLeft):
        return


def _result_of(ctx: RunContext) -> RunResult:
    result = ctx.handle.result
    assert result is not None, "the driver records the result when the run rests"
    return result


async def _notify(ctx: RunContext, hooks: Any, **kwargs: object) -> None:
    """Run observing hooks from the driver; an interrupt is taken before the next handler."""
    with contextlib.suppress(Interrupted):
        await ctx.effect(ctx.agent.hooks.notify(ctx, hooks, **kwargs))


def _usage_exceeded(policy: Policy, usage: Usage, model_calls: int) -> bool:
    # max_requests counts attempts (``model_calls``), failed ones included: a provider bills and
    # rate-limits those too, and bounds() relies on it when max_steps is None.
    limits = policy.usage_limits
    return (
        (limits.max_requests is not None and model_calls >= limits.max_requests)
        or (limits.max_input_tokens is not None and usage.input_tokens >= limits.max_input_tokens)
        or (
            limits.max_output_tokens is not None and usage.output_tokens >= limits.max_output_tokens
        )
        or (limits.max_total_tokens is not None and usage.total_tokens >= limits.max_total_tokens)
        or (limits.max_cost_usd is not None and usage.cost_usd >= limits.max_cost_usd)
    )
