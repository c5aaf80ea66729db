"""Property: every value the fast path builds equals the value validated from its own dump.

The message types are slotted dataclasses whose constructors validate nothing; pydantic
validates them at the edges through ``adapter(T)``. For every type, with every field filled,
and for each way the kernel and the readers build one without validation (the constructor,
``Message.user/assistant/tool``, ``ToolCall.create``, ``Usage.plus``, the OpenAI reader's
responses), the invariant checked is::

    adapter(T).validate_python(x.model_dump()) == x
    adapter(T).validate_json(x.model_dump_json()) == x

so a value built on the fast path is one the validated path would also give, and a checkpoint
or recording of it reads back equal.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from fsm_agent.messages import (
    FinishReason,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    OutputSchema,
    ReasoningDelta,
    ReasoningPart,
    ResourceLinkPart,
    Role,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
    ToolResult,
    Usage,
)
from fsm_agent.providers.openai import OpenAIChatModel
from fsm_agent.record import Record, adapter

texts = st.text(max_size=8)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=3)
counts = st.integers(0, 10**9)
costs = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)

text_parts = st.builds(TextPart, text=texts)
reasoning_parts = st.builds(
    ReasoningPart, text=texts, signature=texts, redacted=st.booleans(), provider_data=json_objects
)
image_parts = st.builds(ImagePart, media_type=texts, data=texts, url=texts)
link_parts = st.builds(
    ResourceLinkPart,
    uri=texts,
    name=texts,
    title=texts,
    description=texts,
    media_type=texts,
)
tool_calls = st.builds(
    ToolCall.create,
    id=texts,
    name=texts,
    arguments=json_objects | json_objects.map(str) | texts,
    provider_data=json_objects,
)
tool_results = st.builds(
    ToolResult,
    call_id=texts,
    name=texts,
    content=texts,
    is_error=st.booleans(),
    metadata=json_objects,
    parts=st.lists(image_parts | link_parts, max_size=2).map(tuple),
    structured=json_values,
)
parts = text_parts | reasoning_parts | image_parts | tool_calls | tool_results
usages = st.builds(
    Usage,
    requests=counts,
    input_tokens=counts,
    output_tokens=counts,
    cache_read_tokens=counts,
    cache_write_tokens=counts,
    reasoning_tokens=counts,
    cost_usd=costs,
)
messages = st.one_of(
    st.builds(Message, role=st.sampled_from(Role), parts=st.lists(parts, max_size=4).map(tuple)),
    st.builds(Message.user, texts, *[image_parts] * 2),
    st.builds(Message.system, texts),
    st.builds(Message.assistant, texts, st.lists(tool_calls, max_size=3)),
    st.builds(Message.tool, tool_results),
)
definitions = st.builds(
    ToolDefinition, name=texts, description=texts, parameters=json_objects, strict=st.booleans()
)
schemas = st.builds(
    OutputSchema, name=texts, json_schema=json_objects, wrapped=st.booleans(), strict=st.booleans()
)
requests = st.builds(
    ModelRequest,
    messages=st.lists(messages, max_size=3).map(tuple),
    tools=st.lists(definitions, max_size=2).map(tuple),
    tool_choice=st.sampled_from(["auto", "none", "required", "look"]),
    parallel_tool_calls=st.booleans(),
    max_tokens=counts,
    temperature=costs,
    top_p=st.floats(0, 1),
    seed=st.integers(-(2**31), 2**31),
    stop_sequences=st.lists(texts, max_size=2).map(tuple),
    reasoning_effort=st.sampled_from(["low", "medium", "high"]),
    reasoning_budget_tokens=counts,
    output=schemas,
)
responses = st.builds(
    ModelResponse,
    message=messages,
    finish_reason=st.sampled_from(FinishReason),
    raw_finish_reason=texts,
    usage=usages,
    response_id=texts,
    model_name=texts,
)
deltas = (
    st.builds(TextDelta, text=texts)
    | st.builds(ReasoningDelta, text=texts)
    | st.builds(ToolCallDelta, index=counts, id=texts, name=texts, arguments_fragment=texts)
)
summed_usages = st.builds(lambda a, b, n: a.plus(b, requests=n), usages, usages, counts)


@st.composite
def wire_responses(draw: st.DrawFn) -> ModelResponse:
    """A response the OpenAI Chat Completions reader builds from a generated wire body."""
    calls = [
        {
            "id": draw(texts),
            "type": "function",
            "function": {"name": draw(texts), "arguments": draw(json_objects.map(str) | texts)},
        }
        for _ in range(draw(st.integers(0, 2)))
    ]
    body: dict[str, Any] = {
        "id": draw(texts),
        "model": draw(texts),
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": draw(st.none() | texts),
                    "reasoning_content": draw(st.none() | texts),
                    "tool_calls": calls,
                },
                "finish_reason": draw(st.sampled_from(["stop", "tool_calls", "length", "odd"])),
            }
        ],
        "usage": {
            "prompt_tokens": draw(counts),
            "completion_tokens": draw(counts),
            "prompt_tokens_details": {"cached_tokens": draw(counts)},
            "completion_tokens_details": {"reasoning_tokens": draw(counts)},
        },
    }
    reader = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", api_key="k")
    return reader._response(body)


values = st.one_of(
    text_parts,
    reasoning_parts,
    image_parts,
    link_parts,
    tool_calls,
    tool_results,
    messages,
    usages,
    summed_usages,
    definitions,
    schemas,
    requests,
    responses,
    deltas,
    wire_responses(),
)


def _check(value: Record) -> None:
    kind = type(value)
    assert adapter(kind).validate_python(value.model_dump()) == value
    assert adapter(kind).validate_json(value.model_dump_json()) == value
    assert kind.model_validate_json(value.model_dump_json()) == value


@given(values)
def test_every_fast_path_value_equals_the_value_validated_from_its_dump(value: Record) -> None:
    _check(value)


def test_the_kernels_own_values_equal_their_validated_dumps() -> None:
    """The constants and defaults the kernel shares between runs."""
    from fsm_agent.kernel.context import ONE_REQUEST, tool_message

    call = ToolCall.create("c", "t", {"a": 1})
    for value in (
        ONE_REQUEST,
        Usage(),
        ModelResponse(message=Message.user("x"), finish_reason=FinishReason.STOP),
        tool_message(call, "x", is_error=True),
    ):
        _check(value)
