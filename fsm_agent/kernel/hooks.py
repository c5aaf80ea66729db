"""The hook machinery: the hooks of an agent registered per point with their signatures checked
(:class:`HookSet`), and run at the seams with their failure semantics.

What a hook may implement, and what each point passes, is documented in :mod:`fsm_agent.hooks`,
which re-exports the public names of this module. A hook that raises, overruns its timeout or
returns something it may not is reported by :func:`report_hook_failure`: a ``hook_error``
event, and under ``Policy(hook_failure_mode="fail")`` the end of the run.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol, TypeAlias

from ..errors import ConfigurationError, HookError
from ..log import logger
from ..machine.table import TERMINAL, Outcome, State
from ..phases.table import MovePhase
from ..policy import HookFailureMode
from ..run.approval import Approval, Decision
from ..run.events import HookErrorEvent
from ..run.state import explained
from ..tools import HumanInputRequired, TaskComplete
from ..values.define import record
from ..values.messages import ModelRequest, ModelResponse, ToolCall, ToolResult
from ..values.model_settings import ModelSettings
from ..values.record import field_problem
from .limits import usage_fault

if TYPE_CHECKING:
    from ..machine.agent_machine import Move
    from ..models import Model
    from ..policy import Policy
    from ..run.events import Event
    from ..run.state import RunState

__all__ = ["HOOK_POINTS", "HookSet", "HookedRun", "MockResult", "SkipTool", "report_hook_failure"]

HOOK_POINTS: dict[str, frozenset[str]] = {
    "before_run": frozenset({"run_state", "agent"}),
    "after_run": frozenset({"result", "run_state"}),
    "before_model_call": frozenset({"request", "run_state", "model", "stream"}),
    "after_model_call": frozenset({"request", "response", "run_state"}),
    "model_call_failed": frozenset({"request", "error", "run_state"}),
    "before_tool": frozenset({"call", "run_state"}),
    "approve_tool": frozenset({"call", "run_state"}),
    "after_tool": frozenset({"call", "result", "run_state"}),
    "on_transition": frozenset({"move", "run_state"}),
}
"""Every hook point and the keyword arguments it passes."""


@record(kw_only=False)
class MockResult:
    """A ``before_tool`` answer: do not run the tool; ``content`` is the call's result."""

    content: str
    is_error: bool = False


@record(kw_only=False)
class SkipTool:
    """A ``before_tool`` answer: do not run the tool; the model is told why (an ``is_error``
    result)."""

    reason: str = "a hook skipped this call"


class _Planned(Protocol):
    @property
    def policy(self) -> Policy: ...


class HookedRun(Protocol):
    """What running a hook reads and writes of a run (its
    :class:`~fsm_agent.kernel.context.RunContext`, which sits above the plan that holds the
    :class:`HookSet`): the run state, its interrupt, and where a failure is reported."""

    rs: RunState
    listening: bool
    last_move: Move | None
    error: BaseException | None

    @property
    def plan(self) -> _Planned:
        """The run's plan (its policy sets the hooks' timeout and failure mode)."""
        ...

    @property
    def interrupt(self) -> Outcome | None:
        """The interrupt the run was asked to stop with, if any."""
        ...

    def request_interrupt(self, outcome: Outcome) -> None:
        """Ask the run to stop with ``outcome``."""
        ...

    def hold(self, event: Event) -> None:
        """Keep ``event`` (a hook's failure), to be yielded with the run's next events."""
        ...


# -- registration ------------------------------------------------------------------------------
@record(kw_only=False)
class _Hook:
    label: str  # "Audit.before_tool", as shown in hook_error events
    fn: Callable[..., object]
    timeout_s: float | None  # the hook object's own timeout, else the policy's


_Hooks: TypeAlias = tuple[_Hook, ...]


def _check_signature(label: str, point: str, fn: Callable[..., object]) -> None:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"hook {label}: cannot read its signature: {exc}") from exc
    if not any(p.kind is p.VAR_KEYWORD for p in parameters):
        raise ConfigurationError(
            f"hook {label} must end with '**future_kwargs' so that arguments added later do "
            "not break it"
        )
    allowed = HOOK_POINTS[point]
    for p in parameters:
        if p.kind is p.VAR_KEYWORD:
            continue
        if p.kind is not p.KEYWORD_ONLY:
            raise ConfigurationError(
                f"hook {label}: parameter {p.name!r} must be keyword-only (put it after '*')"
            )
        if p.name not in allowed:
            raise ConfigurationError(
                f"hook {label}: unknown argument {p.name!r}; {point} passes "
                f"{', '.join(sorted(allowed))}"
            )


class HookSet:
    """The hooks of an agent, per point and in registration order, with signatures checked.

    Each point is a (possibly empty) tuple, so the kernel tests ``if hooks.before_tool:`` once
    and does no work when nothing is registered.
    """

    def __init__(self, hooks: Iterable[object] = ()) -> None:
        found: dict[str, list[_Hook]] = {point: [] for point in HOOK_POINTS}
        for obj in hooks:
            name = getattr(obj, "__name__", None) or type(obj).__name__
            timeout = getattr(obj, "timeout_s", None)
            if timeout is not None and (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or not 0 < timeout < float("inf")
            ):
                raise ConfigurationError(f"hook {name}: timeout_s must be a positive number")
            points = [p for p in HOOK_POINTS if callable(getattr(obj, p, None))]
            if not points:
                raise ConfigurationError(
                    f"hook {name} defines none of the hook methods: {', '.join(HOOK_POINTS)}"
                )
            for point in points:
                fn = getattr(obj, point)
                label = f"{name}.{point}"
                _check_signature(label, point, fn)
                found[point].append(_Hook(label, fn, timeout))
        self.before_run: _Hooks = tuple(found["before_run"])
        self.after_run: _Hooks = tuple(found["after_run"])
        self.before_model_call: _Hooks = tuple(found["before_model_call"])
        self.after_model_call: _Hooks = tuple(found["after_model_call"])
        self.model_call_failed: _Hooks = tuple(found["model_call_failed"])
        self.before_tool: _Hooks = tuple(found["before_tool"])
        self.approve_tool: _Hooks = tuple(found["approve_tool"])
        self.after_tool: _Hooks = tuple(found["after_tool"])
        self.on_transition: _Hooks = tuple(found["on_transition"])

    def __bool__(self) -> bool:
        return any(getattr(self, point) for point in HOOK_POINTS)

    # -- running ---------------------------------------------------------------------------
    async def notify(self, ctx: HookedRun, hooks: _Hooks, **kwargs: object) -> None:
        """Run observing hooks (their return value is ignored). An interrupt that arrives
        while they run stops the rest; one that came before does not: every hook of a later
        hook point still sees how an interrupted run goes on and ends."""
        before = ctx.interrupt
        for hook in hooks:
            await _call(ctx, hook, kwargs)
            if ctx.interrupt is not before:
                return

    async def run_before_model_call(
        self, ctx: HookedRun, request: ModelRequest, model: Model, stream: bool
    ) -> ModelRequest | ModelResponse:
        """The request after every ``before_model_call`` hook, or the response one supplied."""
        for hook in self.before_model_call:
            ok, value = await _call(
                ctx,
                hook,
                {"request": request, "run_state": ctx.rs, "model": model, "stream": stream},
            )
            if ctx.interrupt is not None:
                break
            if not ok or value is None:
                continue
            if isinstance(value, ModelResponse):
                fault = _fields_fault(value) or usage_fault(value.usage)
                if fault is None:
                    return value
                report_hook_failure(ctx, hook.label, f"returned a ModelResponse; {fault}")
            elif isinstance(value, ModelRequest):
                fault = _request_fault(value, request)
                if fault is None:
                    request = value
                else:
                    report_hook_failure(ctx, hook.label, f"returned a ModelRequest; {fault}")
            else:
                _bad_return(ctx, hook, value, "a ModelRequest, a ModelResponse or None")
        return request

    async def run_before_tool(
        self, ctx: HookedRun, call: ToolCall
    ) -> ToolCall | MockResult | SkipTool:
        """The call after every ``before_tool`` hook, or the mock result or skip one returned."""
        for hook in self.before_tool:
            ok, value = await _call(ctx, hook, {"call": call, "run_state": ctx.rs})
            if ctx.interrupt is not None:
                break
            if not ok or value is None:
                continue
            if isinstance(value, MockResult | SkipTool | ToolCall):
                fault = _fields_fault(value)
                if fault is not None:
                    name = type(value).__name__
                    report_hook_failure(ctx, hook.label, f"returned a {name}; {fault}")
                elif not isinstance(value, ToolCall):
                    return value
                elif (value.id, value.name) != (call.id, call.name):
                    _bad_return(ctx, hook, value, f"a ToolCall with id {call.id!r}, {call.name!r}")
                else:
                    call = value
            else:
                _bad_return(ctx, hook, value, "a ToolCall, MockResult, SkipTool or None")
        return call

    async def run_approve_tool(self, ctx: HookedRun, call: ToolCall) -> Approval | None:
        """The first verdict that is not ``allow``, else ``allow`` if a hook said so, else
        ``None`` (no hook had an opinion).

        The gate fails closed: a hook that raises, overruns its timeout or returns something
        that is not a verdict denies the call (whatever the hook failure mode), and so does an
        interrupt before every hook has answered."""
        verdict: Approval | None = None
        for hook in self.approve_tool:
            ok, value = await _call(ctx, hook, {"call": call, "run_state": ctx.rs})
            if not ok:
                return Approval.deny(f"the approval check {hook.label} failed ({_FAILED})")
            if ctx.interrupt is not None:
                return Approval.deny("the run stopped before the approval check finished")
            if value is None:
                continue
            if isinstance(value, bool):
                value = Approval.allow() if value else Approval.deny()
            approval = _verdict(value)
            if approval is None:
                _bad_return(ctx, hook, value, "an Approval, a bool or None")
                return Approval.deny(
                    f"the approval check {hook.label} gave no valid verdict ({_FAILED})"
                )
            if approval.decision is not Decision.ALLOW:
                return approval
            verdict = approval
        return verdict

    async def run_after_tool(
        self, ctx: HookedRun, call: ToolCall, result: ToolResult
    ) -> tuple[ToolResult, str | None]:
        """The result after every ``after_tool`` hook (its call id and name are kept), and
        the phase the last hook that returned a :class:`~fsm_agent.phases.MovePhase` asks
        the task to move to."""
        move: str | None = None
        for hook in self.after_tool:
            ok, value = await _call(
                ctx, hook, {"call": call, "result": result, "run_state": ctx.rs}
            )
            if ctx.interrupt is not None:
                break
            if not ok or value is None:
                continue
            fault = _fields_fault(value) if isinstance(value, ToolResult | MovePhase) else None
            if fault is not None:
                report_hook_failure(ctx, hook.label, f"returned a {type(value).__name__}; {fault}")
            elif isinstance(value, ToolResult):
                result = value.model_copy(update={"call_id": call.id, "name": call.name})
            elif isinstance(value, MovePhase):  # a move by code; its content, when given
                move = value.phase
                if value.content:
                    result = result.model_copy(update={"content": value.content})
            else:
                _bad_return(ctx, hook, value, "a ToolResult, a MovePhase or None")
        return result, move


def _fields_fault(value: object, skip: tuple[str, ...] = ()) -> str | None:
    """What is wrong with the fields of a hook's answer (the constructor checks nothing)."""
    problem = field_problem(value, skip=skip)
    return None if problem is None else f"its {problem}"


def _request_fault(value: ModelRequest, before: ModelRequest) -> str | None:
    """What is wrong with a hook's request: a field of the wrong type (its messages and tools
    are checked only when the hook replaced them), or settings :class:`ModelSettings` refuses
    (a temperature below 0, say)."""
    kept = (
        *(("messages",) if value.messages is before.messages else ()),
        *(("tools",) if value.tools is before.tools else ()),
    )
    fault = _fields_fault(value, kept)
    if fault is not None:
        return fault
    try:
        ModelSettings.of(value)
    except ConfigurationError as exc:
        return f"its settings are refused: {exc}"
    return None


def _verdict(value: object) -> Approval | None:
    """``value`` as a verdict, or ``None`` when it is not one (an ``Approval`` built with a
    decision outside :class:`Decision`)."""
    if not isinstance(value, Approval):
        return None
    if isinstance(value.decision, Decision):
        return value
    try:
        return Approval(Decision(value.decision), value.reason)
    except ValueError:
        return None


_FAILED = "the call was not run; the operator can see why in the hook_error event"


async def _call(ctx: HookedRun, hook: _Hook, kwargs: dict[str, object]) -> tuple[bool, object]:
    """Run one hook: ``(True, its answer)``, or ``(False, None)`` after reporting a failure."""
    timeout = hook.timeout_s if hook.timeout_s is not None else ctx.plan.policy.hook_timeout_s
    try:
        value = hook.fn(**kwargs)
        if inspect.isawaitable(value):
            async with asyncio.timeout(timeout):
                value = await value
    except TimeoutError:
        report_hook_failure(ctx, hook.label, f"timed out after {timeout:g} s")
        return False, None
    except (TaskComplete, HumanInputRequired) as signal:  # a tool's signals, not a hook's
        report_hook_failure(
            ctx, hook.label, f"raised {type(signal).__name__}, which only a tool may raise"
        )
        return False, None
    except Exception as caught:
        exc = explained(caught)
        report_hook_failure(ctx, hook.label, f"{type(exc).__name__}: {exc}", exc)
        return False, None
    return True, value


def _bad_return(ctx: HookedRun, hook: _Hook, value: object, expected: str) -> None:
    report_hook_failure(ctx, hook.label, f"returned {type(value).__name__}; expected {expected}")


def report_hook_failure(
    ctx: HookedRun, label: str, error: str, cause: BaseException | None = None
) -> None:
    """Emit ``hook_error`` for the failed user callable ``label``; under
    ``hook_failure_mode="fail"`` also stop the run, else record it on the ``fsm_agent`` logger
    (the run goes on without its answer)."""
    if ctx.listening:
        ctx.hold(HookErrorEvent(run_id=ctx.rs.run_id, hook=label, error=error))
    state = ctx.rs.state
    # A run at rest (ended, or suspended waiting for a human) has nothing left to stop: a hook
    # that fails then (after_run, on_transition into the rest) is reported, and the later
    # hooks still run.
    at_rest = state in TERMINAL or (state is State.SUSPENDED and ctx.last_move is not None)
    if at_rest:
        logger.warning("run %s: %s failed (%s); the run was at rest", ctx.rs.run_id, label, error)
    elif ctx.plan.policy.hook_failure_mode is not HookFailureMode.FAIL:
        logger.warning("run %s: %s failed (%s); the run goes on", ctx.rs.run_id, label, error)
    elif ctx.interrupt is None:
        ctx.error = HookError(f"hook {label} failed: {error}", hook=label)
        ctx.error.__cause__ = cause
        ctx.request_interrupt(Outcome.HOOK_ERROR)
