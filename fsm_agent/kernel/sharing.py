"""How the children of a parent's tool turn share what is left of the parent's usage limits.

The rule, for each usage limit the parent sets (requests, tokens, cost): when a child starts,
what is left is the limit less what the run has used and less what the children still running
were granted; the child is granted an equal share of it among the turn's agent calls that have
not started yet, itself included (rounded up for the counts), or its own limit when that is
smaller. Concurrent children start together, so the ``k`` children of a turn that
have ``L`` requests left are granted ``ceil(L / k)``, ``ceil((L - first) / (k - 1))``, ... :
shares that differ by at most one and sum to ``L``. Children called one after another get the
same shares, each from what its elder siblings left. A child that ends gives back what it did
not use (the parent is charged what it used). An agent call of the turn that never runs (over
``max_tool_calls``, or answered from a resumed run's journal) counts among those not yet
started: the share it would have had stays with the parent.

No child is refused while something is left; when nothing is, the refusal says what the child
asked for, what the run used and what it granted the children running beside it. Nothing here
runs for an agent without children.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import field
from typing import TYPE_CHECKING

from ..policy import UsageLimits
from ..values.define import record
from ..values.messages import ToolCall, Usage

if TYPE_CHECKING:
    from ..tools import Tool
    from .context import RunContext

__all__ = ["Grant", "grant_limits", "release", "spent_share"]

LIMIT_FIELDS = (
    "max_requests",
    "max_input_tokens",
    "max_output_tokens",
    "max_total_tokens",
    "max_cost_usd",
)


@record(frozen=False, kw_only=False)
class Grant:
    """The share of a parent's usage limits one running child was given, by limit name, and
    what the parent had left of each when it was split."""

    limits: dict[str, float]
    left: dict[str, float]
    sharing: int  # the turn's agent calls not yet started it was split among


@record(frozen=False, kw_only=False)
class _Sharing:
    """The agent calls of a parent's current tool turn that started, and the grants of the
    children still running."""

    turn: list[ToolCall]
    started: set[str] = field(default_factory=set)
    grants: list[Grant] = field(default_factory=list)


_SHARING: weakref.WeakKeyDictionary[RunContext, _Sharing] = weakref.WeakKeyDictionary()


def _used(usage: Usage, model_calls: int) -> dict[str, float]:
    return {
        "max_requests": model_calls,
        "max_input_tokens": usage.input_tokens,
        "max_output_tokens": usage.output_tokens,
        "max_total_tokens": usage.total_tokens,
        "max_cost_usd": usage.cost_usd,
    }


def _sharing(parent: RunContext) -> _Sharing:
    """The parent's sharing state for its current turn (a new turn starts afresh)."""
    found = _SHARING.get(parent)
    if found is None or found.turn is not parent.turn_calls:
        found = _SHARING[parent] = _Sharing(parent.turn_calls)
    return found


def _waiting(parent: RunContext, sharing: _Sharing, call_id: str) -> int:
    """The turn's agent calls that have not started, ``call_id``'s included."""
    tools = parent.plan.tools
    names = {
        call.id
        for call in sharing.turn
        if call.id not in sharing.started and _runs_agent(tools.find(call.name))
    }
    names.add(call_id)
    return len(names)


def _runs_agent(found: Tool | None) -> bool:
    return found is not None and found.runs_agent


def grant_limits(
    own: UsageLimits, parent: RunContext, call_id: str
) -> tuple[UsageLimits, Grant] | str:
    """The usage limits of the child started by the parent's call ``call_id``, each the
    smaller of the child's own and its share of what the parent has left, with the grant taken
    from the parent; or, when the parent has nothing left of a limit, why the child is
    refused."""
    theirs = parent.plan.policy.usage_limits
    sharing = _sharing(parent)
    used = _used(parent.rs.usage, parent.rs.model_calls)
    waiting = _waiting(parent, sharing, call_id)
    values: dict[str, float | None] = {}
    grant = Grant({}, {}, waiting)
    for name in LIMIT_FIELDS:
        mine = getattr(own, name)
        limit = getattr(theirs, name)
        if limit is None:
            continue
        granted = sum(g.limits.get(name, 0) for g in sharing.grants)
        left = limit - used[name] - granted
        if left <= 0:
            return _refusal(name, limit, mine, used[name], granted, len(sharing.grants))
        share = left / waiting if name == "max_cost_usd" else math.ceil(left / waiting)
        if mine is not None:
            share = min(mine, share)
        values[name] = grant.limits[name] = share
        grant.left[name] = left
    sharing.started.add(call_id)
    sharing.grants.append(grant)
    return own.model_copy(update=values), grant


def _refusal(
    name: str, limit: float, mine: float | None, used: float, granted: float, running: int
) -> str:
    asked = "no limit of its own" if mine is None else f"at most {name}={_show(mine)}"
    beside = f"{running} agent call{'s' if running != 1 else ''} running beside it"
    return (
        f"nothing is left for it of the run's usage_limits.{name}={_show(limit)} "
        f"({_show(used)} used, {_show(granted)} granted to the {beside}); it asks for {asked}. "
        "Call fewer agents at once, or raise the parent's limit"
    )


def release(parent: RunContext, grant: Grant) -> None:
    """The child of ``grant`` ended: what it was granted is the parent's again (its usage is
    charged to the parent by the caller)."""
    found = _SHARING.get(parent)
    if found is not None and grant in found.grants:
        found.grants.remove(grant)


def spent_share(grant: Grant, usage: Usage, model_calls: int) -> str | None:
    """What a child that stopped on a usage limit was granted and used, when it stopped on a
    share of its parent's limits (``None`` when none of its shares is spent)."""
    used = _used(usage, model_calls)
    for name, share in grant.limits.items():
        if used[name] >= share:
            calls = f"{grant.sharing} agent call{'s' if grant.sharing != 1 else ''}"
            return (
                f"it was granted {name}={_show(share)}, an equal share of the "
                f"{_show(grant.left[name])} the run had left among the turn's {calls} not yet "
                f"started, and used {_show(used[name])}"
            )
    return None


def _show(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
