"""The kernel's behaviours, one test per seed behaviour (the docstring cites the seed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pydantic import BaseModel

from fsm_agent import (
    Agent,
    AuthenticationError,
    CompactionSettings,
    ContextWindowExceededError,
    FinishReason,
    InvalidRequestError,
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    Policy,
    RateLimitError,
    RetryPolicy,
    Role,
    RunHandle,
    RunResult,
    Runtime,
    State,
    StopReason,
    TaskComplete,
    Tool,
    ToolCall,
    Usage,
    UsageLimits,
    Verdict,
    tool,
)
from fsm_agent.kernel.states import DONE_REMINDER, SUMMARY_FALLBACK, SUMMARY_PROMPT
from fsm_agent.kernel.states.compacting import FEEDBACK_PREFIX
from fsm_agent.machine.table import Outcome
from fsm_agent.testing import (
    ScriptedModel,
    VirtualClock,
    fail,
    finish,
    text,
    tool_call,
    tool_calls,
)
from helpers import add, make_agent, stream


def states(result) -> list[str]:  # type: ignore[no-untyped-def]
    return [m.dest.value for m in result.trace]


# -- finish reasons [S001 §6] ----------------------------------------------------------------
def test_stop_finishes_with_the_answer() -> None:
    """`stop` is a normal finish: the text is the output [S001 §6, S000 §2.2]."""
    agent, _, _ = make_agent([text("hello")])
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason, result.state) == (
        "hello",
        StopReason.COMPLETED,
        State.DONE,
    )


def test_tool_calls_continue_the_loop() -> None:
    """`tool_calls` runs the tools and calls the model again [S001 §6]."""
    agent, model, _ = make_agent([tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add])
    result = agent.run_sync("What is 1 + 2?")
    assert result.output == "3"
    assert len(model.requests) == 2
    second = model.requests[1].messages
    assert second[-1].role is Role.TOOL and second[-1].tool_results[0].content == "3"
    assert second[-1].tool_results[0].call_id == second[-2].tool_calls[0].id


# A length finish whose output filled a 1,000-token context: context pressure, not an output cut.
FILLED = Usage(requests=1, input_tokens=10, output_tokens=1_000)
SMALL_WINDOW = Policy(compaction=CompactionSettings(context_window=1_000))


def test_length_forces_compaction_then_context_limit() -> None:
    """`length` near the context budget forces compaction; when nothing can be removed the run
    ends with context_limit and the partial text as output [S001 §6, §8]."""
    agent, _, _ = make_agent([finish("length", "partial", usage=FILLED)], policy=SMALL_WINDOW)
    result = agent.run_sync("hi")
    assert states(result)[-3:] == ["compacting", "finalizing", "done"]
    assert result.stop_reason is StopReason.CONTEXT_LIMIT
    assert result.output == "partial"


def test_length_after_a_long_history_compacts_and_retries() -> None:
    """A forced compaction that removes old turns lets the next call go ahead, and never
    splits a call from its result [S001 §6, S004 Tool Boundary Safety]."""
    turns = [tool_call("add", {"a": i, "b": 1}) for i in range(4)]
    agent, model, _ = make_agent(
        [*turns, finish("length", "cut", usage=FILLED), text("done")],
        tools=[add],
        policy=SMALL_WINDOW,
    )
    result = agent.run_sync("count")
    assert result.output == "done"
    assert "compacted" in [m.outcome.value for m in result.trace]
    last = model.requests[-1].messages
    assert len(last) < len(model.requests[-2].messages)
    assert last[0].role is Role.USER and last[0].text == "count"
    for i, message in enumerate(last):
        if message.role is Role.TOOL:
            assert last[i - 1].role in (Role.ASSISTANT, Role.TOOL)


def test_context_window_error_is_treated_as_length() -> None:
    """A provider's context-window-exceeded error takes the `length` path (DESIGN §6)."""
    agent, _, _ = make_agent([fail(ContextWindowExceededError("too long"))])
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.CONTEXT_LIMIT
    assert [m.outcome.value for m in result.trace][2] == "length"


def test_content_filter_finishes_with_a_message() -> None:
    """`content_filter` returns the filtered-content message [S001 §6]."""
    agent, _, _ = make_agent([finish("content_filter")])
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.CONTENT_FILTER
    assert "content filter" in (result.output or "")


def test_other_and_unknown_finish_reasons_complete() -> None:
    """`other` (and an unknown reason, mapped to other) completes with the text; the raw
    reason is kept [S001 §6]."""
    agent, _, _ = make_agent([finish("weird", "answer")])
    events, result = stream(agent)
    assert (result.output, result.stop_reason) == ("answer", StopReason.COMPLETED)
    response = next(e for e in events if e.type == "model_response").response  # type: ignore[union-attr]
    assert response.finish_reason is FinishReason.OTHER
    assert response.raw_finish_reason == "weird"


class _Typed(BaseModel):
    x: int


@pytest.mark.parametrize(
    "requirement",
    [
        {"policy": Policy(require_done_tool=True)},
        {"verifier": lambda **_: Verdict.reject("no")},
        {"output_type": _Typed},
    ],
    ids=["done_tool", "verifier", "output_type"],
)
@pytest.mark.parametrize("reason", ["other", "weird"])
def test_an_other_finish_is_checked_like_any_answer(
    requirement: dict[str, Any], reason: str
) -> None:
    """An `other` finish (an unknown reason, or a `stop` with nothing in it, as a real server
    sends) is an answer: the done-tool requirement, the verifier and the output type see it
    like a `stop`, and never let it end the run `completed` unchecked."""
    agent, model, _ = make_agent([finish(reason, ""), text("x"), text("y")], **requirement)
    result = agent.run_sync("hi")
    assert result.stop_reason is not StopReason.COMPLETED
    assert len(model.requests) > 1  # the first answer was sent back, not taken
    assert not any(m.outcome is Outcome.OTHER and m.dest is State.FINALIZING for m in result.trace)


def test_an_other_finish_then_an_answer_keeps_no_stale_raw_reason() -> None:
    """A rejected `other` turn's raw reason does not stay on a run that a later answer ends."""
    accept = iter([Verdict.reject("again"), Verdict.accept()])
    agent, _, _ = make_agent([finish("weird", "a"), text("b")], verifier=lambda **_: next(accept))
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason) == ("b", StopReason.COMPLETED)
    assert result.raw_finish_reason is None


def test_finish_error_is_retried_then_aborts() -> None:
    """`error` (the provider says generation failed) is retried, then aborts [S001 §6]."""
    policy = Policy(retry=RetryPolicy(max_retries=1))
    agent, model, _ = make_agent([finish("error"), finish("error")], policy=policy)
    result = agent.run_sync("hi")
    assert len(model.requests) == 2
    assert (result.state, result.stop_reason) == (State.ABORTED, StopReason.MAX_ERRORS)
    assert isinstance(result.error, ModelError)


# -- model errors [S001 §7, S000 §5] ----------------------------------------------------------
def test_retryable_errors_back_off_exponentially_with_jitter() -> None:
    """Retryable errors are retried with exponential backoff and jitter, within the policy
    bounds, and sleep through the injected clock [S001 §7, S000 §5]."""
    policy = Policy(retry=RetryPolicy(max_retries=3, base_delay_s=1, max_delay_s=60, jitter=0.2))
    agent, _, clock = make_agent([fail(), fail(), fail(), text("ok")], policy=policy)
    result = agent.run_sync("hi")
    assert result.output == "ok"
    assert len(clock.sleeps) == 3
    for attempt, slept in enumerate(clock.sleeps, start=1):
        base = 2 ** (attempt - 1)
        assert base * 0.8 <= slept <= base * 1.2


def test_retry_after_is_honoured() -> None:
    """A server's Retry-After replaces the computed delay [S000 §1.1]."""
    agent, _, clock = make_agent([fail(RateLimitError("slow", retry_after=7.5)), text("ok")])
    result = agent.run_sync("hi")
    assert result.output == "ok" and clock.sleeps == [7.5]


def test_retry_after_longer_than_max_delay_is_not_waited() -> None:
    """A Retry-After longer than max_delay_s ends the run with the error kept, instead of a
    long sleep."""
    agent, _, clock = make_agent([fail(RateLimitError("slow", retry_after=3600))])
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.MODEL_ERROR and clock.sleeps == []
    assert isinstance(result.error, RateLimitError)


def test_retries_exhausted_abort_with_max_errors() -> None:
    """After max_retries failed retries the run aborts with max_errors, error kept [S001 §7]."""
    policy = Policy(retry=RetryPolicy(max_retries=2))
    agent, model, _ = make_agent([fail(), fail(), fail(), text("never")], policy=policy)
    result = agent.run_sync("hi")
    assert len(model.requests) == 3
    assert (result.state, result.stop_reason) == (State.ABORTED, StopReason.MAX_ERRORS)
    assert isinstance(result.error, ModelError)


@pytest.mark.parametrize(
    "error",
    [AuthenticationError("bad key", status_code=401), InvalidRequestError("bad", status_code=400)],
)
def test_non_retryable_errors_abort_at_once(error: ModelError) -> None:
    """Auth and invalid-request errors abort at once with the error kept [S001 §7]."""
    agent, model, clock = make_agent([fail(error), text("never")])
    result = agent.run_sync("hi")
    assert len(model.requests) == 1 and clock.sleeps == []
    assert (result.state, result.stop_reason, result.error) == (
        State.ABORTED,
        StopReason.MODEL_ERROR,
        error,
    )


def test_status_outside_retryable_statuses_is_not_retried() -> None:
    """A retryable-looking error whose status the policy does not list is not retried."""
    policy = Policy(retry=RetryPolicy(retryable_statuses=frozenset({429})))
    agent, model, _ = make_agent([fail(), text("never")], policy=policy)
    assert agent.run_sync("hi").stop_reason is StopReason.MODEL_ERROR
    assert len(model.requests) == 1


def test_a_model_that_raises_a_plain_exception_is_not_disguised() -> None:
    """A bug in a model object is raised as itself, never dressed up as a ModelError."""
    agent, _, _ = make_agent([fail(ValueError("oops"))])
    with pytest.raises(ValueError, match="oops"):
        agent.run_sync("hi")


def test_a_malformed_response_is_retried() -> None:
    """A model returning something that is not a ModelResponse is a retryable malformed
    response, never a crash."""

    class Broken:  # not a ScriptedModel: that one only plays well-formed responses
        name = "broken"
        context_window = None
        calls = 0

        async def complete(self, request: object) -> object:
            self.calls += 1
            return {"message": None} if self.calls == 1 else text("fine")

    agent = Agent(Broken(), runtime=make_agent([])[0].runtime)  # type: ignore[arg-type]
    result = agent.run_sync("hi")
    assert result.output == "fine"
    assert [m.outcome.value for m in result.trace][2] == "retryable_error"


# -- errors in tool turns [S002] ----------------------------------------------------------------
def test_consecutive_failed_tool_turns_abort_with_max_errors() -> None:
    """max_consecutive_errors failed tool turns in a row abort the run [S002]."""
    bad = tool_call("add", {"a": "x", "b": 1})
    agent, _, _ = make_agent([bad, bad, bad, text("never")], tools=[add])
    result = agent.run_sync("hi")
    assert (result.state, result.stop_reason) == (State.ABORTED, StopReason.MAX_ERRORS)
    assert result.counters.consecutive_error_turns == 3


def test_a_successful_turn_resets_consecutive_errors() -> None:
    """A turn with a success in between resets the count: errors must be consecutive [S002]."""
    bad = tool_call("add", {"a": "x", "b": 1})
    good = tool_call("add", {"a": 1, "b": 1})
    agent, _, _ = make_agent([bad, bad, good, bad, bad, text("ok")], tools=[add])
    assert agent.run_sync("hi").output == "ok"


# -- step limit [S000 §6] -------------------------------------------------------------------
def test_step_limit_makes_a_tools_off_summary_call_on_a_copy() -> None:
    """At max_steps one summary call runs with tools off and tool_choice none, on a
    temporary copy of the history: the run's own history does not gain the prompt [S000 §6]."""
    policy = Policy(max_steps=2)
    turns = [tool_call("add", {"a": 1, "b": 1}), tool_call("add", {"a": 2, "b": 2}), text("sum")]
    agent, model, _ = make_agent(turns, tools=[add], policy=policy)
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason) == ("sum", StopReason.MAX_STEPS)
    summary = model.requests[-1]
    assert summary.tools == () and summary.tool_choice == "none"
    assert summary.messages[-1].text == SUMMARY_PROMPT
    assert all(m.text != SUMMARY_PROMPT for m in result.messages)


def test_step_limit_summary_failure_falls_back_to_fixed_text() -> None:
    """When the summary call fails, the output is a fixed fallback text [S000 §6]."""
    policy = Policy(max_steps=1)
    agent, _, _ = make_agent(
        [tool_call("add", {"a": 1, "b": 1}), fail()], tools=[add], policy=policy
    )
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason, result.state) == (
        SUMMARY_FALLBACK,
        StopReason.MAX_STEPS,
        State.DONE,
    )


# -- done tool and verification [S000 §2.2, §4.4; S002] ----------------------------------------
def test_task_complete_ends_the_run_and_keeps_the_result_message() -> None:
    """A tool raising TaskComplete ends the run with its message; its result stays in the
    history [S000 §4.4]."""

    @tool
    def finish_task(summary: str) -> str:
        """Finish."""
        raise TaskComplete(f"final: {summary}")

    agent, model, _ = make_agent([tool_call("finish_task", {"summary": "x"})], tools=[finish_task])
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason) == ("final: x", StopReason.DONE_TOOL)
    assert result.messages[-1].role is Role.TOOL
    assert len(model.requests) == 1


def test_calls_after_the_call_that_completed_the_task_get_a_not_run_result() -> None:
    """Calls after the one whose tool completed the task (raised TaskComplete) are not run but
    still get a result, so the history stays valid [S000 §4.4, DESIGN §8.5]."""

    @tool
    def submit(message: str) -> str:
        """Submit the final answer."""
        raise TaskComplete(message)

    policy = Policy(parallel_tool_calls=False)
    turn = tool_calls(("submit", {"message": "bye"}), ("add", {"a": 1, "b": 2}))
    agent, _, _ = make_agent([turn], tools=[submit, add], policy=policy)
    result = agent.run_sync("hi")
    assert result.output == "bye" and result.tool_executions == 1
    contents = [m.tool_results[0].content for m in result.messages if m.role is Role.TOOL]
    assert contents[1].startswith("Error: not run")


def test_require_done_tool_makes_a_no_tool_answer_non_terminal() -> None:
    """With require_done_tool, a no-tool answer is not the end: the model is reminded and
    the run goes on until `done` is called [S000 §2.2]."""
    policy = Policy(require_done_tool=True)
    agent, model, _ = make_agent(
        [text("thinking"), tool_call("done", {"message": "42"})], policy=policy
    )
    result = agent.run_sync("hi")
    assert (result.output, result.stop_reason) == ("42", StopReason.DONE_TOOL)
    assert model.requests[1].messages[-1].text == FEEDBACK_PREFIX + DONE_REMINDER
    assert "done" in [t.name for t in model.requests[0].tools]


def test_verifier_feedback_is_injected_as_a_user_message() -> None:
    """A rejecting verifier's feedback goes back to the model as a user message; the next
    answer is verified again [S002]."""
    answers = iter([Verdict.reject("show your work"), Verdict.accept()])
    seen: list[str] = []

    def verifier(*, output: str, run_state: object) -> Verdict:
        seen.append(output)
        return next(answers)

    agent, model, _ = make_agent([text("4"), text("2+2=4")], verifier=verifier)
    result = agent.run_sync("2+2?")
    assert (result.output, result.stop_reason) == ("2+2=4", StopReason.COMPLETED)
    assert seen == ["4", "2+2=4"]
    injected = model.requests[1].messages[-1]
    assert injected.role is Role.USER and injected.text == FEEDBACK_PREFIX + "show your work"


def test_verifications_are_bounded() -> None:
    """A verifier that always rejects ends the run unverified after max_verifications [S002]."""

    async def never(*, output: str, run_state: object) -> bool:
        return False

    policy = Policy(max_verifications=2)
    agent, model, _ = make_agent(
        [text("a"), text("b"), text("c"), text("d")], verifier=never, policy=policy
    )
    result = agent.run_sync("hi")
    assert (result.stop_reason, result.output) == (StopReason.UNVERIFIED, "c")
    assert len(model.requests) == 3


# -- cancellation, deadline, usage, stop conditions [S000 §2.3, S001 §10, S002] ----------------
def test_cancel_before_the_run_starts_runs_nothing() -> None:
    """A handle cancelled before the run: no model call, aborted/cancelled [S000 §2.3]."""
    agent, model, _ = make_agent([text("never")])
    handle = RunHandle()
    handle.cancel()
    result = agent.run_sync("hi", handle=handle)
    assert (result.state, result.stop_reason, model.requests) == (
        State.ABORTED,
        StopReason.CANCELLED,
        [],
    )


def test_cancel_interrupts_an_in_flight_tool_and_no_final_is_emitted() -> None:
    """Cancelling from another task interrupts the running tool; its call gets a result,
    no further model call or tool starts, and the terminal event is `aborted`, not `final`
    [S000 §2.3]."""
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Wait."""
        started.set()
        await asyncio.sleep(30)
        return "late"

    agent, model, _ = make_agent([tool_call("slow"), text("never")], tools=[slow])
    handle = RunHandle()
    events: list[str] = []

    async def main() -> None:
        async def consume() -> None:
            async for event in agent.run_stream("hi", handle=handle):
                events.append(event.type)

        task = asyncio.create_task(consume())
        await started.wait()
        handle.cancel()
        await asyncio.wait_for(task, 5)

    asyncio.run(main())
    result = handle.result
    assert result is not None
    assert (result.state, result.stop_reason) == (State.ABORTED, StopReason.CANCELLED)
    assert len(model.requests) == 1
    assert events[-1] == "aborted" and "final" not in events
    assert result.messages[-1].tool_results[0].content.startswith("Error: interrupted (cancel)")


def test_cancelling_the_task_records_the_ending_and_propagates() -> None:
    """Cancelling the asyncio task running the agent raises CancelledError to the caller and
    leaves the run state aborted/cancelled with a valid history [S000 §2.3]."""

    @tool
    async def slow() -> str:
        """Wait."""
        await asyncio.sleep(30)
        return "late"

    agent, _, _ = make_agent([tool_call("slow")], tools=[slow])
    handle = RunHandle()

    async def main() -> None:
        task = asyncio.create_task(agent.run("hi", handle=handle))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    state = handle._rs
    assert state is not None
    assert (state.state, state.stop_reason) == (State.ABORTED, StopReason.CANCELLED)
    assert state.messages[-1].role is Role.TOOL


def test_wall_clock_deadline_finalizes_with_timeout() -> None:
    """Past max_wall_clock_s the run goes to finalizing with `timeout` [S001 §10]."""
    policy = Policy(max_wall_clock_s=5, retry=RetryPolicy(base_delay_s=4, max_delay_s=4, jitter=0))
    agent, _, _ = make_agent([fail(), fail(), text("never")], policy=policy)
    result = agent.run_sync("hi")
    assert (result.state, result.stop_reason) == (State.DONE, StopReason.TIMEOUT)


def test_deadline_interrupts_a_hanging_tool() -> None:
    """The real-time deadline cuts a hanging async tool short; the run finalizes with
    `timeout` and the call keeps a result [S001 §10]."""

    @tool
    async def hang() -> str:
        """Hang."""
        await asyncio.sleep(30)
        return "late"

    agent, _, _ = make_agent(
        [tool_call("hang")], tools=[hang], policy=Policy(max_wall_clock_s=0.05)
    )
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.TIMEOUT
    assert result.messages[-1].role is Role.TOOL


def test_usage_limit_finalizes_with_usage_limit() -> None:
    """Reaching a usage limit stops the run between calls with `usage_limit` [S002]."""
    policy = Policy(usage_limits=UsageLimits(max_total_tokens=20))
    turns = [tool_call("add", {"a": 1, "b": 1})] * 3 + [text("never")]
    agent, model, _ = make_agent(turns, tools=[add], policy=policy)
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.USAGE_LIMIT
    assert len(model.requests) == 2


def test_stop_condition_finalizes_with_stop_condition() -> None:
    """A user stop condition evaluated between iterations stops the run [S002]."""
    turns = [tool_call("add", {"a": 1, "b": 1})] * 5
    agent, model, _ = make_agent(
        turns, tools=[add], stop_conditions=[lambda state: state.counters.steps >= 2]
    )
    result = agent.run_sync("hi")
    assert result.stop_reason is StopReason.STOP_CONDITION
    assert len(model.requests) == 2


# -- events [S000 §3.1] ------------------------------------------------------------------------
def test_events_follow_the_seed_order() -> None:
    """Per iteration: reasoning, text, then per tool call step_start, tool_call, tool_result,
    step_complete; no text for the terminal no-tool answer; exactly one final, last
    [S000 §3.1]."""
    turns = [
        tool_calls(("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4}), text="Let me add."),
        text("3 and 7", reasoning="easy"),
    ]
    agent, _, _ = make_agent(turns, tools=[add], policy=Policy(parallel_tool_calls=False))
    events, _ = stream(agent)
    kinds = [
        e.type
        for e in events
        if e.type not in ("state_changed", "model_request", "model_response", "usage")
        and not e.type.endswith("_delta")
    ]
    assert kinds == [
        "text",
        "step_start",
        "tool_call",
        "tool_result",
        "step_complete",
        "step_start",
        "tool_call",
        "tool_result",
        "step_complete",
        "reasoning",
        "final",
    ]
    assert events[-1].type == "final" and events[-1].output == "3 and 7"  # type: ignore[union-attr]


def test_every_move_emits_state_changed() -> None:
    """Every move of the trace has its state_changed event, in order (DESIGN §7)."""
    agent, _, _ = make_agent([tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add])
    events, result = stream(agent)
    changes = [(e.source, e.outcome, e.dest) for e in events if e.type == "state_changed"]  # type: ignore[union-attr]
    assert changes == [(m.source, m.outcome, m.dest) for m in result.trace]


def test_streaming_yields_deltas_before_the_response() -> None:
    """run_stream streams a streaming model: text deltas arrive before the response."""
    agent, _, _ = make_agent([text("a fairly long answer")])
    events, result = stream(agent)
    deltas = [e.text for e in events if e.type == "text_delta"]  # type: ignore[union-attr]
    assert "".join(deltas) == result.output
    kinds = [e.type for e in events]
    assert kinds.index("text_delta") < kinds.index("model_response")


def test_closing_the_stream_mid_answer_closes_the_models_stream() -> None:
    """A listener that stops reading mid-answer and closes the stream closes the model's stream
    too, and that stream's cleanup may await (an HTTP response's does)."""
    closed: list[str] = []

    class CleanupAwaits(ScriptedModel):
        async def stream(self, request: ModelRequest) -> Any:
            try:
                async for item in super().stream(request):
                    yield item
            finally:
                await asyncio.sleep(0)
                closed.append("model stream")

    agent = Agent(CleanupAwaits([text("a fairly long answer")], chunk_size=2))

    async def main() -> list[str]:
        events = agent.run_stream("hi")
        seen = []
        async for event in events:
            seen.append(event.type)
            if event.type == "text_delta":
                break
        await events.aclose()
        assert closed == ["model stream"], "closed with the listener's stream, not later"
        return seen

    seen = asyncio.run(main())
    assert seen[-1] == "text_delta"
    assert closed == ["model stream"]


# -- bad input -------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["", "   ", None, 42])
def test_empty_or_non_string_input_is_refused(prompt: object) -> None:
    """Empty or non-string input raises InvalidInputError before anything runs."""
    from fsm_agent import InvalidInputError

    agent, model, _ = make_agent([text("x")])
    with pytest.raises(InvalidInputError):
        agent.run_sync(prompt)  # type: ignore[arg-type]
    assert model.requests == []


def test_an_object_that_is_not_a_model_is_refused() -> None:
    """Passing something that is not a model fails at construction with a clear message."""
    from fsm_agent import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"must implement fsm_agent\.Model"):
        Agent("gpt-4o")  # type: ignore[arg-type]


def test_run_sync_inside_a_running_loop_says_to_await() -> None:
    """run_sync inside an event loop raises a ConfigurationError that says to await run()."""
    from fsm_agent import ConfigurationError

    agent, _, _ = make_agent([text("x")])

    async def main() -> None:
        with pytest.raises(ConfigurationError, match=r"await agent\.run"):
            agent.run_sync("hi")

    asyncio.run(main())


def test_history_continues_a_conversation_with_one_system_prompt() -> None:
    """history= continues an earlier run; the system prompt stays first and once."""
    agent, model, _ = make_agent([text("one"), text("two")], system_prompt="sys")
    first = agent.run_sync("q1")
    agent.run_sync("q2", history=first.messages)
    messages = model.requests[1].messages
    assert [m.role for m in messages] == [
        Role.SYSTEM,
        Role.USER,
        Role.ASSISTANT,
        Role.USER,
    ]
    assert isinstance(messages[0], Message)


def test_wall_clock_budget_counts_active_time_over_resumes() -> None:
    """max_wall_clock_s bounds the time a run spends running, summed over resumes: the hours
    a suspended run waits for a human do not count, and a resume does not refill the budget."""
    clock = VirtualClock()

    @tool(needs_approval=True)
    async def slow(seconds: float) -> str:
        """Work for ``seconds``."""
        await clock.sleep(seconds)
        return "worked"

    model = ScriptedModel(
        [tool_call("slow", {"seconds": 0.6}), tool_call("slow", {"seconds": 0.6}), text("done")]
    )
    agent = Agent(
        model,
        tools=[slow],
        policy=Policy(max_wall_clock_s=1.0),
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )

    async def main() -> RunResult:
        result = await agent.run("Work twice.")
        while result.resume_handle is not None:
            clock.time += 3600.0  # the human answers an hour later
            decisions = {call.id: True for call in result.pending}
            result = await agent.resume(result.resume_handle, decisions)
        return result

    result = asyncio.run(main())
    assert result.stop_reason is StopReason.TIMEOUT
    assert result.tool_executions == 2  # 1.2 s of work: the deadline falls before the answer
    assert result.run_state is not None
    assert result.run_state.active_s == pytest.approx(1.2)


@pytest.mark.parametrize(
    "turns",
    [
        [tool_call("add", {"a": 1, "b": 2}), text("3")],  # done
        [fail(AuthenticationError("bad key"))],  # aborted, with the error
    ],
)
def test_result_of_a_run_state_equals_the_constructed_result(turns: list[Any]) -> None:
    """RunResult.of (which fills the slots directly) gives what the dataclass's own
    constructor gives from the same run state, field for field."""
    agent, _, _ = make_agent(turns, tools=[add])
    result = agent.run_sync("go")
    rs = result.run_state
    assert rs is not None
    expected = RunResult(
        run_id=rs.run_id,
        output=rs.output,
        stop_reason=result.stop_reason,
        state=rs.state,
        usage=rs.usage,
        messages=tuple(rs.messages),
        trace=tuple(rs.trace),
        counters=rs.counters,
        model_calls=rs.model_calls,
        tool_executions=rs.tool_executions,
        error=result.error,
        pending=(),
        run_state=rs,
        resume_handle=None,
    )
    assert RunResult.of(rs, result.error) == expected
    assert result == expected
    assert (result.error is None) == (rs.state is State.DONE)


def test_a_result_prints_as_one_short_line() -> None:
    """A RunResult's repr summarises it (history and trace by their lengths), however long the
    run: results land in logs, and asyncio formats the result of every task it ends."""
    turns = [tool_call("add", {"a": i, "b": 1}) for i in range(30)] + [text("x" * 500)]
    agent, _, _ = make_agent(turns, tools=[add], policy=Policy(max_steps=50))
    result = agent.run_sync("count")
    shown = repr(result)
    assert shown.startswith("RunResult(run_id=")
    assert "state=done" in shown and "stop_reason=completed" in shown
    assert f"messages={len(result.messages)}" in shown and f"moves={len(result.trace)}" in shown
    assert len(shown) < 400


def test_with_effects_routes_model_and_tools_through_adapters() -> None:
    """with_effects gives a copy whose model calls and tool runs go through the adapters (as a
    durable-execution engine's steps do); the original agent is untouched."""
    seen: list[str] = []

    class Recording:
        def __init__(self, inner: ScriptedModel) -> None:
            self.inner = inner

        @property
        def name(self) -> str:
            return "recording"

        async def complete(self, request: ModelRequest) -> ModelResponse:
            seen.append("model")
            return await self.inner.complete(request)

    class Logged(Tool):
        def __init__(self, inner: Tool) -> None:
            super().__init__(inner.fn, name=inner.name)

        async def execute(self, call: ToolCall, context: Any, **kw: Any) -> Any:
            seen.append(f"tool {call.name}")
            return await super().execute(call, context, **kw)

    agent, model, _ = make_agent([tool_call("add", {"a": 1, "b": 2}), text("3")], tools=[add])
    adapted = agent.with_effects(model=Recording(model), wrap_tool=Logged)
    result = adapted.run_sync("1 + 2?")
    assert result.output == "3"
    assert seen == ["model", "tool add", "model"]
    assert agent.model is model and not isinstance(agent.tools["add"], Logged)
    assert adapted.tools.definitions == agent.tools.definitions
