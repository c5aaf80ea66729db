"""Values built by user code are checked where they enter a run: a history's fields, a tool's
``ToolReturn``, a changing hook's answer and the settings it sends, and a ``done`` call that
comes with other calls in one turn."""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    Conversation,
    FinishReason,
    HookError,
    HookFailureMode,
    ImagePart,
    InvalidInputError,
    Message,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    Policy,
    Role,
    SQLiteCheckpointer,
    StopReason,
    TextPart,
    Tool,
    ToolCall,
    ToolResult,
    ToolReturn,
    tool,
)
from fsm_agent.events import HookErrorEvent
from fsm_agent.hooks import MockResult, SkipTool
from fsm_agent.messages import validate_history
from fsm_agent.phases import MovePhase
from fsm_agent.record import field_problem
from fsm_agent.testing import ScriptedModel, text, tool_call, tool_calls
from helpers import stream
from invariants import check_history

_USER = Role.USER


# -- 1: a history's fields ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("history", "problem"),
    [
        (
            [Message(role=_USER, parts=(TextPart(text=123),))],
            "history[0].parts[0].text is an int, not a str",
        ),
        (
            [Message.user("hi"), Message(role=_USER, parts="hello")],
            "history[1].parts is a str, not a tuple",
        ),
        (
            [Message(role=_USER, parts=({"type": "text", "text": "hi"},))],
            "history[0].parts[0] is a dict, not a TextPart or ReasoningPart",
        ),
        (
            [Message(role=_USER, parts=[TextPart(text="hi")])],
            "history[0].parts is a list, not a tuple",
        ),
        (
            [Message.user("look", ImagePart(data=b"iVBOR"))],
            "history[0].parts[1].data is a bytes, not a str or None",
        ),
        (
            [
                Message.assistant(
                    tool_calls=[ToolCall(id="c1", name="f", arguments={"x": math.nan})]
                ),
                Message.tool(ToolResult(call_id="c1", name="f", content="ok")),
            ],
            "history[0].parts[0].arguments['x'] is nan, a number JSON cannot hold",
        ),
        (
            [
                Message.assistant(tool_calls=[ToolCall.create("c1", "f", {})]),
                Message.tool(ToolResult(call_id="c1", name="f", content=7)),
            ],
            "history[1].parts[0].content is an int, not a str",
        ),
    ],
)
def test_a_history_with_wrong_typed_fields_is_refused_before_the_run(
    history: list[Message], problem: str
) -> None:
    """A history whose fields do not hold their declared types raises InvalidInputError naming
    the message and the field, before any model call, from a run and from a Conversation."""
    with pytest.raises(InvalidInputError, match=re.escape(problem)):
        validate_history(history)
    model = ScriptedModel([text("ok")])
    agent = Agent(model)
    with pytest.raises(InvalidInputError, match=re.escape(problem)) as caught:
        agent.run_sync("go on", history=history)
    assert "Message.model_validate(data)" in str(caught.value)
    assert model.requests == []
    with pytest.raises(InvalidInputError, match=re.escape(problem)):
        Conversation(agent, history)


def test_a_prompt_message_with_wrong_typed_fields_is_refused() -> None:
    """A Message given as the prompt is checked the same way: its field is named."""
    model = ScriptedModel([text("ok")])
    bad = Message(role=_USER, parts=(TextPart(text=None),))
    with pytest.raises(InvalidInputError, match=re.escape("the prompt's parts[0].text is None")):
        Agent(model).run_sync(bad)
    assert model.requests == []


def test_a_history_built_as_documented_still_runs() -> None:
    """A history of well-typed messages (text, images, tool turns) passes and reaches the
    model unchanged."""
    call = ToolCall.create("c1", "f", {"x": [1, 2.5, {"y": None}]})
    history = [
        Message.system("be brief"),
        Message.user("look", ImagePart(data="iVBOR")),
        Message.assistant("calling", tool_calls=[call]),
        Message.tool(ToolResult(call_id="c1", name="f", content="ok", structured={"n": 1})),
    ]
    validate_history(history)
    model = ScriptedModel([text("ok")])
    result = Agent(model).run_sync("and now?", history=history)
    assert result.ok and model.requests[0].messages[:4] == tuple(history)


# -- 2: a ToolReturn JSON cannot hold ----------------------------------------------------------
@tool
def measure(kind: str) -> ToolReturn:
    """Return a measurement that is not a number JSON can hold."""
    if kind == "nan":
        return ToolReturn("measured", structured=math.nan)
    if kind == "deep-inf":
        return ToolReturn("measured", structured={"readings": [1.0, math.inf]})
    return ToolReturn("measured", metadata={"scale": -math.inf})


@pytest.mark.parametrize(
    ("kind", "problem"),
    [
        ("nan", "structured is nan"),
        ("deep-inf", "structured['readings'][1] is inf"),
        ("metadata", "metadata['scale'] is -inf"),
    ],
)
def test_a_tool_return_json_cannot_hold_is_an_error_result_live_and_stored(
    tmp_path: Path, kind: str, problem: str
) -> None:
    """A ToolReturn holding NaN or an infinity becomes an error result saying where, and the
    run a store keeps is the run that was lived."""
    store = SQLiteCheckpointer(tmp_path / "runs.db")
    script = [tool_call("measure", {"kind": kind}), text("noted")]
    agent = Agent(ScriptedModel(script), tools=[measure], checkpointer=store)
    result = agent.run_sync("measure")
    (kept,) = result.messages[-2].tool_results
    assert kept.is_error and kept.structured is None and kept.metadata == {}
    assert kept.content == (
        f"Error: tool 'measure' returned an invalid ToolReturn: {problem}, a number JSON cannot "
        "hold"
    )
    assert store.load(result.run_id).state.messages == list(result.messages)


# -- 3: a changing hook's answer with wrong-typed fields ---------------------------------------
@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"found {topic}"


_TURNS = [tool_call("lookup", {"topic": "tides"}), text("the tides are high")]


class _BadResult:
    def after_tool(self, **future_kwargs: Any) -> ToolResult:
        return ToolResult(call_id="x", name="y", content=123)


class _BadMove:
    def after_tool(self, **future_kwargs: Any) -> MovePhase:
        return MovePhase(phase=5)


class _BadMock:
    def before_tool(self, **future_kwargs: Any) -> MockResult:
        return MockResult(123)


class _BadSkip:
    def before_tool(self, **future_kwargs: Any) -> SkipTool:
        return SkipTool(reason=["no"])


class _BadCall:
    def before_tool(self, *, call: ToolCall, **future_kwargs: Any) -> ToolCall:
        return ToolCall(id=call.id, name=call.name, arguments='{"topic": "moon"}')


class _BadResponse:
    def before_model_call(self, **future_kwargs: Any) -> ModelResponse:
        message = Message(role=Role.ASSISTANT, parts=(TextPart(text=5),))
        return ModelResponse(message=message, finish_reason=FinishReason.STOP)


class _BadRequest:
    def before_model_call(self, *, request: ModelRequest, **future_kwargs: Any) -> ModelRequest:
        extra = Message(role=Role.USER, parts=("be brief",))
        return request.model_copy(update={"messages": (*request.messages, extra)})


@pytest.mark.parametrize(
    ("hook", "fault"),
    [
        (_BadResult(), "returned a ToolResult; its content is an int, not a str"),
        (_BadMove(), "returned a MovePhase; its phase is an int, not a str"),
        (_BadMock(), "returned a MockResult; its content is an int, not a str"),
        (_BadSkip(), "returned a SkipTool; its reason is a list, not a str"),
        (_BadCall(), "returned a ToolCall; its arguments is a str, not a dict or None"),
        (_BadResponse(), "returned a ModelResponse; its message.parts[0].text is an int"),
        (_BadRequest(), "].parts[0] is a str, not a TextPart or ReasoningPart"),
    ],
)
def test_a_changing_hooks_answer_with_wrong_typed_fields_is_a_hook_failure(
    hook: object, fault: str
) -> None:
    """A changing hook that answers with the right type but a field of the wrong type is a hook
    failure naming the field, and the request, call or result is left as it was."""
    model = ScriptedModel(_TURNS)
    events, result = stream(Agent(model, tools=[lookup], hooks=[hook]), "tides?")
    errors = [e for e in events if isinstance(e, HookErrorEvent)]
    assert errors and all(fault in e.error for e in errors)
    assert result.ok and result.output == "the tides are high"
    assert result.messages[-2].tool_results[0].content == "found tides"
    assert [len(r.messages) for r in model.requests] == [1, 3]
    check_history(result.messages)


@pytest.mark.parametrize("hook", [_BadResult(), _BadMock(), _BadResponse(), _BadRequest()])
def test_under_fail_a_hooks_wrong_typed_answer_ends_the_run_with_hook_error(hook: object) -> None:
    """Under hook_failure_mode="fail", such an answer ends the run with stop reason hook_error
    and a valid history, instead of an exception escaping run()."""
    policy = Policy(hook_failure_mode=HookFailureMode.FAIL)
    agent = Agent(ScriptedModel(_TURNS), tools=[lookup], hooks=[hook], policy=policy)
    result = agent.run_sync("tides?")
    assert result.stop_reason is StopReason.HOOK_ERROR and isinstance(result.error, HookError)
    assert "its " in str(result.error)
    check_history(result.messages)


# -- 4: settings a before_model_call hook sends --------------------------------------------------
@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"temperature": -1.0}, "temperature must be a finite number 0 or more, got -1.0"),
        ({"temperature": math.nan}, "temperature must be a finite number 0 or more, got nan"),
        ({"top_p": 2.0}, "top_p must be a finite number above 0 and at most 1, got 2.0"),
        ({"max_tokens": 0}, "max_tokens must be a whole number above 0, got 0"),
        ({"reasoning_budget_tokens": -5}, "reasoning_budget_tokens must be a whole number"),
        ({"stop_sequences": ("",)}, "stop_sequences must be a list of non-empty strings"),
        ({"tool_choice": ""}, "tool_choice must be 'auto', 'none', 'required' or a tool's name"),
        ({"max_tokens": "512"}, "its max_tokens is a str, not an int or None"),
        (
            {"reasoning_effort": "max"},
            "its reasoning_effort is 'max', not 'low' or 'medium'",
        ),
    ],
)
def test_settings_a_hook_sends_are_checked_as_model_settings_checks_them(
    change: dict[str, Any], refused: str
) -> None:
    """A before_model_call hook that sets a value ModelSettings refuses is a hook failure naming
    the setting; the model gets the request as it was."""

    class Tune:
        def before_model_call(self, *, request: ModelRequest, **future_kwargs: Any) -> ModelRequest:
            return request.model_copy(update=change)

    model = ScriptedModel([text("ok")])
    events, result = stream(Agent(model, hooks=[Tune()]), "hi")
    (error,) = [e for e in events if isinstance(e, HookErrorEvent)]
    assert "returned a ModelRequest" in error.error and refused in error.error
    assert result.ok
    (sent,) = model.requests
    assert all(getattr(sent, name) != value for name, value in change.items())
    policy = Policy(hook_failure_mode=HookFailureMode.FAIL)
    strict = Agent(ScriptedModel([text("ok")]), hooks=[Tune()], policy=policy).run_sync("hi")
    assert strict.stop_reason is StopReason.HOOK_ERROR


def test_settings_a_hook_sets_within_bounds_reach_the_model() -> None:
    """Valid settings from a hook (ModelSettings.apply) still reach the model as set."""

    class Tune:
        def before_model_call(self, *, request: ModelRequest, **future_kwargs: Any) -> ModelRequest:
            return ModelSettings(temperature=0.0, top_p=1.0, max_tokens=64).apply(request)

    model = ScriptedModel([text("ok")])
    events, result = stream(Agent(model, hooks=[Tune()]), "hi")
    assert result.ok and not [e for e in events if isinstance(e, HookErrorEvent)]
    (sent,) = model.requests
    assert (sent.temperature, sent.top_p, sent.max_tokens) == (0.0, 1.0, 64)


# -- 5: done called beside other tools ---------------------------------------------------------
_DONE_ALONE = "Error: done was not run: it came with other tool calls in one turn"


@pytest.mark.parametrize("parallel", [True, False])
@pytest.mark.parametrize("done_first", [True, False])
def test_done_beside_other_calls_waits_for_their_results(parallel: bool, done_first: bool) -> None:
    """A done call made beside other calls is answered with an error result while the others
    run; the run ends when the model, having read their results, calls done alone."""
    calls = [("lookup", {"topic": "tides"}), ("done", {"message": "guessed: low"})]
    model = ScriptedModel(
        [
            tool_calls(*(reversed(calls) if done_first else calls)),
            tool_call("done", {"message": "the tides are high"}),
        ]
    )
    policy = Policy(require_done_tool=True, parallel_tool_calls=parallel)
    result = Agent(model, tools=[lookup], policy=policy).run_sync("tides?")
    assert (result.stop_reason, result.output) == (StopReason.DONE_TOOL, "the tides are high")
    first = {r.name: r for m in model.requests[1].messages for r in m.tool_results}
    assert first["lookup"].content == "found tides" and not first["lookup"].is_error
    assert first["done"].is_error and first["done"].content.startswith(_DONE_ALONE)
    assert result.tool_executions == 2  # lookup, then the lone done
    check_history(result.messages)


def test_done_alone_still_ends_the_run_at_once() -> None:
    """A done call that is the turn's only call ends the run with its message, as before."""
    model = ScriptedModel([tool_call("done", {"message": "42"})])
    result = Agent(model, policy=Policy(require_done_tool=True)).run_sync("?")
    assert (result.stop_reason, result.output) == (StopReason.DONE_TOOL, "42")


def test_a_model_that_keeps_calling_done_beside_other_calls_stops_at_the_step_limit() -> None:
    """A model that never calls done alone is stopped by the step limit: the rule adds no
    unbounded loop."""
    mixed = tool_calls(("lookup", {"topic": "tides"}), ("done", {"message": "guess"}))
    policy = Policy(require_done_tool=True, max_steps=3)
    model = ScriptedModel([mixed] * 3 + [text("summary")])
    result = Agent(model, tools=[lookup], policy=policy).run_sync("tides?")
    assert result.stop_reason is StopReason.MAX_STEPS
    assert len(model.requests) <= 4
    check_history(result.messages)


# -- the field check itself --------------------------------------------------------------------
def _cycle() -> dict[str, Any]:
    looped: dict[str, Any] = {"n": 1}
    looped["again"] = [looped]
    return looped


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (ToolCall(id="c", name="f", arguments={"n": True}), None),
        (ToolResult(call_id="c", name="f", content="x", is_error=1), "is_error is an int"),
        (ModelRequest(messages=(), max_tokens=True), "max_tokens is a bool, not an int or None"),
        (ModelRequest(messages=(), temperature=1), None),
        (Message(role="user", parts=()), "role is a str, not a Role"),
        (ToolCall(id="c", name="f", arguments={1: "x"}), "arguments has the key 1, not a str"),
        (
            ToolResult(call_id="c", name="f", content="x", structured={"a": [{"b": {1, 2}}]}),
            "structured['a'][0]['b'] is a set, not a JSON value",
        ),
        (
            ToolResult(call_id="c", name="f", content="x", structured=_cycle()),
            "structured['again'][0] contains itself",
        ),
    ],
)
def test_field_problem_is_exact_about_declared_types(value: object, problem: str | None) -> None:
    """The field check names the first field whose value is not of its declared type, without
    the conversions pydantic's lax mode makes (a bool is no int, a str no enum member)."""
    found = field_problem(value)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_field_problem_skips_the_fields_it_is_told_are_good() -> None:
    """Fields named in skip are not read, so a request's unchanged history is not walked again."""
    request = ModelRequest(messages=("not a message",), temperature="hot")
    assert field_problem(request) == "messages[0] is a str, not a Message"
    assert field_problem(request, skip=("messages",)) == "temperature is a str, not a float or None"


def test_a_deeply_nested_json_value_is_checked_in_time_linear_in_its_size() -> None:
    """A JSON value nested 20,000 deep is checked at once (one walk, no copy of the path per
    container), and a cycle at its bottom is still found."""
    top: list[Any] = []
    bottom = top
    for _ in range(20_000):
        below: list[Any] = []
        bottom.append(below)
        bottom = below
    result = ToolResult(call_id="c", name="f", content="x", structured=top)
    started = time.perf_counter()
    assert field_problem(result) is None
    assert time.perf_counter() - started < 2.0
    bottom.append(top)
    problem = field_problem(result)
    assert problem is not None and problem.endswith("[0] contains itself")
    assert problem.count("[0]") == 20_001


class _Adapted(Tool):
    """A tool adapter, as a durable-execution engine wraps each tool (with_effects)."""

    def __init__(self, inner: Tool) -> None:
        super().__init__(inner.fn, name=inner.name)


def test_done_beside_other_calls_waits_for_them_through_a_tool_adapter() -> None:
    """The rule holds for an agent whose tools, the built-in done tool included, go through an
    adapter (with_effects(wrap_tool=...)), and a tool of the user's named done is run as is."""
    model = ScriptedModel(
        [
            tool_calls(("lookup", {"topic": "tides"}), ("done", {"message": "guessed: low"})),
            tool_call("done", {"message": "the tides are high"}),
        ]
    )
    agent = Agent(model, tools=[lookup], policy=Policy(require_done_tool=True))
    result = agent.with_effects(wrap_tool=_Adapted).run_sync("tides?")
    assert (result.stop_reason, result.output) == (StopReason.DONE_TOOL, "the tides are high")
    first = {r.name: r for m in model.requests[1].messages for r in m.tool_results}
    assert first["done"].is_error and first["done"].content.startswith(_DONE_ALONE)
    check_history(result.messages)

    @tool(name="done")
    def own_done(note: str) -> str:
        """The user's own tool called done."""
        return f"noted {note}"

    mine = ScriptedModel(
        [tool_calls(("lookup", {"topic": "a"}), ("done", {"note": "b"})), text("ok")]
    )
    own = Agent(mine, tools=[lookup, own_done]).with_effects(wrap_tool=_Adapted).run_sync("?")
    assert own.output == "ok"
    results = {r.name: r.content for m in own.messages for r in m.tool_results}
    assert results == {"lookup": "found a", "done": "noted b"}
