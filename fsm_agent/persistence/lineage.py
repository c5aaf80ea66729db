"""Stored runs listed by where they came from: a child run (of an agent tool's call) under its
parent, a fork under its original, as the run list of the inspector and of ``fsm-agent runs``
show them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["by_origin"]

_T = TypeVar("_T")


def by_origin(
    runs: Sequence[_T], run_id: Callable[[_T], str], origin: Callable[[_T], str | None]
) -> list[tuple[_T, int]]:
    """``runs`` (in the store's order) with each run listed under the run it came from
    (``origin``: its parent's or original's id) when that one is listed, each with its depth
    there; otherwise in their order. Runs whose origins loop back to them come last, each
    heading its own loop."""
    listed = {run_id(run) for run in runs}
    under: dict[str, list[_T]] = {}
    tops: list[_T] = []
    for run in runs:
        came_from = origin(run)
        if came_from is not None and came_from in listed and came_from != run_id(run):
            under.setdefault(came_from, []).append(run)
        else:
            tops.append(run)
    ordered: list[tuple[_T, int]] = []
    seen: set[str] = set()
    for start in (*tops, *runs):  # the runs left after the tops are those of loops
        stack = [(start, 0)]
        while stack:  # depth first, iteratively: a chain of forks may be long
            run, depth = stack.pop()
            key = run_id(run)
            if key in seen:
                continue
            seen.add(key)
            ordered.append((run, depth))
            stack.extend((below, depth + 1) for below in reversed(under.get(key, ())))
    return ordered
