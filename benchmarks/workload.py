"""The peer benchmark's workload, and the adapters that need nothing but fsm_agent.

One run of N steps: the model calls a trivial ``add`` tool N - 1 times, then answers ``done``.
Step k calls ``add(a=k, b=1)``; its result, k + 1, tells a stateless model which step comes next
(see :func:`next_call`), so every system plays the same turns from its own history without a
per-run script.

fsm_agent and the floors answer from a wire model: each call builds the decoded JSON body a
Chat Completions server sends (:func:`wire_payload`: a call id, a tool name and the arguments as
a JSON string) and turns it into a response the way the system's provider would, so response
construction is part of every step. Three floors, the least a correct loop does at three levels
of typing:

- the **typed floor** (:class:`TypedFloorAdapter`), the reference of the targets: a minimal typed
  loop on its own plain pydantic models, built per call (:func:`plain_response`);
- the **asyncio floor** (:class:`AsyncioFloorAdapter`): the same loop on dicts, no types at all;
- the **types floor** (:class:`FloorAdapter`): the same loop on fsm_agent's public message types
  and its OpenAI provider's reader; it also builds a ``ModelRequest`` each step and runs each
  tool call through ``Tool.execute``, as the kernel does and the typed floor does not, so its
  cost is the types' and those choices' together.

:func:`script` keeps the same turns pre-built for the scripts that replay them.

An :class:`Adapter` makes one system run the workload. Everything a run needs (agents, models)
is built by :meth:`Adapter.prepare`, before the clock starts; the clock times only the runs.
Building the agent is measured on its own, as start-up (:meth:`Adapter.start`).
"""

from __future__ import annotations

import asyncio
import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel

from fsm_agent import (
    Agent,
    Message,
    ModelRequest,
    ModelResponse,
    Policy,
    Role,
    Tool,
    ToolContext,
    ToolResult,
    tool,
)
from fsm_agent.phases import Phase, Phases
from fsm_agent.testing import Turn, text, tool_call

PROMPT = "count"
SYSTEM_PROMPT = "Be brief."
ANSWER = "done"

Run = Callable[[], Awaitable[str]]
"""One prepared run: awaiting it plays the whole run and returns the final answer."""


@dataclass(slots=True)
class _Counter:
    value: int = 0


add_calls = _Counter()
"""How many times :func:`add` ran (adapters are checked against it)."""


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    add_calls.value += 1
    return a + b


ADD_TOOL: Tool = tool(add)
POLICY = Policy(max_steps=10_000)


@dataclass(frozen=True, slots=True)
class Call:
    """The model's call ``add(a, 1)`` at step ``a`` (steps count from 0)."""

    a: int

    @property
    def id(self) -> str:
        """The call id, the same in every system."""
        return f"c{self.a}"

    @property
    def args(self) -> dict[str, int]:
        """The call's arguments."""
        return {"a": self.a, "b": 1}


def next_call(last_result: int | None, steps: int) -> Call | None:
    """The model's next turn in a run of ``steps`` steps, given the last ``add`` result
    (``None`` before the first call): the next call, or ``None`` for the final answer."""
    step = last_result or 0
    return Call(step) if step < steps - 1 else None


@functools.cache
def script(steps: int) -> tuple[Turn, ...]:
    """The run's turns for :class:`~fsm_agent.testing.ScriptedModel` (shared: turns are
    immutable)."""
    turns: list[Turn] = []
    result: int | None = None
    while (call := next_call(result, steps)) is not None:
        turns.append(tool_call("add", call.args, id=call.id))
        result = call.a + 1  # what add returns
    turns.append(text(ANSWER))
    return tuple(turns)


class Adapter(ABC):
    """One system running the workload."""

    name: ClassVar[str]
    """The system's name in the report."""
    distributions: ClassVar[tuple[str, ...]] = ()
    """The installed distributions whose versions the report names."""
    concurrent: ClassVar[bool] = True
    """Runs can share one event loop (false for a synchronous framework)."""

    @abstractmethod
    def start(self, steps: int) -> object:
        """Build what one run of ``steps`` steps starts from (the agent): the start-up cost."""

    @abstractmethod
    def prepare(self, steps: int) -> Run:
        """Build everything one run needs; awaiting the result plays the run."""


def wire_payload(call: Call | None) -> dict[str, Any]:
    """The decoded body of a Chat Completions answer for the turn ``call`` (``None``: the
    answer), built afresh: what a provider holds after reading the server's JSON."""
    if call is None:
        message: dict[str, Any] = {"role": "assistant", "content": ANSWER}
        finish = "stop"
    else:
        function = {"name": "add", "arguments": f'{{"a": {call.a}, "b": 1}}'}
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": function}],
        }
        finish = "tool_calls"
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
    }


def last_result(messages: Sequence[Message]) -> int | None:
    """The last ``add`` result in an fsm_agent history, or ``None`` before the first call."""
    last = messages[-1]
    if last.role is not Role.TOOL:
        return None
    result = last.parts[-1]
    assert isinstance(result, ToolResult)
    return int(result.content)


class WireModel:
    """A model that answers the workload's next turn from the request's history, building the
    response per call from the wire body with fsm_agent's OpenAI provider. Stateless."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self._parse = openai_parser()

    @property
    def name(self) -> str:
        """The model's name in events and traces."""
        return "wire"

    @property
    def context_window(self) -> int | None:
        """Unknown: compaction never triggers."""
        return None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Yield to the loop once, then parse the next turn's wire body."""
        await asyncio.sleep(0)
        return self._parse(wire_payload(next_call(last_result(request.messages), self.steps)))


@functools.cache
def openai_parser() -> Callable[[dict[str, Any]], ModelResponse]:
    """The OpenAI provider's reader of a whole ``chat.completion`` body."""
    from fsm_agent.providers import OpenAIChatModel

    return OpenAIChatModel("bench", base_url="http://127.0.0.1:9/v1")._response


class FsmAgentAdapter(Adapter):
    """fsm_agent: an :class:`~fsm_agent.Agent` over a :class:`WireModel`."""

    name = "fsm_agent"
    distributions = ("fsm_agent", "pydantic", "transitions")

    def start(self, steps: int) -> Agent[None]:
        """An agent with the ``add`` tool, a system prompt and the run's model."""
        return Agent(WireModel(steps), tools=[ADD_TOOL], system_prompt=SYSTEM_PROMPT, policy=POLICY)

    def prepare(self, steps: int) -> Run:
        """A fresh agent's ``run``."""
        agent = self.start(steps)

        async def run() -> str:
            result = await agent.run(PROMPT)
            return result.output or ""

        return run


class PhasedAdapter(FsmAgentAdapter):
    """fsm_agent under phases: the same agent with a two-phase task machine (each step offers
    the phase's tools and the move tool, adds the phase's instructions, and gates the call)."""

    name = "phases"

    def start(self, steps: int) -> Agent[None]:
        """The ``fsm_agent`` agent with phases."""
        phases = Phases(
            [Phase("work", ("add",), "Add the numbers."), Phase("answer")],
            [("work", "answer")],
            goals=["work", "answer"],
        )
        return Agent(
            WireModel(steps),
            tools=[ADD_TOOL],
            system_prompt=SYSTEM_PROMPT,
            policy=POLICY,
            phases=phases,
        )


class FloorAdapter(Adapter):
    """The types floor: a hand-written asyncio loop over fsm_agent's public message types, the
    least a correct loop does with them (same model, same tool, same argument validation; no
    table, counters, trace, limits or interrupts)."""

    name = "types floor"

    def start(self, steps: int) -> WireModel:
        """The loop starts from its model alone."""
        return WireModel(steps)

    def prepare(self, steps: int) -> Run:
        """The typed loop over a fresh model."""
        return functools.partial(typed_loop, self.start(steps))


async def typed_loop(model: WireModel) -> str:
    """Call the model, run its tool calls, repeat until it answers; return the answer."""
    tools = {ADD_TOOL.name: ADD_TOOL}
    definitions = (ADD_TOOL.definition,)
    messages = [Message.system(SYSTEM_PROMPT), Message.user(PROMPT)]
    step = 0
    while True:
        step += 1
        request = ModelRequest(messages=tuple(messages), tools=definitions, tool_choice=None)
        response = await model.complete(request)
        messages.append(response.message)
        calls = response.message.tool_calls
        if not calls:
            return response.message.text
        for call in calls:
            context = ToolContext(run_id="run", call_id=call.id, step=step, deps=None)
            execution = await tools[call.name].execute(call, context)
            messages.append(Message(role=Role.TOOL, parts=(execution.result,)))


# -- the typed floor: its own plain pydantic models ---------------------------------------------
class PlainToolCall(BaseModel):
    """A tool call: id, name, parsed arguments."""

    id: str
    name: str
    arguments: dict[str, Any]


class PlainMessage(BaseModel):
    """One message: role, text, the assistant's calls, the tool result's call id."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[PlainToolCall] = []
    tool_call_id: str | None = None


class PlainResponse(BaseModel):
    """One model turn."""

    message: PlainMessage
    finish_reason: str
    input_tokens: int = 0
    output_tokens: int = 0


class AddArguments(BaseModel):
    """The ``add`` tool's arguments."""

    a: int
    b: int


def plain_response(payload: dict[str, Any]) -> PlainResponse:
    """A Chat Completions body as a minimal typed loop reads it: the first choice, each call's
    arguments decoded from their JSON text, the pieces validated by the plain models."""
    choice = payload["choices"][0]
    message = choice["message"]
    calls = [
        PlainToolCall(
            id=wire["id"],
            name=wire["function"]["name"],
            arguments=json.loads(wire["function"]["arguments"]),
        )
        for wire in message.get("tool_calls") or ()
    ]
    usage = payload.get("usage") or {}
    return PlainResponse(
        message=PlainMessage(
            role="assistant", content=message.get("content") or "", tool_calls=calls
        ),
        finish_reason=choice["finish_reason"],
        input_tokens=usage.get("prompt_tokens", 0),
        output_tokens=usage.get("completion_tokens", 0),
    )


class PlainWireModel:
    """:class:`WireModel` for the typed floor: same turns, parsed by :func:`plain_response`."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def complete(self, messages: Sequence[PlainMessage]) -> PlainResponse:
        """Yield to the loop once, then parse the next turn's wire body."""
        await asyncio.sleep(0)
        last = messages[-1]
        result = int(last.content) if last.role == "tool" else None
        return plain_response(wire_payload(next_call(result, self.steps)))


class TypedFloorAdapter(Adapter):
    """The typed floor, the reference of the targets: the least a correct typed loop does, on
    its own plain pydantic models built per call (so no cost of fsm_agent's types hides in it)."""

    name = "typed floor"
    distributions = ("pydantic",)

    def start(self, steps: int) -> PlainWireModel:
        """The loop starts from its model alone."""
        return PlainWireModel(steps)

    def prepare(self, steps: int) -> Run:
        """The plain loop over a fresh model."""
        return functools.partial(plain_loop, self.start(steps))


async def plain_loop(model: PlainWireModel) -> str:
    """Call the model, validate each call's arguments and run the tool, repeat until it
    answers; return the answer."""
    tools = {"add": add}
    messages = [
        PlainMessage(role="system", content=SYSTEM_PROMPT),
        PlainMessage(role="user", content=PROMPT),
    ]
    while True:
        response = await model.complete(messages)
        messages.append(response.message)
        if not response.message.tool_calls:
            return response.message.content
        for call in response.message.tool_calls:
            arguments = AddArguments.model_validate(call.arguments)
            value = tools[call.name](arguments.a, arguments.b)
            messages.append(PlainMessage(role="tool", content=str(value), tool_call_id=call.id))


# -- the asyncio floor: no types at all ---------------------------------------------------------
def dict_response(payload: dict[str, Any]) -> dict[str, Any]:
    """A Chat Completions body as an untyped loop reads it: the first choice's message, each
    call's arguments decoded from their JSON text, nothing validated."""
    message = payload["choices"][0]["message"]
    calls = [
        {
            "id": wire["id"],
            "name": wire["function"]["name"],
            "arguments": json.loads(wire["function"]["arguments"]),
        }
        for wire in message.get("tool_calls") or ()
    ]
    return {"role": "assistant", "content": message.get("content") or "", "tool_calls": calls}


class DictWireModel:
    """:class:`WireModel` for the asyncio floor: same turns, read by :func:`dict_response`."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    async def complete(self, messages: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """Yield to the loop once, then read the next turn's wire body."""
        await asyncio.sleep(0)
        last = messages[-1]
        result = int(last["content"]) if last["role"] == "tool" else None
        return dict_response(wire_payload(next_call(result, self.steps)))


class AsyncioFloorAdapter(Adapter):
    """The asyncio floor: the typed floor's loop on dicts, with no types and no validation."""

    name = "asyncio floor"

    def start(self, steps: int) -> DictWireModel:
        """The loop starts from its model alone."""
        return DictWireModel(steps)

    def prepare(self, steps: int) -> Run:
        """The untyped loop over a fresh model."""
        return functools.partial(dict_loop, self.start(steps))


async def dict_loop(model: DictWireModel) -> str:
    """Call the model, run its tool calls, repeat until it answers; return the answer."""
    tools = {"add": add}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": PROMPT},
    ]
    while True:
        message = await model.complete(messages)
        messages.append(message)
        if not message["tool_calls"]:
            return str(message["content"])
        for call in message["tool_calls"]:
            value = tools[call["name"]](**call["arguments"])
            messages.append({"role": "tool", "content": str(value), "tool_call_id": call["id"]})
