"""The usage limits of a policy, as the driver and the step-limit summary call read them."""

from __future__ import annotations

from ..messages import Usage
from ..policy import Policy

__all__ = ["usage_exceeded", "usage_limited"]


def usage_limited(policy: Policy) -> bool:
    """Whether ``policy`` sets any usage limit (requests, tokens or cost)."""
    return any(value is not None for value in policy.usage_limits.model_dump().values())


def usage_exceeded(policy: Policy, usage: Usage, model_calls: int) -> bool:
    """Whether a run that used ``usage`` in ``model_calls`` attempts has reached a limit.

    ``max_requests`` counts attempts (``model_calls``), failed ones included: a provider bills
    and rate-limits those too, and the bounds rely on it when ``max_steps`` is ``None``."""
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
