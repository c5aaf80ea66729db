"""Agent factories that make the fuzzer slow: a model that takes minutes to answer, and a
retry budget as large as validation accepts. Importable by name (``slow_agents:...``), so
``fsm-agent fuzz --jobs N`` can load them in its worker processes."""

from __future__ import annotations

import asyncio
from typing import Any

from fsm_agent import Agent, Policy, RetryPolicy
from fsm_agent.fuzzing import DEFAULT_TOOLS
from fsm_agent.messages import ModelRequest, ModelResponse
from fsm_agent.models import Model

__all__ = ["many_retries_agent", "slow_model_agent"]

SLOW_S = 600.0
"""How long the slow model takes to answer: far past any time limit a test gives."""


class _SlowModel:
    """``model``, answering only after :data:`SLOW_S` seconds of real time."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.name = "slow"
        self.context_window = None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Wait, then answer as the wrapped model does."""
        await asyncio.sleep(SLOW_S)
        return await self.model.complete(request)


def slow_model_agent(model: Model) -> Agent[Any, Any]:
    """An agent whose every model call takes :data:`SLOW_S` seconds."""
    return Agent(_SlowModel(model), tools=DEFAULT_TOOLS[:2])


def many_retries_agent(model: Model) -> Agent[Any, Any]:
    """An agent with the largest retry budget validation accepts."""
    return Agent(
        model, tools=DEFAULT_TOOLS[:2], policy=Policy(retry=RetryPolicy(max_retries=10**6))
    )
