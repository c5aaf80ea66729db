"""``Record``, the base of the cheap value types: its pydantic-like methods go through one
``TypeAdapter`` per type, the constructor validates nothing, and a frozen value refuses writes."""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from pathlib import Path

import pytest
from pydantic import ValidationError

from fsm_agent.messages import (
    ImagePart,
    Message,
    ModelResponse,
    ResourceLinkPart,
    Role,
    TextPart,
    ToolCall,
    ToolResult,
    Usage,
)
from fsm_agent.record import Record, adapter


def _response() -> ModelResponse:
    call = ToolCall.create("c1", "add", {"a": 1, "b": [2, 3]})
    return ModelResponse.model_validate(
        {
            "message": {"role": "assistant", "parts": [{"type": "text", "text": "hi"}, call]},
            "finish_reason": "tool_calls",
            "usage": {"requests": 1, "input_tokens": 3, "cost_usd": 0.5},
            "model_name": "m",
        }
    )


def test_model_validate_builds_nested_values_from_dicts() -> None:
    response = _response()
    assert response.message.role is Role.ASSISTANT
    assert response.message.parts[0] == TextPart(text="hi")
    assert response.message.parts[1].arguments == {"a": 1, "b": [2, 3]}
    assert response.usage == Usage(requests=1, input_tokens=3, cost_usd=0.5)


def test_model_validate_refuses_what_the_constructor_lets_through() -> None:
    """The constructor is the unvalidated fast path; ``model_validate`` checks types, bounds,
    discriminators and unknown fields."""
    assert Usage(input_tokens=-1).input_tokens == -1  # built, not checked
    for bad in (
        {"input_tokens": -1},
        {"cost_usd": math.inf},
        {"requests": "many"},
        {"unknown_field": 1},
    ):
        with pytest.raises(ValidationError):
            Usage.model_validate(bad)
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "user", "parts": [{"type": "nope", "text": "x"}]})
    with pytest.raises(ValidationError):
        Message.model_validate({"role": "robot", "parts": []})


def test_model_validate_json_reads_what_model_dump_json_writes() -> None:
    response = _response()
    text = response.model_dump_json()
    assert '"type":"tool_call"' in text and '"finish_reason":"tool_calls"' in text
    assert ModelResponse.model_validate_json(text) == response
    assert ModelResponse.model_validate_json(text.encode()) == response
    assert response.model_dump_json(indent=2).count("\n") > 5


def test_model_dump_gives_nested_dicts_with_their_discriminators() -> None:
    response = _response()
    dumped = response.model_dump()
    assert dumped["message"]["parts"][0] == {"type": "text", "text": "hi"}
    assert dumped["message"]["role"] is Role.ASSISTANT
    as_json = response.model_dump(mode="json")
    assert as_json["message"]["role"] == "assistant" and type(as_json["finish_reason"]) is str
    assert response.model_dump(include={"model_name"}) == {"model_name": "m"}
    assert "usage" not in response.model_dump(exclude={"usage"})
    assert "response_id" not in response.model_dump(exclude_none=True)
    defaults = Usage(requests=2).model_dump(exclude_defaults=True)
    assert defaults == {"requests": 2}
    assert "signature" not in ImagePart(url="u").model_dump_json(exclude_none=True)


def test_model_copy_replaces_fields_and_leaves_the_original() -> None:
    result = ToolResult(call_id="c", name="t", content="old")
    copy = result.model_copy(update={"content": "new", "is_error": True})
    assert (copy.content, copy.is_error, copy.call_id) == ("new", True, "c")
    assert result.content == "old" and not result.is_error
    assert result.model_copy() == result and result.model_copy() is not result
    with pytest.raises(TypeError):
        result.model_copy(update={"no_such_field": 1})


def test_a_frozen_value_refuses_writes() -> None:
    part = TextPart(text="hi")
    with pytest.raises(dataclasses.FrozenInstanceError):
        part.text = "changed"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del part.text  # type: ignore[misc]
    # A name that is no field: Python 3.11's frozen slotted __setattr__ raises TypeError
    # (its zero-argument super() sees the class before slots were added), later versions
    # FrozenInstanceError; either way the write does not happen.
    with pytest.raises((dataclasses.FrozenInstanceError, TypeError)):
        part.extra = 1  # type: ignore[attr-defined]
    assert part.text == "hi" and not hasattr(part, "extra")


def test_values_are_slotted_equal_by_fields_hashable_and_picklable() -> None:
    a, b = TextPart(text="x"), TextPart(text="x")
    assert not hasattr(a, "__dict__")
    assert a == b and hash(a) == hash(b) and a != TextPart(text="y")
    assert a != ImagePart()  # another type is never equal
    message = Message.user("hi")
    assert pickle.loads(pickle.dumps(message)) == message
    assert repr(a) == "TextPart(type='text', text='x')"


def test_adapter_is_built_once_per_type() -> None:
    assert adapter(Usage) is adapter(Usage)
    assert adapter(Usage) is not adapter(TextPart)
    assert isinstance(Usage(), Record)


def test_a_run_state_written_when_messages_were_pydantic_models_loads_and_dumps_the_same() -> None:
    """Stored data keeps its shape: a run state saved by the version whose messages were
    pydantic models (tool calls, a result with an image, a link and structured content) loads,
    and dumps back to the very same JSON, with the fields added since at their defaults."""
    from fsm_agent.run_state import RunState

    stored = (
        Path(__file__).parents[1] / "support" / "snapshots" / "run_state_pydantic_messages.json"
    ).read_text()
    state = RunState.model_validate_json(stored)
    call = state.messages[1].tool_calls[0]
    assert call == ToolCall(
        id=call.id, name="add", arguments_json='{"a":1,"b":2}', arguments={"a": 1, "b": 2}
    )
    result = state.messages[4].tool_results[0]
    assert result.parts == (ImagePart(data="aGk="), ResourceLinkPart(uri="file:///x", name="x"))
    assert result.structured == {"k": [1, 2.5, None]} and result.metadata == {"m": True}
    assert state.messages[-1] == Message.assistant("3")
    added_since = {"agent": None, "handoff_trace": [], "children": {}}
    assert json.loads(state.model_dump_json()) == {**json.loads(stored), **added_since}


def test_a_history_message_whose_role_is_a_string_is_refused_with_what_to_do() -> None:
    """The constructor converts nothing: ``Message(role="user", ...)`` keeps the string, which
    the kernel's ``is Role.X`` checks would never match, so a run refuses it up front."""
    from fsm_agent import Agent, InvalidInputError
    from fsm_agent.testing import ScriptedModel, text

    loose = Message(role="user", parts=(TextPart(text="hi"),))  # type: ignore[arg-type]
    agent = Agent(ScriptedModel([text("ok")]))
    with pytest.raises(InvalidInputError, match=r"history\[0\] has the role 'user'.*Role\.USER"):
        agent.run_sync("go", history=[loose])
    validated = Message.model_validate({"role": "user", "parts": [{"type": "text", "text": "hi"}]})
    assert validated.role is Role.USER
    assert agent.run_sync("go", history=[validated]).output == "ok"
