"""Checks of the code a user hands an :class:`~fsm_agent.Agent`, made when the agent is built.

A verifier or a stop condition with the wrong signature would otherwise fail only in the middle
of a run (a verifier's ``TypeError`` even reads as a rejection, spending the verification
budget), and ``tools=add`` would fail with a bare ``TypeError``. Each check raises a
:class:`~fsm_agent.ConfigurationError` that shows what to write instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError

if TYPE_CHECKING:
    from ..policy import Policy

__all__ = ["check_done_tool", "check_user_code"]

_VERIFIER_CALL = "verifier(output=..., run_state=...)"
_VERIFIER_FIX = "def verify(*, output: str, run_state: RunState) -> Verdict | bool"
_STOP_CALL = "condition(run_state)"
_STOP_FIX = "def should_stop(run_state: RunState) -> bool"


def check_user_code(
    *,
    tools: object,
    verifier: Callable[..., Any] | None,
    stop_conditions: Iterable[Callable[..., Any]],
) -> None:
    """Raise :class:`~fsm_agent.ConfigurationError` when ``tools`` is not a collection of
    tools, or a verifier or stop condition cannot be called the way the kernel calls it."""
    if callable(tools):
        name = _describe(tools)
        raise ConfigurationError(
            f"tools must be a list of tools, e.g. tools=[{name}]; got {name} itself"
        )
    if isinstance(tools, str | bytes) or not isinstance(tools, Iterable):
        raise ConfigurationError(f"tools must be a list of tools, e.g. tools=[add]; got {tools!r}")
    if verifier is not None:
        _check_signature(
            verifier,
            "verifier",
            lambda sig: sig.bind(output="", run_state=None),
            _VERIFIER_CALL,
            _VERIFIER_FIX,
        )
    for condition in stop_conditions:
        _check_signature(
            condition, "stop condition", lambda sig: sig.bind(None), _STOP_CALL, _STOP_FIX
        )


def check_done_tool(policy: Policy, *, verifier: object, typed: bool) -> None:
    """Raise :class:`~fsm_agent.ConfigurationError` when ``require_done_tool`` meets a
    verifier or an output type: the done tool's message ends the run without either."""
    if not policy.require_done_tool:
        return
    if verifier is not None:
        raise ConfigurationError(
            "require_done_tool=True and a verifier do not combine: the done tool's message "
            "ends the run unverified and a plain answer only gets the reminder to call "
            "'done', so the verifier would never run. Check the answer inside the done tool "
            "(or in an after_tool hook), or drop require_done_tool"
        )
    if typed:
        raise ConfigurationError(
            "require_done_tool=True and an output_type do not combine: the done tool's "
            "message ends the run without validation. Drop require_done_tool (the typed "
            "answer already ends the run) or the output_type"
        )


def _check_signature(
    function: Callable[..., Any],
    role: str,
    bind: Callable[[inspect.Signature], object],
    call: str,
    fix: str,
) -> None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or C callable: nothing to read, nothing to check
        return
    try:
        bind(signature)
    except TypeError as exc:
        raise ConfigurationError(
            f"{role} {_describe(function)} cannot be called as {call} ({exc}); write {fix}"
        ) from None


def _describe(value: object) -> str:
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) else f"a {type(value).__name__}"
