"""The model protocol: what the kernel needs from any model, provider or test double."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ..errors import ModelError
from ..values.messages import ModelRequest, ModelResponse, StreamDelta

__all__ = ["Model", "ModelChain", "StreamingModel", "check_request"]


@runtime_checkable
class Model(Protocol):
    """A chat model.

    ``complete`` returns one :class:`ModelResponse` or raises a
    :class:`~fsm_agent.errors.ModelError`. ``name`` identifies the model in events and traces;
    ``context_window`` (tokens, or ``None`` when unknown) sizes the compaction budget.

    A model may also have ``check_request(request)``, which raises
    :class:`~fsm_agent.errors.ConfigurationError` for settings it would refuse: the agent asks
    it before a run starts, with the run's first request (no messages yet), so that nothing is
    stored. A model without the method takes every request (see :func:`check_request`).
    """

    @property
    def name(self) -> str:
        """A short identifier such as ``"openai:gpt-4o-mini"``."""
        ...

    @property
    def context_window(self) -> int | None:
        """The model's context window in tokens, or ``None`` when unknown."""
        ...

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Make one call and return the whole response."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream: deltas as they arrive, then exactly one final
    :class:`ModelResponse` as the last item. A stream that ends without one is an error."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Stream one call."""
        ...


@runtime_checkable
class ModelChain(Model, Protocol):
    """A model that is an ordered chain of models, the first one called first
    (:class:`~fsm_agent.providers.fallback.FallbackModel`). The kernel calls the chain's models
    itself: each move to the next one is a row of the machine."""

    @property
    def models(self) -> tuple[Model, ...]:
        """The models, in the order they take the call."""
        ...

    def falls_back_on(self, error: ModelError) -> bool:
        """Whether ``error`` hands the call to the next model at once (without the retries)."""
        ...


def check_request(model: Model, request: ModelRequest) -> None:
    """Ask ``model`` whether it takes ``request``: its ``check_request`` method raises
    :class:`~fsm_agent.errors.ConfigurationError` for settings it refuses; a model without
    the method takes every request."""
    check = getattr(model, "check_request", None)
    if check is not None:
        check(request)
