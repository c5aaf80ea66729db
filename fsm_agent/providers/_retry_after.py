"""Parsing the delay a server asks for before a retry.

Precedence: ``retry-after-ms`` (milliseconds), then ``retry-after`` (seconds, fractional allowed,
or an HTTP-date), then a provider's own body value (Gemini ``google.rpc.RetryInfo.retryDelay``).
Non-finite, zero, negative and absurdly large values are rejected (``None``), so a bad header
never replaces the status error it came with.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Mapping

__all__ = ["MAX_SANE_DELAY", "parse_duration", "parse_retry_after"]

MAX_SANE_DELAY = 7 * 24 * 3600.0
"""Delays above a week are treated as garbage (e.g. ``retry-after: 1e35``), not as a schedule."""


def _valid(delay: float) -> float | None:
    if not math.isfinite(delay) or delay <= 0 or delay > MAX_SANE_DELAY:
        return None
    return delay


def _seconds(text: str) -> float | None:
    try:
        return _valid(float(text))
    except ValueError:
        return None


def _http_date(text: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    try:
        return _valid(when.timestamp() - now)
    except (OverflowError, OSError, ValueError):
        return None


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The delay in seconds asked for by ``retry-after-ms`` or ``retry-after``, or ``None``.

    ``now`` (a POSIX timestamp) is only used to turn an HTTP-date into a delay.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            delay = _valid(float(millis.strip()) / 1000.0)
        except ValueError:
            delay = None
        if delay is not None:
            return delay
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    delay = _seconds(value)
    if delay is not None or _looks_numeric(value):
        return delay
    return _http_date(value, time.time() if now is None else now)


def _looks_numeric(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def parse_duration(text: str) -> float | None:
    """A protobuf JSON duration such as ``"45.837906927s"`` in seconds, or ``None``."""
    if not text.endswith("s"):
        return None
    return _seconds(text[:-1])
