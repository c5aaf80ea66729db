"""Hypothesis strategies for fuzz cases, for your own property tests.

Each strategy is hypothesis's ``binary()`` decoded by a reader of the fuzzer's
:mod:`fsm_agent.fuzzing.decoding`: hypothesis shrinks bytes by deleting and lowering them, so a
shrunk case is a short, simple one; and one draw per example instead of dozens keeps the tests
fast (hypothesis spends about 15 µs per draw). ``fsm-agent fuzz`` itself draws its bytes without
hypothesis, which this module needs (the ``[testing]`` extra).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from ..errors import MissingExtraError

try:
    from hypothesis import strategies as st
except ImportError:
    raise MissingExtraError(
        "fsm_agent.testing's strategies", extra="testing", module="hypothesis"
    ) from None

from ..fuzzing.case import FuzzCase, HookPlan, VerifierAnswer
from ..fuzzing.decoding import (
    CASE_SIZE,
    Choices,
    read_case,
    read_hook_plan,
    read_policy,
    read_script,
    read_verifier,
)
from ..models.scripted import Turn
from ..policy import Policy
from ..values.messages import ToolDefinition

__all__ = ["cases", "hook_plans", "policies", "scripts", "verifiers"]

T = TypeVar("T")


def _decoded(reader: Callable[[Choices], T], size: int) -> st.SearchStrategy[T]:
    return st.binary(min_size=size // 2, max_size=size * 2).map(lambda b: reader(Choices(b)))


def cases(definitions: Iterable[ToolDefinition] | None = None) -> st.SearchStrategy[FuzzCase]:
    """Fuzz cases (see :func:`~fsm_agent.fuzzing.decoding.read_case`)."""
    tools = None if definitions is None else list(definitions)
    return _decoded(lambda c: read_case(c, tools), CASE_SIZE)


def scripts(definitions: Iterable[ToolDefinition] = ()) -> st.SearchStrategy[tuple[Turn, ...]]:
    """Model scripts for an agent with these tools (see
    :func:`~fsm_agent.fuzzing.decoding.read_script`)."""
    tools = list(definitions)
    return _decoded(lambda c: read_script(c, tools), 64)


def policies() -> st.SearchStrategy[Policy]:
    """Small policies with every feature in play (see
    :func:`~fsm_agent.fuzzing.decoding.read_policy`)."""
    return _decoded(read_policy, 40)


def hook_plans() -> st.SearchStrategy[HookPlan]:
    """Hook plans (see :func:`~fsm_agent.fuzzing.decoding.read_hook_plan`)."""
    return _decoded(read_hook_plan, 16)


def verifiers() -> st.SearchStrategy[tuple[VerifierAnswer, ...] | None]:
    """No verifier, or the planned verifier's answers (accept once they run out)."""
    return _decoded(read_verifier, 6)
