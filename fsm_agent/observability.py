"""OpenTelemetry traces of a run: one hook object, :class:`OpenTelemetryHooks`.

``Agent(model, hooks=[OpenTelemetryHooks()])`` records, through the OpenTelemetry API and
following the GenAI semantic conventions:

- an ``invoke_agent`` span per invocation (``run`` and every ``resume``), carrying each move of
  the machine as a ``fsm_agent.transition`` span event and, at the end, the stop reason;
- a ``chat`` span per model call attempt, named after the model that takes it (a retried call
  has one span per attempt, a fallback chain one per model it tries; a failed attempt has
  error status and the exception);
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
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from . import _genai_names as n
from .errors import MissingExtraError
from .kernel.composition import called_as, parent_call
from .kernel.plan import plan_of
from .kernel.run import own_usage
from .machine.table import Counters, State
from .values.messages import TextPart, ToolCall, ToolResult

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, Status, StatusCode, TracerProvider
except ImportError as exc:
    raise MissingExtraError(
        "fsm_agent.observability", extra="otel", module="opentelemetry-api"
    ) from exc

if TYPE_CHECKING:
    from .kernel.agent import Agent, RunResult
    from .machine.agent_machine import Move
    from .models import Model
    from .run.state import RunState
    from .values.messages import Message, ModelRequest, ModelResponse, Usage

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


@dataclass(frozen=True, slots=True)
class _ModelInfo:
    """What the spans say of one model: its provider, its name and the server it calls."""

    attributes: dict[str, str | int]
    span_name: str  # ``chat {model}``, or ``chat`` when the model is not known


@dataclass(slots=True)
class _Invocation:
    """The open spans of one invocation of a run, and what the spans say of its agent."""

    span: Span
    run_state: RunState  # the kernel's own object: at any time, the run as it stands
    chat: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)  # tool name -> description
    models: dict[int, _ModelInfo] = field(default_factory=dict)  # by id() of the model


_OBSERVERS: weakref.WeakSet[OpenTelemetryHooks] = weakref.WeakSet()
"""Every hook object alive: a child observed by one nests under its parent's call observed by
another."""


class OpenTelemetryHooks:
    """A hook object that records a run as OpenTelemetry spans (see the module docstring).

    ``tracer_provider`` defaults to the global one (``opentelemetry.trace.set_tracer_provider``);
    ``agent_name`` names the ``invoke_agent`` spans; ``request_model`` and ``provider``, when
    given, replace the ``gen_ai.request.model`` and ``gen_ai.provider.name`` read from the
    model that takes each call (a model of your own that names neither); ``capture_content``
    records messages, tool arguments and tool results. One instance may serve many agents and
    concurrent runs.
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
        _OBSERVERS.add(self)

    # -- the invocation span -------------------------------------------------------------------
    def before_run(
        self, *, run_state: RunState, agent: Agent[Any, Any] | None = None, **future_kwargs: Any
    ) -> None:
        """Open the ``invoke_agent`` span of this invocation."""
        run_id = run_state.run_id
        stale = self._runs.pop(run_id, None)
        if stale is not None:  # the last invocation never returned (a crash in this process)
            self._end_open(stale, "the invocation ended without returning")
            stale.span.set_attributes(_usage(_own(stale.run_state)))  # as far as it went
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
        name = called_as(run_id) or self.agent_name  # a child is named by its tool's name
        attributes: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.OPERATION_INVOKE_AGENT,
            n.GEN_AI_AGENT_NAME: name,
            n.GEN_AI_CONVERSATION_ID: run_state.conversation_id or run_id,
            "fsm_agent.run_id": run_id,
            "fsm_agent.resumed": resumed,
            "fsm_agent.state": run_state.state.value,
        }
        invocation = _Invocation(trace.INVALID_SPAN, run_state)
        if agent is not None:
            attributes.update(self._describe(invocation, agent, run_state))
        else:
            attributes.update(self._model_info(invocation, None).attributes)
        invocation.span = self._tracer.start_span(
            f"invoke_agent {name}",
            context=trace.set_span_in_context(parent),
            kind=trace.SpanKind.INTERNAL,
            links=links,
            attributes=attributes,
        )
        self._runs[run_id] = invocation
        # A resume runs the calls a human settled without their before_tool hooks: their spans
        # start here, and after_tool (or the move out of dispatching) ends them.
        for request in run_state.human_requests:
            self._start_tool(invocation, request.call)

    def _caller_span(self, run_id: str) -> Span | None:
        """The ``execute_tool`` span of the parent's call that runs ``run_id``, when it is a
        child run (an agent used as a tool) whose parent these hooks, or others, observe."""
        called = parent_call(run_id)
        if called is None:
            return None
        for observer in (self, *_OBSERVERS):
            invocation = observer._runs.get(called[0])
            if invocation is not None:
                return invocation.tools.get(called[1])
        return None

    def _describe(
        self, invocation: _Invocation, agent: Agent[Any, Any], run_state: RunState
    ) -> dict[str, Any]:
        """The agent's attributes of the invocation span; keeps its tools' descriptions."""
        plan = plan_of(agent)
        tools = plan.tool_definitions
        if plan.pager is not None:
            tools = (*tools, plan.pager.definition)
        invocation.descriptions = {t.name: t.description for t in tools if t.description}
        models = plan.models  # the model taking the calls now: models[model_switches]
        model = models[min(run_state.counters.model_switches, len(models) - 1)]
        return {
            # The definition's fingerprint (tools, instructions, policy): the same in every
            # process that runs this agent, as durable runs need (hashed: it is long).
            n.GEN_AI_AGENT_ID: hashlib.sha256(plan.definition.encode()).hexdigest()[:32],
            n.GEN_AI_OUTPUT_TYPE: n.OUTPUT_TEXT if plan.output_schema is None else n.OUTPUT_JSON,
            **self._model_info(invocation, model).attributes,
        }

    def _model_info(self, invocation: _Invocation, model: Model | None) -> _ModelInfo:
        """The provider, model and server attributes of ``model`` (the options win)."""
        key = id(model)
        info = invocation.models.get(key)
        if info is not None:
            return info
        provider = self.provider
        if provider is None:
            own = getattr(model, "provider", None)
            if isinstance(own, str):
                provider = n.PROVIDERS.get(own, own)
            else:  # a model of the user's own, or a test double: its name says what it is
                provider = str(getattr(model, "name", type(model).__name__))
        attributes: dict[str, str | int] = {n.GEN_AI_PROVIDER_NAME: provider}
        request_model = self.request_model or getattr(model, "model_id", None)
        if isinstance(request_model, str):
            attributes[n.GEN_AI_REQUEST_MODEL] = request_model
        base_url = getattr(model, "base_url", None)
        if isinstance(base_url, str):
            url = httpx.URL(base_url)
            if url.host:
                attributes[n.SERVER_ADDRESS] = url.host
                port = url.port or {"https": 443, "http": 80}.get(url.scheme)
                if port is not None:
                    attributes[n.SERVER_PORT] = port
        name = f"chat {request_model}" if isinstance(request_model, str) else "chat"
        info = invocation.models[key] = _ModelInfo(attributes, name)
        return info

    def after_run(
        self,
        *,
        run_state: RunState,
        result: RunResult[Any] | None = None,
        **future_kwargs: Any,
    ) -> None:
        """Close the invocation span with the run's ending, usage and counters."""
        invocation = self._runs.pop(run_state.run_id, None)
        if invocation is None:
            return
        self._end_open(invocation, f"the run stopped in {run_state.state.value}")
        span = invocation.span
        children = run_state.children.values()
        span.set_attributes(
            {
                "fsm_agent.state": run_state.state.value,
                **_usage(_own(run_state)),
                "fsm_agent.model_calls": run_state.model_calls
                - sum(c.model_calls for c in children),
                "fsm_agent.tool_executions": run_state.tool_executions,
                "fsm_agent.steps": run_state.counters.steps,
            }
        )
        if children:  # the whole composition's, once (its children's spans carry their own)
            total = run_state.usage
            span.set_attributes(
                {
                    "fsm_agent.total.input_tokens": total.input_tokens,
                    "fsm_agent.total.output_tokens": total.output_tokens,
                    "fsm_agent.total.model_calls": run_state.model_calls,
                    "fsm_agent.total.tool_executions": run_state.tool_executions
                    + sum(c.tool_executions for c in children),
                }
            )
        if run_state.stop_reason is not None:
            span.set_attribute("fsm_agent.stop_reason", run_state.stop_reason.value)
        if run_state.state is State.ABORTED:
            reason = run_state.stop_reason.value if run_state.stop_reason else "aborted"
            error = result.error if result is not None else None
            _fail(span, reason, run_state.error or f"the run aborted: {reason}", error)
        if self.capture_content and run_state.output is not None:
            span.set_attribute(
                n.GEN_AI_OUTPUT_MESSAGES,
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
        if chat is not None:  # the call never answered nor failed: an interrupted attempt
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
        self,
        *,
        request: ModelRequest,
        run_state: RunState,
        model: Model | None = None,
        stream: bool = False,
        **future_kwargs: Any,
    ) -> None:
        """Open the ``chat`` span of one attempt, named after the model that takes it."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None:
            return
        if invocation.chat is not None:
            invocation.chat.end()
        info = self._model_info(invocation, model)
        attributes: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.OPERATION_CHAT,
            **info.attributes,
            n.GEN_AI_OUTPUT_TYPE: n.OUTPUT_TEXT if request.output is None else n.OUTPUT_JSON,
            n.GEN_AI_REQUEST_STREAM: stream,
            "fsm_agent.step": run_state.counters.steps + 1,
            "fsm_agent.attempt": run_state.counters.retries + 1,
        }
        if request.max_tokens is not None:
            attributes[n.GEN_AI_REQUEST_MAX_TOKENS] = request.max_tokens
        if request.temperature is not None:
            attributes[n.GEN_AI_REQUEST_TEMPERATURE] = request.temperature
        if request.stop_sequences:
            attributes[n.GEN_AI_REQUEST_STOP_SEQUENCES] = request.stop_sequences
        if self.capture_content:
            attributes[n.GEN_AI_INPUT_MESSAGES] = json.dumps(
                [_message(m) for m in request.messages]
            )
        invocation.chat = self._tracer.start_span(
            info.span_name,
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
            n.GEN_AI_RESPONSE_FINISH_REASONS: [response.finish_reason.value],
            **_usage(response.usage),
        }
        if response.model_name is not None:
            attributes[n.GEN_AI_RESPONSE_MODEL] = response.model_name
        if response.response_id is not None:
            attributes[n.GEN_AI_RESPONSE_ID] = response.response_id
        if self.capture_content:
            attributes[n.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
                [{**_message(response.message), "finish_reason": response.finish_reason.value}]
            )
        chat.set_attributes(attributes)
        chat.end()

    def model_call_failed(
        self, *, error: BaseException, run_state: RunState, **future_kwargs: Any
    ) -> None:
        """Close the ``chat`` span of a failed attempt with the error."""
        invocation = self._runs.get(run_state.run_id)
        if invocation is None or invocation.chat is None:
            return
        chat, invocation.chat = invocation.chat, None
        _fail(chat, _qualified(error), str(error) or type(error).__name__, error)
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
            span.set_attribute(n.GEN_AI_TOOL_CALL_RESULT, result.content)
        if result.is_error:
            _fail(span, "tool_error", f"the tool {call.name!r} failed")
        span.end()

    def _start_tool(self, invocation: _Invocation, call: ToolCall, *, keep: bool = True) -> Span:
        open_span = invocation.tools.get(call.id)
        if open_span is not None:
            return open_span
        attributes: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.OPERATION_EXECUTE_TOOL,
            n.GEN_AI_TOOL_NAME: call.name,
            n.GEN_AI_TOOL_CALL_ID: call.id,
            n.GEN_AI_TOOL_TYPE: "function",
        }
        description = invocation.descriptions.get(call.name)
        if description is not None:
            attributes[n.GEN_AI_TOOL_DESCRIPTION] = description
        if self.capture_content:
            attributes[n.GEN_AI_TOOL_CALL_ARGUMENTS] = call.arguments_json
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


def _fail(span: Span, error_type: str, message: str, error: BaseException | None = None) -> None:
    """Error status and ``error.type``; with an exception, the conventions' ``exception``
    event, whose ``exception.type`` is its class (an interrupt, a limit, has none)."""
    span.set_status(Status(StatusCode.ERROR, message))
    span.set_attribute(n.ERROR_TYPE, error_type)
    if error is not None:
        span.add_event(
            n.EXCEPTION_EVENT,
            {n.EXCEPTION_TYPE: _qualified(error), n.EXCEPTION_MESSAGE: str(error) or message},
        )


def _qualified(error: BaseException) -> str:
    """The exception's fully qualified class name (``fsm_agent.RateLimitError``)."""
    kind = type(error)
    return (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )


def _own(run_state: RunState) -> Usage:
    """The run's usage, its children's left out (their invocation spans carry theirs)."""
    children = run_state.children
    if not children:
        return run_state.usage
    return own_usage(run_state.usage, [c.usage for c in children.values()])


def _usage(usage: Usage) -> dict[str, int]:
    """The usage attributes: input and output tokens, and the cache and reasoning counts the
    provider reported (``gen_ai.usage.input_tokens`` includes the cached tokens)."""
    attributes = {
        n.GEN_AI_USAGE_INPUT_TOKENS: usage.input_tokens,
        n.GEN_AI_USAGE_OUTPUT_TOKENS: usage.output_tokens,
    }
    if usage.cache_read_tokens:
        attributes[n.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        attributes[n.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = usage.cache_write_tokens
    if usage.reasoning_tokens:
        attributes[n.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens
    return attributes


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
