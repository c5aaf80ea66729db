"""``fuzz_agent``: the fuzzer in one line of your own test suite.

It runs :func:`fsm_agent.fuzzing.fuzz` with your suite's hypothesis profile and raises
``AssertionError`` with the shrunk case, as a ready-to-paste test, on a violation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import MissingExtraError

if TYPE_CHECKING:
    from ..fuzzing import FuzzReport
    from ..kernel.agent import Agent
    from ..models import Model

__all__ = ["fuzz_agent"]


def fuzz_agent(
    make_agent: Callable[[Model], Agent[Any, Any]],
    *,
    examples: int | None = None,
    seed: int | None = None,
    max_seconds: float | None = None,
) -> FuzzReport:
    """Fuzz your agent in your own test suite: one line, ``fuzz_agent(make_agent)``.

    ``make_agent(model)`` builds your agent (tools, hooks, verifier, policy) around the model
    it is given. Generated scripts run on the real kernel and every run invariant is
    checked after every run (see :mod:`fsm_agent.fuzzing`). Raises ``AssertionError`` with
    the shrunk case, as a ready-to-paste test, on a violation (or when ``max_seconds`` cut the
    first example: no example finished). ``examples`` defaults to the
    loaded hypothesis profile's ``max_examples``; ``seed`` to 0 when that profile is
    derandomized (as hypothesis's ``ci`` profile is), else random: this helper follows your
    suite's hypothesis profile, so it needs the ``[testing]`` extra.
    """
    try:
        from hypothesis import settings
    except ImportError:
        raise MissingExtraError("fuzz_agent", extra="testing", module="hypothesis") from None

    from ..fuzzing import fuzz

    profile = settings.default
    assert profile is not None, "hypothesis always has a current profile"
    if seed is None and profile.derandomize:
        seed = 0
    report = fuzz(
        make_agent,
        examples=examples if examples is not None else profile.max_examples,
        seed=seed,
        max_seconds=max_seconds,
    )
    if not report.ok:  # a violation, or no example finished within max_seconds
        raise AssertionError(report.format())
    return report
