"""An agent as a tool: the parent's model calls it with a task, the child runs its own machine,
and the child's output is the call's result.

The child shares what bounds the parent's run:

- **usage limits**: the child runs under the smaller of its own limits and its share of what
  the parent has left (its ``max_requests``, token and cost caps): the agent calls of one turn
  split what is left equally (see :mod:`.sharing`), and when a child ends its usage and model
  calls are added to the parent's, so the parent's limits hold over the whole composition;
- **the deadline**: the child's wall-clock limit is at most the parent's time left;
- **cancellation**: a cancel (or the deadline) of the parent is the child's too, seen at its next
  move; an effect of the child in flight is cut short with the parent's.

Under a parent with a checkpointer the child is saved in the parent's store as a run of its
own, and resumed with the parent after a crash (see :mod:`fsm_agent.kernel.durable_child`).

A stop of the child's own (its ``max_steps``, an abort, a usage limit) is not a crash of the
parent: the call's result is an :class:`~fsm_agent.AgentToolError` the parent's model reads,
with the child's last answer when it has one.

When the parent is listened to (``run_stream``), each event of the child reaches the parent's
listener as a :class:`~fsm_agent.run.events.ChildEvent`: the parent's call id, the child's run
id and its depth. Nothing here runs for an agent without children: the kernel passes its tools
nothing new, and a child finds its parent's run through the tool context it is given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Generic

from pydantic import Field
from typing_extensions import TypeVar

from ..analysis.bounds import Bounds, ChildBounds, bounds
from ..errors import AgentToolError, ConfigurationError
from ..machine.table import ANSWERED, Outcome, State, StopReason
from ..persistence.storable import storable_message
from ..run.events import ChildEvent, Event
from ..run.state import AgentUsage, RunState
from ..tools import Tool, ToolContext, ToolExecution
from ..values.define import record
from ..values.messages import Message, Role, ToolCall, validate_history
from .context import Emitted, Handed, RunContext
from .driver import drive
from .durable_child import child_run_id, open_child
from .handoffs import declared_graph, handoff_graph
from .plan import Plan, Planned, RunOwner, plan_of, with_policy
from .run import RunResult, own_usage
from .sharing import Grant, grant_limits, release, spent_share
from .states.model_call import model_name

if TYPE_CHECKING:
    from collections.abc import Awaitable, Generator

__all__ = [
    "AgentTool",
    "ChildRunContext",
    "agent_bounds",
    "agent_tools",
    "called_as",
    "children_bounds",
    "explored_model_calls",
    "parent_call",
    "parent_run",
    "phase_turns",
]

TASK_DESCRIPTION = (
    "The task for this agent, stated in full: it sees nothing else of this conversation."
)
SHARED_TASK_DESCRIPTION = (
    "The task for this agent: it also sees this conversation, as far as it is shared with it."
)

_Task = Annotated[str, Field(description=TASK_DESCRIPTION)]
_SharedTask = Annotated[str, Field(description=SHARED_TASK_DESCRIPTION)]


@record(kw_only=False)
class _Shared:
    """What a parent shares with the child of an agent tool beyond the task: its ``deps`` (as
    they are, or through ``deps_from``) and a view of its conversation."""

    deps: bool = False
    deps_from: Callable[[Any], Any] | None = None
    conversation: Callable[[tuple[Message, ...]], Sequence[Message]] | None = None


_CALLS: dict[str, tuple[str, str, str]] = {}
"""The parent run id, call id and tool name of each child run while it runs, by its run id."""


def parent_call(run_id: str) -> tuple[str, str] | None:
    """The run id and call id of the parent's call that runs the child run ``run_id``, while it
    runs (``None`` for a run that is not a child): how observers nest a child under its call."""
    found = _CALLS.get(run_id)
    return None if found is None else found[:2]


def called_as(run_id: str) -> str | None:
    """The tool name the parent calls the child run ``run_id`` by, while it runs (``None`` for
    a run that is not a child): how observers name a child's agent."""
    found = _CALLS.get(run_id)
    return None if found is None else found[2]


def parent_run(context: ToolContext[Any]) -> RunContext | None:
    """The run that gave a tool ``context``, or ``None`` outside a run (a tool called by hand).

    The kernel hands each tool its run's cancel check, a method of the run's context: reading
    the run from it keeps the tool contexts of agents without children as they are."""
    owner = getattr(context.cancel_requested, "__self__", None)
    return owner if isinstance(owner, RunContext) else None


class ChildRunContext(RunContext):
    """The context of a child run: it inherits its parent's cancel and deadline, and hands its
    events to its parent's listener wrapped in :class:`~fsm_agent.run.events.ChildEvent`.

    ``inline`` says the child runs in the task stepping its parent's listened run (the calls of
    a turn run one by one): its events are yielded on the spot. Otherwise (concurrent calls)
    they go to the queue the parent's turn emits from while its calls run (through an ancestor
    that runs in a task of its own, up to the one whose turn has the queue).

    ``path`` names the child from the listened run down, one ``segment`` per level:
    ``tool_name:step.call_id`` (the parent's step of the call: call ids repeat across turns)."""

    def __init__(
        self,
        agent: RunOwner,
        plan: Plan,
        state: RunState,
        *,
        parent: RunContext,
        call_id: str,
        tool_name: str,
        segment: str,
        inline: bool,
    ) -> None:
        self.parent = parent
        self._own_interrupt: Outcome | None = None
        super().__init__(
            plan,
            agent.runtime,
            state,
            listening=parent.listening,
            agent=agent,
            model_settings=agent.model_settings,
        )
        self.call_id = call_id
        self.tool_name = tool_name
        self.depth: int = getattr(parent, "depth", 0) + 1
        self.path: tuple[str, ...] = (*getattr(parent, "path", ()), segment)
        self.inline = inline

    @property
    def interrupt(self) -> Outcome | None:
        """The child's own interrupt, else its parent's cancel or deadline."""
        own = self._own_interrupt
        if own is None:
            inherited = self.parent.interrupt
            if inherited is Outcome.CANCEL or inherited is Outcome.DEADLINE:
                return inherited
        return own

    @interrupt.setter
    def interrupt(self, value: Outcome | None) -> None:
        self._own_interrupt = value

    def emit(self, event: Event) -> Awaitable[None]:
        """Hand ``event`` to the parent's listener as a :class:`ChildEvent` (an event a
        grandchild sent up is already one, and goes on as it is)."""
        if not self.listening:
            return super().emit(event)
        if not isinstance(event, ChildEvent):
            event = ChildEvent(
                run_id=self.parent.rs.run_id,
                call_id=self.call_id,
                tool_name=self.tool_name,
                child_run_id=self.rs.run_id,
                depth=self.depth,
                path=self.path,
                event=event,
            )
        if self.inline:
            return Emitted(event)
        parent = self.parent
        if parent.child_events is not None:  # the child goes on once the listener took it
            taken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            parent.child_events.put_nowait(Handed(event, taken))
            return taken
        if isinstance(parent, ChildRunContext) and not parent.inline:
            return parent.emit(event)
        parent.hold(event)
        return _SETTLED


class _Settled:
    """An awaitable that completes at once (an event left with the parent's pending ones)."""

    __slots__ = ()

    def __await__(self) -> Generator[Emitted, None, None]:
        return
        yield


_SETTLED = _Settled()


def _bounded(plan: Plan, parent: RunContext, call_id: str) -> tuple[Plan, Grant | None, str | None]:
    """``plan`` under the limits its parent shares with it (see :mod:`.sharing`): compiled
    again with a narrower policy when the parent has usage limits or a deadline, else ``plan``
    itself; the grant taken from the parent's usage limits; or why it is not run."""
    policy = plan.policy
    update: dict[str, Any] = {}
    if parent.deadline is not None:
        left = parent.deadline - parent.runtime.clock()
        if left <= 0:
            return plan, None, "the run's wall-clock limit has passed"
        own = policy.max_wall_clock_s
        update["max_wall_clock_s"] = left if own is None else min(own, left)
    grant = None
    if parent.plan.usage_limited:
        shared = grant_limits(policy.usage_limits, parent, call_id)
        if isinstance(shared, str):
            return plan, None, shared
        update["usage_limits"], grant = shared
    if not update:
        return plan, None, None
    return with_policy(plan, policy.model_copy(update=update)), grant, None


async def _run_child(
    agent: RunOwner, name: str, task: str, context: ToolContext[Any], shared: _Shared
) -> object:
    """Run ``agent`` on ``task`` as the call ``context`` describes; its output, or
    :class:`AgentToolError` when it stopped without one."""
    parent = parent_run(context)
    if parent is None:
        raise AgentToolError(
            f"the agent tool {name!r} runs inside an agent's run only (it shares the run's "
            "limits); pass it to an Agent's tools",
            tool_name=name,
        )
    deps, history = _shared_context(agent, name, parent, shared)
    child, grant, refused = _bounded(agent._plan, parent, context.call_id)
    if refused is not None:
        raise AgentToolError(f"agent {name!r} was not run: {refused}", tool_name=name)
    try:
        result = await _run_granted(agent, child, name, task, context, parent, deps, history)
    finally:
        if grant is not None:  # however the child ended: what it did not use is the parent's
            release(parent, grant)
    return _answer(name, result, grant)


async def _run_granted(
    agent: RunOwner,
    child: Plan,
    name: str,
    task: str,
    context: ToolContext[Any],
    parent: RunContext,
    deps: object,
    history: list[Message],
) -> RunResult[Any]:
    """Run ``agent`` under ``child`` (its plan under its share of the parent's limits) on
    ``task``, with the ``deps`` and ``history`` its tool shares; its result, charged to the
    parent."""
    segment = f"{name}:{context.step}.{context.call_id}"  # its path's part, in the parent
    top = type(parent) is RunContext
    inline = (top or getattr(parent, "inline", False)) and asyncio.current_task() is parent.task
    log = None
    if parent.durable is not None:  # saved in the parent's store, to be resumed with it
        run_id = child_run_id(parent.rs.run_id, context.step, context.call_id)
        rs, log = await open_child(agent, child, parent, run_id)
        parent.rs.child_runs[context.call_id] = run_id  # the inspector's link to the child
        if log is None:  # it had come to rest before the parent's crash
            _charge(parent, rs, segment)
            return RunResult.of(rs, None, child.output_spec)
        rs.parent_run_id, rs.parent_call_id = parent.rs.run_id, context.call_id
    else:
        rs = RunState(run_id=agent.runtime.new_id())
    if rs.model is None:  # its model by name, as a top run's is stored (and accounted)
        rs.model = " | ".join(model_name(m) for m in child.models)
    ctx = ChildRunContext(
        agent,
        child,
        rs,
        parent=parent,
        call_id=context.call_id,
        tool_name=name,
        segment=segment,
        inline=inline,
    )
    ctx.deps = deps
    ctx.durable = log
    if rs.state is State.IDLE:
        ctx.input = Message.user(task) if log is None else storable_message(Message.user(task))
        ctx.history = history
    elif rs.trace:
        ctx.last_move = rs.trace[-1]  # a resumed child: a retry's backoff needs it
    _CALLS[rs.run_id] = (parent.rs.run_id, context.call_id, name)
    try:
        await drive(ctx)
    finally:
        del _CALLS[rs.run_id]
        _charge(parent, rs, segment)
    result = ctx.result
    assert result is not None, "the driver records the result when the run rests"
    return result


def _shared_context(
    agent: RunOwner, name: str, parent: RunContext, shared: _Shared
) -> tuple[object, list[Message]]:
    """The child's deps and the history it starts with, as its tool shares them (raises
    :class:`AgentToolError`, the call's result, when user code sharing them fails)."""
    deps = parent.deps if shared.deps else agent.deps
    if shared.deps_from is not None:
        try:
            deps = shared.deps_from(parent.deps)
        except Exception as exc:
            raise AgentToolError(
                f"agent {name!r} was not run: its deps_from raised {type(exc).__name__}: {exc}",
                tool_name=name,
            ) from exc
    if shared.conversation is None:
        return deps, []
    try:
        history = list(shared.conversation(_settled(parent.rs.messages)))
        validate_history(history)
    except Exception as exc:
        raise AgentToolError(
            f"agent {name!r} was not run: its conversation filter failed "
            f"({type(exc).__name__}: {exc}); return messages that keep every tool call with "
            "its one result",
            tool_name=name,
        ) from exc
    return deps, [m for m in history if m.role is not Role.SYSTEM]


def _settled(messages: list[Message]) -> tuple[Message, ...]:
    """The parent's conversation as a child may see it: without its system message, and
    without the calls of the turn in progress (their results are not in yet), the turn's
    text kept."""
    shown = [m for m in messages if m.role is not Role.SYSTEM]
    if shown and shown[-1].tool_calls:
        last = shown[-1]
        parts = tuple(p for p in last.parts if p not in last.tool_calls)
        shown[-1:] = [last.model_copy(update={"parts": parts})] if parts else []
    return tuple(shown)


def _charge(parent: RunContext, rs: RunState, segment: str) -> None:
    """Add what the child used to its parent's usage, however it ended, and enter its own use
    and its descendants' in the parent's accounts, under ``segment``
    (``tool_name:step.call_id``)."""
    theirs = parent.rs
    theirs.usage = theirs.usage + rs.usage
    theirs.model_calls += rs.model_calls
    below = rs.children
    for path, account in below.items():
        theirs.children[f"{segment}/{path}"] = account
    theirs.children[segment] = AgentUsage(
        run_id=rs.run_id,
        model=rs.model,
        usage=own_usage(rs.usage, [a.usage for a in below.values()]) if below else rs.usage,
        model_calls=rs.model_calls - sum(a.model_calls for a in below.values()),
        tool_executions=rs.tool_executions,
    )


def _answer(name: str, result: RunResult[Any], grant: Grant | None) -> object:
    """The child's output, or the error its stop is to the parent's model (for a stop on its
    share of the parent's usage limits, what it was granted and used)."""
    if result.state is State.DONE and result.stop_reason in ANSWERED:
        return result.output
    why = result.stop_reason.value
    if grant is not None and result.stop_reason is StopReason.USAGE_LIMIT:
        share = spent_share(grant, result.usage, result.model_calls)
        if share is not None:
            why += f": {share}"
    if result.state is State.SUSPENDED:
        why = "it waits for a human, which an agent used as a tool cannot ask"
    message = f"agent {name!r} stopped without finishing its task ({why})"
    if result.error is not None:
        message += f": {result.error}"
    if result.output_text:
        message += f". Its last answer: {result.output_text}"
    raise AgentToolError(message, tool_name=name, result=result)


ChildT = TypeVar("ChildT", bound=RunOwner, default=Any)
"""The type of an agent tool's child: the :class:`~fsm_agent.Agent` it runs."""


class AgentTool(Tool, Generic[ChildT]):
    """An agent used as a tool (build one with :meth:`fsm_agent.Agent.as_tool`): its one
    argument is the task, its result the child's output. ``agent`` is the child."""

    runs_agent = True

    def __init__(
        self,
        agent: ChildT,
        *,
        name: str,
        description: str,
        timeout_s: float | None = None,
        share_deps: bool = False,
        deps_from: Callable[[Any], Any] | None = None,
        conversation: Callable[[tuple[Message, ...]], Sequence[Message]] | None = None,
    ) -> None:
        if share_deps and deps_from is not None:
            raise ConfigurationError(
                f"agent tool {name!r}: pass share_deps=True (the parent's deps as they are) or "
                "deps_from (a function of them), not both"
            )
        if deps_from is not None and not callable(deps_from):
            raise ConfigurationError(f"agent tool {name!r}: deps_from must be callable")
        if conversation is not None and not callable(conversation):
            raise ConfigurationError(
                f"agent tool {name!r}: conversation must be callable (the parent's messages in, "
                "the messages the child sees out)"
            )
        if agent.checkpointer is not None:
            raise ConfigurationError(
                f"agent tool {name!r}: an agent used as a tool is saved in its parent's store "
                "when the parent has a checkpointer; build it without one"
            )
        if not isinstance(description, str) or not description.strip():
            raise ConfigurationError(
                f"agent tool {name!r} needs a description: the parent's model reads it to "
                "decide when to hand a task to this agent"
            )
        if timeout_s is None:
            timeout_s = agent._plan.policy.max_wall_clock_s

        shared = _Shared(share_deps, deps_from, conversation)

        async def delegate(task: _Task, context: ToolContext[Any]) -> object:
            return await _run_child(agent, name, task, context, shared)

        async def delegate_shared(task: _SharedTask, context: ToolContext[Any]) -> object:
            return await _run_child(agent, name, task, context, shared)

        # Idempotent: run again after a crash, the call resumes the child a durable parent
        # saved (see kernel.durable_child) instead of starting it over.
        super().__init__(
            delegate if conversation is None else delegate_shared,
            name=name,
            description=description,
            timeout_s=timeout_s,
            idempotent=True,
        )
        self.agent = agent
        self.shared = shared

    async def execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        *,
        default_timeout_s: float | None = None,
    ) -> ToolExecution:
        """Run the child as :meth:`Tool.execute` runs a function, cut off at the call's own
        ``timeout_s`` (given to ``as_tool``, else the child's ``max_wall_clock_s``), never at
        the parent's per-tool default: without either, the child runs until its own limits
        end it, within the parent's deadline."""
        return await super().execute(call, context, default_timeout_s=None)

    @property
    def reports_progress(self) -> bool:
        """No: the child's events say how it goes, and they reach the parent's listener as they
        happen (see :class:`ChildRunContext`)."""
        return False

    def __repr__(self) -> str:
        return f"AgentTool({self.name!r})"


def agent_bounds(agent: Planned, *, model_timeout_s: float | None = None) -> Bounds:
    """The worst case of a run of ``agent``, its children's included (each computed the same
    way, so a grandchild's counts too), and, for an agent with handoffs, of the whole chain of
    agents that may hold the conversation (one policy, the most models, every child); for an
    agent with phases, under the turns its phase budgets allow: see
    :meth:`fsm_agent.Agent.bounds`."""
    plan = plan_of(agent)
    plans = _chain(plan)
    return bounds(
        plan.policy,
        verification=plan.verifier is not None or plan.output_spec is not None,
        model_timeout_s=model_timeout_s,
        models=max(len(p.models) for p in plans),
        children=children_bounds(agent, model_timeout_s=model_timeout_s),
        other_tools=any(not isinstance(t, AgentTool) for p in plans for t in p.tools.values()),
        turns=phase_turns(agent),
        handoffs=declared_graph(plan.parts) if plan.handoffs else None,
    )


def _chain(plan: Plan) -> list[Plan]:
    """``plan`` and the own plans of every agent a chain of its handoffs can reach."""
    plans = [plan]
    if plan.handoffs:
        for handoff in handoff_graph(plan.parts).values():
            theirs = plan_of(handoff.agent)
            if all(theirs is not p for p in plans):
                plans.append(theirs)
    return plans


def phase_turns(agent: Planned) -> tuple[int, str] | None:
    """The most model turns the budgets of ``agent``'s phases allow, explored with the loop
    (:func:`~fsm_agent.analysis.checker.phases.check_phases`), when fewer than its
    ``max_steps``; ``None`` without phases, or when the search is inconclusive."""
    plan = plan_of(agent)
    phases = plan.parts.phases
    policy = plan.policy
    limit = policy.max_steps or policy.usage_limits.max_requests
    if phases is None or limit is None:
        return None
    from ..analysis.checker.phases import check_phases

    report = check_phases(phases, limit)
    if not report.complete or report.max_turns >= limit:
        return None
    return report.max_turns, "its phases' step budgets, explored with the loop"


def explored_model_calls(agent: Planned) -> int | None:
    """The most model calls a run of ``agent`` makes, its children's included, found by the
    exhaustive checker's search (each child's explored the same way) rather than computed from
    formulas: it equals ``agent.bounds().max_model_calls``. For an agent with handoffs the
    search covers the chain: the run's policy, the most models of its agents, every child."""
    from ..analysis.checker.compose import explored_model_calls as explore

    plan = plan_of(agent)
    plans = _chain(plan)
    children = [
        explored_model_calls(found.agent)
        for each in plans
        for found in each.tools.values()
        if isinstance(found, AgentTool)
    ]
    policy = plan.policy
    turns = phase_turns(agent)
    if turns is not None:
        policy = policy.model_copy(update={"max_steps": turns[0], "summarize_on_max_steps": False})
    return explore(
        policy,
        children=children,
        machine=plan.machine,
        verification=plan.verifier is not None,
        stop_conditions=bool(plan.parts.stop_conditions),
        models=max(len(p.models) for p in plans),
        output_validation=plan.output_spec is not None,
    )


def agent_tools(agent: Planned) -> list[AgentTool[Any]]:
    """The agents ``agent`` uses as tools, as their tools (with handoffs, those of every agent
    that may hold the conversation)."""
    return [
        found
        for each in _chain(plan_of(agent))
        for found in each.tools.values()
        if isinstance(found, AgentTool)
    ]


def children_bounds(agent: Planned, *, model_timeout_s: float | None = None) -> list[ChildBounds]:
    """The worst case of each agent ``agent`` uses as a tool, by its tool name (with handoffs,
    those of every agent that may hold the conversation)."""
    return [
        ChildBounds(
            found.name,
            agent_bounds(found.agent, model_timeout_s=model_timeout_s),
            timeout_s=found.timeout_s,
        )
        for found in agent_tools(agent)
    ]
