"""Typed output on the wire as a tool call: the final answer tool, for providers without a
JSON-schema response mode (Anthropic) and for requests whose tools a response mode would shut
out (an OpenAI-compatible server that enforces ``response_format`` does so on every turn).

Such a provider offers one more tool, ``final_answer``, whose input schema is the output schema,
and asks the model to call a tool (``tool_choice`` "any" or "required") so the answer comes as
that call's arguments. The call never reaches the kernel as a tool call: :func:`answer_parts`
turns it into the answer's text (the arguments as JSON) and :class:`AnswerDeltas` turns its
streamed arguments into text deltas. The history then holds the answer as the assistant's
text, so no tool call is left without a result.
"""

from __future__ import annotations

from ..run.output import ANSWER_TOOL
from ..values.messages import (
    FinishReason,
    ModelRequest,
    OutputSchema,
    Part,
    StreamDelta,
    TextDelta,
    TextPart,
    ToolCall,
    ToolCallDelta,
    ToolDefinition,
)

__all__ = ["ANSWER_TOOL", "AnswerDeltas", "answer_parts", "answer_tool", "answers_by_tool"]


def answer_tool(output: OutputSchema) -> ToolDefinition:
    """The final answer tool for ``output``."""
    return ToolDefinition(
        name=ANSWER_TOOL,
        description=(
            f"Give your final answer (a {output.name}) as this tool's input. Call it once, when "
            "the task is complete, instead of answering in text."
        ),
        parameters=output.json_schema,
    )


def answers_by_tool(request: ModelRequest) -> bool:
    """Whether a provider with a JSON-schema response mode asks for typed output with the final
    answer tool: when the request has tools. A server that enforces the response format does so
    on every turn, so with tools the model could never call one."""
    return request.output is not None and bool(request.tools)


def answer_parts(parts: list[Part], finish: FinishReason) -> tuple[list[Part], FinishReason]:
    """The response's parts with a ``final_answer`` call turned into its text, and the finish
    reason ``stop`` when that call was the only one."""
    calls = [p for p in parts if isinstance(p, ToolCall)]
    if not any(c.name == ANSWER_TOOL for c in calls):
        return parts, finish
    kept: list[Part] = [
        TextPart(text=p.arguments_json) if isinstance(p, ToolCall) and p.name == ANSWER_TOOL else p
        for p in parts
    ]
    if all(c.name == ANSWER_TOOL for c in calls) and finish is FinishReason.TOOL_CALLS:
        finish = FinishReason.STOP
    return kept, finish


class AnswerDeltas:
    """Turns the streamed deltas of a ``final_answer`` call into text deltas."""

    __slots__ = ("_answer",)

    def __init__(self) -> None:
        self._answer: int | None = None

    def map(self, delta: StreamDelta) -> StreamDelta | None:
        """The delta to pass on (``None``: swallowed)."""
        if not isinstance(delta, ToolCallDelta):
            return delta
        if delta.name == ANSWER_TOOL:
            self._answer = delta.index
            return None
        if delta.index == self._answer:
            return TextDelta(text=delta.arguments_fragment) if delta.arguments_fragment else None
        return delta
