"""The failing primary of a fuzz case's fallback chain (``FuzzCase.fallback``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

from ..errors import RateLimitError
from ..models.scripted import Failure, Turn
from ..values.messages import ModelRequest, ModelResponse, StreamDelta

__all__ = ["FailingPrimary", "Recording"]


class Recording(Protocol):
    """The script model the primary records its calls in."""

    requests: list[ModelRequest]
    played: list[Turn]


class FailingPrimary:
    """The primary of a case's fallback chain: every call fails with a rate limit. Its calls are
    recorded in the script model's ``requests`` (as failures in ``played``), so the invariants
    count every call of the chain."""

    def __init__(self, backup: Recording) -> None:
        self.backup = backup

    @property
    def name(self) -> str:
        """The model's name in events and traces."""
        return "fuzz-primary"

    @property
    def context_window(self) -> int | None:
        """Unknown, like the script model's."""
        return None

    def _fail(self, request: ModelRequest) -> RateLimitError:
        error = RateLimitError("429: the primary is rate-limited", status_code=429)
        self.backup.requests.append(request)
        self.backup.played.append(Failure(error))
        return error

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Fail."""
        await asyncio.sleep(0)
        raise self._fail(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamDelta | ModelResponse]:
        """Fail before the first fragment."""
        await asyncio.sleep(0)
        raise self._fail(request)
        yield  # pragma: no cover - makes this an async generator
