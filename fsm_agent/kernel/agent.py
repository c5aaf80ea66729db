"""The public entry point: :class:`Agent`, what a user builds and calls.

``run_stream`` is the one code path: it steps the driver's coroutine
(:func:`fsm_agent.kernel.driver.drive`) and yields the events it emits; ``run`` awaits the same
driver without building events (nobody listens), and ``run_sync`` is ``asyncio.run`` around
``run``. ``resume`` continues a suspended or saved run through the same driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, cast

from typing_extensions import TypeVar

from ..compaction import Compactor
from ..errors import ConfigurationError
from ..machine.agent_machine import AgentMachine, default_machine
from ..machine.table import State
from ..models import Model
from ..persistence import Checkpointer, Durability
from ..persistence.run_log import UnknownOutcome
from ..phases import Phases
from ..policy import Policy
from ..run.approval import HumanDecision, ResumeHandle
from ..run.events import Event
from ..run.output import output_spec
from ..run.state import RunState, build_run_validators
from ..tools import Tool, ToolRegistry
from ..values.messages import Message
from ..values.model_settings import ModelSettings, merge_settings
from .checks import check_user_code
from .context import RunContext
from .driver import drive
from .handoffs import Handoff, declared
from .hooks import HookSet
from .listening import listened
from .plan import Plan, compile_plan
from .resuming import resume_context, start_context
from .run import OutputT, RunHandle, RunResult, Runtime
from .states import Verdict

if TYPE_CHECKING:
    from ..analysis.bounds import Bounds
    from .composition import AgentTool
    from .fork import RunEdit

__all__ = ["Agent", "RunHandle", "RunResult", "Runtime", "StopCondition", "Verifier"]


DepsT = TypeVar("DepsT", default=None)
"""The type of the ``deps`` an agent hands its tools; an agent built without ``deps`` is an
``Agent[None]``."""

_DEFAULT_RUNTIME = Runtime()
"""The real clock, sleep and ids, shared by the agents given no runtime (its random
generator holds 2.5 KiB of state: one per agent would weigh on every agent built)."""

Verifier = Callable[..., Verdict | bool | Awaitable[Verdict | bool]]
"""Called as ``verifier(output=..., run_state=...)``; returns a :class:`Verdict` or a bool."""

StopCondition = Callable[[RunState], "bool | str | None"]
"""Called between iterations with the run state; a truthy value stops the run."""


class Agent(Generic[DepsT, OutputT]):
    """An agent: a model, tools, a policy, and the machine that drives them.

    ``output_type`` (default ``str``: text) is the type of the final answer: a pydantic model,
    a dataclass, a ``TypedDict``, a scalar or a list; the model is asked for JSON of that shape
    and each answer is validated (see ``docs/output.md``), and ``result.output`` is typed
    ``OutputT | None``.

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
    ``phases`` is the task's phase table (see ``docs/phases.md``). ``handoffs`` are the agents
    this one may hand the conversation to, each offered to the model as a tool (see
    :class:`~fsm_agent.Handoff` and ``docs/composition.md``).

    ``model_settings`` (:class:`~fsm_agent.ModelSettings`) apply to every model call; a run's
    own ``model_settings`` (``run``, ``run_stream``, ``run_sync``, ``resume``) override them
    field by field for that invocation, and a ``before_model_call`` hook has the last word.

    The agent's attributes are what it was given; what its runs read (the tool registry with
    the done tool and the pager, the compiled limits, the loop settings...) is compiled from
    them into a frozen plan, which each run takes when it starts. Assigning ``policy``
    compiles a new one for the runs started after it.
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
        output_type: type[OutputT] | None = None,
        phases: Phases | None = None,
        model_settings: ModelSettings | None = None,
        handoffs: Iterable[Handoff] = (),
    ) -> None:
        self.durability = _checked_parts(
            model,
            tools=tools,
            verifier=verifier,
            stop_conditions=stop_conditions,
            checkpointer=checkpointer,
            durability=durability,
            unknown_outcome=unknown_outcome,
        )
        self.checkpointer = checkpointer
        self.model_settings = merge_settings(model_settings)
        build_run_validators(durable=checkpointer is not None)
        self.unknown_outcome: UnknownOutcome = unknown_outcome
        self.output_type = cast("type[OutputT]", str if output_type is None else output_type)
        self._output_spec = output_spec(self.output_type)
        self.model = model
        self._system_prompt = _checked_prompt(system_prompt)
        self.hooks = HookSet(hooks)
        self.verifier = verifier
        self.phases = phases
        self.stop_conditions = tuple(stop_conditions)
        self.deps = deps
        self.runtime = runtime or _DEFAULT_RUNTIME
        self.machine = machine
        self._tools_given = list(tools)
        self._compactor_given = compactor
        self._wrap_tool: Callable[[Tool], Tool] | None = None
        self._streams: bool | None = None  # with_effects's override
        self._handoffs: tuple[Handoff, ...] = ()
        self._plan: Plan = self._compile(policy or Policy())
        if handoffs:
            self.handoffs = handoffs

    def _compile(self, policy: Policy) -> Plan:
        """The plan of this agent under ``policy``."""
        if self.phases is not None and self._handoffs:
            raise ConfigurationError(
                "an agent with phases cannot hand off: its phase table is the run's task machine"
            )
        return compile_plan(
            model=self.model,
            tools=self._tools_given,
            policy=policy,
            machine=self.machine,
            system_prompt=self._system_prompt,
            verifier=self.verifier,
            stop_conditions=self.stop_conditions,
            hooks=self.hooks,
            compactor=self._compactor_given,
            phases=self.phases,
            output_spec=self._output_spec,
            wrap_tool=self._wrap_tool,
            streams=self._streams,
            handoffs=self._handoffs,
        )

    @property
    def handoffs(self) -> tuple[Handoff, ...]:
        """The agents this one may hand the conversation to (see :class:`~fsm_agent.Handoff`).
        Assigning a new list applies to the runs started after it; assign after building the
        agents of a handoff cycle (a specialist that hands back to its triage)."""
        return self._handoffs

    @handoffs.setter
    def handoffs(self, handoffs: Iterable[Handoff]) -> None:
        previous = self._handoffs
        self._handoffs = declared(handoffs, Agent, self.output_type)
        try:
            self._plan = self._compile(self.policy)
        except BaseException:
            self._handoffs = previous
            raise

    @property
    def policy(self) -> Policy:
        """The agent's policy. Assigning a new one applies to the runs started after it, in
        full: limits, settings, the done tool, the pager and the default compactor follow it;
        a run in flight keeps the policy it started with."""
        return self._plan.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self._plan = self._compile(policy)

    @property
    def system_prompt(self) -> str | None:
        """The system prompt. Assigning a new one applies to the runs started after it (and
        changes the definition a stored run is resumed under)."""
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, system_prompt: str | None) -> None:
        previous = self._system_prompt
        self._system_prompt = _checked_prompt(system_prompt)
        try:
            self._plan = self._compile(self.policy)
        except BaseException:
            self._system_prompt = previous
            raise

    @property
    def tools(self) -> ToolRegistry:
        """The tools the model is offered, by name: those given, with the done tool when the
        policy requires it."""
        return self._plan.tools

    @property
    def compactor(self) -> Compactor:
        """The compactor runs use: the one given, else the one the policy's compaction
        settings name."""
        return self._plan.compactor

    # -- public API -------------------------------------------------------------------------
    def with_effects(
        self,
        *,
        model: Model | None = None,
        wrap_tool: Callable[[Tool], Tool] | None = None,
        runtime: Runtime | None = None,
        streams: bool | None = None,
    ) -> Agent[DepsT, OutputT]:
        """A copy of this agent whose model calls, tools or runtime go through adapters (the
        recorded steps of a durable-execution engine, say); the policy, hooks, verifier and
        machine are shared. ``wrap_tool`` must keep each tool's name, schema and approval
        flag. ``streams`` (default: whether ``model`` has ``stream``) says whether listened
        runs stream the model's answer."""
        if model is not None and self._handoffs:
            raise ConfigurationError(
                "with_effects(model=...) adapts this agent's model only, and the agents it hands "
                "the conversation to would call theirs unadapted: not supported for an agent "
                "with handoffs (adapt its tools, runtime or streams only)"
            )
        clone = copy.copy(self)
        if model is not None:
            clone.model = model
            clone._streams = streams
        elif streams is not None:
            clone._streams = streams
        if wrap_tool is not None:
            previous = self._wrap_tool
            clone._wrap_tool = wrap_tool if previous is None else (lambda t: wrap_tool(previous(t)))
        if runtime is not None:
            clone.runtime = runtime
        if model is not None or streams is not None or wrap_tool is not None:
            clone._plan = clone._compile(self.policy)
        return clone

    def as_tool(
        self,
        *,
        name: str,
        description: str,
        timeout_s: float | None = None,
        share_deps: bool = False,
        deps_from: Callable[[Any], DepsT] | None = None,
        conversation: Callable[[tuple[Message, ...]], Sequence[Message]] | None = None,
    ) -> AgentTool[Agent[DepsT, OutputT]]:
        """This agent as a tool another agent's model can call with a task: the call runs this
        agent on the task, under the calling run's usage limits, deadline and cancellation, and
        its output (typed, for an ``output_type``) is the call's result. A stop without an
        answer (its step limit, an abort) is an error result the caller's model reads. The
        call is cut off after ``timeout_s`` (default: this agent's ``max_wall_clock_s``; with
        neither, only this agent's own limits and the caller's deadline end it: the calling
        policy's per-tool ``tool_timeout_s`` does not apply).

        By default the child sees only the task and its tools get its own ``deps``.
        ``share_deps=True`` gives its tools the calling run's ``deps``; ``deps_from(deps)``
        builds its deps from them. ``conversation(messages)`` gives it a view of the caller's
        conversation before the task: the messages in (the system message and the calls in
        progress left out), those the child sees out (``without_tool_calls`` of
        :mod:`fsm_agent.kernel.handoffs` keeps what was said). See ``docs/composition.md``."""
        from .composition import AgentTool  # here: a program that composes no agent skips it

        return AgentTool(
            self,
            name=name,
            description=description,
            timeout_s=timeout_s,
            share_deps=share_deps,
            deps_from=deps_from,
            conversation=conversation,
        )

    def bounds(self, *, model_timeout_s: float | None = None) -> Bounds:
        """The most a run of this agent can use (model calls, tool executions, seconds,
        handoffs), each with its derivation: its children's worst cases included (agents it
        uses as tools), the chain of agents it may hand the conversation to, and the turns its
        phases' budgets allow (see ``docs/composition.md``); one model call takes at most
        ``model_timeout_s`` seconds (``None``: not known, so the work gives no time bound)."""
        from .composition import agent_bounds  # here, with the bounds' analysis

        return agent_bounds(self, model_timeout_s=model_timeout_s)

    async def run(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
        conversation_id: str | None = None,
    ) -> RunResult[OutputT]:
        """Run to the end and return the :class:`RunResult` (events are not built).
        ``conversation_id`` names the conversation the run continues (see
        :class:`~fsm_agent.Conversation`); it is kept in the run state."""
        ctx = start_context(
            self,
            prompt,
            history,
            handle,
            deps,
            model_settings,
            listening=False,
            conversation_id=conversation_id,
        )
        await drive(ctx)
        return _result_of(ctx)

    async def run_stream(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
        conversation_id: str | None = None,
    ) -> AsyncIterator[Event]:
        """Run, yielding every event as it happens; the last one is the terminal event.
        Pass a :class:`RunHandle` to read the :class:`RunResult` afterwards."""
        ctx = start_context(
            self,
            prompt,
            history,
            handle,
            deps,
            model_settings,
            listening=True,
            conversation_id=conversation_id,
        )
        async with contextlib.aclosing(listened(ctx, drive(ctx))) as events:
            async for event in events:
                yield event

    def run_sync(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message] = (),
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        model_settings: ModelSettings | None = None,
        conversation_id: str | None = None,
    ) -> RunResult[OutputT]:
        """``run`` for code without an event loop."""
        if _loop_running():
            raise ConfigurationError(
                "run_sync cannot be called from a running event loop; use 'await agent.run(...)'"
            )
        run = self.run(
            prompt,
            history=history,
            handle=handle,
            deps=deps,
            model_settings=model_settings,
            conversation_id=conversation_id,
        )
        return asyncio.run(run)

    async def resume(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None = None,
        /,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        allow_changed_definition: bool = False,
        model_settings: ModelSettings | None = None,
    ) -> RunResult[OutputT]:
        """Continue a suspended run from ``dispatching``: ``decisions`` maps the call id of each
        pending call to the human's decision (see :mod:`fsm_agent.run.approval`). Approved calls
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
        ctx = await resume_context(
            self, resume, decisions, handle, deps, model_settings, False, allow_changed_definition
        )
        await drive(ctx)
        return _result_of(ctx)

    async def abandon(self, run_id: str, *, reason: str = "abandoned") -> RunResult[OutputT]:
        """End a stored run for good: it is saved ``aborted`` with ``cancelled``, so that it
        can no longer be resumed, and the result's ``error`` is a
        :class:`~fsm_agent.RunAbandonedError` with ``reason``. Every call still waiting gets
        the result its journal recorded, else "outcome unknown" when it started, else "not
        run". A cancelled durable run stays resumable until this is called. Raises
        :class:`~fsm_agent.UnknownRunError`, :class:`~fsm_agent.RunFinishedError` for a run
        that already ended, and :class:`~fsm_agent.CheckpointConflictError` when a worker
        wrote the run meanwhile (it is still running: cancel it there first)."""
        from .abandon import abandon_run  # here: stored runs are abandoned by few programs

        return await abandon_run(self, run_id, reason)

    async def fork(
        self,
        run_id: str,
        *,
        at: int | None = None,
        edit: RunEdit | None = None,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        allow_changed_definition: bool = False,
    ) -> RunResult[OutputT]:
        """Start a new run from the state stored after move ``at`` of ``run_id`` (``None``: its
        latest checkpoint), changed by ``edit`` (given the state, it changes it in place or
        returns the one to use), and run it as ``resume`` would. The original run is left as
        it was; the fork's state says where it came from (``forked_from``, ``forked_at``) and
        it is checkpointed like any run of this agent. A fork of a move that waits for a human
        is returned suspended: resume it with the decisions. Raises
        :class:`~fsm_agent.InvalidInputError`, storing nothing, for a move not saved, a move
        that ended the run, or an edit that leaves an invalid state, and
        :class:`~fsm_agent.DefinitionChangedError`, storing nothing, when this agent is not the
        one that started the run (unless ``allow_changed_definition``)."""
        store = self.checkpointer
        if store is None:
            raise ConfigurationError(
                "fork starts from a run's saved moves: it needs an agent with a checkpointer "
                "(the store that holds the run)"
            )
        from .fork import fork_run  # here: stored runs are forked by few programs

        definition = None if allow_changed_definition else self._plan.definition
        state = await fork_run(
            store, run_id, self.runtime.new_id(), at=at, edit=edit, definition=definition
        )
        if state.state is State.SUSPENDED and state.resume_token is not None:
            return RunResult.of(state, None, self._output_spec)
        return await self.resume(
            state.run_id,
            handle=handle,
            deps=deps,
            allow_changed_definition=allow_changed_definition,
        )

    async def resume_stream(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None = None,
        /,
        *,
        handle: RunHandle | None = None,
        deps: DepsT | None = None,
        allow_changed_definition: bool = False,
        model_settings: ModelSettings | None = None,
    ) -> AsyncIterator[Event]:
        """``resume``, yielding every event as it happens (like ``run_stream``)."""
        ctx = await resume_context(
            self, resume, decisions, handle, deps, model_settings, True, allow_changed_definition
        )
        async with contextlib.aclosing(listened(ctx, drive(ctx))) as events:
            async for event in events:
                yield event


def _checked_prompt(system_prompt: object) -> str | None:
    """``system_prompt``, refused with a :class:`~fsm_agent.ConfigurationError` unless it is a
    string or ``None``."""
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise ConfigurationError("system_prompt must be a string")
    return system_prompt


def _result_of(ctx: RunContext) -> RunResult[Any]:
    result = ctx.result
    assert result is not None, "the driver records the result when the run rests"
    return result


def _loop_running() -> bool:
    """Whether this thread runs an event loop. The run is started after this returns, not in
    its ``except``: an exception out of the run would otherwise carry the ``RuntimeError`` as
    its context, and every traceback would read "During handling of the above exception"."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _checked_parts(
    model: Model,
    *,
    tools: Iterable[Tool | Callable[..., Any]],
    verifier: Verifier | None,
    stop_conditions: Sequence[StopCondition],
    checkpointer: Checkpointer | None,
    durability: Durability | str,
    unknown_outcome: str,
) -> Durability:
    """Check what an :class:`Agent` is given (raises :class:`~fsm_agent.ConfigurationError`
    naming the part that is wrong); the durability it asks for."""
    complete = getattr(model, "complete", None)
    if not callable(complete) or not asyncio.iscoroutinefunction(complete):
        raise ConfigurationError(
            f"model must implement fsm_agent.Model (an object with 'async def "
            f"complete(request)'); got {type(model).__name__}"
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
        checked_durability = Durability(durability)
    except ValueError:
        raise ConfigurationError(
            f"durability must be 'sync', 'async' or 'exit', got {durability!r}"
        ) from None
    if unknown_outcome not in ("model", "human"):
        raise ConfigurationError(
            f"unknown_outcome must be 'model' or 'human', got {unknown_outcome!r}"
        )
    return checked_durability
