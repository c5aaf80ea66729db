"""A triage agent that hands the conversation to a specialist, and the bound of the chain.

The triage agent looks the order up, then hands the conversation to the refunds specialist
(its model calls ``transfer_to_refunds``, a tool the declared handoff offers). The specialist
continues the same run, under its own system prompt, tools and model, and answers the user; it
may hand the conversation back to triage, so the graph has a cycle, which
``Policy.max_handoffs`` bounds. ``triage.bounds()`` covers the whole chain: the run's policy,
the agents' models and tools, and the handoffs.

Offline it runs on scripted models. With ``TRIAGE_MODEL=provider:model`` (and that provider's
server, e.g. ``OPENAI_BASE_URL`` of a local llama.cpp server) every agent runs on a real one.

Prove the chain's bound from the command line::

    fsm-agent check --agent examples.handoff_triage:triage --model-timeout 60
"""

from __future__ import annotations

import asyncio
import os

from fsm_agent import Agent, Handoff, Model, Policy, RetryPolicy, tool
from fsm_agent.kernel.handoffs import without_tool_calls
from fsm_agent.testing import ScriptedModel, text, tool_call

ORDERS = {"1042": "order 1042: 2 × tea, 24 EUR, charged twice on 3 March"}


@tool
def lookup_order(order: str) -> str:
    """Look an order up by its number."""
    return ORDERS.get(order, f"no order {order!r}")


@tool
def refund(order: str, amount_eur: float) -> str:
    """Refund part of an order."""
    return f"refunded {amount_eur:g} EUR on order {order}"


POLICY = Policy(
    max_steps=4,
    max_tool_calls=4,
    max_handoffs=2,
    retry=RetryPolicy(max_retries=1, base_delay_s=0.01, max_delay_s=0.01),
)
"""The run's policy, whoever holds the conversation: 4 turns, 4 tool calls, 2 handoffs."""


def build(triage_model: Model, refunds_model: Model) -> Agent[None]:
    """Triage, which may hand off to refunds, which may hand back to triage."""
    refunds = Agent(
        refunds_model,
        tools=[refund],
        system_prompt="You handle refunds. Refund what was charged twice, then tell the user.",
    )
    triage = Agent(
        triage_model,
        tools=[lookup_order],
        system_prompt="You triage customer messages: look the order up, then hand off.",
        policy=POLICY,
        handoffs=[
            Handoff(
                refunds,
                name="refunds",
                description="Hand the conversation to the refunds specialist.",
                input_filter=without_tool_calls,  # refunds sees what was said, not the lookups
            )
        ],
    )
    refunds.handoffs = [
        Handoff(triage, name="triage", description="Hand back anything that is not a refund.")
    ]
    return triage


TRIAGE_SCRIPT = [
    tool_call("lookup_order", {"order": "1042"}),
    tool_call("transfer_to_refunds", {}, text="Order 1042 was charged twice: 24 EUR."),
]
REFUNDS_SCRIPT = [
    tool_call("refund", {"order": "1042", "amount_eur": 24}),
    text("I have refunded the second charge of 24 EUR on order 1042."),
]

# Scripted models by default, so that ``fsm-agent check --agent`` can import this module.
triage = build(ScriptedModel(TRIAGE_SCRIPT), ScriptedModel(REFUNDS_SCRIPT))


async def main() -> None:
    spec = os.environ.get("TRIAGE_MODEL")
    message = "I was charged twice for order 1042."
    if spec is None:
        result = await triage.run(message)
    else:
        from fsm_agent.providers import infer_model

        async with infer_model(spec) as model:  # closes its HTTP connections at the end
            result = await build(model, model).run(message)
    assert result.run_state is not None
    print(f"{result.stop_reason.value}: {result.output}")
    for change in result.run_state.handoff_trace:
        print(f"after turn {change.step}: {change.source or 'triage'} -> {change.dest}")
    bound = triage.bounds(model_timeout_s=60)
    print("the chain's bounds:")
    for line in bound.lines():
        print(f"  {line}")
    assert bound.max_model_calls is not None
    assert result.model_calls <= bound.max_model_calls
    if spec is None:
        assert result.ok
        assert result.run_state.agent == "refunds"
        assert result.model_calls == 4


if __name__ == "__main__":
    asyncio.run(main())
