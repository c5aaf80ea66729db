"""Events as cheap slotted dataclasses: built without validation, validated and serialised
through their adapter, and read back from recordings written when they were pydantic models."""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_agent.events import (
    ChildEvent,
    Event,
    FinalEvent,
    ModelResponseEvent,
    StateChangedEvent,
    SuspendedEvent,
    event_adapter,
)
from fsm_agent.machine.table import Outcome, State, StopReason
from fsm_agent.messages import FinishReason, ModelRequest, ModelResponse, ToolCall, Usage

_EVENT_TYPES: list[type[Any]] = list(typing.get_args(typing.get_args(Event)[0]))

_texts = st.text(max_size=8)
_counts = st.integers(0, 10**9)
_floats = st.floats(allow_nan=False, allow_infinity=False)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _floats | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=8,
)
_usages = st.builds(
    lambda n, cost: Usage.model_validate(
        {"requests": n, "input_tokens": n + 1, "output_tokens": n + 2, "cost_usd": cost}
    ),
    _counts,
    st.floats(0, 1e6),
)
_calls = st.builds(
    lambda i, name, args: ToolCall.model_validate({"id": i, "name": name, "arguments": args}),
    _texts,
    _texts,
    st.dictionaries(_texts, _json, max_size=3),
)
_messages = _texts.map(
    lambda text: {"role": "assistant", "parts": [{"type": "text", "text": text}]}
)
_requests = st.builds(
    lambda message, seed: ModelRequest.model_validate({"messages": [message], "seed": seed}),
    _messages,
    _counts,
)
_responses = st.builds(
    lambda message, usage: ModelResponse.model_validate(
        {"message": message, "finish_reason": "stop", "usage": usage.model_dump()}
    ),
    _messages,
    _usages,
)

# A value for every field of every event type, by field name; a few names mean different
# types in different events.
_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "run_id": _texts,
    "source": st.sampled_from(list(State)),
    "dest": st.sampled_from(list(State)),
    "outcome": st.sampled_from(list(Outcome)),
    "stop_reason": st.sampled_from(list(StopReason)),
    "finish_reason": st.sampled_from(list(FinishReason)),
    "request": _requests,
    "response": _responses,
    "call": _usages,
    "total": _usages,
    "partial": _json,
    "args": st.dictionaries(_texts, _json, max_size=3),
    "progress": _floats,
    "duration_s": _floats,
    "delay_s": _floats,
    "is_error": st.booleans(),
    "forced": st.booleans(),
    "status": st.sampled_from(["ok", "error"]),
    "action": st.sampled_from(["warn", "finalize"]),
    "by": st.sampled_from(["model", "code", "budget"]),
    "errors": st.lists(_texts, max_size=3).map(tuple),
    "tool_names": st.lists(_texts, max_size=3),
    "pending": st.lists(_calls, max_size=2).map(tuple),
    "questions": st.dictionaries(_texts, _texts, max_size=2),
    **dict.fromkeys(
        [
            "row",
            "step",
            "attempt",
            "index",
            "switches",
            "repeats",
            "depth",
            "tokens_before",
            "tokens_after",
            "messages_removed",
        ],
        _counts,
    ),
    **dict.fromkeys(
        [
            "phase",
            "text",
            "call_id",
            "name",
            "tool_name",
            "arguments_fragment",
            "content",
            "error",
            "feedback",
            "hook",
            "strategy",
            "from_model",
            "to_model",
            "output",
            "message",
            "child_run_id",
        ],
        _texts,
    ),
}
_BY_EVENT: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("PhaseChangedEvent", "source"): _texts,
    ("PhaseChangedEvent", "dest"): _texts,
    ("HandoffEvent", "source"): st.none() | _texts,
    ("HandoffEvent", "dest"): _texts,
    ("ToolProgressEvent", "total"): _floats,
    ("ChildEvent", "path"): st.lists(_texts, max_size=3).map(tuple),
}


def _filled(cls: type[Any], nested: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``cls`` built by its constructor with every field given (none left to its default)."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in dataclasses.fields(cls):
        if f.name == "type":
            continue
        if f.name == "event":
            fields[f.name] = nested
        else:
            key = (cls.__name__, f.name)
            fields[f.name] = _BY_EVENT[key] if key in _BY_EVENT else _FIELDS[f.name]
    return st.builds(cls, **fields)


_flat = st.one_of([_filled(cls, st.nothing()) for cls in _EVENT_TYPES if cls is not ChildEvent])
_events = st.one_of([_filled(cls, _flat) for cls in _EVENT_TYPES])


def test_every_field_of_every_event_has_a_strategy() -> None:
    """The property test below fills every field: a new event type or field needs a value
    here, or this fails (rather than the new field going unchecked)."""
    assert len(_EVENT_TYPES) == 28
    for cls in _EVENT_TYPES:
        for f in dataclasses.fields(cls):
            if f.name not in ("type", "event"):
                assert (cls.__name__, f.name) in _BY_EVENT or f.name in _FIELDS, (cls, f.name)


@given(_events)
def test_a_built_event_equals_the_event_validated_from_its_dump(event: Any) -> None:
    """Invariant: for every event type, with every field filled, the event its constructor
    builds (no validation) equals the one ``event_adapter`` validates from its dump, the
    Python dump and the JSON text alike; and the type's own ``model_validate`` and
    ``model_validate_json`` agree."""
    cls = type(event)
    assert event_adapter.validate_python(event_adapter.dump_python(event)) == event
    assert event_adapter.validate_json(event_adapter.dump_json(event)) == event
    assert cls.model_validate(event.model_dump()) == event
    assert cls.model_validate_json(event.model_dump_json()) == event
    assert event.model_dump(mode="json") == event_adapter.dump_python(event, mode="json")


def test_events_are_slotted_frozen_dataclasses() -> None:
    """An event holds no per-instance dictionary and cannot be changed after it is built."""
    event = StateChangedEvent(
        run_id="r", source=State.CALLING, outcome=Outcome.STOP, dest=State.VERIFYING, row=3
    )
    assert not hasattr(event, "__dict__")
    for cls in _EVENT_TYPES:
        assert dataclasses.is_dataclass(cls) and "__dict__" not in dir(cls), cls
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.row = 4  # type: ignore[misc]
    assert event.model_copy(update={"row": 4}).row == 4 and event.row == 3


def test_validation_refuses_unknown_fields_and_wrong_discriminators() -> None:
    """The edge still validates: an unknown field, a missing field or a wrong value is refused."""
    good = {"type": "final", "run_id": "r", "output": "4", "stop_reason": "completed"}
    assert event_adapter.validate_python(good) == FinalEvent(
        run_id="r", output="4", stop_reason=StopReason.COMPLETED
    )
    for bad in (
        {**good, "surprise": 1},
        {key: value for key, value in good.items() if key != "output"},
        {**good, "stop_reason": "bored"},
        {**good, "type": "finale"},
    ):
        with pytest.raises(pydantic.ValidationError):
            event_adapter.validate_python(bad)
    with pytest.raises(pydantic.ValidationError):
        FinalEvent.model_validate({**good, "row": 1})


# Lines written by ``event_adapter.dump_json`` when the events were pydantic models (before
# they became dataclasses): recordings and durable streams hold lines like these.
_OLD_LINES = [
    '{"run_id":"run-1","type":"state_changed","source":"calling","outcome":"tool_calls",'
    '"dest":"dispatching","row":7,"stop_reason":null,"phase":"plan"}',
    '{"run_id":"run-1","type":"model_response","step":1,"response":{"message":{"role":'
    '"assistant","parts":[{"type":"text","text":"hi"}]},"finish_reason":"stop",'
    '"raw_finish_reason":null,"usage":{"requests":1,"input_tokens":5,"output_tokens":2,'
    '"cache_read_tokens":0,"cache_write_tokens":0,"reasoning_tokens":0,"cost_usd":0.0},'
    '"response_id":null,"model_name":"m"}}',
    '{"run_id":"run-1","type":"suspended","pending":[{"type":"tool_call","id":"c1",'
    '"name":"delete","arguments_json":"{\\"path\\": \\"/tmp/x\\"}","arguments":'
    '{"path":"/tmp/x"},"provider_data":null}],"questions":{"c1":"Delete it?"}}',
    '{"run_id":"run-1","type":"child","call_id":"c2","tool_name":"helper",'
    '"child_run_id":"run-2","depth":1,"event":{"run_id":"run-2","type":"final",'
    '"output":"done","stop_reason":"completed"}}',
]


def test_recordings_written_before_events_were_dataclasses_still_load() -> None:
    """Each old line loads as the event it recorded and dumps back to the same JSON (a child
    event with an empty path)."""
    loaded = [event_adapter.validate_json(line) for line in _OLD_LINES]
    moved, answered, suspended, child = loaded
    assert moved == StateChangedEvent(
        run_id="run-1",
        source=State.CALLING,
        outcome=Outcome.TOOL_CALLS,
        dest=State.DISPATCHING,
        row=7,
        phase="plan",
    )
    assert isinstance(answered, ModelResponseEvent) and answered.response.message.text == "hi"
    assert answered.response.usage.input_tokens == 5
    assert isinstance(suspended, SuspendedEvent)
    assert suspended.pending[0].arguments == {"path": "/tmp/x"}
    assert suspended.questions == {"c1": "Delete it?"}
    assert isinstance(child, ChildEvent) and child.event == FinalEvent(
        run_id="run-2", output="done", stop_reason=StopReason.COMPLETED
    )
    dumped = [json.loads(event_adapter.dump_json(e)) for e in loaded]
    assert dumped[3].pop("path") == []  # a child event's path, added since: empty when unknown
    assert dumped == [json.loads(line) for line in _OLD_LINES]
