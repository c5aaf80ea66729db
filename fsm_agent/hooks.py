"""Hooks: your code at the seams of a run, one small protocol per hook point.

A hook is any object with one or more of the methods below (a class instance, a module, a
``types.SimpleNamespace`` of functions). Each method takes keyword-only arguments and must end
with ``**future_kwargs``, so that arguments added later do not break it; the signature is
checked when the agent is built. Methods may be sync or async. Hooks of one point run in
registration order, and each sees the changes of the one before.

- ``before_run(*, run_state, agent)``: a run (or a resume) starts; ``agent`` runs it.
- ``after_run(*, result, run_state)``: an invocation returns (done, aborted or suspended).
- ``before_model_call(*, request, run_state, model, stream)``: may return a changed
  :class:`ModelRequest`, or a :class:`ModelResponse` to use instead of calling the model;
  ``model`` takes the call (a fallback chain's current model), ``stream`` says whether it streams.
- ``after_model_call(*, request, response, run_state)``: a model call returned a response.
- ``model_call_failed(*, request, error, run_state)``: a model call raised ``error`` (a
  :class:`~fsm_agent.ModelError`); the machine's move follows.
- ``before_tool(*, call, run_state)``: may return a changed :class:`ToolCall` (same id and name,
  new arguments), a :class:`MockResult` or a :class:`SkipTool`; the tool then does not run.
- ``approve_tool(*, call, run_state)``: the permission hook; returns an :class:`Approval`
  (allow, deny with a reason, ask a human) or a bool.
- ``after_tool(*, call, result, run_state)``: may return a changed :class:`ToolResult`.
- ``on_transition(*, move, run_state)``: the machine moved.

Returning ``None`` changes nothing. A hook that raises, overruns its timeout (the policy's
``hook_timeout_s``, or the hook object's own ``timeout_s``) or returns something it may not
emits ``hook_error``; its answer is ignored and the run goes on, or, with
``Policy(hook_failure_mode="fail")``, the run aborts with stop reason ``hook_error``.
A sync hook runs inline and cannot be interrupted by its timeout. ``before_run`` and
``after_run`` run once per invocation: ``run`` and every ``resume``.

This module is the API a hook implements; the kernel registers and runs hooks in
:mod:`fsm_agent.kernel.hooks`, whose public names it re-exports.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .kernel.hooks import HOOK_POINTS, HookSet, MockResult, SkipTool, report_hook_failure

if TYPE_CHECKING:
    from .errors import ModelError
    from .kernel.agent import Agent, RunResult
    from .machine.agent_machine import Move
    from .models import Model
    from .phases.table import MovePhase
    from .run.approval import Approval
    from .run.state import RunState
    from .values.messages import ModelRequest, ModelResponse, ToolCall, ToolResult

__all__ = [
    "HOOK_POINTS",
    "AfterModelCallHook",
    "AfterRunHook",
    "AfterToolHook",
    "ApproveToolHook",
    "BeforeModelCallHook",
    "BeforeRunHook",
    "BeforeToolHook",
    "HookSet",
    "MockResult",
    "ModelCallFailedHook",
    "OnTransitionHook",
    "SkipTool",
    "report_hook_failure",
]


# -- one protocol per hook point ---------------------------------------------------------------
@runtime_checkable
class BeforeRunHook(Protocol):
    """Runs when a run (or a resume) starts, before the first state's handler."""

    def before_run(
        self, *, run_state: RunState, agent: Agent[Any, Any], **future_kwargs: Any
    ) -> Awaitable[None] | None:
        """Observe the run state and the agent that runs it."""
        ...


@runtime_checkable
class AfterRunHook(Protocol):
    """Runs when an invocation returns: done, aborted or suspended."""

    def after_run(
        self, *, result: RunResult, run_state: RunState, **future_kwargs: Any
    ) -> Awaitable[None] | None:
        """Observe the result."""
        ...


@runtime_checkable
class BeforeModelCallHook(Protocol):
    """Runs before each model call of the ``calling`` state."""

    def before_model_call(
        self,
        *,
        request: ModelRequest,
        run_state: RunState,
        model: Model,
        stream: bool,
        **future_kwargs: Any,
    ) -> ModelRequest | ModelResponse | Awaitable[ModelRequest | ModelResponse | None] | None:
        """Return a changed request, or a response to use instead of calling ``model``."""
        ...


@runtime_checkable
class AfterModelCallHook(Protocol):
    """Runs after each model call that returned a response (not after a failed call)."""

    def after_model_call(
        self,
        *,
        request: ModelRequest,
        response: ModelResponse,
        run_state: RunState,
        **future_kwargs: Any,
    ) -> Awaitable[None] | None:
        """Observe the request and its response."""
        ...


@runtime_checkable
class ModelCallFailedHook(Protocol):
    """Runs after each model call that raised a :class:`~fsm_agent.ModelError` (before the
    machine moves to retry, fall back or stop)."""

    def model_call_failed(
        self, *, request: ModelRequest, error: ModelError, run_state: RunState, **future_kwargs: Any
    ) -> Awaitable[None] | None:
        """Observe the request and its error."""
        ...


@runtime_checkable
class BeforeToolHook(Protocol):
    """Runs before the permission check of each tool call."""

    def before_tool(
        self, *, call: ToolCall, run_state: RunState, **future_kwargs: Any
    ) -> (
        ToolCall | MockResult | SkipTool | Awaitable[ToolCall | MockResult | SkipTool | None] | None
    ):
        """Return a changed call (new arguments), a mock result, or a skip."""
        ...


@runtime_checkable
class ApproveToolHook(Protocol):
    """The permission hook: allow, deny (with a reason) or ask a human."""

    def approve_tool(
        self, *, call: ToolCall, run_state: RunState, **future_kwargs: Any
    ) -> Approval | bool | Awaitable[Approval | bool | None] | None:
        """Return a verdict, or ``None`` for no opinion."""
        ...


@runtime_checkable
class AfterToolHook(Protocol):
    """Runs after each tool that ran, before its result is recorded."""

    def after_tool(
        self, *, call: ToolCall, result: ToolResult, run_state: RunState, **future_kwargs: Any
    ) -> ToolResult | MovePhase | Awaitable[ToolResult | MovePhase | None] | None:
        """Return a changed result, or a :class:`~fsm_agent.phases.MovePhase` to move the
        task (an agent with phases)."""
        ...


@runtime_checkable
class OnTransitionHook(Protocol):
    """Runs after every move of the machine (``run_state.state`` is already the destination)."""

    def on_transition(
        self, *, move: Move, run_state: RunState, **future_kwargs: Any
    ) -> Awaitable[None] | None:
        """Observe the move."""
        ...
