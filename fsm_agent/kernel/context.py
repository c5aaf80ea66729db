"""What the state handlers of one run share: the run context, the interrupt mechanism, and the
way a handler hands an event to whoever listens.

Interruptions (the caller's cancel, the wall-clock deadline) reach a handler in two ways: the
driver checks them before every handler, and while a handler awaits an effect
(:meth:`RunContext.effect`) the interrupt cancels that await, which surfaces as
:class:`Interrupted` and becomes the interrupt's outcome.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ..errors import Interrupted
from ..machine.agent_machine import Move
from ..machine.table import Outcome
from ..run.events import ChildEvent, Event, ToolProgressEvent
from ..run.state import RunState
from ..values.define import builder
from ..values.messages import (
    Message,
    Role,
    ToolCall,
    ToolResult,
    Usage,
)

if TYPE_CHECKING:
    from ..persistence.run_log import RunLog
    from ..values.model_settings import ModelSettings
    from .plan import Plan
    from .run import RunHandle, RunResult, Runtime

__all__ = [
    "ONE_REQUEST",
    "Emitted",
    "Handed",
    "Interrupted",
    "Reports",
    "RunContext",
    "maybe_await",
    "tool_message",
]

# Enum members read on every step, bound once: on Python 3.11 each read of one goes through
# the enum's class attribute lookup (docs/performance.md, the traps).
_TOOL = Role.TOOL
_new_message = builder(Message)  # a tool result's message, one per call: see builder()

T = TypeVar("T")

ONE_REQUEST = Usage(requests=1)


async def maybe_await(value: T | Awaitable[T]) -> T:
    """``value``, awaited when it is awaitable (hooks and verifiers may be sync or async)."""
    if inspect.isawaitable(value):
        return await value
    return value


class Handed(NamedTuple):
    """A child's event on its way to the listener; ``taken`` is set once it was handed out
    (the child waits for it, so that it moves in step with the listener)."""

    event: ChildEvent
    taken: asyncio.Future[None]


Reports = asyncio.Queue[ToolProgressEvent | Handed]
"""The progress reports of a turn's running calls, and the events of the children they run."""


class Emitted:
    """An event on its way out of a handler: awaiting it suspends the handler's coroutine
    (through the driver's, which awaits it) up to the stepper of the listened run, which
    yields the event to the listener and resumes the run once the listener asks for the next
    one (see ``kernel.listening``).

    The driver and the handlers are plain coroutines, so a run nobody listens to pays for no
    generator. Only a stepped run may emit: awaited anywhere else, this reaches the asyncio
    task, which rejects it ("Task got bad yield"); :meth:`RunContext.emit` therefore hands
    one out only when someone listens."""

    __slots__ = ("event",)

    def __init__(self, event: Event) -> None:
        self.event = event

    def __await__(self) -> Generator[Emitted, None, None]:
        yield self


class _Nothing:
    """An awaitable that completes at once (an event nobody listens to)."""

    __slots__ = ()

    def __await__(self) -> Generator[Emitted, None, None]:
        return
        yield


_NOTHING = _Nothing()


class RunContext:
    """What the handlers of one run share: the plan, the runtime, the run state, the interrupt.

    ``plan`` is the agent's plan when the run started: the run reads it, not the agent, so a
    policy assigned while it moves applies to the runs started after it. A handoff replaces it
    with the target's plan, which ``origin`` (the plan the run started with) compiles.
    ``agent`` is the agent the run is for, handed only to user code (a ``before_run`` hook).
    ``handle`` is the caller's :class:`RunHandle`, ``None`` when they passed none (a run
    in flight then holds no handle for the garbage collector to walk)."""

    def __init__(
        self,
        plan: Plan,
        runtime: Runtime,
        state: RunState,
        *,
        listening: bool,
        handle: RunHandle | None = None,
        agent: object = None,
        model_settings: ModelSettings | None = None,
    ) -> None:
        self.agent = agent
        self.plan = self.origin = plan
        self.runtime = runtime
        self.rs = state
        self.listening = listening
        self.handle = handle
        self.result: RunResult[Any] | None = None  # set by the driver when the run rests
        self.deps: object = None
        self.input: Message | None = None
        # The run's containers start as the shared empty tuple: a run in flight holds no
        # empty container for the garbage collector to walk.
        self.history: Sequence[Message] = ()
        self.last_move: Move | None = None
        self.last_error: BaseException | None = None
        self.error: BaseException | None = None
        self.interrupt: Outcome | None = None
        self.deadline: float | None = None  # on the runtime's clock, when a wall limit is set
        self.task: asyncio.Task[Any] | None = None
        self.in_effect = False
        self.own_cancels = 0  # task.cancel() calls the run made to cut an effect short
        # Events built where none can be yielded (hooks), kept by :meth:`hold`.
        self.pending_events: list[Event] | tuple[()] = ()
        self.turn_phase: str | None = None  # concurrent calls: the phase they are checked in
        self.turn_calls: list[ToolCall] = []  # the calls the current tool turn runs
        # A listened run's concurrent calls: the queue their children's events go to.
        self.child_events: Reports | None = None
        self.count_tokens = self.plan.compactor.tokenizer  # the context budget's counter
        self.durable: RunLog | None = None  # checkpoints and the effect journal, when saved
        # The agent's and the run's model settings merged (None: neither sets any).
        self.model_settings = model_settings

    # -- interrupts -------------------------------------------------------------------------
    def cancel_requested(self) -> bool:
        """Whether the run was asked to cancel (what ``ToolContext.cancelled`` asks)."""
        return self.interrupt is Outcome.CANCEL

    def request_interrupt(self, outcome: Outcome) -> None:
        """Ask the run to stop with ``outcome`` (cancel wins over a deadline)."""
        if self.interrupt is None or outcome is Outcome.CANCEL:
            self.interrupt = outcome
        task = self.task
        # Only an await inside an effect may be cancelled: anywhere else the CancelledError
        # would land in the caller's code. From inside the run's own task, the flag suffices.
        if (
            self.in_effect
            and task is not None
            and task is not asyncio.current_task()
            and task.cancel()
        ):
            self.own_cancels += 1  # told apart from the caller's cancels in effect()

    def pause_requested(self) -> bool:
        """Whether the caller's handle asks the run to pause (see :meth:`RunHandle.pause`)."""
        return self.handle is not None and self.handle.pause_requested

    @property
    def interrupted(self) -> Outcome:
        """The outcome of the interrupt that cut an effect short (a handler's answer to
        :class:`Interrupted`)."""
        assert self.interrupt is not None, "Interrupted is raised only once an interrupt is set"
        return self.interrupt

    def deadline_passed(self) -> bool:
        """Whether the wall-clock budget is spent, by the runtime's clock; records the deadline
        interrupt when it is (the timer does the same in real time; this sees a virtual clock
        too, so a run and its resumed copy stop at the same point)."""
        deadline = self.deadline
        if deadline is None or self.runtime.clock() < deadline:
            return False
        self.request_interrupt(Outcome.DEADLINE)
        return True

    async def effect(self, awaitable: Awaitable[T]) -> T:
        """Await an effect so that the run's interrupt can cut it short. ``task`` is the task
        driving the run: the driver records it when it starts and after every event the
        listener takes (a stream may be read on from another task), not here, on every
        effect."""
        self.in_effect = True
        try:
            return await awaitable
        except asyncio.CancelledError:
            # Only the run's own cancel requests become Interrupted. When the caller cancelled
            # too (task.cancel(), a TaskGroup, asyncio.timeout), the cancel goes on with the
            # caller's count intact.
            if not self.take_own_cancels():
                raise
            assert self.task is not None
            if self.task.cancelling():
                raise
            raise Interrupted from None
        finally:
            self.in_effect = False
            if self.own_cancels:  # the effect ended before the cancel landed (it swallowed it)
                self.take_own_cancels()

    def take_own_cancels(self) -> int:
        """Withdraw the cancel requests the run made of its own task; how many there were."""
        own = self.own_cancels
        if own:
            self.own_cancels = 0
            task = self.task
            assert task is not None
            for _ in range(own):
                task.uncancel()
        return own

    # -- history ----------------------------------------------------------------------------
    def append(self, message: Message) -> None:
        """Add a message to the thread, keeping the token estimate current."""
        self.rs.messages.append(message)
        self.rs.context_tokens += self.count_tokens(message)

    def close_pending_calls(self, why: str) -> None:
        """Record the turn's finished results and give every call still waiting one, in call
        order, so the history stays valid."""
        rs = self.rs
        calls, results = rs.pending_tool_calls, rs.tool_results
        if len(calls) == 1 and len(results) == 1 and results[0].call_id == calls[0].id:
            self.append(_new_message(role=_TOOL, parts=(results[0],)))
        else:  # the common turn above: one call, finished
            finished = {r.call_id: r for r in results} if results else {}
            for call in calls:
                result = finished.get(call.id)
                if result is None:
                    self.append(tool_message(call, f"Error: not run: {why}", is_error=True))
                else:
                    self.append(_new_message(role=_TOOL, parts=(result,)))
        rs.pending_tool_calls = []
        rs.tool_results = rs.approved_calls = rs.human_requests = ()

    def emit(self, event: Event) -> Awaitable[None]:
        """Hand ``event`` to the listener (``await ctx.emit(event)``); the handler goes on when
        the listener takes the next event. Does nothing when nobody listens (build the event
        only ``if ctx.listening`` where it costs anything)."""
        return Emitted(event) if self.listening else _NOTHING

    async def emit_all(self, events: Iterable[Event]) -> None:
        """:meth:`emit` each of ``events``, in order."""
        for event in events:
            await self.emit(event)

    def hold(self, event: Event) -> None:
        """Keep ``event``, built where no event can be yielded, for :meth:`take_events`."""
        if self.pending_events:
            self.pending_events.append(event)
        else:
            self.pending_events = [event]

    def take_events(self) -> Sequence[Event]:
        """The events built since the last call (hook errors), to be yielded now."""
        events = self.pending_events
        if events:  # no allocation on the common path, when there is nothing to take
            self.pending_events = ()
        return events


def tool_message(call: ToolCall, content: str, *, is_error: bool) -> Message:
    result = ToolResult(call_id=call.id, name=call.name, content=content, is_error=is_error)
    return _new_message(role=_TOOL, parts=(result,))
