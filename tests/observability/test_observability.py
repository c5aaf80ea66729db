"""OpenTelemetry instrumentation: the span tree of scripted runs, exported to memory by the SDK."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from fsm_agent import Agent, Policy, StopReason, tool
from fsm_agent.approval import Approval
from fsm_agent.observability import TRANSITION_EVENT, OpenTelemetryHooks, trace_id_of
from fsm_agent.persistence.sqlite import SQLiteCheckpointer
from fsm_agent.policy import RetryPolicy
from fsm_agent.testing import (
    CrashingCheckpointer,
    ScriptedModel,
    SimulatedCrash,
    crash_and_resume,
    fail,
    text,
    tool_call,
    tool_calls,
)
from helpers import add


def _hooks(exporter: InMemorySpanExporter, **options: Any) -> OpenTelemetryHooks:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OpenTelemetryHooks(tracer_provider=provider, request_model="scripted", **options)


@tool
def boom() -> str:
    """Always fails."""
    raise RuntimeError("no luck")


def _named(spans: tuple[ReadableSpan, ...], prefix: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name.startswith(prefix)]


def _parent(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_a_plain_run_is_one_invocation_span_with_a_chat_and_a_tool_span_under_it(
    exporter: InMemorySpanExporter,
) -> None:
    """A tool turn then an answer: one invoke_agent span; two chat spans and one execute_tool
    span as its children, with the GenAI attributes; every move a transition event."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    result = Agent(model, tools=[add], hooks=[_hooks(exporter)]).run_sync("1 + 2?")
    spans = exporter.get_finished_spans()
    (run,) = _named(spans, "invoke_agent")
    chats = _named(spans, "chat scripted")
    (call,) = _named(spans, "execute_tool add")
    assert len(spans) == 4 and len(chats) == 2
    assert all(_parent(s) == _id(run) for s in [*chats, call])
    assert {s.context.trace_id for s in spans if s.context} == {trace_id_of(result.run_id)}
    attrs = run.attributes or {}
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["fsm_agent.stop_reason"] == "completed"
    assert attrs["gen_ai.conversation.id"] == result.run_id
    assert attrs["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    first = chats[0].attributes or {}
    assert first["gen_ai.operation.name"] == "chat"
    assert first["gen_ai.request.model"] == "scripted"
    assert first["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert first["gen_ai.usage.output_tokens"] == model.turns[0].usage.output_tokens  # type: ignore[union-attr]
    tool_attrs = call.attributes or {}
    assert tool_attrs["gen_ai.tool.name"] == "add"
    assert tool_attrs["gen_ai.tool.call.id"] == result.messages[-2].tool_results[0].call_id
    assert call.status.status_code is StatusCode.UNSET
    moves = [e for e in run.events if e.name == TRANSITION_EVENT]
    assert [(e.attributes or {})["fsm_agent.dest"] for e in moves] == [
        m.dest.value for m in result.trace
    ]
    last = moves[-1].attributes or {}
    assert (
        last["fsm_agent.source"] == "finalizing" and last["fsm_agent.row"] == result.trace[-1].row
    )
    assert last["fsm_agent.counters.steps"] == 2
    stops = [(e.attributes or {}).get("fsm_agent.stop_reason") for e in moves]
    assert [s for s in stops if s is not None] == ["completed"]
    assert "gen_ai.input.messages" not in first  # content only when asked for


def test_a_retried_model_call_has_one_span_per_attempt_and_the_failed_one_is_an_error(
    exporter: InMemorySpanExporter,
) -> None:
    """A 500 then an answer: two chat spans, the first with error status and an exception
    event naming the error's class, the second with attempt 2."""
    from fsm_agent.errors import ProviderServerError

    policy = Policy(retry=RetryPolicy(base_delay_s=0.0, max_delay_s=0.0))
    model = ScriptedModel([fail("upstream down"), text("ok")])
    assert Agent(model, policy=policy, hooks=[_hooks(exporter)]).run_sync("hi").ok
    spans = exporter.get_finished_spans()
    (run,) = _named(spans, "invoke_agent")
    failed, answered = _named(spans, "chat")
    assert failed.status.status_code is StatusCode.ERROR
    error_type = f"{ProviderServerError.__module__}.{ProviderServerError.__qualname__}"
    assert (failed.attributes or {})["error.type"] == error_type
    assert [e.name for e in failed.events] == ["exception"]
    assert answered.status.status_code is StatusCode.UNSET
    assert (answered.attributes or {})["fsm_agent.attempt"] == 2
    assert _parent(failed) == _parent(answered) == _id(run)


def test_an_aborted_run_records_its_error_on_the_invocation_span(
    exporter: InMemorySpanExporter,
) -> None:
    """A fatal model error: the run span has error status, the stop reason and the error text."""
    from fsm_agent.errors import AuthenticationError

    model = ScriptedModel([fail(AuthenticationError("bad key", status_code=401))])
    result = Agent(model, hooks=[_hooks(exporter)]).run_sync("hi")
    assert not result.ok
    (run,) = _named(exporter.get_finished_spans(), "invoke_agent")
    assert run.status.status_code is StatusCode.ERROR
    assert (run.attributes or {})["fsm_agent.stop_reason"] == result.stop_reason.value
    (event,) = [e for e in run.events if e.name == "exception"]
    assert "bad key" in str((event.attributes or {})["exception.message"])


def test_parallel_tool_calls_are_sibling_spans_under_the_invocation_span(
    exporter: InMemorySpanExporter,
) -> None:
    """Three calls of one turn run in parallel: three execute_tool spans, each a child of the
    run span, the failing one with error status."""
    model = ScriptedModel(
        [
            tool_calls(("add", {"a": 1, "b": 1}), ("add", {"a": 2, "b": 2}), ("boom", {})),
            text("done"),
        ]
    )
    policy = Policy(parallel_tool_calls=True)
    Agent(model, tools=[add, boom], policy=policy, hooks=[_hooks(exporter)]).run_sync("go")
    spans = exporter.get_finished_spans()
    (run,) = _named(spans, "invoke_agent")
    tools = _named(spans, "execute_tool")
    assert sorted(s.name for s in tools) == [
        "execute_tool add",
        "execute_tool add",
        "execute_tool boom",
    ]
    assert {_parent(s) for s in tools} == {_id(run)}
    ids = {(s.attributes or {})["gen_ai.tool.call.id"] for s in tools}
    assert len(ids) == 3
    (failed,) = [s for s in tools if s.status.status_code is StatusCode.ERROR]
    assert failed.name == "execute_tool boom"


class _AskForBigAmounts:
    def approve_tool(self, *, call: Any, **future_kwargs: Any) -> Approval | None:
        return Approval.ask("sure?") if (call.arguments or {}).get("a", 0) > 100 else None


def test_a_suspended_and_resumed_run_is_two_invocation_spans_in_one_trace(
    exporter: InMemorySpanExporter,
) -> None:
    """A call waits for a human: the first invocation ends suspended, its tool span marked not
    run; the resume is a second invocation span in the same trace, where the approved call runs."""
    model = ScriptedModel([tool_call("add", {"a": 500, "b": 1}), text("501")])
    agent = Agent(model, tools=[add], hooks=[_hooks(exporter), _AskForBigAmounts()])
    first = agent.run_sync("add")
    assert first.stop_reason is StopReason.SUSPENDED and first.resume_handle is not None
    (waiting,) = _named(exporter.get_finished_spans(), "execute_tool")
    assert (waiting.attributes or {})["fsm_agent.tool.ran"] is False
    call_id = first.pending[0].id
    done = asyncio.run(agent.resume(first.resume_handle, {call_id: Approval.allow()}))
    assert done.ok
    spans = exporter.get_finished_spans()
    suspended, resumed = _named(spans, "invoke_agent")
    assert (suspended.attributes or {})["fsm_agent.state"] == "suspended"
    assert (suspended.attributes or {})["fsm_agent.stop_reason"] == "suspended"
    assert (resumed.attributes or {})["fsm_agent.resumed"] is True
    assert {s.context.trace_id for s in spans if s.context} == {trace_id_of(first.run_id)}
    ran = [
        s for s in _named(spans, "execute_tool") if "fsm_agent.tool.ran" not in (s.attributes or {})
    ]
    assert len(ran) == 1 and _parent(ran[0]) == _id(resumed)
    assert (ran[0].attributes or {})["gen_ai.tool.call.id"] == call_id


def test_a_crash_resumed_durable_run_continues_the_same_trace(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """A run on SQLite crashes after its fourth checkpoint; a new agent with new hooks (a new
    process, as far as tracing knows) resumes it: every span lands in the run's one trace."""
    path = tmp_path / "runs.db"
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    crashing = CrashingCheckpointer(SQLiteCheckpointer(path), 4)
    with pytest.raises(SimulatedCrash):
        asyncio.run(
            Agent(model, tools=[add], hooks=[_hooks(exporter)], checkpointer=crashing).run("go")
        )
    before = exporter.get_finished_spans()
    assert not _named(before, "invoke_agent")  # the crashed invocation never ended
    store = SQLiteCheckpointer(path)
    (saved,) = store.runs()
    agent = Agent(model, tools=[add], hooks=[_hooks(exporter)], checkpointer=store)
    done = asyncio.run(agent.resume(saved.run_id))
    assert done.ok and done.run_id == saved.run_id
    spans = exporter.get_finished_spans()
    (resumed,) = _named(spans, "invoke_agent")
    assert (resumed.attributes or {})["fsm_agent.resumed"] is True
    assert {s.context.trace_id for s in spans if s.context} == {trace_id_of(saved.run_id)}
    assert len(spans) > len(before)


def test_crash_and_resume_in_one_process_ends_the_crashed_invocation_span(
    exporter: InMemorySpanExporter, tmp_path: Path
) -> None:
    """The same hooks see the resume: the crashed invocation's span is ended with error status
    and both invocations share the trace."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    agent = Agent(model, tools=[add], hooks=[_hooks(exporter)])
    result, crashed = asyncio.run(
        crash_and_resume(agent, "go", crash_after=3, store=SQLiteCheckpointer(tmp_path / "r.db"))
    )
    assert crashed and result.ok
    spans = exporter.get_finished_spans()
    crashed_span, resumed = _named(spans, "invoke_agent")
    assert crashed_span.status.status_code is StatusCode.ERROR
    assert resumed.status.status_code is StatusCode.UNSET
    assert {s.context.trace_id for s in spans if s.context} == {trace_id_of(result.run_id)}


def test_content_is_recorded_only_when_asked_for(exporter: InMemorySpanExporter) -> None:
    """capture_content=True puts the messages, arguments and results on the spans."""
    model = ScriptedModel([tool_call("add", {"a": 20, "b": 22}), text("forty-two")])
    Agent(model, tools=[add], hooks=[_hooks(exporter, capture_content=True)]).run_sync("sum?")
    spans = exporter.get_finished_spans()
    first = _named(spans, "chat")[0].attributes or {}
    inputs = json.loads(str(first["gen_ai.input.messages"]))
    assert inputs[-1] == {"role": "user", "parts": [{"type": "text", "content": "sum?"}]}
    (call,) = _named(spans, "execute_tool")
    assert json.loads(str((call.attributes or {})["gen_ai.tool.call.arguments"])) == {
        "a": 20,
        "b": 22,
    }
    assert (call.attributes or {})["gen_ai.tool.call.result"] == "42"
    last = json.loads(str((_named(spans, "chat")[1].attributes or {})["gen_ai.output.messages"]))
    assert last[0]["parts"] == [{"type": "text", "content": "forty-two"}]


def test_no_api_key_or_header_reaches_any_span(exporter: InMemorySpanExporter) -> None:
    """A real provider over HTTP with content capture on: neither the API key nor the
    Authorization header appears in any span name, attribute or event."""
    from fsm_agent.providers.openai import OpenAIChatModel

    secret = "sk-test-SECRET-4242"
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "model": "gpt-test",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hello"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            },
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel("gpt-test", api_key=secret, client=client)
    hooks = _hooks(exporter, capture_content=True, provider="openai")
    assert Agent(model, hooks=[hooks]).run_sync("hi").output == "hello"
    assert seen == [f"Bearer {secret}"]
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    (chat,) = _named(spans, "chat")
    assert (chat.attributes or {})["gen_ai.response.model"] == "gpt-test"
    dumped = "\n".join(span.to_json() for span in spans)
    assert (
        "SECRET" not in dumped and "Bearer" not in dumped and "authorization" not in dumped.lower()
    )


def test_without_the_otel_extra_the_error_names_it() -> None:
    """With opentelemetry missing, importing fsm_agent.observability raises MissingExtraError
    (an ImportError) naming [otel]; importing fsm_agent never imports opentelemetry."""
    program = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "import fsm_agent\n"
        "from fsm_agent.errors import MissingExtraError\n"
        "try:\n"
        "    import fsm_agent.observability\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.extra, isinstance(exc, ImportError), exc, sep='|')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    extra, is_import_error, message = done.stdout.strip().split("|")
    assert (extra, is_import_error) == ("otel", "True")
    assert "[otel] extra" in message and "pip install -e '.[otel]'" in message
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, fsm_agent; print('opentelemetry' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert loaded.stdout.strip() == "False"


def test_the_collector_example_of_the_docs_runs() -> None:
    """The program of docs/observability.md runs offline as written and its assertions hold."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "observability.md").read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
    exec(compile(code, "observability.md", "exec"), {"__name__": "docs_example_observability"})


def test_a_sampled_out_run_exports_nothing_and_ends_as_it_would_without_hooks(
    exporter: InMemorySpanExporter,
) -> None:
    """With a sampler that drops every trace, no span is exported and the run's result (output,
    trace, usage) equals an uninstrumented run's."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = OpenTelemetryHooks(tracer_provider=provider)

    def script() -> ScriptedModel:
        return ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])

    traced = Agent(script(), tools=[add], hooks=[hooks]).run_sync("1 + 2?")
    plain = Agent(script(), tools=[add]).run_sync("1 + 2?")
    assert exporter.get_finished_spans() == ()
    assert (traced.output, traced.trace, traced.usage) == (plain.output, plain.trace, plain.usage)


def test_a_streamed_run_gives_the_same_span_tree(exporter: InMemorySpanExporter) -> None:
    """run_stream records the same spans as run: one invocation, two chats and one tool call."""
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}), text("3")])
    agent = Agent(model, tools=[add], hooks=[_hooks(exporter)])

    async def consume() -> list[str]:
        return [event.type async for event in agent.run_stream("1 + 2?")]

    assert asyncio.run(consume())[-1] == "final"
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "chat scripted",
        "chat scripted",
        "execute_tool add",
        "invoke_agent fsm_agent",
    ]
    (run,) = _named(spans, "invoke_agent")
    assert {_parent(s) for s in spans if s is not run} == {_id(run)}


def test_a_ratio_sampler_on_the_trace_id_keeps_or_drops_a_run_whole(
    exporter: InMemorySpanExporter,
) -> None:
    """Invariant: with a trace-id ratio sampler, a suspended-and-resumed run is recorded in both
    its invocations or in neither, and some runs of many are recorded but not all."""
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    ratio = TraceIdRatioBased(0.5)
    provider = TracerProvider(sampler=ParentBased(root=ratio, remote_parent_sampled=ratio))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    hooks = OpenTelemetryHooks(tracer_provider=provider)
    run_ids = []
    for _ in range(24):
        model = ScriptedModel([tool_call("add", {"a": 500, "b": 1}), text("501")])
        agent = Agent(model, tools=[add], hooks=[hooks, _AskForBigAmounts()])
        first = agent.run_sync("add")
        assert first.resume_handle is not None
        decisions = {first.pending[0].id: Approval.allow()}
        assert asyncio.run(agent.resume(first.resume_handle, decisions)).ok
        run_ids.append(first.run_id)
    invocations = [
        (s.attributes or {})["fsm_agent.run_id"]
        for s in _named(exporter.get_finished_spans(), "invoke_agent")
    ]
    counts = {run_id: invocations.count(run_id) for run_id in run_ids}
    assert set(counts.values()) == {0, 2}
