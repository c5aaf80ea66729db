"""The usage limits of a policy, as the driver and the step-limit summary call read them, and
the check of the usage a model adapter reports before it counts."""

from __future__ import annotations

import math
from operator import attrgetter

from ..policy import Policy
from ..values.messages import Usage

__all__ = ["usage_exceeded", "usage_fault", "usage_limited"]

_COUNTS = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
_counts = attrgetter(*_COUNTS)


def usage_limited(policy: Policy) -> bool:
    """Whether ``policy`` sets any usage limit (requests, tokens or cost)."""
    return any(value is not None for value in policy.usage_limits.model_dump().values())


def usage_fault(usage: object) -> str | None:
    """What is wrong with a usage a model adapter reported, or ``None`` when it can count: a
    ``Usage`` whose counts are integers of 0 or more and whose cost is finite and 0 or more.
    An adapter may build its usage without validation; a NaN or negative value summed into
    the run's usage would leave a limit never reached."""
    if not isinstance(usage, Usage):
        return f"the response's usage is a {type(usage).__name__}, not a Usage"
    for count in _counts(usage):
        if type(count) is not int or count < 0:  # (bool is not int here)
            return _count_fault(usage)
    cost = usage.cost_usd
    if not isinstance(cost, (int, float)) or not math.isfinite(cost) or cost < 0:
        return (
            f"it reported usage cost_usd={cost!r}; a cost must be a finite number of 0 or more "
            "(report 0 when it is not known)"
        )
    return None


def _count_fault(usage: Usage) -> str:
    name, count = next(
        (name, count)
        for name, count in zip(_COUNTS, _counts(usage), strict=True)
        if type(count) is not int or count < 0
    )
    return f"it reported usage {name}={count!r}; a count must be an integer of 0 or more"


def usage_exceeded(policy: Policy, usage: Usage, model_calls: int) -> bool:
    """Whether a run that used ``usage`` in ``model_calls`` attempts has reached a limit.

    ``max_requests`` counts attempts (``model_calls``), failed ones included: a provider bills
    and rate-limits those too, and the bounds rely on it when ``max_steps`` is ``None``. Each
    comparison is written so that a value that is not a number (NaN) reaches the limit: a
    limit fails closed."""
    limits = policy.usage_limits
    return (
        (limits.max_requests is not None and not model_calls < limits.max_requests)
        or (
            limits.max_input_tokens is not None and not usage.input_tokens < limits.max_input_tokens
        )
        or (
            limits.max_output_tokens is not None
            and not usage.output_tokens < limits.max_output_tokens
        )
        or (
            limits.max_total_tokens is not None and not usage.total_tokens < limits.max_total_tokens
        )
        or (limits.max_cost_usd is not None and not usage.cost_usd < limits.max_cost_usd)
    )
