"""The checks and parts of a tool's definition made from its function: its name, its timeout,
its description (the docstring's summary) and the model that validates its arguments, with
their JSON schema. Each refuses what a provider or the kernel could not use with a
:class:`~fsm_agent.ToolDefinitionError` that says what to write instead."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ToolDefinitionError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from ..values.schema import JsonValue

__all__ = ["arguments_model", "check_timeout", "checked_name", "description_of"]


def checked_name(name: str) -> str:
    """``name``, checked to be a tool name a provider accepts."""
    if not name.replace("_", "").replace("-", "").isalnum():
        raise ToolDefinitionError(f"tool name {name!r} must use letters, digits, '_' and '-' only")
    return name


def check_timeout(name: str, timeout_s: float | None, *, inline: bool) -> None:
    """Refuse a timeout that is not positive, or one an ``inline`` sync tool could never
    honour."""
    if timeout_s is not None and not timeout_s > 0:
        raise ToolDefinitionError(f"tool {name!r}: timeout_s must be > 0")
    if timeout_s is not None and inline:
        raise ToolDefinitionError(
            f"tool {name!r}: a sync tool runs inline and cannot be cut off, so its "
            "timeout_s would never apply; mark it @tool(threaded=True, timeout_s=...) or "
            "make it async"
        )


def description_of(fn: Callable[..., Any], name: str) -> str:
    """The description the model reads: the summary of ``fn``'s docstring, which must have
    one."""
    description = _doc_summary(fn)
    if not description:
        raise ToolDefinitionError(
            f"tool {name!r} has no description, and the model reads it to decide "
            "when to call the tool: give the function a docstring, or pass "
            "@tool(description=...) (description='' sends none on purpose)"
        )
    return description


def arguments_model(
    name: str, params: list[tuple[str, Any, Any]], raw_arguments: bool
) -> tuple[str | None, type[BaseModel] | None, dict[str, JsonValue]]:
    """How a call's arguments reach the function, and their JSON schema: the one ``str``
    parameter that takes them raw (``raw_arguments``), else a pydantic model of the
    parameters that validates them."""
    if raw_arguments:
        if len(params) != 1 or params[0][1] is not str:
            raise ToolDefinitionError(
                f"tool {name!r} declares raw_arguments, so it must take exactly one "
                "'str' parameter (besides an optional ToolContext)"
            )
        return params[0][0], None, {"type": "object", "additionalProperties": True}
    from pydantic import ConfigDict, create_model

    fields: dict[str, Any] = {pname: (annotation, default) for pname, annotation, default in params}
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    schema = model.model_json_schema()
    schema.pop("title", None)
    return None, model, schema


def _doc_summary(fn: Callable[..., Any]) -> str:
    """The first paragraph of ``fn``'s docstring, on one line (empty without one)."""
    doc = inspect.getdoc(fn) or ""
    return doc.split("\n\n", 1)[0].replace("\n", " ").strip()
