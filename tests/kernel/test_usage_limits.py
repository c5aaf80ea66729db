"""Usage limits hold whatever a model adapter reports: a NaN, infinite or negative count is
refused at the seam, and a limit that meets one anyway counts as reached."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from pydantic import ValidationError

from fsm_agent import (
    MalformedResponseError,
    ModelResponse,
    Policy,
    State,
    StopReason,
    UsageLimits,
)
from fsm_agent.events import AttemptDiscardedEvent, HookErrorEvent
from fsm_agent.kernel.limits import usage_exceeded, usage_fault
from fsm_agent.messages import Usage
from fsm_agent.testing import text, tool_call
from helpers import look, make_agent, stream


def _usage(cost: float, **counts: int) -> Usage:
    """A usage as an adapter that skips validation builds it (the constructor validates
    nothing)."""
    fields = {"requests": 1, "input_tokens": 10, "output_tokens": 5, **counts}
    return Usage(cost_usd=cost, **fields)


def _script(first: Usage) -> list:  # type: ignore[type-arg]
    """20 tool turns, the first reporting ``first`` and the others 0.004 USD each."""
    turns = [tool_call("look", usage=first)]
    turns += [tool_call("look", usage=_usage(0.004)) for _ in range(19)]
    return [*turns, text("done")]


CAP = Policy(max_steps=30, usage_limits=UsageLimits(max_cost_usd=0.01))


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf, -math.inf])
def test_a_bad_cost_does_not_disable_the_cost_cap(bad: float) -> None:
    """A turn reporting a NaN, infinite or negative cost is refused, and the cap still stops
    the run at 0.01 USD: three paid turns after it, not 21 calls."""
    agent, model, _ = make_agent(_script(_usage(bad)), tools=[look], policy=CAP)
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.USAGE_LIMIT
    assert len(model.requests) == 4
    assert result.usage.cost_usd == pytest.approx(0.012)


COUNTS = [f.name for f in dataclasses.fields(Usage) if f.name != "cost_usd"]


@pytest.mark.parametrize("name", COUNTS)
@pytest.mark.parametrize("bad", [-1, 1.0, True, None, "3"])
def test_the_usage_check_names_the_count_that_cannot_count(name: str, bad: object) -> None:
    """Each count must be an integer (not a bool) of 0 or more; the fault names the first bad
    one and its value, whichever of the six it is."""
    usage = Usage(**{"requests": 1, name: bad})  # type: ignore[arg-type]
    assert usage_fault(usage) == (
        f"it reported usage {name}={bad!r}; a count must be an integer of 0 or more"
    )
    assert usage_fault(Usage(requests=1, input_tokens=3, output_tokens=2)) is None


def test_negative_token_counts_are_refused() -> None:
    """A negative token count is refused like a bad cost: the token cap holds."""
    policy = Policy(max_steps=30, usage_limits=UsageLimits(max_total_tokens=40))
    bad = _usage(0.0, input_tokens=-1_000_000)
    agent, model, _ = make_agent(_script(bad), tools=[look], policy=policy)
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.USAGE_LIMIT
    assert len(model.requests) == 4 and result.usage.total_tokens == 45


def test_a_model_that_always_reports_nan_ends_the_run_with_the_reason() -> None:
    """Every turn NaN: the run aborts on the malformed responses, naming the field."""
    turns = [tool_call("look", usage=_usage(math.nan)) for _ in range(20)]
    agent, model, _ = make_agent(turns, tools=[look], policy=CAP)
    result = agent.run_sync("go")
    assert result.state is State.ABORTED
    assert isinstance(result.error, MalformedResponseError)
    assert "cost_usd" in str(result.error)
    assert len(model.requests) < 20 and math.isfinite(result.usage.cost_usd)


@pytest.mark.parametrize("field", ["cost_usd", "input_tokens", "requests"])
def test_usage_refuses_negative_and_nan_values(field: str) -> None:
    """A validated ``Usage`` cannot hold a negative (or, for cost, NaN) value."""
    with pytest.raises(ValidationError):
        Usage.model_validate({field: -1})
    with pytest.raises(ValidationError):
        Usage.model_validate({"cost_usd": math.nan})


def test_a_nan_total_counts_as_reaching_the_cost_cap() -> None:
    """A run total that is NaN anyway (an unvalidated sum) reaches the cap: fail closed."""
    assert usage_exceeded(CAP, _usage(math.nan), 1)
    assert not usage_exceeded(CAP, _usage(0.001), 1)


def test_a_streamed_bad_cost_is_refused_too() -> None:
    """Under ``run_stream`` the streamed response's usage is checked the same way."""
    agent, model, _ = make_agent(_script(_usage(math.nan)), tools=[look], policy=CAP)
    events, result = stream(agent)
    assert result.stop_reason is StopReason.USAGE_LIMIT and len(model.requests) == 4
    assert any(isinstance(e, AttemptDiscardedEvent) for e in events)


def test_a_hooks_answer_with_a_bad_cost_is_a_hook_failure() -> None:
    """A ``before_model_call`` hook answering with a NaN cost is reported and not used: the
    model is called and the run's cost stays a number."""

    class Cache:
        def before_model_call(self, **kw: Any) -> ModelResponse:
            answer = text("cached")
            assert isinstance(answer, ModelResponse)
            return answer.model_copy(update={"usage": _usage(math.nan)})

    agent, model, _ = make_agent([text("fresh")], hooks=[Cache()])
    events, result = stream(agent)
    assert result.output == "fresh" and len(model.requests) == 1
    assert math.isfinite(result.usage.cost_usd)
    errors = [e for e in events if isinstance(e, HookErrorEvent)]
    assert len(errors) == 1 and "cost_usd=nan" in errors[0].error
