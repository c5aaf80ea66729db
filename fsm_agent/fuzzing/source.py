"""Fuzz cases printed as Python: the :mod:`fsm_agent.testing` builder call of each model turn,
and the constructor call of a pydantic model or a record (its fields that differ from their
defaults), so that a failing case prints as a test that rebuilds it."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator

from pydantic import BaseModel

from ..errors import ModelError
from ..models.scripted import DEFAULT_USAGE, Failure, Turn
from ..values.messages import FinishReason, ToolCall, Usage
from ..values.record import Record

__all__ = ["model_source", "turn_source"]


def model_source(model: BaseModel | Record) -> str:
    """``Cls(field=value, ...)`` for the fields that differ from their defaults."""
    parts = []
    for name, default in _defaults(model):
        value = getattr(model, name)
        if value == default:
            continue
        parts.append(f"{name}={_value_source(value)}")
    return f"{type(model).__name__}({', '.join(parts)})"


def _defaults(model: BaseModel | Record) -> Iterator[tuple[str, object]]:
    """Each field's name and default (``MISSING`` when it has none)."""
    if isinstance(model, BaseModel):
        for name, info in type(model).model_fields.items():
            yield name, info.get_default(call_default_factory=True)
        return
    for field in dataclasses.fields(model):  # type: ignore[arg-type]
        factory = field.default_factory
        yield field.name, field.default if factory is dataclasses.MISSING else factory()


def _value_source(value: object) -> str:
    if isinstance(value, BaseModel | Record):
        return model_source(value)
    if isinstance(value, str) and hasattr(value, "value"):  # a StrEnum member
        return repr(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, tuple):
        return "(" + "".join(f"{_value_source(v)}, " for v in value) + ")"
    if isinstance(value, frozenset):
        return "frozenset({" + ", ".join(map(_value_source, sorted(value))) + "})"
    return repr(value)


def _usage_suffix(usage: Usage) -> str:
    return "" if usage == DEFAULT_USAGE else f", usage={model_source(usage)}"


def _error_source(error: BaseException) -> str:
    name = type(error).__name__
    message = repr(str(error))
    if not isinstance(error, ModelError):
        return f"{name}({message})"
    extras = []
    if error.status_code is not None:
        extras.append(f"status_code={error.status_code}")
    if error.retry_after is not None:
        extras.append(f"retry_after={_value_source(error.retry_after)}")
    if error.retryable is not type(error).default_retryable:
        extras.append(f"retryable={error.retryable}")
    return f"{name}({', '.join([message, *extras])})"


def _args_source(call: ToolCall) -> str:
    if call.arguments is not None and call.arguments_json == _compact_json(call.arguments):
        return repr(call.arguments)
    return repr(call.arguments_json)


def _compact_json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def turn_source(turn: Turn) -> str:
    """The builder call of :mod:`fsm_agent.testing` that makes ``turn``."""
    if isinstance(turn, Failure):
        return f"fail({_error_source(turn.error)})"
    message = turn.message
    calls = message.tool_calls
    usage = _usage_suffix(turn.usage)
    reason = turn.finish_reason
    if reason is FinishReason.STOP and not calls and turn.raw_finish_reason == "stop":
        reasoning = "".join(p.text for p in message.reasoning)
        extra = f", reasoning={reasoning!r}" if message.reasoning else ""
        return f"text({message.text!r}{extra}{usage})"
    if reason is FinishReason.TOOL_CALLS and calls and turn.raw_finish_reason == "tool_calls":
        text = f", text={message.text!r}" if message.text else ""
        items = ", ".join(
            f"({c.name!r}, {_args_source(c)}, {c.id!r})"
            if c.id
            else f"({c.name!r}, {_args_source(c)})"
            for c in calls
        )
        return f"tool_calls({items}{text}{usage})"
    raw = turn.raw_finish_reason or ""
    extra = "" if raw == reason.value else f", raw_reason={raw!r}"
    tools = ""
    if calls:
        tools = (
            ", tool_calls=[" + ", ".join(f"({c.name!r}, {_args_source(c)})" for c in calls) + "]"
        )
    return f"finish({reason.value!r}, {message.text!r}{tools}{extra}{usage})"
