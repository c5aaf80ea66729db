"""A scripted run for the durability tests: a lookup (idempotent), a model error that is
retried, a parallel-capable turn with a charge (not idempotent), an answer the verifier rejects,
then the accepted one. The model and the tools report what they do to ``note``, which stands for
the outside world: it survives a crash of the run's process."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from fsm_agent import Agent, ModelRequest, ModelResponse, Policy, RetryPolicy, Runtime, tool
from fsm_agent.kernel.states import Verdict
from fsm_agent.persistence import Checkpointer
from fsm_agent.testing import Failure, Turn, VirtualClock, fail, text, tool_call, tool_calls

__all__ = ["PROMPT", "RUN_ID", "TURNS", "ExternalModel", "make_agent"]

PROMPT = "Look up a, then charge 5 and look up b."
RUN_ID = "run_durable"
TURNS: list[Turn] = [
    tool_call("lookup", {"key": "a"}, id="c1", text="Looking up a."),
    fail("503 overloaded"),
    tool_calls(("charge", {"amount": 5}, "c2"), ("lookup", {"key": "b"}, "c3")),
    text("Charged."),
    text("Charged 5 after looking up a and b."),
]


class ExternalModel:
    """The scripted model as an outside service: it starts at ``position`` (the calls made
    before a crash) and reports each call to ``note``."""

    def __init__(self, turns: list[Turn], note: Callable[[str], None], position: int = 0) -> None:
        self.turns = turns
        self.note = note
        self.position = position
        self.requests: list[ModelRequest] = []

    @property
    def name(self) -> str:
        return "external"

    @property
    def context_window(self) -> int | None:
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await asyncio.sleep(0)
        self.requests.append(request)
        turn = self.turns[self.position]
        self.position += 1
        self.note("model")
        if isinstance(turn, Failure):
            raise turn.error
        return turn


def _verifier(*, output: str, **_: object) -> Verdict:
    if "a and b" in output:
        return Verdict.accept()
    return Verdict.reject("Say what you looked up.")


def make_agent(
    store: Checkpointer | None,
    note: Callable[[str], None],
    *,
    position: int = 0,
    parallel: bool = False,
    before_charge: Callable[[], None] | None = None,
    after_charge: Callable[[], None] | None = None,
    charge_idempotent: bool = False,
    **kwargs: Any,
) -> Agent[None]:
    """The scenario's agent; ``before_charge``/``after_charge`` run around the charge's effect
    (a test crashes there)."""

    @tool(name="lookup", idempotent=True)
    def lookup(key: str) -> str:
        """Look a key up."""
        note("lookup")
        return f"{key} = 1"

    @tool(name="charge", idempotent=charge_idempotent)
    def charge(amount: int) -> str:
        """Charge an amount."""
        if before_charge is not None:
            before_charge()
        note("charge")
        if after_charge is not None:
            after_charge()
        return f"charged {amount}"

    clock = VirtualClock()
    return Agent(
        ExternalModel(TURNS, note, position),
        tools=[lookup, charge],
        system_prompt="Be careful with money.",
        policy=Policy(max_steps=10, parallel_tool_calls=parallel, retry=RetryPolicy(max_retries=2)),
        verifier=_verifier,
        runtime=Runtime(
            sleep=clock.sleep, clock=clock.now, random=random.Random(0), new_id=lambda: RUN_ID
        ),
        checkpointer=store,
        **kwargs,
    )
