"""Worst-case budgets of a run, computed from a :class:`~fsm_agent.Policy` alone.

The numbers follow the built-in table of :mod:`fsm_agent.machine.table` (the checker in
:mod:`fsm_agent.analysis.checker` proves them, and that they are reached, per policy):

- Every successful model turn spends a step, and every way back to ``calling`` needs a step
  left (the forced-compaction row after a ``length`` turn counts that turn's own step), so a
  run makes at most ``max_steps`` successful turns.
- Failed calls are retried at most ``max_retries`` times between two successful turns (retries
  reset only on success) and, with ``max_total_errors``, at most ``max_total_errors - 1`` times in
  all; the failure that is not retried aborts the run, which then makes no summary call.
- A fallback chain of ``models`` models moves to its next model at most ``models - 1`` times in
  a run (the moves never reset), each move a failed call that starts a fresh run of retries:
  ``(turns + models - 1) × max_retries + models - 1`` failed calls at most (each also spends the
  whole-run error budget).
- Finalizing with stop reason ``max_steps`` makes one tools-off summary call when
  ``summarize_on_max_steps`` is set, unless a usage limit is already reached (or the deadline
  has passed). ``usage_limits.max_requests`` therefore caps every model call, the summary call
  included.
- Verifier rejections (and typed answers that do not validate) never reset, and each rejection
  sent back spends a step, so they add no model call of their own.
- With the ``summarize`` compaction strategy each compaction makes one model call. Compaction
  attempts reset on a turn that fits the context, so before each turn at most
  ``max_compaction_attempts`` compactions run: at most ``turns × max_compaction_attempts``
  summary calls in all.
- With ``max_steps=None`` only ``usage_limits.max_requests`` bounds the calls (counting every
  attempt, failed or not, as a request); a wall-clock limit alone ends a run in time but does not
  bound its work.

An agent with children (agents used as tools, ``Agent.as_tool``; ``bounds(..., children=...)``)
adds their worst cases: each tool execution of the parent may be a call of its costliest child,
so ``max_tool_calls`` executions add that many times the child's worst case, of model calls and
tool executions. A child's model calls count against the parent's usage limits, so
``usage_limits.max_requests`` still caps the model calls of the whole composition, and the
parent's ``max_wall_clock_s`` its time. A child's time is the time of the call that runs it: a
call of an agent tool lasts at most the smaller of the tool's ``timeout_s`` and the child's own
worst time, so the parent's tool time counts its longest tool (a child, or a plain tool's
``tool_timeout_s``) once per tool run, as for any tool: calls run in parallel in one turn take
the longest of them, not their sum.

An agent with phases (``bounds(..., turns=...)``) may take fewer turns than ``max_steps`` when
its phases' step budgets stop a run first: the turns the budgets allow replace ``max_steps``,
and no step-limit summary call is counted (a run that never reaches ``max_steps`` makes none).
An agent with handoffs (``bounds(..., handoffs=...)``, the declared graph) runs one policy over
the chain, so the loop's bounds hold for it as they are; the handoffs themselves are at most
``Policy.max_handoffs``, the longest chain of an acyclic graph, and the tool turns (a turn hands
off at most once), whichever is least.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ..policy import CompactionStrategyName, Policy, RetryPolicy
from ..values.define import record

__all__ = ["Bounds", "ChildBounds", "bounds"]


@record(kw_only=False)
class Bounds:
    """The most a run under one policy can use, each with a one-line derivation.

    ``None`` means unbounded; the derivation then says why and which setting would bound it.
    Wall-clock time excludes time spent suspended, in hooks and in the verifier.
    """

    max_model_calls: int | None
    model_calls_derivation: str
    max_tool_turns: int | None  # model turns that asked for tools (each may carry many calls)
    tool_turns_derivation: str
    max_tool_executions: int | None
    tool_executions_derivation: str
    max_wall_clock_s: float | None
    wall_clock_derivation: str
    max_handoffs: int | None = 0  # handoffs of the conversation to another agent
    handoffs_derivation: str = ""  # empty for an agent that declares no handoff

    def lines(self) -> list[str]:
        """One line per bound: the value, then its derivation (handoffs only for an agent that
        declares some)."""
        lines = [
            f"model calls      {_show(self.max_model_calls):>10}  {self.model_calls_derivation}",
            f"tool turns       {_show(self.max_tool_turns):>10}  {self.tool_turns_derivation}",
            f"tool executions  {_show(self.max_tool_executions):>10}  "
            f"{self.tool_executions_derivation}",
            f"wall clock (s)   {_show(self.max_wall_clock_s):>10}  {self.wall_clock_derivation}",
        ]
        if self.handoffs_derivation:
            lines.append(
                f"handoffs         {_show(self.max_handoffs):>10}  {self.handoffs_derivation}"
            )
        return lines


@record(kw_only=False)
class ChildBounds:
    """The worst case of a child agent, under the tool name its parent calls it by."""

    name: str
    bounds: Bounds
    timeout_s: float | None = None  # the call's own timeout (the agent tool's), if it has one

    @property
    def call_time_s(self) -> float | None:
        """The most one call of the child can take: its tool's timeout or its own worst
        time, the smaller (``None``: unbounded)."""
        times = [t for t in (self.timeout_s, self.bounds.max_wall_clock_s) if t is not None]
        return min(times) if times else None


def _show(value: float | None) -> str:
    if value is None:
        return "unbounded"
    return f"{value:g}" if isinstance(value, float) else str(value)


def bounds(
    policy: Policy,
    *,
    verification: bool = False,
    model_timeout_s: float | None = None,
    models: int = 1,
    children: Sequence[ChildBounds] = (),
    other_tools: bool = True,
    turns: tuple[int, str] | None = None,
    handoffs: Mapping[str, Sequence[str]] | None = None,
) -> Bounds:
    """The worst case of a run under ``policy`` (with a verifier or the done-tool requirement
    when ``verification``, and a fallback chain of ``models`` models), where one model call takes
    at most ``model_timeout_s`` seconds (``None``: not known, so the work gives no time bound).
    ``children`` are the worst cases of the agents it uses as tools, each added as many times as
    the parent can execute a tool; ``other_tools`` says whether it has tools besides them (each
    call of one may take ``tool_timeout_s``).

    ``turns`` is a tighter bound on the model turns than the policy's ``max_steps`` and why
    (a phase table's budgets): the run then never stops at ``max_steps``, so it makes no
    step-limit summary call. ``handoffs`` is the declared handoff graph, each agent's name
    (``""``: the one the run starts with) to the names it may hand the conversation to."""
    if turns is not None and (policy.max_steps is None or turns[0] < policy.max_steps):
        policy = policy.model_copy(update={"max_steps": turns[0], "summarize_on_max_steps": False})
    why = None if turns is None else turns[1]
    own = _bounds(policy, verification, model_timeout_s, models, why)
    found = own
    if children:
        tool_time = _longest_call(policy, children, other_tools)
        timed = _bounds(policy, verification, model_timeout_s, models, why, tool_time)
        found = _compose(own, timed, policy, children)
    if not handoffs:
        return found
    most, text = _handoffs(policy, own.max_tool_turns, handoffs)
    return replace(found, max_handoffs=most, handoffs_derivation=text)


def _longest_call(
    policy: Policy, children: Sequence[ChildBounds], other_tools: bool
) -> tuple[float | None, str]:
    """The most one tool call of an agent with ``children`` can take, and what it is."""
    worst = max(children, key=lambda c: _key(c.call_time_s))
    time = worst.call_time_s
    if time is None:
        return None, (
            f"the child {worst.name!r} has no time bound (give it max_wall_clock_s, or its "
            "tool a timeout_s)"
        )
    if other_tools and policy.tool_timeout_s > time:
        return policy.tool_timeout_s, f"{policy.tool_timeout_s:g} s (tool_timeout_s)"
    cut = worst.timeout_s is not None and worst.timeout_s < _key(worst.bounds.max_wall_clock_s)
    how = "its tool's timeout_s" if cut else "its worst time"
    return time, f"{time:g} s (the child {worst.name!r}, {how})"


def _handoffs(
    policy: Policy, tool_turns: int | None, graph: Mapping[str, Sequence[str]]
) -> tuple[int | None, str]:
    """The most handoffs a run makes, and why: ``Policy.max_handoffs``, the longest chain of an
    acyclic graph, and the tool turns (a turn hands off at most once), whichever is least."""
    candidates: list[tuple[int, str]] = []
    if policy.max_handoffs is not None:
        candidates.append((policy.max_handoffs, f"Policy.max_handoffs={policy.max_handoffs}"))
    longest = _longest_chain(graph)
    shape = "a cycle of handoffs" if longest is None else "no cycle"
    if longest is not None:
        candidates.append((longest, f"the longest chain of handoffs declared ({longest})"))
    if tool_turns is not None:
        candidates.append((tool_turns, f"one per tool turn ({tool_turns})"))
    edges = "; ".join(
        f"{source or '(start)'} -> {', '.join(dests)}" for source, dests in graph.items() if dests
    )
    if not candidates:
        why = f"{shape} and unbounded tool turns; set Policy.max_handoffs"
        return None, f"unbounded: {why} ({edges})"
    most, why = min(candidates, key=lambda c: c[0])
    return most, f"{why}; {shape} ({edges})"


def _longest_chain(graph: Mapping[str, Sequence[str]]) -> int | None:
    """The most handoffs along a path from the agent the run starts with (``""``), or ``None``
    when the graph has a cycle reachable from it."""
    done: dict[str, int] = {}
    on_path: set[str] = set()

    def longest(node: str) -> int | None:
        if node in done:
            return done[node]
        if node in on_path:
            return None
        on_path.add(node)
        best = 0
        for dest in graph.get(node, ()):
            after = longest(dest)
            if after is None:
                return None
            best = max(best, after + 1)
        on_path.discard(node)
        done[node] = best
        return best

    return longest("")


def _bounds(
    policy: Policy,
    verification: bool,
    model_timeout_s: float | None,
    models: int,
    turns_why: str | None = None,
    tool_time: tuple[float | None, str] | None = None,
) -> Bounds:
    """The worst case of one agent's own run, children left out (``turns_why``: what bounds
    the turns, when not the policy's ``max_steps``), where one tool call takes at most
    ``tool_time`` (seconds and what they are; ``None``: the policy's ``tool_timeout_s``)."""
    if policy.max_steps is not None:
        work = _step_bounded(policy, policy.max_steps, verification, models, turns_why)
    elif policy.usage_limits.max_requests is not None:
        work = _request_bounded(policy, policy.usage_limits.max_requests)
    else:
        work = _Work(
            calls=None,
            calls_text=(
                "max_steps=None and no usage_limits.max_requests: nothing bounds the turns "
                "(max_wall_clock_s ends a run in time, not in work)"
            ),
            retried=0,
            tool_turns=None,
            tool_turns_text="as many as the model turns: unbounded",
        )
    calls, calls_text, retried = work.calls, work.calls_text, work.retried
    tool_turns, tool_turns_text = work.tool_turns, work.tool_turns_text
    executions, executions_text = _executions(policy, tool_turns)
    if tool_time is None:
        tool_time = (policy.tool_timeout_s, f"{policy.tool_timeout_s:g} s")
    wall, wall_text = _wall_clock(
        policy, calls, retried, tool_turns, executions, policy.retry, model_timeout_s, tool_time
    )
    return Bounds(
        max_model_calls=calls,
        model_calls_derivation=calls_text,
        max_tool_turns=tool_turns,
        tool_turns_derivation=tool_turns_text,
        max_tool_executions=executions,
        tool_executions_derivation=executions_text,
        max_wall_clock_s=wall,
        wall_clock_derivation=wall_text,
    )


@record(kw_only=False)
class _Work:
    """The model calls and tool turns of one run at worst, with their derivations, and the
    failed calls among those calls (each may wait a backoff)."""

    calls: int | None
    calls_text: str
    retried: int
    tool_turns: int | None
    tool_turns_text: str


def _step_bounded(
    policy: Policy, turns: int, verification: bool, models: int, turns_why: str | None
) -> _Work:
    """The work of a run whose ``turns`` (``max_steps``) bound it: each turn, the failed calls
    retried and the switches down a chain of ``models``, the step-limit summary call and
    compaction summaries; a lower request limit cuts it."""
    retry, errors, switches = policy.retry, policy.max_total_errors, max(0, models - 1)
    failed = (turns + switches) * retry.max_retries + switches
    retried = failed if errors is None else min(failed, errors - 1)
    summary = 1 if policy.summarize_on_max_steps else 0
    compaction = turns * _summaries_per_turn(policy)
    total = turns + retried + summary + compaction
    turns_text = f"{turns} turns ({turns_why or f'max_steps={turns}'})"
    verifier = "; verifier rejections spend steps" if verification else ""
    compaction_text = (
        f" + {turns} × {policy.max_compaction_attempts} compaction summaries" if compaction else ""
    )
    work = _Work(
        calls=total,
        calls_text=(
            f"{turns_text} + {_retried_text(turns, retry.max_retries, errors, switches)} + "
            f"{summary} summary call{compaction_text} = {total}{verifier}"
        ),
        retried=retried,
        tool_turns=turns,
        tool_turns_text=(
            f"one per tool_calls turn, at most {turns} ({turns_why})"
            if turns_why
            else f"one per tool_calls turn, at most max_steps={turns}"
        ),
    )
    requests = policy.usage_limits.max_requests
    if requests is not None and requests < total:
        work = replace(
            work,
            calls=requests,
            calls_text=(
                f"usage_limits.max_requests={requests} (the request limit stops turns, "
                f"retries, compaction summaries and the step-limit summary call before {total})"
            ),
        )
    if requests is not None and requests < turns:
        work = replace(
            work,
            tool_turns=requests,
            tool_turns_text=f"one per tool_calls turn, at most one per request ({requests})",
        )
    return work


def _request_bounded(policy: Policy, requests: int) -> _Work:
    """The work of a run with no step limit whose ``requests`` bound every attempt."""
    errors = policy.max_total_errors
    return _Work(
        calls=requests,
        calls_text=(
            f"usage_limits.max_requests={requests} (max_steps=None; every attempt is a request)"
        ),
        retried=requests - 1 if errors is None else min(requests - 1, errors - 1),
        tool_turns=requests,
        tool_turns_text=f"one per tool_calls turn, at most one per request ({requests})",
    )


def _executions(policy: Policy, tool_turns: int | None) -> tuple[int | None, str]:
    """The tool executions of one run at worst, and why."""
    if policy.max_tool_calls is not None:
        return policy.max_tool_calls, f"Policy.max_tool_calls={policy.max_tool_calls}"
    return None, (
        "a response may carry any number of tool calls; set Policy.max_tool_calls "
        f"(tool turns: {_show(tool_turns)})"
    )


def _compose(own: Bounds, timed: Bounds, policy: Policy, children: Sequence[ChildBounds]) -> Bounds:
    """The worst case of an agent whose own is ``own`` under ``policy`` (``timed``: the same
    with each tool call as long as its longest child's call) when it uses ``children`` as
    tools: each of its tool executions may be a call of its costliest child."""
    times = own.max_tool_executions
    calls, calls_text = _added(
        own.max_model_calls, own.model_calls_derivation, children, "max_model_calls", times
    )
    requests = policy.usage_limits.max_requests
    if requests is not None and (calls is None or requests < calls):
        calls_text = (
            f"usage_limits.max_requests={requests}, shared with the children ({calls_text})"
        )
        calls = requests
    executions, executions_text = _added(
        own.max_tool_executions,
        own.tool_executions_derivation,
        children,
        "max_tool_executions",
        times,
    )
    wall, wall_text = timed.max_wall_clock_s, timed.wall_clock_derivation
    if policy.max_wall_clock_s is not None and wall == policy.max_wall_clock_s:
        wall_text = wall_text.replace(" (", ", shared with the children (", 1)
    return Bounds(
        max_model_calls=None if calls is None else int(calls),
        model_calls_derivation=calls_text,
        max_tool_turns=own.max_tool_turns,
        tool_turns_derivation=own.tool_turns_derivation,
        max_tool_executions=None if executions is None else int(executions),
        tool_executions_derivation=executions_text,
        max_wall_clock_s=None if wall is None else float(wall),
        wall_clock_derivation=wall_text,
    )


def _added(
    own: float | None,
    own_text: str,
    children: Sequence[ChildBounds],
    metric: str,
    times: int | None,
) -> tuple[float | None, str]:
    """One bound of the parent, ``own``, plus ``times`` the costliest child's, with the
    derivation."""
    worst = max(children, key=lambda c: _key(getattr(c.bounds, metric)))
    child: float | None = getattr(worst.bounds, metric)
    if own is None:
        return None, own_text
    if times is None:
        return None, (
            "unbounded: the children may be called any number of times (set Policy.max_tool_calls)"
        )
    if child is None:
        return None, f"unbounded: the child {worst.name!r} is unbounded"
    total = own + times * child
    return total, (
        f"{_show(own)} of its own + {times} tool executions × {_show(child)} (the worst of "
        f"the child {worst.name!r}) = {_show(total)}"
    )


def _key(value: float | None) -> float:
    """Orders bounds with ``None`` (unbounded) above every number."""
    return float("inf") if value is None else value


def _summaries_per_turn(policy: Policy) -> int:
    """Model calls the compaction before one turn can make (``summarize`` makes one each)."""
    if CompactionStrategyName.SUMMARIZE not in policy.compaction.strategies:
        return 0
    return policy.max_compaction_attempts


def _retried_text(turns: int, max_retries: int, errors: int | None, switches: int) -> str:
    per_turn = f"{turns} × {max_retries} retries"
    if switches:
        per_turn = f"({turns} + {switches}) × {max_retries} retries + {switches} model switch" + (
            "es" if switches > 1 else ""
        )
    if errors is None:
        return per_turn
    return f"min({per_turn}, max_total_errors - 1 = {errors - 1})" + (
        " failed calls" if switches else " retries"
    )


def _wall_clock(
    policy: Policy,
    calls: int | None,
    retried: int,
    tool_turns: int | None,
    executions: int | None,
    retry: RetryPolicy,
    model_timeout_s: float | None,
    tool_time: tuple[float | None, str],
) -> tuple[float | None, str]:
    """The wall-clock bound: the policy's limit, or the worst time the bounded work can take,
    one tool call taking at most ``tool_time`` (seconds, and what they are)."""
    tool_s, tool_text = tool_time
    work: float | None = None
    if model_timeout_s is None:
        why = "no model-call timeout is known (model_timeout_s)"
    elif calls is None:
        why = "the model calls are unbounded"
    else:
        backoff = _worst_backoff(retry, retried)
        if executions is not None:
            tool_runs: int | None = executions
            if policy.parallel_tool_calls and tool_turns is not None:
                tool_runs = min(executions, tool_turns)
        else:
            tool_runs = tool_turns if policy.parallel_tool_calls else None
        if tool_runs is None:
            why = "sequential tool calls without max_tool_calls take unbounded time"
        elif tool_s is None:
            why = f"a tool call takes unbounded time: {tool_text}"
        else:
            work = calls * model_timeout_s + backoff + tool_runs * tool_s
            tools = "parallel turns" if policy.parallel_tool_calls else "tool calls"
            why = (
                f"{calls} calls × {model_timeout_s:g} s + {backoff:g} s worst backoff over "
                f"{retried} retries + {tool_runs} {tools} × {tool_text} = {work:g} s"
            )
    limit = policy.max_wall_clock_s
    if limit is None:
        return work, why if work is not None else f"unbounded: {why}"
    if work is None or limit <= work:
        return limit, f"max_wall_clock_s={limit:g} ({why})"
    return work, f"{why} < max_wall_clock_s={limit:g}"


def _worst_backoff(retry: RetryPolicy, retried: int) -> float:
    """The longest total wait over ``retried`` retries grouped in runs of at most
    ``retry.max_retries`` (a run's waits grow, so full runs are the worst)."""
    if retried == 0 or retry.max_retries == 0:
        return 0.0
    full, rest = divmod(retried, retry.max_retries)
    return full * _run_wait(retry, retry.max_retries) + _run_wait(retry, rest)


def _run_wait(retry: RetryPolicy, count: int) -> float:
    """The longest total wait before retries 1..count of one run of failures."""
    if retry.honour_retry_after:  # a server may ask for any wait up to max_delay_s
        return count * retry.max_delay_s
    total = 0.0
    delay = retry.base_delay_s * (1 + retry.jitter)  # the most jitter can add
    for done in range(count):
        if delay >= retry.max_delay_s:  # capped from here on
            return total + (count - done) * retry.max_delay_s
        if delay == 0:
            return total
        total += delay
        delay *= 2
    return total
