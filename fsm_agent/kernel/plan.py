"""The plan of an agent: what its runs read, compiled once from what the user set.

An :class:`~fsm_agent.Agent` keeps what its user gave it (model, tools, policy, hooks...);
:func:`compile_plan` turns those into the frozen :class:`Plan` the driver and the state
handlers read (the tool registry with the done tool and the pager, the limits and the compiled
``decide``, the loop settings, the output spec...). A run takes its agent's plan when it starts
and keeps it to its end: assigning ``agent.policy`` compiles a new plan for the runs started
after it, and a run in flight goes on under the plan it started with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from ..compaction import Compactor
from ..errors import ConfigurationError, ModelError
from ..machine.agent_machine import AgentMachine, Move
from ..machine.guards import Limits
from ..machine.table import LIMITS, Counter, Counters, Outcome, State
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
from .phasing import compile_phases, phase_stop_conditions

__all__ = ["LoopSettings", "Plan", "Planned", "compile_plan", "plan_of"]


@record(kw_only=False)
class LoopSettings:
    """The policy values the loop reads on every step, copied out of the policy once per
    agent: a pydantic model's field read goes through its ``__getattr__`` hook and costs
    several times a slot read."""

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
    handoffs: Mapping[str, Handoff]  # the agent's handoffs by their tool's name (often empty)

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
    handoffs: Sequence[Handoff] = (),
) -> Plan:
    """The plan of an agent built from these parts (raises
    :class:`~fsm_agent.ConfigurationError` for parts that do not fit together)."""
    _check_policy(policy, verifier, output_spec)
    stops = (*stop_conditions, *phase_stop_conditions(phases))  # checks ``phases`` is a table
    registry, pager, done_offered = _tools(tools, handoffs, policy, output_spec, wrap_tool)
    models, falls_back_on = _models(model)
    limits = limits_of(
        policy,
        verification=verifier is not None,
        models=len(models),
        output_validation=output_spec is not None,
    )
    return Plan(
        policy=policy,
        machine=machine,
        limits=limits,
        decide=machine.deciding(limits),
        settings=LoopSettings.of(policy, getattr(model, "context_window", None)),
        usage_limited=usage_limited(policy),
        limit_states=_limit_states(machine),
        switch_rows=_switch_rows(machine),
        models=models,
        falls_back_on=falls_back_on,
        streams=_streams(models, streams),
        tools=registry,
        done_offered=done_offered,
        tool_definitions=registry.definitions,
        pager=pager,
        approval_needed=any(t.needs_approval for t in registry.values()),
        phases=compile_phases(phases, registry, system_prompt, policy),
        compactor=compactor or Compactor.from_settings(policy.compaction),
        system_prompt=system_prompt,
        system_message=None if system_prompt is None else Message.system(system_prompt),
        hooks=hooks,
        verifier=verifier,
        stop_conditions=stops,
        output_spec=output_spec,
        output_schema=None if output_spec is None else output_spec.schema,
        handoffs=by_tool_name(handoffs),
    )


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
    if isinstance(model, ModelChain):
        return model.models, model.falls_back_on
    return (model,), None


def _limit_states(machine: AgentMachine) -> frozenset[State]:
    """The states whose handler a reached usage limit replaces."""
    return frozenset(
        s for s, declared in machine.declarations.items() if declared.interrupts >= LIMITS
    )


def _switch_rows(machine: AgentMachine) -> frozenset[int]:
    """The rows that move a model call down a fallback chain (with no backoff)."""
    return frozenset(
        i
        for i, row in enumerate(machine.rows)
        if any(u.counter is Counter.MODEL_SWITCHES and not u.reset for u in row.updates)
    )


def _tools(
    given: Sequence[Tool | Callable[..., Any]],
    handoffs: Sequence[Handoff],
    policy: Policy,
    output_spec: OutputSpec | None,
    wrap_tool: Callable[[Tool], Tool] | None,
) -> tuple[ToolRegistry, Tool | None, bool]:
    """The tool registry the policy asks for (the done tool and a tool per handoff added) and
    the pager, both through ``wrap_tool``, and whether the registry's ``done`` is the built-in
    done tool."""
    tool_list = [*given, *handoff_tools(handoffs)]
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
