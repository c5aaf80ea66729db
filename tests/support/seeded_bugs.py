"""The seeded bugs: known-bad tables, policies and hooks that ``check`` and ``fuzz`` must each
catch (tests/analysis/test_seeded_bugs.py proves they do). Importable by name
(``seeded_bugs:unlimited_retry_agent``) so that ``fsm-agent fuzz`` can load a factory."""

from __future__ import annotations

from typing import Any

from fsm_agent import (
    Agent,
    AgentMachine,
    FinishReason,
    Message,
    ModelResponse,
    Policy,
    RetryPolicy,
    Usage,
    UsageLimits,
    Verdict,
)
from fsm_agent.fuzzing import DEFAULT_TOOLS
from fsm_agent.machine.table import TABLE, Counter, Outcome, Row, State, Update
from fsm_agent.messages import ToolCall
from fsm_agent.models import Model

S, On = State, Outcome
TOOLS = DEFAULT_TOOLS[:2]  # add (ok) and boom (raises)


def _without(source: State, outcome: Outcome) -> list[Row]:
    return [r for r in TABLE if not (r.source is source and r.outcome is outcome)]


# -- the planted bugs ---------------------------------------------------------------------------
ENDLESS_REJECTION = AgentMachine(
    [*_without(S.VERIFYING, On.REJECTED), Row(S.VERIFYING, On.REJECTED, S.COMPACTING)]
)
"""Rejected answers always go back to the model: the verification budget is never read."""
ENDLESS_RETRY = AgentMachine(
    [
        *_without(S.CALLING, On.RETRYABLE_ERROR),
        Row(S.CALLING, On.RETRYABLE_ERROR, S.CALLING, updates=(Update(Counter.RETRIES),)),
    ]
)
"""A retry row without the can_retry guard: a retry policy with no limit."""
REENQUEUED_TOOLS = AgentMachine(
    [*_without(S.DISPATCHING, On.TOOLS_DONE), Row(S.DISPATCHING, On.TOOLS_DONE, S.DISPATCHING)]
)
"""The table's picture of a hook that re-runs the tool turn without a model turn."""
NO_STEP_LIMIT = Policy(max_steps=None, max_wall_clock_s=60)
"""Only a wall-clock limit, which ends a run in time but not in work."""
FEW_REQUESTS = Policy(max_steps=None, usage_limits=UsageLimits(max_requests=2))


def always_rejecting_verifier_agent(model: Model) -> Agent[Any, Any]:
    """An agent whose verifier rejects every answer, on the endless-rejection table."""
    return Agent(
        model,
        tools=TOOLS,
        policy=Policy(max_steps=2, max_compaction_attempts=0),
        verifier=lambda **_: Verdict.reject("never good enough"),
        machine=ENDLESS_REJECTION,
    )


class Reenqueue:
    """A hook that answers every model call with the same tool call, so the model is never
    asked again and no request is counted."""

    def before_model_call(self, **future_kwargs: Any) -> ModelResponse:
        """Re-enqueue the last tool call."""
        call = ToolCall.create("again", "add", {"a": 1, "b": 1})
        return ModelResponse(
            message=Message.assistant("", [call]),
            finish_reason=FinishReason.TOOL_CALLS,
            usage=Usage(),
        )


def reenqueueing_hook_agent(model: Model) -> Agent[Any, Any]:
    """An agent whose hook re-enqueues tool calls forever (a real hook, a valid policy)."""
    return Agent(model, tools=TOOLS, policy=FEW_REQUESTS, hooks=[Reenqueue()])


def never_stopping_agent(model: Model) -> Agent[Any, Any]:
    """An agent that relies on a stop condition that never fires, with max_steps=None."""
    return Agent(model, tools=TOOLS, policy=NO_STEP_LIMIT, stop_conditions=[lambda rs: False])


def unlimited_retry_agent(model: Model) -> Agent[Any, Any]:
    """An agent on the table whose retry row has no limit."""
    return Agent(
        model,
        tools=TOOLS,
        policy=Policy(max_steps=2, retry=RetryPolicy(max_retries=2)),
        machine=ENDLESS_RETRY,
    )
