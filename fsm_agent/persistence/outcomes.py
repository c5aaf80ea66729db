"""How the write-ahead journal stores an effect's outcome: a model call's response or error, and
a tool call's execution, as JSON text, and read back (a record that does not decode is a
:class:`~fsm_agent.CorruptCheckpointError`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic_core import PydanticSerializationError, to_json

from .. import errors
from ..errors import ModelError
from ..tools import ToolExecution
from ..values.messages import ModelResponse, ToolCall, ToolResult
from ..values.record import adapter

if TYPE_CHECKING:
    from pydantic import JsonValue

__all__ = [
    "RecordedToolError",
    "decode_model_outcome",
    "decode_tool_outcome",
    "encode_model_outcome",
    "encode_tool_outcome",
    "recorded_content",
]


class RecordedToolError(Exception):
    """The error a tool raised in an earlier process, as its journal recorded it."""


def encode_model_outcome(outcome: ModelResponse | Exception, *, model: str | None = None) -> str:
    """A model call's outcome as the journal stores it (:func:`decode_model_outcome` reads it back):
    the response, or the error with what classifying it needs; and ``model``, the fallback
    chain's model that made the call, when given."""
    by = "" if model is None else '"model":' + _json(model) + ","
    if isinstance(outcome, ModelResponse):
        response = adapter(ModelResponse).serializer.to_json(outcome).decode()
        return "{" + by + '"response":' + response + "}"
    error: dict[str, JsonValue] = {"type": "ModelError", "message": str(outcome)}
    if isinstance(outcome, ModelError):
        error.update(
            type=type(outcome).__name__,
            retryable=outcome.retryable,
            retry_after=outcome.retry_after,
            status_code=outcome.status_code,
            provider=outcome.provider,
        )
    else:
        error["message"] = f"the model raised {type(outcome).__name__}: {outcome}"
    return json.dumps({"error": error} if model is None else {"model": model, "error": error})


def decode_model_outcome(text: str) -> ModelResponse | ModelError:
    try:
        data = json.loads(text)
        if "response" in data:
            return ModelResponse.model_validate(data["response"])
        error = data["error"]
        cls = getattr(errors, str(error["type"]), ModelError)
        if not (isinstance(cls, type) and issubclass(cls, ModelError)):
            cls = ModelError
        return cls(
            str(error["message"]),
            retryable=error.get("retryable", False),
            retry_after=error.get("retry_after"),
            status_code=error.get("status_code"),
            provider=error.get("provider"),
        )
    except (ValueError, KeyError, TypeError) as problem:
        raise errors.CorruptCheckpointError(
            f"a recorded model call does not decode ({problem})"
        ) from None


def encode_tool_outcome(execution: ToolExecution) -> str:
    """A tool call's execution as the journal stores it (:func:`decode_tool_outcome` reads it
    back): its result, and what else the run needs of it."""
    rest = _json(
        {
            "done": execution.done,
            "final_message": execution.final_message,
            "error": None if execution.error is None else repr(execution.error),
            "question": execution.question,
            "duration_s": execution.duration_s,
            "phase": execution.phase,
        }
    )
    try:  # the result through its serialiser, not through Python data and json
        result = adapter(ToolResult).serializer.to_json(execution.result).decode()
    except PydanticSerializationError:  # text JSON cannot carry as it is: escaped as it was
        result = json.dumps(execution.result.model_dump(mode="json"))
    return '{"result":' + result + "," + rest[1:]


def _json(value: object) -> str:
    """``value`` (JSON data) as JSON text: by pydantic's encoder, a sixth of the time the standard
    library's takes for the few keys of a record; text holding a lone surrogate, which UTF-8
    cannot carry, escaped by the standard library's."""
    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        return json.dumps(value)


def recorded_content(text: str) -> str | None:
    """The content of the tool result a journal record holds (``None`` when it does not
    decode): a store may keep a cut output's full text as a reference to it."""
    try:
        content = json.loads(text)["result"]["content"]
    except (ValueError, KeyError, TypeError):
        return None
    return content if isinstance(content, str) else None


def decode_tool_outcome(text: str, call: ToolCall) -> ToolExecution:
    try:
        data = json.loads(text)
        result = ToolResult.model_validate(data["result"])
        error = data["error"]
        return ToolExecution(
            result,
            done=bool(data["done"]),
            final_message=data["final_message"],
            error=None if error is None else RecordedToolError(str(error)),
            duration_s=float(data["duration_s"]),
            question=data["question"],
            phase=data.get("phase"),
        )
    except (ValueError, KeyError, TypeError) as problem:
        raise errors.CorruptCheckpointError(
            f"the recorded result of tool call {call.id!r} does not decode ({problem})"
        ) from None
