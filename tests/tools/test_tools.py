"""@tool: schemas from type hints, validation, errors as results, timeouts, bad definitions."""

from __future__ import annotations

import asyncio
import datetime
from typing import Annotated

import pytest
from pydantic import BaseModel, Field
from pydantic_core import to_json

from fsm_agent import (
    Policy,
    Role,
    State,
    StopReason,
    TaskComplete,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolExecutionError,
    tool,
)
from fsm_agent.events import AbortedEvent
from fsm_agent.testing import text, tool_call
from fsm_agent.tools import ToolRegistry, serialise_result
from helpers import add, make_agent, stream


def run_tool(t, arguments: dict | str, **context):  # type: ignore[no-untyped-def, type-arg]
    call = ToolCall.create("c1", t.name, arguments)
    ctx = ToolContext(run_id="r", call_id="c1", step=1, deps=context.get("deps"))
    return asyncio.run(t.execute(call, ctx, default_timeout_s=context.get("timeout", 30.0)))


def test_schema_comes_from_type_hints_and_docstring() -> None:
    """The JSON schema lists typed parameters, required ones, defaults and descriptions."""

    @tool
    def search(query: Annotated[str, Field(description="what to find")], limit: int = 5) -> str:
        """Search the notes.

        Longer text that is not part of the description."""
        return query

    definition = search.definition
    assert definition.name == "search"
    assert definition.description == "Search the notes."
    params = definition.parameters
    assert params["required"] == ["query"]
    assert params["properties"]["limit"] == {"default": 5, "title": "Limit", "type": "integer"}
    assert params["properties"]["query"]["description"] == "what to find"


def test_sync_and_async_tools_both_run() -> None:
    """Sync and async functions are both tools."""

    @tool
    async def double(x: int) -> int:
        """Double."""
        await asyncio.sleep(0)
        return 2 * x

    @tool
    def triple(x: int) -> int:
        """Triple."""
        return 3 * x

    assert run_tool(double, {"x": 2}).result.content == "4"
    assert run_tool(triple, {"x": 2}).result.content == "6"


def test_invalid_arguments_become_an_error_result_the_model_can_act_on() -> None:
    """Arguments that fail validation give an is_error result naming the field (DESIGN §6)."""
    result = run_tool(add, {"a": "x"}).result
    assert result.is_error
    assert "invalid arguments for tool 'add'" in result.content
    assert "a:" in result.content and "b:" in result.content


def test_unparseable_json_goes_to_validation_and_raw_tools_get_the_string() -> None:
    """Malformed JSON: a typed tool answers with a validation error; a raw tool receives the
    raw string [S000 §4.2]."""

    @tool
    def typed(a: int) -> int:
        """Typed."""
        return a

    @tool(raw_arguments=True)
    def raw(arguments: str) -> str:
        """Raw."""
        return f"got {arguments}"

    typed_result = run_tool(typed, '{"a": 1').result
    assert typed_result.is_error and "Invalid JSON" in typed_result.content
    assert run_tool(raw, '{"a": 1').result.content == 'got {"a": 1'


def test_exceptions_become_error_results() -> None:
    """A raised exception is an is_error result with the exception's text [S000 §4.3]."""

    @tool
    def broken() -> str:
        """Break."""
        raise KeyError("missing thing")

    result = run_tool(broken, {}).result
    assert result.is_error and result.content == "Error: KeyError: 'missing thing'"


def test_task_complete_is_a_signal_not_an_error() -> None:
    """TaskComplete ends the run through the tool layer; it is not an FsmAgentError
    [S000 §4.4, STYLE 9]."""
    from fsm_agent import FsmAgentError

    assert not issubclass(TaskComplete, FsmAgentError)

    @tool
    def finish(answer: str) -> None:
        """Finish."""
        raise TaskComplete(answer)

    execution = run_tool(finish, {"answer": "42"})
    assert execution.done and execution.final_message == "42"


def test_an_async_tool_past_its_timeout_gets_an_error_result() -> None:
    """A tool that hangs past its timeout is cut off with an is_error result [S004]."""

    @tool(timeout_s=0.01)
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(10)
        return "never"

    result = run_tool(hang, {}).result
    assert result.is_error and "timed out after 0.01 s" in result.content


def test_a_callers_cancel_of_a_tool_under_its_limit_stays_a_cancel() -> None:
    """The caller cancels a call still within its time limit: the cancel goes on as a cancel
    (never a timeout result), the limit's timer is stopped, and the task's count of pending
    cancels is the caller's."""

    @tool(timeout_s=0.05)
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(10)
        return "never"

    async def main() -> None:
        call = ToolCall.create("c1", "hang", {})
        context = ToolContext(run_id="r", call_id="c1", step=1, deps=None)
        task = asyncio.create_task(hang.execute(call, context))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelling() == 1
        await asyncio.sleep(0.08)  # past the limit: its timer cancels nothing any more

    asyncio.run(main())


def test_a_cancel_that_comes_while_the_limit_cuts_a_call_off_stays_a_cancel() -> None:
    """The caller cancels while the tool is still ending after its time limit cut it off: the
    caller's cancel wins, as with ``asyncio.timeout`` (the limit withdraws only its own)."""
    started = asyncio.Event()

    @tool(timeout_s=0.02)
    async def slow_to_stop() -> str:
        """Hang past the limit, then take a while to stop."""
        started.set()
        try:
            await asyncio.sleep(10)
        finally:
            await asyncio.sleep(0.1)
        return "never"

    async def main() -> None:
        call = ToolCall.create("c1", "slow_to_stop", {})
        context = ToolContext(run_id="r", call_id="c1", step=1, deps=None)
        task = asyncio.create_task(slow_to_stop.execute(call, context))
        await started.wait()
        await asyncio.sleep(0.05)  # the limit has cut it off; it is still stopping
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())


def test_the_policy_timeout_applies_to_threaded_sync_tools() -> None:
    """A threaded sync tool is bounded by the policy's tool timeout."""
    import time

    @tool(threaded=True)
    def blocking() -> str:
        """Block."""
        time.sleep(0.2)
        return "late"

    result = run_tool(blocking, {}, timeout=0.02).result
    assert result.is_error and "timed out" in result.content


def test_values_are_serialised_and_unserialisable_ones_are_stringified() -> None:
    """Return values become JSON; a value JSON cannot hold is shown as text with a note, and
    the run goes on."""

    class Point(BaseModel):
        x: int

    class Opaque:
        def __str__(self) -> str:
            return "<opaque>"

    assert serialise_result({"a": [1, 2]}) == '{"a":[1,2]}'
    for number in (0, -5, 2**63, -(2**64), 2**70, 10**5000, True, False):  # each as JSON
        assert serialise_result(number) == to_json(number).decode()
    assert serialise_result(Point(x=1)) == '{"x":1}'
    assert serialise_result(datetime.date(2026, 1, 2)) == '"2026-01-02"'
    assert serialise_result(Opaque()).startswith("<opaque> (note: the result was not JSON")

    @tool
    def odd() -> object:
        """Odd."""
        return Opaque()

    agent, _, _ = make_agent([tool_call("odd"), text("ok")], tools=[odd])
    result = agent.run_sync("hi")
    assert result.output == "ok"
    assert "not JSON-serialisable" in result.messages[-2].tool_results[0].content


def test_tool_context_is_injected_and_hidden_from_the_schema() -> None:
    """A ToolContext parameter is injected with run id, call id, step and deps, and is not
    part of the schema the model sees."""

    @tool
    def whoami(ctx: ToolContext[str], greeting: str) -> str:
        """Who."""
        return f"{greeting} {ctx.deps} {ctx.call_id} {ctx.step}"

    assert list(whoami.definition.parameters["properties"]) == ["greeting"]
    assert run_tool(whoami, {"greeting": "hi"}, deps="alice").result.content == "hi alice c1 1"


def test_results_keep_the_call_id_and_name() -> None:
    """Every result message is linked to its call by id [S003]."""

    @tool
    def echo(s: str) -> str:
        """Echo."""
        return s

    agent, _, _ = make_agent([tool_call("echo", {"s": "x"}, id="abc"), text("ok")], tools=[echo])
    result = agent.run_sync("hi")
    tool_message = next(m for m in result.messages if m.role is Role.TOOL)
    assert tool_message.tool_results[0].call_id == "abc"
    assert tool_message.tool_results[0].name == "echo"
    assert result.stop_reason is StopReason.COMPLETED


def test_unknown_tool_gets_the_seed_error_and_the_loop_continues() -> None:
    """An unknown tool gets `Error: Unknown tool '…'` and the loop continues [S000 §4.1]."""
    agent, model, _ = make_agent([tool_call("nope"), text("ok")])
    result = agent.run_sync("hi")
    assert result.output == "ok"
    sent = model.requests[1].messages[-1].tool_results[0]
    assert (sent.content, sent.is_error) == ("Error: Unknown tool 'nope'", True)


def test_parameters_without_type_hints_are_refused() -> None:
    """A tool function whose parameters lack type hints fails at definition time."""

    def untyped(a, b: int) -> int:  # type: ignore[no-untyped-def]
        return b

    with pytest.raises(ToolDefinitionError, match="parameter 'a' has no type hint"):
        tool(untyped)


def test_var_args_are_refused() -> None:
    """*args and **kwargs cannot be described to a model: refused with a clear message."""

    def variadic(*items: int) -> int:
        return 0

    with pytest.raises(ToolDefinitionError, match=r"\*args"):
        tool(variadic)


def test_two_tools_with_the_same_name_are_refused() -> None:
    """Duplicate tool names are refused when the agent is built."""

    @tool
    def same() -> str:
        """One."""
        return "1"

    other = tool(name="same", description="Two.")(lambda: "2")
    with pytest.raises(ToolDefinitionError, match="two tools are named 'same'"):
        ToolRegistry([same, other])


def test_bad_tool_names_and_timeouts_are_refused() -> None:
    """Names with spaces and non-positive timeouts are refused."""
    with pytest.raises(ToolDefinitionError, match="letters, digits"):
        tool(name="has space")(lambda: "x")
    with pytest.raises(ToolDefinitionError, match="timeout_s must be > 0"):
        tool(name="ok", timeout_s=0)(lambda: "x")


class _Point(BaseModel):
    x: int
    y: int = 0


def test_a_tool_receives_every_validated_argument_as_each_field_reads() -> None:
    """The arguments a tool receives are its validated arguments model's field values, read
    from the model's ``__dict__``: the same values, types and order as reading each field,
    defaults and nested models included."""

    @tool
    def place(
        name: str, point: _Point, when: datetime.date, tags: list[str] | None = None, n: int = 3
    ) -> str:
        """Place something."""
        return name

    call = ToolCall.create(
        "c1", "place", {"name": "a", "point": {"x": 1}, "when": "2026-01-02", "n": "4"}
    )
    given = place._arguments(call)
    model = place._args_model
    assert model is not None
    parsed = model.model_validate(call.arguments)
    expected = {name: getattr(parsed, name) for name in type(parsed).model_fields}
    assert given == expected
    assert list(given) == ["name", "point", "when", "tags", "n"]
    assert [type(v) for v in given.values()] == [str, _Point, datetime.date, type(None), int]


@tool
def broken(x: int = 0) -> str:
    """Always fails."""
    raise RuntimeError(f"broken {x}")


@pytest.mark.parametrize("listening", [False, True], ids=["run", "run_stream"])
def test_failed_tool_turns_in_a_row_abort_with_the_reason(listening: bool) -> None:
    """``max_consecutive_errors`` failed tool turns in a row abort the run with a typed error
    naming the limit and the last failure, on the result and on the ``aborted`` event."""
    turns = [tool_call("broken", {"x": n}) for n in range(3)] + [text("never")]
    agent, model, _ = make_agent(turns, tools=[broken])
    if listening:
        events, result = stream(agent)
        (aborted,) = [e for e in events if isinstance(e, AbortedEvent)]
        assert aborted.error == str(result.error)
    else:
        result = agent.run_sync("go")
    assert (result.state, result.stop_reason) == (State.ABORTED, StopReason.MAX_ERRORS)
    assert len(model.requests) == 3
    assert isinstance(result.error, ToolExecutionError)
    assert result.error.tool_name == "broken" and result.error.call_id == "call_2_0"
    message = str(result.error)
    assert "3 failed tool turns in a row" in message and "max_consecutive_errors=3" in message
    assert "broken 2" in message
    assert isinstance(result.error.__cause__, RuntimeError)


def test_a_spent_error_budget_names_max_total_errors() -> None:
    """A failed tool turn that spends ``max_total_errors`` names that limit in the error."""
    turns = [tool_call("broken"), tool_call("broken")]
    policy = Policy(max_consecutive_errors=5, max_total_errors=2)
    agent, _, _ = make_agent(turns, tools=[broken], policy=policy)
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.MAX_ERRORS
    assert isinstance(result.error, ToolExecutionError)
    assert "max_total_errors=2" in str(result.error)
