"""A fallback chain of models: when one is down, rate-limited or out of retries, the next one
takes the call.

Given to an :class:`~fsm_agent.Agent`, the chain is the machine's business: the kernel calls
the chain's models itself, and each move to the next model is a ``calling → calling`` move of
the table (outcome ``fallback`` for an error named in ``on``; ``retryable_error`` once the
retries are spent), counted by ``model_switches`` and bounded by the chain's length. Called on
its own (``await chain.complete(request)``), it tries its models in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from ..errors import (
    ConfigurationError,
    ContextWindowExceededError,
    ModelError,
    ModelTimeoutError,
    ProviderServerError,
    RateLimitError,
)
from ..models import Model
from ..values.messages import ModelRequest, ModelResponse, StreamDelta
from ._base import deltas_of

__all__ = ["DEFAULT_FALLBACK_ON", "FallbackModel"]

DEFAULT_FALLBACK_ON: tuple[type[ModelError], ...] = (
    RateLimitError,
    ProviderServerError,
    ModelTimeoutError,
)
"""The errors that hand a call to the next model at once by default: a rate limit, a server
error (5xx) and a timeout."""


class FallbackModel:
    """``primary``, then each of ``others`` in turn.

    An error whose type is one of ``on`` (by default :data:`DEFAULT_FALLBACK_ON`) hands the call
    to the next model at once; any other retryable error is retried on the same model first,
    and the next model takes the call once the policy's retries are spent. The last model of the
    chain retries as a single model would. A run never moves back up the chain.

    >>> from fsm_agent.testing import ScriptedModel
    >>> FallbackModel(ScriptedModel([]), ScriptedModel([])).name
    'fallback(scripted, scripted)'
    """

    def __init__(
        self,
        primary: Model,
        *others: Model,
        on: type[ModelError] | Iterable[type[ModelError]] = DEFAULT_FALLBACK_ON,
    ) -> None:
        models = (primary, *others)
        if not others:
            raise ConfigurationError(
                "FallbackModel needs at least two models: FallbackModel(primary, other, ...)"
            )
        for model in models:
            complete = getattr(model, "complete", None)
            if not callable(complete):
                raise ConfigurationError(
                    f"every model of a FallbackModel must implement fsm_agent.Model; got "
                    f"{type(model).__name__}"
                )
        kinds = _error_classes(on)
        for kind in kinds:
            if issubclass(kind, ContextWindowExceededError):
                raise ConfigurationError(
                    "on= cannot name ContextWindowExceededError: a context overflow is "
                    "compaction's case, not the next model's"
                )
        self._models = models
        self._on = kinds

    @property
    def models(self) -> tuple[Model, ...]:
        """The models, in the order they take the call."""
        return self._models

    @property
    def on(self) -> tuple[type[ModelError], ...]:
        """The error types that hand a call to the next model at once."""
        return self._on

    @property
    def name(self) -> str:
        """``fallback(<first>, <second>, ...)``."""
        return f"fallback({', '.join(_name(m) for m in self._models)})"

    @property
    def context_window(self) -> int | None:
        """The smallest context window the chain's models report (any model may take the
        history), or ``None`` when none reports one."""
        windows = [w for m in self._models if (w := getattr(m, "context_window", None))]
        return min(windows) if windows else None

    def falls_back_on(self, error: ModelError) -> bool:
        """Whether ``error`` hands the call to the next model at once."""
        return isinstance(error, self._on) and not isinstance(error, ContextWindowExceededError)

    def __repr__(self) -> str:
        kinds = ", ".join(k.__name__ for k in self._on)
        return f"FallbackModel({', '.join(map(repr, self._models))}, on=({kinds}))"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One call on its own: each model in turn while the error is one of ``on``."""
        last = len(self._models) - 1
        for index, model in enumerate(self._models):
            try:
                return await model.complete(request)
            except ModelError as exc:
                if index == last or not self.falls_back_on(exc):
                    raise
        raise AssertionError("unreachable: the last model returns or raises")  # pragma: no cover

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Stream one call on its own: each model in turn while the error is one of ``on`` and
        nothing was streamed yet (a model without ``stream`` gives its answer whole)."""
        last = len(self._models) - 1
        for index, model in enumerate(self._models):
            started = False
            try:
                async for item in stream_of(model, request):
                    started = True
                    yield item
                return
            except ModelError as exc:
                if started or index == last or not self.falls_back_on(exc):
                    raise


async def stream_of(
    model: Model, request: ModelRequest
) -> AsyncIterator[StreamDelta | ModelResponse]:
    """``model``'s stream of one call, or its whole answer as a stream when it cannot stream."""
    stream = getattr(model, "stream", None)
    if callable(stream):
        items = stream(request)
        try:
            async for item in items:
                yield item
        finally:
            close = getattr(items, "aclose", None)
            if close is not None:
                await close()
        return
    response = await model.complete(request)
    for delta in deltas_of(response.message.parts):
        yield delta
    yield response


def _error_classes(on: object) -> tuple[type[ModelError], ...]:
    """``on`` as a tuple of error classes: one class, or an iterable of them (not a string)."""
    items = (on,) if isinstance(on, type) else on
    if isinstance(items, Iterable) and not isinstance(items, str | bytes):
        kinds = tuple(items)
        bad = [k for k in kinds if not (isinstance(k, type) and issubclass(k, ModelError))]
        if not bad:
            return kinds
        on = bad[0]
    raise ConfigurationError(
        "on= takes ModelError subclasses, one or several (RateLimitError, ProviderServerError, "
        f"ModelTimeoutError, ...): the classes, not their names; got {on!r}"
    )


def _name(model: Model) -> str:
    return str(getattr(model, "name", type(model).__name__))
