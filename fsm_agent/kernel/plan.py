"""The plan of an agent: what its runs read, compiled once from what the user set.

An :class:`~fsm_agent.Agent` keeps what its user gave it (model, tools, policy, hooks...);
:func:`compile_plan` turns those into the frozen :class:`Plan` the driver and the state
handlers read (the tool registry with the done tool and the pager, the limits and the compiled
``decide``, the loop settings, the output spec...). A run takes its agent's plan when it starts
and keeps it to its end: assigning ``agent.policy`` compiles a new plan for the runs started
after it, and a run in flight goes on under the plan it started with.

A plan keeps the :class:`PlanParts` it was compiled from, so the kernel compiles the plans a
run needs from plans alone: a child's under its share of its parent's limits
(:func:`with_policy`), a handoff target's under the run's policy (:func:`handoff_plan`). Below
the ``Agent`` class, the kernel reads an agent as a :class:`RunOwner`: its plan and the pieces
of its runtime.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..compaction import Compactor
from ..errors import ConfigurationError, ModelError
from ..machine.agent_machine import AgentMachine, Move
from ..machine.guards import Limits
from ..machine.table import Counters, Outcome, State
from ..models import Model, ModelChain
from ..phases import CompiledPhases, Phases
from ..policy import Policy, ToolFailureMode, limits_of
from ..run.output import ANSWER_TOOL, OutputSpec
from ..run.state import RunState
from ..tools import Tool, ToolRegistry, done_tool
from ..tools.output import PAGER_NAME, pager_tool
from ..values.define import record
from ..values.messages import Message, OutputSchema, ToolDefinition
from .checks import check_done_tool
from .definition import definition_fingerprint
from .handoffs import Handoff, by_tool_name, handoff_tools
from .hooks import HookSet
from .limits import usage_limited

if TYPE_CHECKING:
    from ..persistence import Checkpointer, Durability
    from ..persistence.run_log import UnknownOutcome
    from ..values.model_settings import ModelSettings
    from .run import Runtime

__all__ = [
    "CHECK_ENV",
    "LoopSettings",
    "Plan",
    "PlanParts",
    "Planned",
    "RunOwner",
    "budget_stop",
    "compile_phases",
    "compile_plan",
    "declarations_checked",
    "handoff_plan",
    "phase_stop_conditions",
    "plan_of",
    "with_policy",
]


_T = TypeVar("_T")

CHECK_ENV = "FSM_AGENT_CHECK_DECLARATIONS"
"""The environment variable that turns on the driver's declaration check (the test suite sets
it to ``1``): every outcome a handler reports must be declared for its state. It is read when
an agent's plan is compiled, so it applies to the agents built while it is set."""


def declarations_checked() -> bool:
    """Whether :data:`CHECK_ENV` turns the declaration check on."""
    return os.environ.get(CHECK_ENV, "") not in ("", "0")


@record(kw_only=False)
class LoopSettings:
    """The policy values the loop reads on every step, copied out of the policy and its nested
    parts once per agent, with what they imply worked out (``fail_fast``, ``compact_above``):
    one read each on the step, where the policy would take two or three and a computation."""

    parallel_tool_calls: bool
    max_tool_calls: int | None
    tool_timeout_s: float
    fail_fast: bool  # tool_failure_mode is "fail"
    keep_recent_outputs: int | None  # tool outputs kept whole; older ones are trimmed
    old_output_max_chars: int
    max_output_chars: int | None  # a tool result is cut above this
    compact_above: int | None  # the context size that starts a compaction (tokens)
    max_messages: int | None  # the message window
    use_reported_usage: bool  # the provider's input count replaces the estimate

    @classmethod
    def of(cls, policy: Policy, context_window: int | None) -> LoopSettings:
        """The settings of ``policy`` for a model with ``context_window`` tokens (``None``:
        unknown, unless the policy names one)."""
        compaction = policy.compaction
        window = compaction.context_window or context_window
        return cls(
            parallel_tool_calls=policy.parallel_tool_calls,
            max_tool_calls=policy.max_tool_calls,
            tool_timeout_s=policy.tool_timeout_s,
            fail_fast=policy.tool_failure_mode is ToolFailureMode.FAIL,
            keep_recent_outputs=policy.tool_output.keep_recent,
            old_output_max_chars=policy.tool_output.old_max_chars,
            max_output_chars=policy.tool_output.max_chars,
            compact_above=None if window is None else int(compaction.threshold * window),
            max_messages=compaction.max_messages,
            use_reported_usage=compaction.use_reported_usage,
        )


@record(kw_only=False)
class PlanParts:
    """What a plan is compiled from, as its agent's user set it: kept in the plan, so that the
    kernel compiles a plan under another policy (a child's share of its parent's limits) or
    for another agent's parts (a handoff's target) from the plan alone."""

    model: Model
    tools: tuple[Tool | Callable[..., Any], ...]
    policy: Policy
    machine: AgentMachine
    system_prompt: str | None
    verifier: Callable[..., Any] | None
    stop_conditions: tuple[Callable[[RunState], object], ...]  # the agent's own
    hooks: HookSet
    compactor: Compactor | None  # the one given (None: the policy's)
    phases: Phases | None
    output_spec: OutputSpec | None
    wrap_tool: Callable[[Tool], Tool] | None
    streams: bool | None
    handoffs: tuple[Handoff[Any], ...]


@dataclass(frozen=True, eq=False)
class Plan:
    """What the runs of one agent read, compiled from what its user set; never changed (a new
    policy, model or tool adapter compiles a new plan). Not slotted: :attr:`definition` is
    computed on first use and kept in the instance's ``__dict__``."""

    policy: Policy
    machine: AgentMachine
    limits: Limits  # the policy's limits, as the guards read them
    decide: Callable[[State, Outcome, Counters], Move]  # the machine's, compiled for ``limits``
    settings: LoopSettings  # the policy values read on every step
    usage_limited: bool  # the policy sets a usage limit
    limit_states: frozenset[State]  # the states whose handler a reached limit replaces
    switch_rows: frozenset[int]  # the rows that move down a fallback chain (no backoff)
    models: tuple[Model, ...]  # a fallback chain's models, else the one model
    falls_back_on: Callable[[ModelError], bool] | None  # a chain's test of an error
    streams: bool  # listened runs stream the model's answer
    tools: ToolRegistry  # the tools offered, the done tool included, through any adapter
    done_offered: bool  # the built-in done tool is one of them (a call of it waits for the others)
    tool_definitions: tuple[ToolDefinition, ...]
    pager: Tool | None  # offered to the model once a tool output was cut
    approval_needed: bool  # some tool needs a human's approval
    phases: CompiledPhases | None
    compactor: Compactor
    system_prompt: str | None
    system_message: Message | None  # shared by every run's history (messages are immutable)
    hooks: HookSet
    verifier: Callable[..., Any] | None
    stop_conditions: tuple[Callable[[RunState], object], ...]  # the phases' own included
    output_spec: OutputSpec | None  # how answers are validated (None: text output)
    output_schema: OutputSchema | None  # the JSON schema of the answer (None: text output)
    handoffs: Mapping[str, Handoff[Any]]  # the agent's handoffs by their tool's name (often empty)
    parts: PlanParts  # what it was compiled from
    checks_declarations: bool  # the driver checks each outcome against its state's declaration
    # The plans of handoff targets compiled under this one, by the target's own plan's id,
    # each with that plan (a target given a new prompt compiles a new one).
    handoff_plans: dict[int, tuple[Plan, Plan]] = field(default_factory=dict, repr=False)

    @cached_property
    def definition(self) -> str:
        """The fingerprint of the agent's definition (tools, system prompt, policy, phases,
        output), checked when a stored run is resumed; computed once per plan."""
        return definition_fingerprint(self)


class Planned(Protocol):
    """What has a compiled plan: an :class:`~fsm_agent.Agent` (read it with :func:`plan_of`)."""

    @property
    def _plan(self) -> Plan:
        """The plan the agent's next run follows."""
        ...


class RunOwner(Planned, Protocol):
    """The agent a run is started for, as the kernel below :class:`~fsm_agent.Agent` reads it:
    its plan and the pieces of its runtime, nothing else. An ``Agent`` is one; the run's own
    code gets the plan and these pieces, and hands the object itself only to user code (a
    ``before_run`` hook's ``agent``)."""

    @property
    def runtime(self) -> Runtime:
        """The clock, sleep, randomness and ids its runs use."""
        ...

    @property
    def deps(self) -> object:
        """What its tools get as ``deps`` when a run is given none."""
        ...

    @property
    def model_settings(self) -> ModelSettings | None:
        """Its model settings, under a run's own."""
        ...

    @property
    def checkpointer(self) -> Checkpointer | None:
        """The store its runs are saved in (``None``: not saved)."""
        ...

    @property
    def durability(self) -> Durability:
        """When the store's writes happen."""
        ...

    @property
    def unknown_outcome(self) -> UnknownOutcome:
        """Who settles a call a crash cut short."""
        ...


def plan_of(agent: Planned) -> Plan:
    """The plan ``agent``'s next run follows: the one way for the package's layers outside the
    kernel (the CLI, the fuzzer, observability, replay, the testing tools, the inspector) to
    read what an agent compiled. Not for users: :class:`Plan` and its fields are internal and
    change between releases; users read the agent's public attributes. A plan is frozen, but
    the agent compiles a new one when its policy, system prompt or handoffs are assigned: read
    it again rather than keep it across such a change."""
    return agent._plan


def compile_plan(
    *,
    model: Model,
    tools: Sequence[Tool | Callable[..., Any]],
    policy: Policy,
    machine: AgentMachine,
    system_prompt: str | None,
    verifier: Callable[..., Any] | None,
    stop_conditions: Sequence[Callable[[RunState], object]],
    hooks: HookSet,
    compactor: Compactor | None,
    phases: Phases | None,
    output_spec: OutputSpec | None,
    wrap_tool: Callable[[Tool], Tool] | None = None,
    streams: bool | None = None,
    handoffs: Sequence[Handoff[Any]] = (),
) -> Plan:
    """The plan of an agent built from these parts (raises
    :class:`~fsm_agent.ConfigurationError` for parts that do not fit together)."""
    parts = PlanParts(
        model=model,
        tools=tuple(tools),
        policy=policy,
        machine=machine,
        system_prompt=system_prompt,
        verifier=verifier,
        stop_conditions=tuple(stop_conditions),
        hooks=hooks,
        compactor=compactor,
        phases=phases,
        output_spec=output_spec,
        wrap_tool=wrap_tool,
        streams=streams,
        handoffs=tuple(handoffs),
    )
    return _compiled(parts)


def with_policy(plan: Plan, policy: Policy) -> Plan:
    """``plan`` compiled again under ``policy`` (a child's share of its parent's limits)."""
    return _compiled(replace(plan.parts, policy=policy))


def handoff_plan(origin: Plan, target: Planned) -> Plan:
    """The plan a run started under ``origin`` follows once a handoff gave ``target`` the
    conversation: ``target``'s model, tools, handoffs, system prompt and compactor under
    ``origin``'s policy, hooks, verifier, stop conditions, output and machine (compiled on
    first use, and kept with ``origin``)."""
    own = target._plan
    if own is origin:
        return origin
    cached = origin.handoff_plans.get(id(own))
    if cached is not None and cached[0] is own:
        return cached[1]
    theirs = own.parts
    plan = _compiled(
        replace(
            origin.parts,
            model=theirs.model,
            tools=theirs.tools,
            system_prompt=theirs.system_prompt,
            compactor=theirs.compactor,
            phases=None,
            streams=None,
            handoffs=theirs.handoffs,
        )
    )
    origin.handoff_plans[id(own)] = (own, plan)
    return plan


def _compiled(parts: PlanParts) -> Plan:
    """The plan of ``parts``."""
    policy, model, phases = parts.policy, parts.model, parts.phases
    verifier, output_spec, machine = parts.verifier, parts.output_spec, parts.machine
    system_prompt = parts.system_prompt
    _check_policy(policy, verifier, output_spec)
    stops = (*parts.stop_conditions, *phase_stop_conditions(phases))  # checks it is a table
    registry, pager, done_offered = _tools(
        parts.tools, parts.handoffs, policy, output_spec, parts.wrap_tool
    )
    models, falls_back_on = _models(model)
    limits = _shared(
        _shared_limits, policy, verifier is not None, len(models), output_spec is not None
    )
    return Plan(
        policy=policy,
        machine=machine,
        limits=limits,
        decide=machine.deciding(limits),
        settings=_shared(_shared_settings, policy, getattr(model, "context_window", None)),
        usage_limited=usage_limited(policy),
        limit_states=machine.limit_states,
        switch_rows=machine.switch_rows,
        models=models,
        falls_back_on=falls_back_on,
        streams=_streams(models, parts.streams),
        tools=registry,
        done_offered=done_offered,
        tool_definitions=registry.definitions,
        pager=pager,
        approval_needed=any(t.needs_approval for t in registry.values()),
        phases=compile_phases(phases, registry, system_prompt, policy),
        compactor=parts.compactor or Compactor.from_settings(policy.compaction),
        system_prompt=system_prompt,
        system_message=None
        if system_prompt is None
        else _shared(_shared_system_message, system_prompt),
        hooks=parts.hooks,
        verifier=verifier,
        stop_conditions=stops,
        output_spec=output_spec,
        output_schema=None if output_spec is None else output_spec.schema,
        handoffs=by_tool_name(parts.handoffs),
        parts=parts,
        checks_declarations=declarations_checked(),
    )


# The immutable parts of a plan (limits, loop settings, the system message) are shared by the
# agents built from equal policies and prompts: a run then reads parts that every run reads,
# not its own agent's copies, which are cold in the cache when many agents were built before
# their runs (an agent per request). Each cache keeps the 64 most recently used.
@functools.lru_cache(maxsize=64)
def _shared_limits(policy: Policy, verified: bool, models: int, validated: bool) -> Limits:
    return limits_of(policy, verification=verified, models=models, output_validation=validated)


@functools.lru_cache(maxsize=64)
def _shared_settings(policy: Policy, context_window: int | None) -> LoopSettings:
    return LoopSettings.of(policy, context_window)


@functools.lru_cache(maxsize=64)
def _shared_system_message(prompt: str) -> Message:
    return Message.system(prompt)


def _shared(cached: functools._lru_cache_wrapper[_T], *key: Any) -> _T:
    """``cached(*key)``: the value for an equal key if one is kept, else a new one."""
    try:
        return cached(*key)
    except TypeError:  # a policy holding an unhashable value (built without validation)
        return cached.__wrapped__(*key)


def _check_policy(
    policy: Policy, verifier: Callable[..., Any] | None, output_spec: OutputSpec | None
) -> None:
    """Refuse a policy that is not a :class:`~fsm_agent.Policy`, or whose done-tool settings
    do not fit the verifier and the output type."""
    if not isinstance(policy, Policy):
        raise ConfigurationError(f"policy must be a fsm_agent.Policy, got {type(policy).__name__}")
    check_done_tool(policy, verifier=verifier, typed=output_spec is not None)


def _streams(models: tuple[Model, ...], override: bool | None) -> bool:
    """Whether listened runs stream the model's answer: as ``override`` says (an adapter's),
    else when every model of the chain can stream."""
    if override is not None:
        return override
    return all(callable(getattr(m, "stream", None)) for m in models)


def _models(model: Model) -> tuple[tuple[Model, ...], Callable[[ModelError], bool] | None]:
    """The models a call goes down (a chain's, in order) and when it falls back."""
    # A model without ``models`` is no chain; on Python 3.11 a protocol's isinstance gathers
    # its members on each call, about a third of building an agent.
    if hasattr(model, "models") and isinstance(model, ModelChain):
        return model.models, model.falls_back_on
    return (model,), None


def _tools(
    given: Sequence[Tool | Callable[..., Any]],
    handoffs: Sequence[Handoff[Any]],
    policy: Policy,
    output_spec: OutputSpec | None,
    wrap_tool: Callable[[Tool], Tool] | None,
) -> tuple[ToolRegistry, Tool | None, bool]:
    """The tool registry the policy asks for (the done tool and a tool per handoff added) and
    the pager, both through ``wrap_tool``, and whether the registry's ``done`` is the built-in
    done tool."""
    tool_list = [*given, *handoff_tools(handoffs, policy.max_handoffs)]
    if policy.require_done_tool and not any(
        (t.name if isinstance(t, Tool) else getattr(t, "__name__", "")) == "done" for t in tool_list
    ):
        tool_list.append(done_tool())
    registry = ToolRegistry(tool_list)
    done_offered = registry.get("done") is done_tool()
    if output_spec is not None and ANSWER_TOOL in registry:
        raise ConfigurationError(
            f"a tool named {ANSWER_TOOL!r} clashes with the tool a typed-output agent offers "
            f"the model for its answer: rename the tool"
        )
    output = policy.tool_output
    pager: Tool | None = None
    if (output.max_chars is not None or output.keep_recent is not None) and (
        PAGER_NAME not in registry
    ):
        pager = pager_tool((output.max_chars or 10_000) - 200)
    if wrap_tool is not None:
        registry = ToolRegistry(wrap_tool(t) for t in registry.values())
        pager = None if pager is None else wrap_tool(pager)
    return registry, pager, done_offered


def compile_phases(
    phases: Phases | None, registry: ToolRegistry, system_prompt: str | None, policy: Policy
) -> CompiledPhases | None:
    """``phases`` fitted to an agent's tools, system prompt and policy: the pager is allowed
    in every phase, and the done tool of ``require_done_tool`` offered in the goal phases."""
    if phases is None:
        return None
    done = registry.find("done") if policy.require_done_tool else None
    return CompiledPhases(
        phases,
        registry.definitions,
        system_prompt,
        always=frozenset({PAGER_NAME}),
        goal_tools=() if done is None else (done.definition,),
    )


def phase_stop_conditions(phases: Phases | None) -> tuple[Callable[[RunState], str | None], ...]:
    """The stop condition an agent with ``phases`` adds to its own (see :func:`budget_stop`);
    raises :class:`~fsm_agent.ConfigurationError` when ``phases`` is not a table."""
    if phases is None:
        return ()
    if not isinstance(phases, Phases):
        raise ConfigurationError(f"phases must be a fsm_agent.Phases, got {type(phases).__name__}")
    return (budget_stop(phases),)


def budget_stop(phases: Phases) -> Callable[[RunState], str | None]:
    """The stop condition that ends a run whose phase spent its budget and names no
    ``on_budget`` phase (stop reason ``stop_condition``, detail ``phase_budget: ...``)."""

    def phase_budget(rs: RunState) -> str | None:
        spent = phases.spent(rs)
        if spent is None or spent[1] is not None:
            return None
        phase = spent[0]
        return f"phase_budget: phase '{phase.name}' spent its {phase.max_steps} steps"

    return phase_budget
