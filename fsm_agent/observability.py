"""OpenTelemetry traces of a run: one hook object, :class:`OpenTelemetryHooks`.

``Agent(model, hooks=[OpenTelemetryHooks()])`` records, through the OpenTelemetry API and
following the GenAI semantic conventions:

- an ``invoke_agent`` span per invocation (``run`` and every ``resume``), carrying each move of
  the machine as a ``fsm_agent.transition`` span event and, at the end, the stop reason;
- a ``chat`` span per model call attempt (a retried call has one span per attempt; a failed
  attempt has error status);
- an ``execute_tool`` span per tool call, siblings under the invocation span.

Every invocation of one run shares one trace: its trace id is derived from the run id, so a run
resumed after a crash, in another process, continues the trace the first process started. A
child run (an agent used as a tool, ``Agent.as_tool``) observed by the same hook object as its
parent is in its parent's trace instead: its ``invoke_agent`` span is a child of the parent's
``execute_tool`` span for the call that runs it.

Message content (prompts, answers, tool arguments and results) is recorded only with
``capture_content=True``. Nothing here reads a provider's client, so no API key or header can
reach a span. ``import fsm_agent`` never imports OpenTelemetry; importing this module does, and
without it raises :class:`~fsm_agent.errors.MissingExtraError`, which names the ``[otel]``
extra.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import MissingExtraError
from .kernel.composition import parent_call
from .machine.table import Counters, State
from .messages import TextPart, ToolCall, ToolResult

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
except ImportError as exc:
    raise MissingExtraError(
        "fsm_agent.observability", extra="otel", module="opentelemetry-api"
    ) from exc

if TYPE_CHECKING:
    from .machine.agent_machine import Move
    from .messages import Message, ModelRequest, ModelResponse
    from .run_state import RunState

__all__ = ["TRANSITION_EVENT", "OpenTelemetryHooks", "trace_id_of"]

TRANSITION_EVENT = "fsm_agent.transition"
"""The name of the span event each move of the machine adds to the invocation span."""

_ENDED = frozenset({State.DONE, State.ABORTED, State.SUSPENDED})
_COUNTER_KEYS = tuple(f"fsm_agent.counters.{name}" for name in Counters._fields)


def trace_id_of(run_id: str) -> int:
    """The trace id every invocation of the run ``run_id`` is recorded under (128 bits, from a
    SHA-256 of the run id, never zero)."""
    return int.from_bytes(_digest(run_id)[:16], "big") or 1


def _digest(run_id: str) -> bytes:
    return hashlib.sha256(run_id.encode()).digest()


@dataclass(slots=True)
class _Invocation:
    """The open spans of one invocation of a run."""

    span: Span
    chat: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)


class OpenTelemetryHooks:
    """A hook object that records a run as OpenTelemetry spans (see the module docstring).

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace.set_tracer_provider``);
    ``agent_name`` names the ``invoke_agent`` spans; ``request_model`` and ``provider`` fill
    ``gen_ai.request.model`` and ``gen_ai.provider.name`` (the kernel's requests do not name
    the model); ``capture_content`` records messages, tool arguments and tool results.
    One instance may serve many agents and concurrent runs.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        agent_name: str = "fsm_agent",
        request_model: str | None = None,
        provider: str | None = None,
        capture_content: bool = False,
    ) -> None:
        from . import __version__

        self._tracer = trace.get_tracer("fsm_agent", __version__, tracer_provider=tracer_provider)
        self.agent_name = agent_name
        self.request_model = request_model
        self.provider = provider
        self.capture_content = capture_content
        self._runs: dict[str, _Invocation] = {}

    # -- the invocation span -------------------------------------------------------------------
    def before_run(self, *, run_state: RunState, **future_kwargs: Any) -> None:
        """Open the ``invoke_agent`` span of this invocation."""
        run_id = run_state.run_id
        stale = self._runs.pop(run_id, None)
        if stale is not None:  # the last invocation never returned (a crash in this process)
            self._end_open(stale, "the invocation ended without returning")
            _fail(stale.span, "interrupted", "the invocation ended without returning")
            stale.span.end()
        parent = self._caller_span(run_id)
        if parent is None:
            digest = _digest(run_id)
            parent = trace.NonRecordingSpan(
                trace.SpanContext(
                    trace_id=trace_id_of(run_id),
                    span_id=int.from_bytes(digest[16:24], "big") or 1,
                    is_remote=True,
                    trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
                )
            )
        caller = trace.get_current_span().get_span_context()
        links = [trace.Link(caller, {"fsm_agent.link": "caller"})] if caller.is_valid else []
        resumed = bool(run_state.trace)
        span = self._tracer.start_span(
            f"invoke_agent {self.agent_name}",
            context=trace.set_span_in_context(parent),
            kind=trace.SpanKind.INTERNAL,
            links=links,
            attributes={
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": self.agent_name,
                "gen_ai.conversation.id": run_id,
                "fsm_agent.run_id": run_id,
                "fsm_agent.resumed": resumed,
                "fsm_agent.state": run_state.state.value,
            },
        )
        invocation = self._runs[run_id] = _Invocation(span)
        # A resume runs the calls a human settled without their before_tool hooks: their spans
        # start here, and after_tool (or the move out of dispatching) ends them.
        for request in run_state.human_requests:
            self._start_tool(invocation, request.call)

    def _caller_span(self, run_id: str) -> Span | None:
        """The ``execute_tool`` span of the parent's call that runs ``run_id``, when it is a
        child run (an agent used as a tool) whose parent these hooks also observe."""
        called = parent_call(run_id)
        if called is None:
            return None
        invocation = self._runs.get(called[0])
        return None if invocation is None else invocation.tools.get(called[1])

    def after_run(self, *, run_state: RunState, **future_kwargs: Any) -> None:
        """Close the invocation span with the run's ending, usage and counters."""
        invocation = self._runs.pop(run_state.run_id, None)
        if invocation is None:
            return
        self._end_open(invocation, f"the run stopped in {run_state.state.value}")
        span = invocation.span
        usage = run_state.usage
        span.set_attributes(
            {
                "fsm_agent.state": run_state.state.value,
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
                "fsm_agent.model_calls": run_state.model_calls,
                "fsm_agent.tool_executions": run_state.tool_executions,
                "fsm_agent.steps": run_state.counters.steps,
            }
        )
        if run_state.stop_reason is not None:
            span.set_attribute("fsm_agent.stop_reason", run_state.stop_reason.value)
        if run_state.state is State.ABORTED:
            reason = run_state.stop_reason.value if run_state.stop_reason else "aborted"
            _fail(span, reason, run_state.error or f"the run aborted: {reason}")
        if self.capture_content and run_state.output is not None:
            span.set_attribute(
                "gen_ai.output.messages",
                json.dumps([{"role": "assistant", "parts": [_text(run_state.output)]}]),
            )
        span.end()

    def on_transition(self, *, move: Move, run_state: RunState, **future_kwargs: Any) -> None:
        """Add the move as a span event; close the spans the move leaves behind."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None:
            return
        if invocation.span.is_recording():  # not when sampled out, or with no SDK configured
            self._add_move(invocation.span, move)
        chat = invocation.chat
        if chat is not None:  # the call never answered: a failed (or interrupted) attempt
            invocation.chat = None
            message = run_state.error if move.dest is State.ABORTED else None
            _fail(chat, move.outcome.value, message or f"the model call ended: {move.outcome}")
            chat.end()
        if move.source is State.DISPATCHING or move.dest in _ENDED:
            self._end_tools(invocation, f"not run: {move.outcome.value}")

    @staticmethod
    def _add_move(span: Span, move: Move) -> None:
        attributes: dict[str, str | int] = {
            "fsm_agent.source": move.source.value,
            "fsm_agent.outcome": move.outcome.value,
            "fsm_agent.dest": move.dest.value,
            "fsm_agent.row": move.row,
        }
        attributes.update(zip(_COUNTER_KEYS, move.counters, strict=True))
        if move.stop is not None:
            attributes["fsm_agent.stop_reason"] = move.stop.value
        span.add_event(TRANSITION_EVENT, attributes)

    # -- model calls ---------------------------------------------------------------------------
    def before_model_call(
        self, *, request: ModelRequest, run_state: RunState, **future_kwargs: Any
    ) -> None:
        """Open the ``chat`` span of one attempt."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None:
            return
        if invocation.chat is not None:
            invocation.chat.end()
        model = self.request_model or "model"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "fsm_agent.step": run_state.counters.steps + 1,
            "fsm_agent.attempt": run_state.counters.retries + 1,
        }
        if self.provider is not None:
            attributes["gen_ai.provider.name"] = self.provider
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        if request.temperature is not None:
            attributes["gen_ai.request.temperature"] = request.temperature
        if self.capture_content:
            attributes["gen_ai.input.messages"] = json.dumps(
                [_message(m) for m in request.messages]
            )
        invocation.chat = self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(invocation.span),
            kind=trace.SpanKind.CLIENT,
            attributes=attributes,
        )

    def after_model_call(
        self, *, response: ModelResponse, run_state: RunState, **future_kwargs: Any
    ) -> None:
        """Close the ``chat`` span with the response's finish reason and usage."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None or invocation.chat is None:
            return
        chat, invocation.chat = invocation.chat, None
        attributes: dict[str, Any] = {
            "gen_ai.response.finish_reasons": [response.finish_reason.value],
            "gen_ai.usage.input_tokens": response.usage.input_tokens,
            "gen_ai.usage.output_tokens": response.usage.output_tokens,
        }
        if response.model_name is not None:
            attributes["gen_ai.response.model"] = response.model_name
        if response.response_id is not None:
            attributes["gen_ai.response.id"] = response.response_id
        if self.capture_content:
            attributes["gen_ai.output.messages"] = json.dumps(
                [{**_message(response.message), "finish_reason": response.finish_reason.value}]
            )
        chat.set_attributes(attributes)
        chat.end()

    # -- tool calls ----------------------------------------------------------------------------
    def before_tool(self, *, call: ToolCall, run_state: RunState, **future_kwargs: Any) -> None:
        """Open the ``execute_tool`` span of one call."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is not None:
            self._start_tool(invocation, call)

    def after_tool(
        self, *, call: ToolCall, result: ToolResult, run_state: RunState, **future_kwargs: Any
    ) -> None:
        """Close the call's span; a failed tool sets error status."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None:
            return
        span = invocation.tools.pop(call.id, None) or self._start_tool(invocation, call, keep=False)
        if self.capture_content:
            span.set_attribute("gen_ai.tool.call.result", result.content)
        if result.is_error:
            _fail(span, "tool_error", f"the tool {call.name!r} failed")
        span.end()

    def _start_tool(self, invocation: _Invocation, call: ToolCall, *, keep: bool = True) -> Span:
        open_span = invocation.tools.get(call.id)
        if open_span is not None:
            return open_span
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments_json
        span = self._tracer.start_span(
            f"execute_tool {call.name}",
            context=trace.set_span_in_context(invocation.span),
            kind=trace.SpanKind.INTERNAL,
            attributes=attributes,
        )
        if keep:
            invocation.tools[call.id] = span
        return span

    def _end_tools(self, invocation: _Invocation, why: str) -> None:
        """End the tool spans whose tool did not run (denied, skipped, mocked, awaiting a human)."""
        for span in invocation.tools.values():
            span.set_attribute("fsm_agent.tool.ran", False)
            span.set_attribute("fsm_agent.tool.outcome", why)
            span.end()
        invocation.tools.clear()

    def _end_open(self, invocation: _Invocation, why: str) -> None:
        if invocation.chat is not None:
            _fail(invocation.chat, "interrupted", why)
            invocation.chat.end()
            invocation.chat = None
        self._end_tools(invocation, why)


def _fail(span: Span, error_type: str, message: str) -> None:
    """Error status, ``error.type`` and an ``exception`` event (the semantic conventions' form)."""
    span.set_status(Status(StatusCode.ERROR, message))
    span.set_attribute("error.type", error_type)
    span.add_event("exception", {"exception.type": error_type, "exception.message": message})


def _text(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


def _message(message: Message) -> dict[str, Any]:
    """A message in the GenAI conventions' JSON shape (role and typed parts)."""
    parts: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            parts.append(_text(part.text))
        elif isinstance(part, ToolCall):
            parts.append(
                {
                    "type": "tool_call",
                    "id": part.id,
                    "name": part.name,
                    "arguments": part.arguments_json,
                }
            )
        elif isinstance(part, ToolResult):
            parts.append(
                {"type": "tool_call_response", "id": part.call_id, "response": part.content}
            )
        else:
            parts.append({"type": part.type})
    return {"role": str(message.role), "parts": parts}
