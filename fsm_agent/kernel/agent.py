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
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Generic, cast

from typing_extensions import TypeVar

from ..approval import HumanDecision, ResumeHandle, apply_decisions
from ..compaction import Compactor
from ..errors import (
    ConfigurationError,
    InvalidInputError,
    ModelError,
    ResumeError,
    RunFinishedError,
)
from ..events import Event
from ..machine.agent_machine import AgentMachine, default_machine
from ..machine.bounds import Bounds
from ..machine.table import LIMITS, TERMINAL, Counter, State
from ..messages import Message, ToolDefinition, validate_history
from ..model_settings import ModelSettings, merge_settings
from ..models import Model, ModelChain
from ..output import ANSWER_TOOL, output_spec
from ..persistence import Checkpoint, Checkpointer, Durability
from ..persistence.run_log import RunLog, UnknownOutcome, load_checkpoint
from ..persistence.storable import storable_message
from ..phases import Phases
from ..policy import Policy, limits_of
from ..run_state import RunState, build_run_validators
from ..tool_output import PAGER_NAME, pager_tool
from ..tools import Tool, ToolRegistry, done_tool
from .abandon import abandon_run
from .checks import check_done_tool, check_user_code
from .composition import AgentTool, agent_bounds
from .context import LoopSettings
from .definition import check_definition, definition_fingerprint
from .driver import drive
from .fork import RunEdit, fork_run
from .hooks import HookSet
from .limits import usage_limited
from .listening import listened
from .phasing import compile_phases, phase_stop_conditions
from .run import OutputT, RunHandle, RunResult, Runtime
from .states import RunContext, Verdict
from .states.calling import model_name

__all__ = ["Agent", "RunHandle", "RunResult", "Runtime", "StopCondition", "Verifier"]


DepsT = TypeVar("DepsT", default=None)
"""The type of the ``deps`` an agent hands its tools; an agent built without ``deps`` is an
``Agent[None]``."""

# Enum members read on every step, bound once: on Python 3.11 each read of one
# (``State.DONE``) goes through ``EnumType.__getattr__``, about ten global reads.
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
    ``phases`` is the task's phase table (see ``docs/phases.md``).

    ``model_settings`` (:class:`~fsm_agent.ModelSettings`) apply to every model call; a run's
    own ``model_settings`` (``run``, ``run_stream``, ``run_sync``, ``resume``) override them
    field by field for that invocation, and a ``before_model_call`` hook has the last word.
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
    ) -> None:
        complete = getattr(model, "complete", None)
        if not callable(complete) or not asyncio.iscoroutinefunction(complete):
            raise ConfigurationError(
                f"model must implement fsm_agent.Model (an object with 'async def "
                f"complete(request)'); got {type(model).__name__}"
            )
        if system_prompt is not None and not isinstance(system_prompt, str):
            raise ConfigurationError("system_prompt must be a string")
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
        self.model_settings = merge_settings(model_settings)
        build_run_validators(durable=checkpointer is not None)
        self.unknown_outcome: UnknownOutcome = unknown_outcome
        self.output_type = cast("type[OutputT]", str if output_type is None else output_type)
        self.output_spec = output_spec(self.output_type)
        """How answers are validated (``None``: text output, nothing to validate)."""
        self.output_schema = None if self.output_spec is None else self.output_spec.schema
        self._use_model(model)
        self.system_prompt = system_prompt
        # Built once: messages are immutable, so every run's history may share it.
        self.system_message = None if system_prompt is None else Message.system(system_prompt)
        self.hooks = HookSet(hooks)
        self.verifier = verifier
        self._phases_given = phases
        self.stop_conditions = (*stop_conditions, *phase_stop_conditions(phases))
        self.deps = deps
        self.runtime = runtime or _DEFAULT_RUNTIME
        self.machine = machine
        self.switch_rows = frozenset(
            i
            for i, row in enumerate(machine.rows)
            if any(u.counter is Counter.MODEL_SWITCHES and not u.reset for u in row.updates)
        )
        """The rows that move down a fallback chain (the next call needs no backoff)."""
        self.context_window: int | None = getattr(model, "context_window", None)
        self._tools_given = list(tools)
        self._compactor_given = compactor
        self._wrap_tool: Callable[[Tool], Tool] | None = None
        self.limit_states = frozenset(
            s for s, declared in machine.declarations.items() if declared.interrupts >= LIMITS
        )
        """The states whose handler the driver replaces when a limit is reached."""
        self.policy = policy or Policy()

    @property
    def policy(self) -> Policy:
        """The agent's policy. Assigning a new one applies to the runs started after it, in
        full: limits, settings, the done tool, the pager and the default compactor follow it."""
        return self._policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        if not isinstance(policy, Policy):
            raise ConfigurationError(
                f"policy must be a fsm_agent.Policy, got {type(policy).__name__}"
            )
        check_done_tool(policy, verifier=self.verifier, typed=self.output_spec is not None)
        self._policy = policy
        tool_list = list(self._tools_given)
        if policy.require_done_tool and not any(
            (t.name if isinstance(t, Tool) else getattr(t, "__name__", "")) == "done"
            for t in tool_list
        ):
            tool_list.append(done_tool())
        registry = ToolRegistry(tool_list)
        if self.output_spec is not None and ANSWER_TOOL in registry:
            raise ConfigurationError(
                f"a tool named {ANSWER_TOOL!r} clashes with the tool a typed-output agent offers "
                f"the model for its answer: rename the tool"
            )
        output = policy.tool_output
        pager: Tool | None = None  # offered to the model once an output was cut
        if (output.max_chars is not None or output.keep_recent is not None) and (
            PAGER_NAME not in registry
        ):
            pager = pager_tool((output.max_chars or 10_000) - 200)
        wrap = self._wrap_tool
        if wrap is not None:
            registry = ToolRegistry(wrap(t) for t in registry.values())
            pager = None if pager is None else wrap(pager)
        self.tools = registry
        self.tool_definitions: tuple[ToolDefinition, ...] = registry.definitions
        self.approval_needed = any(t.needs_approval for t in registry.values())
        self.phases = compile_phases(self._phases_given, registry, self.system_prompt, policy)
        self.pager = pager
        self.limits = limits_of(
            policy,
            verification=self.verifier is not None,
            models=len(self.models),
            output_validation=self.output_spec is not None,
        )
        self.decide = self.machine.deciding(self.limits)
        self.settings = LoopSettings.of(policy, self.context_window)
        self.compactor = self._compactor_given or Compactor.from_settings(policy.compaction)
        self.usage_limited = usage_limited(policy)

    def _use_model(self, model: Model) -> None:
        """Call ``model``: a :class:`~fsm_agent.models.ModelChain`'s models are called one at a
        time by the kernel (``models[model_switches]``), each move to the next a row."""
        self.model = model
        if isinstance(model, ModelChain):
            self.models: tuple[Model, ...] = model.models
            self.falls_back_on: Callable[[ModelError], bool] | None = model.falls_back_on
        else:
            self.models = (model,)
            self.falls_back_on = None
        self.streams = all(callable(getattr(m, "stream", None)) for m in self.models)

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
        clone = copy.copy(self)
        if model is not None:
            clone._use_model(model)
            if streams is not None:
                clone.streams = streams
            if len(clone.models) != len(self.models):
                clone.policy = self.policy  # the guards read the chain's length
        elif streams is not None:
            clone.streams = streams
        if wrap_tool is not None:
            previous = self._wrap_tool
            clone._wrap_tool = wrap_tool if previous is None else (lambda t: wrap_tool(previous(t)))
            clone.policy = self.policy  # the tools again, through the adapters
        if runtime is not None:
            clone.runtime = runtime
        return clone

    def as_tool(self, *, name: str, description: str, timeout_s: float | None = None) -> AgentTool:
        """This agent as a tool another agent's model can call with a task: the call runs this
        agent on the task, under the calling run's usage limits, deadline and cancellation, and
        its output (typed, for an ``output_type``) is the call's result. A stop without an
        answer (its step limit, an abort) is an error result the caller's model reads. The
        call is cut off after ``timeout_s`` (default: this agent's ``max_wall_clock_s``, else
        the calling policy's ``tool_timeout_s``). See ``docs/composition.md``."""
        return AgentTool(self, name=name, description=description, timeout_s=timeout_s)

    def bounds(self, *, model_timeout_s: float | None = None) -> Bounds:
        """The most a run of this agent can use (model calls, tool executions, seconds), each
        with its derivation, its children's worst cases included (agents it uses as tools, see
        ``docs/composition.md``); one model call takes at most ``model_timeout_s`` seconds
        (``None``: not known, so the work gives no time bound)."""
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
        ctx = self._context(
            prompt,
            history,
            handle,
            deps,
            model_settings,
            listening=False,
            conversation_id=conversation_id,
        )
        await self._drive(ctx)
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
        ctx = self._context(
            prompt,
            history,
            handle,
            deps,
            model_settings,
            listening=True,
            conversation_id=conversation_id,
        )
        async with contextlib.aclosing(listened(ctx, self._drive(ctx))) as events:
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
            resume, decisions, handle, deps, model_settings, False, allow_changed_definition
        )
        await self._drive(ctx)
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
        that ended the run, or an edit that leaves an invalid state."""
        store = self.checkpointer
        if store is None:
            raise ConfigurationError(
                "fork starts from a run's saved moves: it needs an agent with a checkpointer "
                "(the store that holds the run)"
            )
        state = await fork_run(store, run_id, self.runtime.new_id(), at=at, edit=edit)
        if state.state is State.SUSPENDED and state.resume_token is not None:
            return RunResult.of(state, None, self.output_spec)
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
        ctx = await self._resume_context(
            resume, decisions, handle, deps, model_settings, True, allow_changed_definition
        )
        async with contextlib.aclosing(listened(ctx, self._drive(ctx))) as events:
            async for event in events:
                yield event

    # -- the driver -------------------------------------------------------------------------
    async def _resume_context(
        self,
        resume: ResumeHandle | str,
        decisions: Mapping[str, HumanDecision] | None,
        handle: RunHandle | None,
        deps: DepsT | None,
        model_settings: ModelSettings | None = None,
        listening: bool = False,
        allow_changed: bool = False,
    ) -> RunContext:
        settings = merge_settings(self.model_settings, model_settings)
        if self.checkpointer is not None:
            ctx = await self._durable_resume_context(
                resume, decisions, handle, deps, listening, allow_changed
            )
            ctx.model_settings = settings
            return ctx
        if isinstance(resume, str):
            raise ResumeError(
                f"resume needs the ResumeHandle of a result; resuming run {resume!r} by its id "
                "needs an agent with a checkpointer"
            )
        handle = handle or RunHandle()
        if handle._rs is not None and handle._rs is not getattr(resume, "run_state", None):
            raise InvalidInputError("a RunHandle controls one run; create a new one per run")
        rs = apply_decisions(resume, decisions if decisions is not None else {})
        ctx = self._new_context(rs, handle, deps, listening)
        ctx.model_settings = settings
        return ctx

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
            heard=listening or bool(self.hooks),
        )
        try:
            rs = await self._claim(log, checkpoint, token, decisions, allow_changed)
        except BaseException:
            log.close()  # the store keeps nothing for a run that was not resumed
            raise
        handle = handle or RunHandle()
        if handle._rs is not None and handle._rs.run_id == run_id:
            handle._ctx = handle._rs = None  # the same run, resumed from its checkpoint
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
        model_settings: ModelSettings | None,
        *,
        listening: bool,
        conversation_id: str | None = None,
    ) -> RunContext:
        settings = merge_settings(self.model_settings, model_settings)
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
        if conversation_id is not None:
            if not isinstance(conversation_id, str) or not conversation_id:
                raise InvalidInputError(
                    f"conversation_id must be a non-empty string, got {conversation_id!r}"
                )
            rs.conversation_id = conversation_id
        log = None
        if self.checkpointer is not None:
            rs.definition = self._definition()
            rs.model = " | ".join(model_name(m) for m in self.models)
            message = storable_message(message)
            log = RunLog(
                self.checkpointer,
                rs.run_id,
                version=0,
                mode=self.durability,
                unknown_outcome=self.unknown_outcome,
                heard=listening or bool(self.hooks),
            )
        ctx = self._new_context(rs, handle or RunHandle(), deps, listening, log)
        ctx.input = message
        ctx.model_settings = settings
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

    def _drive(self, ctx: RunContext) -> Coroutine[object, object, None]:
        return drive(ctx)

    def _definition(self) -> str:
        """The fingerprint of this agent's definition, computed again when one of its parts
        was replaced."""
        key = (id(self.tools), self.system_prompt, id(self.policy))
        cached = self.__dict__.get("_fingerprint")
        if cached is None or cached[0] != key:
            cached = self._fingerprint = (key, definition_fingerprint(self))
        return cached[1]


def _result_of(ctx: RunContext) -> RunResult[Any]:
    result = ctx.handle.result
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
