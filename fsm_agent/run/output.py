"""Typed output: the type an agent's final answer must have, and how an answer is checked.

``Agent(model, output_type=Plan)`` asks the model for a JSON answer that matches ``Plan``'s
schema, and the ``verifying`` state validates it (:meth:`OutputSpec.validate`): an answer that
does not validate is a rejection whose feedback is the validation error, spending the
verification budget like a verifier's rejection; a run that spends it ends with stop reason
``output_invalid``. Any type :class:`pydantic.TypeAdapter` accepts works: a pydantic model, a
dataclass, a ``TypedDict``, a scalar (``int``, ``bool``, ...), a list. A type whose JSON schema is
not an object is *wrapped*: the model is asked for ``{"value": ...}`` and the output is the value.

The run state keeps the answer as JSON text (``RunState.output``), so a checkpoint holds it as
it holds any text; the result is validated again when it is built.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pydantic_core
from pydantic_core import ValidationError

from ..errors import ConfigurationError
from ..machine.table import State
from ..values.define import record
from ..values.messages import OutputSchema
from .state import RunState

if TYPE_CHECKING:
    from pydantic import JsonValue, TypeAdapter

__all__ = ["ANSWER_TOOL", "OutputSpec", "output_spec"]

ANSWER_TOOL = "final_answer"
"""The name of the tool whose arguments are the final answer, where a provider asks for the
answer as a tool call."""

_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_MAX_ERRORS = 5


def _type_name(output_type: object) -> str:
    name = getattr(output_type, "__name__", None) or "output"
    return re.sub(r"[^a-zA-Z0-9_-]", "_", str(name))[:64]


@record(kw_only=False)
class OutputSpec:
    """What a typed-output agent checks: the output type, its validator and its schema."""

    output_type: Any
    adapter: TypeAdapter[Any]
    schema: OutputSchema

    @classmethod
    def of(cls, output_type: Any) -> OutputSpec:
        """The spec of ``output_type``; raises :class:`~fsm_agent.ConfigurationError` when
        pydantic cannot validate it or give it a JSON schema."""
        from pydantic import TypeAdapter, create_model

        try:
            adapter: TypeAdapter[Any] = TypeAdapter(output_type)
            own = adapter.json_schema()
        except Exception as exc:
            raise ConfigurationError(
                f"output_type must be a type pydantic can validate and describe as JSON schema "
                f"(a pydantic model, a dataclass, a TypedDict, a scalar or a list of them); "
                f"{output_type!r} is not: {exc}"
            ) from exc
        name = _type_name(output_type)
        wrapped = own.get("type") != "object"
        if wrapped:
            adapter = TypeAdapter(create_model(name, value=(output_type, ...)))
            own = adapter.json_schema()
        return cls(output_type, adapter, OutputSchema(name=name, json_schema=own, wrapped=wrapped))

    def validate(self, text: str) -> Any:
        """The answer ``text`` (JSON, optionally in a Markdown code fence) as the output type;
        raises :class:`pydantic.ValidationError` when it does not match."""
        value = self.adapter.validate_json(_unfenced(text))
        return value.value if self.schema.wrapped else value

    def feedback(self, error: ValidationError) -> str:
        """What the model is told about an answer that did not validate: each error's place and
        message (the first few), and what to do."""
        lines = []
        for detail in error.errors(include_url=False)[:_MAX_ERRORS]:
            where = ".".join(str(part) for part in detail["loc"]) or "the answer"
            lines.append(f"- {where}: {detail['msg']}")
        more = error.error_count() - _MAX_ERRORS
        if more > 0:
            lines.append(f"- and {more} more")
        return (
            f"Your answer is not a valid {self.schema.name}:\n"
            + "\n".join(lines)
            + "\nAnswer again with only the JSON that matches the schema."
        )

    def partial(self, text: str) -> JsonValue | None:
        """The best-effort parse of an answer still arriving: the JSON value so far (a dict
        whose last field may be cut), unwrapped; ``None`` when nothing parses yet."""
        text = text.lstrip()
        if text.startswith("```"):
            text = text.split("\n", 1)[1] if "\n" in text else ""
        if not text:
            return None
        try:
            value: JsonValue = pydantic_core.from_json(text, allow_partial="trailing-strings")
        except ValueError:
            return None
        if self.schema.wrapped:
            return value.get("value") if isinstance(value, dict) else None
        return value

    def result_value(self, rs: RunState) -> Any:
        """The output of a run at rest: the final answer as the output type, or ``None`` when
        the run did not finish or its answer does not validate."""
        if rs.state is not State.DONE or not rs.output:
            return None
        try:
            return self.validate(rs.output)
        except ValidationError:
            return None


def _unfenced(text: str) -> str:
    match = _FENCE.match(text.strip())
    return match.group(1) if match else text


def output_spec(output_type: Any) -> OutputSpec | None:
    """The spec of a typed-output agent, ``None`` for text output (``str``)."""
    if output_type is str:
        return None
    return OutputSpec.of(output_type)
