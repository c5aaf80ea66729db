"""Shrinking a failing byte string: the smallest one found that still fails the same way.

The fuzzer's cases are decoded from bytes where a missing byte is the simplest choice and a
lower byte a simpler one, so a shorter (then lexicographically smaller) byte string decodes to
a simpler case. :func:`shrink` repeats three passes until none makes progress or the budget
runs out: truncation (the shortest failing prefix), chunk deletion (8, 4, 2, then 1 bytes at a
time) and byte lowering (to 0, halved, minus one). Every accepted candidate is smaller, so it
ends. Nothing here knows about the kernel: ``fails`` says whether a candidate still fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MAX_ATTEMPTS", "MAX_SECONDS", "shrink"]

MAX_ATTEMPTS = 2_000
"""Candidates tried at most, by default."""
MAX_SECONDS = 20.0
"""Seconds spent at most, by default."""
CHUNKS = (8, 4, 2, 1)


class _Budget(Exception):
    """The budget ran out (raised inside a pass, caught by :func:`shrink`)."""


class _Shrinker:
    def __init__(
        self, data: bytes, fails: Callable[[bytes], bool], attempts: int, seconds: float
    ) -> None:
        self.best = data
        self.fails = fails
        self.attempts = attempts
        self.end = time.perf_counter() + seconds

    def accept(self, candidate: bytes) -> bool:
        """Try ``candidate``: keep it when it still fails."""
        if self.attempts <= 0 or time.perf_counter() >= self.end:
            raise _Budget
        self.attempts -= 1
        if self.fails(candidate):
            self.best = candidate
            return True
        return False

    def truncate(self) -> None:
        """Binary search for a short failing prefix (the best so far always fails)."""
        low, high = 0, len(self.best)
        while low < high:
            middle = (low + high) // 2
            if self.accept(self.best[:middle]):
                high = middle
            else:
                low = middle + 1

    def delete_chunks(self) -> None:
        """Delete runs of ``size`` bytes, from the end back (later bytes matter least)."""
        for size in CHUNKS:
            start = len(self.best) - size
            while start >= 0:
                data = self.best
                self.accept(data[:start] + data[start + size :])
                start = min(start - 1, len(self.best) - size)

    def lower_bytes(self) -> None:
        """Lower each byte as far as it still fails: to 0, else halved, else minus one."""
        index = 0
        while index < len(self.best):
            value = self.best[index]
            for lower in dict.fromkeys((0, value // 2, value - 1)) if value else ():
                data = self.best
                if self.accept(data[:index] + bytes((lower,)) + data[index + 1 :]):
                    break
            else:
                index += 1  # no lower value fails: the next byte


def shrink(
    data: bytes,
    fails: Callable[[bytes], bool],
    *,
    max_attempts: int = MAX_ATTEMPTS,
    max_seconds: float = MAX_SECONDS,
) -> bytes:
    """The smallest byte string found, starting from failing ``data``, for which ``fails``
    still holds: the last candidate it held for (or ``data``). At most ``max_attempts`` calls
    of ``fails``, within about ``max_seconds``."""
    shrinker = _Shrinker(data, fails, max_attempts, max_seconds)
    try:
        while True:
            before = shrinker.best
            shrinker.truncate()
            shrinker.delete_chunks()
            shrinker.lower_bytes()
            if shrinker.best == before:
                return before
    except _Budget:
        return shrinker.best
