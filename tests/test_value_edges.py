"""Values built by user code are checked where they enter a run: a history's fields, a tool's
``ToolReturn``, a changing hook's answer and the settings it sends, and a ``done`` call that
comes with other calls in one turn."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from fsm_agent import (
    Agent,
    Conversation,
    ImagePart,
    InvalidInputError,
    Message,
    Role,
    SQLiteCheckpointer,
    TextPart,
    ToolCall,
    ToolResult,
    ToolReturn,
    tool,
)
from fsm_agent.messages import validate_history
from fsm_agent.testing import ScriptedModel, text, tool_call

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
