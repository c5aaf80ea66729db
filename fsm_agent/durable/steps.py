"""Model calls and tool calls as DBOS steps: the adapters that make an agent durable on DBOS.

Inside a DBOS workflow each model call and each tool call runs as one step, so its outcome is
recorded once and a recovered workflow replays it instead of calling again. A step's output is
JSON text in the format of fsm_agent's own effect journal
(:mod:`fsm_agent.persistence.run_log`), never a
pickle: a recorded run stays readable across versions of Python and of the classes involved.

DBOS's own step retries stay off (``retries_allowed=False``): the kernel's ``calling → calling``
move is the only retry layer, and each retry is a step of its own. A model error is therefore a
step *result*, not a raised exception, and replays as the same error.

A tool call that a crash cut short is settled like a journal without an outcome (see
``docs/scale-out.md``): an idempotent tool runs again, any other tool is not run again and the
model is told that its outcome is unknown. To know, a non-idempotent call first records an
*intent* step holding the nonce of the workflow execution that made it; when the tool step
itself must run and the intent was made by an earlier execution, that execution died inside
the tool.

DBOS numbers a workflow's steps in the order they start and replays a recorded outcome by that
number. Parallel tool calls start their steps from concurrent tasks, so :class:`StepOrder`
makes them start in the order the calls were made, whatever order the earlier steps finish in.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from typing import Any

from dbos import DBOS, StepOptions

from ..errors import ConfigurationError
from ..kernel.agent import Agent, Runtime
from ..models import Model
from ..persistence.outcomes import (
    decode_model_outcome,
    decode_tool_outcome,
    encode_model_outcome,
    encode_tool_outcome,
)
from ..persistence.run_log import unknown_result
from ..tools import Tool, ToolContext, ToolExecution
from ..values.messages import ModelRequest, ModelResponse, ToolCall

__all__ = ["StepModel", "StepTool", "on_dbos"]

_MODEL_STEP: StepOptions = {"name": "fsm_agent.model", "retries_allowed": False}


class StepModel:
    """A model whose every ``complete`` is a DBOS step. It does not stream: a step's outcome is
    the whole response, so the run's events carry no text deltas."""

    def __init__(self, inner: Model) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.inner.name

    @property
    def context_window(self) -> int | None:
        """The wrapped model's context window."""
        return self.inner.context_window

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the wrapped model in a step, or replay the step's recorded outcome."""
        fresh: list[ModelResponse | Exception] = []

        async def call() -> str:
            try:
                response = await self.inner.complete(request)
            except Exception as exc:  # recorded as the call's outcome; the kernel classifies it
                fresh.append(exc)
                return encode_model_outcome(exc)
            fresh.append(response)
            return encode_model_outcome(response)

        recorded = await DBOS.run_step_async(_MODEL_STEP, call)
        outcome = fresh[0] if fresh else decode_model_outcome(recorded)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class StepOrder:
    """Lets concurrent tool calls start their steps in the order the calls reached it: each
    call takes its tickets on arrival and starts a step only when that step's ticket is next.
    A call that waits holds up only the steps behind it; steps already started run on. A call
    that ends without using a ticket (cancelled) releases it, so no one waits for it."""

    def __init__(self) -> None:
        self.issued = 0
        self.started = 0
        self.waiting: dict[int, asyncio.Future[None]] = {}
        self.released: set[int] = set()

    def tickets(self, count: int) -> list[int]:
        """Reserve the next ``count`` step starts (synchronously: arrival order)."""
        first = self.issued
        self.issued += count
        return list(range(first, first + count))

    async def start(self, ticket: int) -> None:
        """Wait for ``ticket``'s turn and take it. The caller then starts its step without
        yielding to the loop (DBOS numbers a step in its first, synchronous part), and only
        then does the next ticket's holder wake."""
        if self.started != ticket:
            turn = asyncio.get_running_loop().create_future()
            self.waiting[ticket] = turn
            try:
                await turn
            finally:
                self.waiting.pop(ticket, None)
        self.release(ticket)

    def release(self, ticket: int) -> None:
        """Give ``ticket``'s turn up (taken or not), waking the next holder when it is due."""
        self.released.add(ticket)
        while self.started in self.released:
            self.released.discard(self.started)
            self.started += 1
        following = self.waiting.get(self.started)
        if following is not None and not following.done():
            following.set_result(None)


class StepTool(Tool):
    """A tool whose every execution is a DBOS step (validation, the timeout and the tool's
    exceptions included, so a replay sees exactly what the first execution saw).

    ``attempt`` is the nonce of the current workflow execution and ``order`` the run's step
    order (see the module docstring)."""

    def __init__(self, inner: Tool, attempt: str, order: StepOrder) -> None:
        # A view of a built tool: its schema, name and flags are copied, not rebuilt.
        self.__dict__.update(inner.__dict__)
        self.inner = inner
        self.attempt = attempt
        self.order = order
        self._step: StepOptions = {"name": f"fsm_agent.tool.{inner.name}", "retries_allowed": False}
        self._intent: StepOptions = {"name": f"fsm_agent.intent.{inner.name}"}

    async def execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        *,
        default_timeout_s: float | None = 30.0,
    ) -> ToolExecution:
        """Run the tool in a step, or replay the step's recorded outcome."""
        intent = not self.inner.idempotent
        tickets = self.order.tickets(2 if intent else 1)
        try:
            return await self._execute(call, context, default_timeout_s, intent, tickets)
        finally:
            for unused in tickets:
                self.order.release(unused)

    async def _execute(
        self,
        call: ToolCall,
        context: ToolContext[Any] | None,
        default_timeout_s: float | None,
        intent: bool,
        tickets: list[int],
    ) -> ToolExecution:
        started_by = self.attempt
        if intent:
            await self.order.start(tickets[0])
            tickets.pop(0)
            started_by = await DBOS.run_step_async(self._intent, _same, self.attempt)
        fresh: list[ToolExecution] = []

        async def run() -> str:
            if started_by != self.attempt:  # an earlier execution died inside this call
                execution = ToolExecution(unknown_result(call))
            else:
                execution = await self.inner.execute(
                    call, context, default_timeout_s=default_timeout_s
                )
            fresh.append(execution)
            return encode_tool_outcome(execution)

        await self.order.start(tickets[0])
        tickets.pop(0)
        recorded = await DBOS.run_step_async(self._step, run)
        return fresh[0] if fresh else decode_tool_outcome(recorded, call)


async def _same(value: str) -> str:
    return value


def on_dbos(agent: Agent[Any, Any], run_id: str) -> Agent[Any, Any]:
    """Make a freshly built agent run inside the DBOS workflow ``run_id``: model and tool calls
    become steps, backoff sleeps become durable sleeps, and the run's id and randomness are
    fixed by the workflow id, so a replay takes the same path (a copy of ``agent``)."""
    if agent.checkpointer is not None:
        raise ConfigurationError(
            "an agent that runs on DBOS must not have a checkpointer: DBOS records the run"
        )
    attempt = uuid.uuid4().hex
    order = StepOrder()
    return agent.with_effects(
        model=StepModel(agent.model),
        streams=False,  # a step returns the whole answer
        wrap_tool=lambda tool: StepTool(tool, attempt, order),
        runtime=Runtime(
            sleep=DBOS.sleep_async,
            clock=agent.runtime.clock,
            random=random.Random(run_id),
            new_id=lambda: run_id,
        ),
    )
