"""The offline demo agent of ``fsm-agent demo``, and the small tools ``fsm-agent run`` offers.

The demo is a scripted run that walks the interesting parts of the machine in a few moves: two
tool calls, a model error that is retried after backoff, and an answer the verifier rejects
before it accepts the second one. Backoff sleeps on a virtual clock, so the run takes
milliseconds, and the run id is fixed, so the run is the same every time.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

from .errors import ProviderServerError
from .events import Event
from .handlers import Verdict
from .kernel import Agent, Runtime
from .policy import Policy, RetryPolicy
from .testing import ScriptedModel, VirtualClock, fail, text, tool_call
from .tools import Tool, tool

__all__ = ["DEMO_POLICY", "DEMO_PROMPT", "DEMO_TOOLS", "demo_agent", "demo_events"]


@tool
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


@tool
def multiply(a: float, b: float) -> float:
    """Multiply two numbers."""
    return a * b


@tool
def utc_now() -> str:
    """The current date and time in UTC, as ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


DEMO_TOOLS: tuple[Tool, ...] = (add, multiply, utc_now)
"""The built-in tools of the demo and of ``fsm-agent run``."""

DEMO_PROMPT = "I buy 3 notebooks at €4 each and a pen at €5. What do I pay?"
"""The demo's task."""

DEMO_POLICY = Policy(max_steps=8, retry=RetryPolicy(max_retries=2, base_delay_s=1.0))
"""The demo's limits: small numbers, so the diagram's guards read clearly."""


def _currency_verifier(*, output: str, **_: object) -> Verdict:
    """Accept an answer only when it states the currency."""
    if "€" in output:
        return Verdict.accept()
    return Verdict.reject("Give the amount with its currency (€).")


def demo_agent(clock: VirtualClock | None = None) -> Agent[None]:
    """The demo agent: a scripted model, two arithmetic tools and a currency verifier."""
    clock = clock or VirtualClock()
    model = ScriptedModel(
        [
            tool_call("multiply", {"a": 3, "b": 4}, text="First the notebooks."),
            fail(ProviderServerError("503 Service Unavailable: overloaded", status_code=503)),
            tool_call("add", {"a": 12, "b": 5}, text="Now add the pen."),
            text("The total is 17."),
            text("3 × €4 = €12, plus the €5 pen: you pay €17."),
        ],
        name="scripted-demo",
    )
    return Agent(
        model,
        tools=DEMO_TOOLS,
        system_prompt="You are a careful shop assistant. Use the tools for arithmetic.",
        policy=DEMO_POLICY,
        verifier=_currency_verifier,
        runtime=Runtime(
            sleep=clock.sleep, clock=clock.now, random=random.Random(0), new_id=lambda: "run_demo"
        ),
    )


def demo_events() -> AsyncIterator[Event]:
    """The events of one demo run, as they happen."""
    return demo_agent().run_stream(DEMO_PROMPT)
