"""The values around one run: the runtime it is given, the handle that controls it from
outside, and the result it gives back."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, Generic, Protocol

from typing_extensions import TypeVar

from ..errors import InvalidInputError
from ..machine.agent_machine import Move
from ..machine.table import Counters, Outcome, State, StopReason
from ..run.approval import ResumeHandle
from ..run.state import AgentUsage, RunState
from ..values.define import builder, record
from ..values.messages import Message, ToolCall, Usage

if TYPE_CHECKING:
    from ..run.output import OutputSpec

OutputT = TypeVar("OutputT", default=str)
"""The type of a run's output: ``str`` for text, or the agent's ``output_type``."""

__all__ = ["OutputT", "RunHandle", "RunResult", "Runtime", "new_run_id", "own_usage"]


def new_run_id() -> str:
    """A fresh run id (tests may pass their own factory in :class:`Runtime`)."""
    return f"run_{os.urandom(16).hex()}"  # 128 random bits, as a uuid4 has (122)


def own_usage(total: Usage, parts: list[Usage]) -> Usage:
    """``total`` less the sum of ``parts`` (a run's usage less its children's)."""
    spent = sum(parts, Usage())
    return Usage(
        requests=total.requests - spent.requests,
        input_tokens=total.input_tokens - spent.input_tokens,
        output_tokens=total.output_tokens - spent.output_tokens,
        cache_read_tokens=total.cache_read_tokens - spent.cache_read_tokens,
        cache_write_tokens=total.cache_write_tokens - spent.cache_write_tokens,
        reasoning_tokens=total.reasoning_tokens - spent.reasoning_tokens,
        cost_usd=max(0.0, total.cost_usd - spent.cost_usd),
    )


@record(kw_only=False)
class Runtime:
    """The run's view of the world: sleeping, the clock, randomness and ids. Tests inject
    a :class:`~fsm_agent.testing.VirtualClock` so that backoff takes no real time."""

    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    clock: Callable[[], float] = time.monotonic
    random: random.Random = field(default_factory=random.Random)
    new_id: Callable[[], str] = new_run_id


@record(kw_only=False)
class RunResult(Generic[OutputT]):
    """How a run ended: its output, why it stopped, what it cost, and everything it did.

    ``output`` is the final text, or, for an agent with an ``output_type``, the final answer
    validated as that type (``None`` when the run did not end with a valid answer; the text is
    then ``output_text``).

    Its ``repr`` is a one-line summary (the history and trace by their lengths): a result is
    printed in logs and debuggers, and asyncio formats it when a task ends.
    """

    run_id: str
    output: OutputT | None
    stop_reason: StopReason
    state: State
    usage: Usage
    messages: tuple[Message, ...]
    trace: tuple[Move, ...]
    counters: Counters
    model_calls: int  # attempts, failed ones included; ``usage.requests`` counts those answered
    tool_executions: int  # its children's included, as model_calls and usage
    error: BaseException | None = None  # what aborted the run, or the verifier's failure
    pending: tuple[ToolCall, ...] = ()
    run_state: RunState | None = None
    resume_handle: ResumeHandle | None = None  # set when suspended: pass it to Agent.resume
    stop_detail: str | None = None  # the string a stop condition that fired returned
    raw_finish_reason: str | None = None  # the provider's reason, when it ended an ``other`` turn
    # Each descendant run's own use, by its path (see ``children``'s docstring).
    children: dict[str, AgentUsage] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        rs: RunState,
        error: BaseException | None = None,
        output: OutputSpec | None = None,
    ) -> RunResult[Any]:
        """The result of a run state at rest (ended, or suspended), with the error that ended
        an aborted run (or the failure that left a run unverified or its output invalid);
        ``output`` validates the final answer of a typed-output agent."""
        assert rs.stop_reason is not None, "a run at rest has a stop reason"
        state = rs.state
        children = rs.children
        # Fifteen keywords at most: from sixteen on, Python 3.11 compiles the call to pack them
        # into a dict (about ten times the cost); the two fields a plain run leaves at their
        # defaults are set apart, when a run has them.
        result = _new_result(  # one per run: see builder()
            run_id=rs.run_id,
            output=rs.output if output is None else output.result_value(rs),
            stop_reason=rs.stop_reason,
            state=state,
            usage=rs.usage,
            messages=tuple(rs.messages),
            trace=tuple(rs.trace),
            counters=rs.counters,
            model_calls=rs.model_calls,
            tool_executions=rs.tool_executions
            + (sum(child.tool_executions for child in children.values()) if children else 0),
            error=error
            if error is not None and (state is _ABORTED or rs.stop_reason in _KEEPS_ERROR)
            else None,
            run_state=rs,
            resume_handle=ResumeHandle.of(rs)
            if state is _SUSPENDED and rs.resume_token is not None
            else None,
            stop_detail=rs.stop_detail,
            raw_finish_reason=rs.raw_finish_reason,
        )
        if rs.human_requests or children:  # a suspension's requests, a composed run's children
            result = replace(
                result,
                pending=tuple([r.call for r in rs.human_requests]),
                children=dict(children),
            )
        return result

    @property
    def own(self) -> AgentUsage:
        """What this run's agent used by itself. ``children`` maps the path of each run below
        it (one ``tool_name:step.call_id`` per level, joined by "/", as
        ``"research:1.c1/dig:1.c4"``; ``step`` is the parent's step of the call) to what that
        run used by itself: ``usage``, ``model_calls`` and ``tool_executions`` are the sums of
        ``own`` and every entry of ``children``."""
        children = self.children.values()
        usage = self.usage
        if children:
            usage = own_usage(usage, [child.usage for child in children])
        return AgentUsage(
            run_id=self.run_id,
            model=None if self.run_state is None else self.run_state.model,
            usage=usage,
            model_calls=self.model_calls - sum(child.model_calls for child in children),
            tool_executions=self.tool_executions - sum(child.tool_executions for child in children),
        )

    @property
    def output_text(self) -> str | None:
        """The final answer as text (for a typed-output agent: the JSON the model gave, valid
        or not)."""
        return None if self.run_state is None else self.run_state.output

    @property
    def ok(self) -> bool:
        """The run finished in ``done`` (not aborted, not suspended)."""
        return self.state is State.DONE

    def __repr__(self) -> str:
        output = self.output if isinstance(self.output, str) else self.output_text
        if output is not None and len(output) > 60:
            output = output[:57] + "..."
        parts = [
            f"run_id={self.run_id!r}",
            f"state={self.state.value}",
            f"stop_reason={self.stop_reason.value}",
            f"output={output!r}",
            f"messages={len(self.messages)}",
            f"moves={len(self.trace)}",
            f"model_calls={self.model_calls}",
            f"tool_executions={self.tool_executions}",
        ]
        if self.error is not None:
            parts.append(f"error={type(self.error).__name__}({str(self.error)[:80]!r})")
        if self.pending:
            parts.append(f"pending={[call.id for call in self.pending]!r}")
        return f"RunResult({', '.join(parts)})"


_KEEPS_ERROR = frozenset({StopReason.UNVERIFIED, StopReason.OUTPUT_INVALID})
_ABORTED, _SUSPENDED = State.ABORTED, State.SUSPENDED  # read once: see kernel/driver.py
_new_result = builder(RunResult)


class _Moving(Protocol):
    """What a handle reaches of the run it controls while the run moves (its context)."""

    rs: RunState
    interrupt: Outcome | None

    def request_interrupt(self, outcome: Outcome) -> None: ...


class RunHandle:
    """Control of a run from outside: ``cancel()`` or ``pause()`` it, and read its ``result``
    when done."""

    def __init__(self) -> None:
        self._ctx: _Moving | None = None  # while the run moves
        self._rs: RunState | None = None  # the run it controls, kept once the run rests
        self._cancel_requested = False
        self._pause_requested = False
        self.result: RunResult[Any] | None = None

    @property
    def pause_requested(self) -> bool:
        """``pause()`` was called and the run has not suspended for it yet."""
        return self._pause_requested

    def pause(self) -> None:
        """Suspend the run at the next safe point: before the next tool call starts. The run
        returns with stop reason ``suspended`` and a resume handle (no decisions needed); a run
        that finishes first just finishes."""
        self._pause_requested = True

    @property
    def cancel_requested(self) -> bool:
        """``cancel()`` was called."""
        return self._cancel_requested

    def cancel(self) -> None:
        """Stop the run: no model call or tool starts after this; an effect in flight is
        interrupted; the run ends ``aborted`` with ``cancelled``. A durable run's
        store keeps its latest checkpoint instead, so that it can be resumed (or abandoned,
        see :meth:`~fsm_agent.Agent.abandon`)."""
        self._cancel_requested = True
        if self._ctx is not None:
            self._ctx.request_interrupt(Outcome.CANCEL)

    def _attach(self, ctx: _Moving) -> None:
        if self._rs is not None:
            if self._rs is not ctx.rs:
                raise InvalidInputError("a RunHandle controls one run; create a new one per run")
            self._pause_requested = False  # the same run, resumed
        self._ctx = ctx
        self._rs = ctx.rs
        if self._cancel_requested:
            ctx.interrupt = Outcome.CANCEL

    def _detach(self) -> None:
        """The run stopped moving: let go of its context. The context holds the handle, so
        keeping it would leave every object of a finished run to the garbage collector's
        cycle search instead of freeing them when the caller drops the result."""
        self._ctx = None
