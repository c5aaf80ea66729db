"""The providers build responses from the wire without validating twice; each shortcut gives
exactly what the validated path gives, for any input.

- ``parse_arguments`` reads with pydantic's validating parser and falls back to ``json.loads``:
  same result as ``json.loads`` alone, whatever the text.
- ``finish_tool_call`` builds a call whose fields were all checked: equal to the validated
  ``ToolCall``.
- ``build_response`` wraps built parts and a built usage: equal to the validated
  ``ModelResponse``.
- The OpenAI usage reader checks each count: equal to the validated ``Usage``.
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from pydantic import JsonValue

from fsm_agent.messages import (
    MAX_ARGUMENT_DEPTH,
    FinishReason,
    ModelResponse,
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
    arguments_too_deep,
    parse_arguments,
)
from fsm_agent.providers._assembly import build_response, finish_tool_call, reconcile
from fsm_agent.providers.openai import _usage

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def argument_texts(draw: st.DrawFn) -> str:
    """JSON texts as models write them (escaped or not, compact or spaced), JSON with a lone
    surrogate or a stray byte, and arbitrary text."""
    value = draw(json_values | st.dictionaries(st.text(), json_values, max_size=5))
    text = json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )
    mutation = draw(st.sampled_from(["none", "surrogate", "truncate", "append", "text"]))
    if mutation == "surrogate" and text.startswith("{") and len(text) > 2:
        return '{"s": "\\ud800", ' + text[1:]
    if mutation == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if mutation == "append":
        return text + draw(st.text(max_size=3))
    if mutation == "text":
        return draw(st.text())
    return text


def reference_arguments(raw: str) -> dict[str, JsonValue] | None:
    """What ``parse_arguments`` returned before it used pydantic's parser."""
    if not raw.strip():
        return {}
    if arguments_too_deep(raw):
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def same(a: object, b: object) -> bool:
    """Equal, counting NaN equal to NaN, and with the same types all the way down (``1`` is
    not ``1.0``, ``-0.0`` is not ``0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and str(a) == str(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@given(argument_texts())
def test_parse_arguments_reads_what_json_loads_reads(raw: str) -> None:
    assert same(parse_arguments(raw), reference_arguments(raw))


def test_parse_arguments_keeps_the_standard_parsers_word_on_edge_cases() -> None:
    """Texts where the two parsers could differ: each reads as ``json.loads`` reads it."""
    deep = "[" * (MAX_ARGUMENT_DEPTH + 1) + "]" * (MAX_ARGUMENT_DEPTH + 1)
    for raw in [
        '{"a": "\\ud800"}',
        '{"a": NaN, "b": Infinity, "c": -Infinity}',
        '{"a": 1e400, "b": -0.0, "c": 123456789012345678901234567890}',
        '{"a": 1, "a": 2}',
        '\ufeff{"a": 1}',
        '{"a": "\x00"}',
        '{"a": 1} x',
        " \n{}\t",
        "[]",
        "null",
        '{"a": ' + deep + "}",
    ]:
        assert same(parse_arguments(raw), reference_arguments(raw)), raw


def validated_call(
    call_id: str | None, name: str, arguments: str, data: dict[str, JsonValue] | None
) -> ToolCall:
    """The call through pydantic's validation, field by field."""
    raw = arguments if arguments.strip() else "{}"
    return ToolCall.model_validate(
        {
            "id": call_id or "generated",
            "name": name,
            "arguments_json": raw,
            "arguments": reference_arguments(raw),
            "provider_data": data,
        }
    )


def dumped(model: Any) -> Any:
    return json.loads(json.dumps(model.model_dump(mode="python"), default=str))


@given(
    st.none() | st.text(),
    st.text(),
    argument_texts() | st.just("") | st.just("  "),
    st.none() | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
def test_a_call_from_the_wire_equals_the_validated_call(
    call_id: str | None, name: str, arguments: str, data: dict[str, JsonValue] | None
) -> None:
    built = finish_tool_call(call_id, name, arguments, data)
    expected = validated_call(call_id, name, arguments, data)
    if not call_id:  # a fresh id is generated: compare the rest
        assert built.id.startswith("call_")
        built = built.model_copy(update={"id": "generated"})
    assert type(built) is ToolCall
    assert same(built.arguments, expected.arguments)
    assert built.model_dump(exclude={"arguments"}) == expected.model_dump(exclude={"arguments"})
    assert ToolCall.model_validate(built.model_dump()).model_dump(
        exclude={"arguments"}
    ) == built.model_dump(exclude={"arguments"})


parts = st.lists(
    st.one_of(
        st.builds(TextPart, text=st.text(max_size=5)),
        st.builds(
            ReasoningPart,
            text=st.text(max_size=5),
            signature=st.none() | st.text(max_size=3),
            redacted=st.booleans(),
        ),
        st.builds(
            ToolCall,
            id=st.text(min_size=1, max_size=3),
            name=st.text(max_size=3),
            arguments=st.just({"a": 1}),
            arguments_json=st.just('{"a":1}'),
        ),
    ),
    max_size=5,
)
usages = st.builds(
    Usage,
    requests=st.integers(0, 3),
    input_tokens=st.integers(0, 10**6),
    output_tokens=st.integers(0, 10**6),
)


@given(
    parts,
    st.sampled_from(list(FinishReason)),
    st.none() | st.text(max_size=5),
    usages,
    st.none() | st.text(max_size=5),
    st.none() | st.text(max_size=5),
)
def test_a_response_from_the_wire_equals_the_validated_response(
    given_parts: list[Part],
    reason: FinishReason,
    raw: str | None,
    usage: Usage,
    response_id: str | None,
    model_name: str | None,
) -> None:
    built = build_response(given_parts, reason, raw, usage, response_id, model_name)
    final, kept = reconcile(reason, given_parts)
    validated = ModelResponse.model_validate(
        {
            "message": {
                "role": "assistant",
                "parts": [p.model_dump() for p in built.message.parts],
            },
            "finish_reason": final.value,
            "raw_finish_reason": raw,
            "usage": usage.model_dump(),
            "response_id": response_id,
            "model_name": model_name,
        }
    )
    assert built == validated
    assert built.model_dump() == validated.model_dump()
    assert ModelResponse.model_validate_json(built.model_dump_json()) == built
    assert [p for p in built.message.parts if isinstance(p, ToolCall)] == [
        p for p in kept if isinstance(p, ToolCall)
    ]


def test_reconcile_decides_as_it_did() -> None:
    """The one-pass reconciliation, on the cases its docstring names."""
    call = ToolCall(id="c", name="t")
    empty, text = TextPart(text=""), TextPart(text="hi")
    assert reconcile(FinishReason.STOP, [text, call]) == (FinishReason.TOOL_CALLS, [text, call])
    assert reconcile(FinishReason.LENGTH, [text, call]) == (FinishReason.LENGTH, [text])
    assert reconcile(FinishReason.TOOL_CALLS, [text]) == (FinishReason.ERROR, [text])
    assert reconcile(FinishReason.STOP, [empty]) == (FinishReason.OTHER, [empty])
    assert reconcile(FinishReason.STOP, [text]) == (FinishReason.STOP, [text])


wire_counts = st.none() | st.integers(-5, 10**9) | st.booleans() | st.text(max_size=2)


@given(
    st.none()
    | st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": wire_counts,
            "completion_tokens": wire_counts,
            "prompt_tokens_details": st.none()
            | st.fixed_dictionaries({}, optional={"cached_tokens": wire_counts}),
            "completion_tokens_details": st.none()
            | st.fixed_dictionaries({}, optional={"reasoning_tokens": wire_counts}),
        },
    )
)
def test_usage_from_the_wire_equals_the_validated_usage(wire: dict[str, object] | None) -> None:
    built = _usage(wire)
    if not wire:
        assert built is None
        return

    def count(value: object) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return 0

    prompt = wire.get("prompt_tokens_details")
    completion = wire.get("completion_tokens_details")
    expected = Usage.model_validate(
        {
            "requests": 1,
            "input_tokens": count(wire.get("prompt_tokens")),
            "output_tokens": count(wire.get("completion_tokens")),
            "cache_read_tokens": count(
                prompt.get("cached_tokens") if isinstance(prompt, dict) else None
            ),
            "reasoning_tokens": count(
                completion.get("reasoning_tokens") if isinstance(completion, dict) else None
            ),
        }
    )
    assert built == expected
    assert built.model_dump() == expected.model_dump()
