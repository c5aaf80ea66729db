"""Context budget and compaction: strategies, their guarantees, and the machine's paths [S001 §6,
S004 Tool Boundary Safety]. Property tests check DESIGN §8 invariant 5 (well-formed history:
each call has exactly one result, in order; no orphan; the system prompt first and once)."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fsm_agent import (
    Agent,
    CompactionSettings,
    ContextWindowExceededError,
    Message,
    ModelRequest,
    ModelResponse,
    Outcome,
    Policy,
    PolicyError,
    ProviderServerError,
    Role,
    State,
    StopReason,
    ToolCall,
    ToolResult,
    Usage,
    tool,
)
from fsm_agent.compaction import (
    SUMMARY_HEADER,
    CompactionJob,
    CompactionResult,
    CompactionStrategy,
    Compactor,
    SlidingWindow,
    Summarize,
    Thread,
    TrimToolOutputs,
    estimate_tokens,
    protected_layout,
)
from fsm_agent.events import CompactedEvent, Event
from fsm_agent.kernel.agent import RunHandle, RunResult
from fsm_agent.models import Model
from fsm_agent.testing import ScriptedModel, fail, finish, text, tool_call
from helpers import Held

NO_INPUT = Usage(requests=1, output_tokens=5)  # no reported input tokens: the estimate stands
# A length finish whose output filled the context (the policy names a 100,000-token window):
# context pressure, which compaction handles, not an answer cut by the output cap.
FILLED = Usage(requests=1, output_tokens=100_000)
WINDOW = CompactionSettings(context_window=100_000)


# -- helpers ---------------------------------------------------------------------------------
def assert_well_formed(messages: Sequence[Message]) -> None:
    """Each call has exactly one result, right after it and in order; no orphan result; the
    system prompt at most once, first."""
    systems = [i for i, m in enumerate(messages) if m.role is Role.SYSTEM]
    assert systems in ([], [0]), f"system messages at {systems}"
    i = 0
    while i < len(messages):
        message = messages[i]
        assert message.role is not Role.TOOL, f"orphan tool result at {i}"
        ids = [c.id for c in message.tool_calls]
        i += 1
        results: list[str] = []
        while i < len(messages) and messages[i].role is Role.TOOL:
            results += [r.call_id for r in messages[i].tool_results]
            i += 1
        assert results == ids, f"calls {ids} answered by {results}"


def newest_user(messages: Sequence[Message]) -> Message | None:
    """The last user message."""
    return next((m for m in reversed(messages) if m.role is Role.USER), None)


def first_user(messages: Sequence[Message]) -> Message | None:
    """The first user message."""
    return next((m for m in messages if m.role is Role.USER), None)


def blob(size: int, seed: int) -> str:
    """``size`` characters, distinct per ``seed``."""
    return (f"{seed}:" + "x" * size)[: max(size, len(str(seed)) + 1)]


@st.composite
def histories(draw: st.DrawFn, *, system: bool | None = None) -> list[Message]:
    """A valid conversation: optional system prompt, a user message, then turns of user text,
    assistant text, or an assistant call turn with all of its results."""
    messages: list[Message] = []
    if draw(st.booleans()) if system is None else system:
        messages.append(Message.system(blob(draw(st.integers(0, 400)), 0)))
    messages.append(Message.user(blob(draw(st.integers(1, 400)), 1)))
    sizes = st.integers(0, 1_200)
    for turn in range(draw(st.integers(0, 30))):
        kind = draw(st.sampled_from(["user", "assistant", "calls", "calls", "calls"]))
        if kind == "user":
            messages.append(Message.user(blob(draw(sizes), turn)))
        elif kind == "assistant":
            messages.append(Message.assistant(blob(draw(sizes), turn)))
        else:
            count = draw(st.integers(1, 3))
            calls = [
                ToolCall.create(f"c{turn}_{k}", "look", {"q": blob(draw(sizes) // 8, k)})
                for k in range(count)
            ]
            messages.append(Message.assistant(draw(st.sampled_from(["", "thinking"])), calls))
            messages += [
                Message.tool(ToolResult(call_id=c.id, name=c.name, content=blob(draw(sizes), turn)))
                for c in calls
            ]
    return messages


def tokens(messages: Sequence[Message]) -> int:
    """The default estimate of ``messages``."""
    return sum(estimate_tokens(m) for m in messages)


def summary_model(error: Exception | None = None) -> ScriptedModel:
    """A model whose one call answers with a short summary, or raises ``error``."""
    return ScriptedModel([fail(error) if error else text("they looked things up", usage=NO_INPUT)])


def job_with(
    model: ScriptedModel, target: int, *, max_messages: int | None = None, keep_recent: int = 2
) -> CompactionJob:
    """A job whose model call goes to ``model``."""

    async def complete(request: ModelRequest, override: Model | None = None) -> ModelResponse:
        return await model.complete(request)

    return CompactionJob(target, max_messages, keep_recent, complete=complete)


def compact(
    messages: Sequence[Message], job: CompactionJob, compactor: Compactor
) -> CompactionResult:
    """Run one compaction to completion."""
    return asyncio.run(compactor.compact(compactor.count(messages), job))


# -- the budget ------------------------------------------------------------------------------
def test_estimate_counts_text_calls_results_and_images() -> None:
    """The estimate grows with text, call arguments and results, and charges images a flat fee."""
    small = estimate_tokens(Message.user("hi"))
    assert estimate_tokens(Message.user("hi" * 400)) > small + 150
    call = ToolCall.create("c", "look", {"q": "x" * 400})
    assert estimate_tokens(Message.assistant("", [call])) > 100
    from fsm_agent import ImagePart

    assert estimate_tokens(Message.user("hi", ImagePart(url="u"))) >= small + 768


def test_run_keeps_the_context_count_incrementally() -> None:
    """The run's token count equals the tokenizer's sum over the thread at the end of a run."""
    model = ScriptedModel([tool_call("look", {"q": 1}, usage=NO_INPUT), text("ok", usage=NO_INPUT)])
    agent = Agent(model, tools=[look], system_prompt="sys")
    result = agent.run_sync("go")
    assert result.run_state is not None
    assert result.run_state.context_tokens == tokens(result.messages)


def test_a_custom_tokenizer_counts_every_message() -> None:
    """A tokenizer given to the Compactor counts every message the run appends."""
    agent = Agent(
        ScriptedModel([text("ok", usage=NO_INPUT)]),
        system_prompt="sys",
        compactor=Compactor(tokenizer=lambda message: 100),
    )
    result = agent.run_sync("go")
    assert result.run_state is not None
    assert result.run_state.context_tokens == 100 * len(result.messages) == 300


def test_reported_input_tokens_replace_the_estimate() -> None:
    """After a call, the provider's input token count replaces the estimate of what was sent."""
    reported = Usage(requests=1, input_tokens=5_000, output_tokens=5)
    agent = Agent(ScriptedModel([text("ok", usage=reported)]), system_prompt="sys")
    result = agent.run_sync("go")
    assert result.run_state is not None
    assert result.run_state.context_tokens == 5_000 + estimate_tokens(result.messages[-1])


def test_reported_usage_can_be_ignored() -> None:
    """With use_reported_usage off, the estimate stands whatever the provider reports."""
    reported = Usage(requests=1, input_tokens=5_000, output_tokens=5)
    policy = Policy(compaction=CompactionSettings(use_reported_usage=False))
    agent = Agent(ScriptedModel([text("ok", usage=reported)]), system_prompt="s", policy=policy)
    result = agent.run_sync("go")
    assert result.run_state is not None
    assert result.run_state.context_tokens == tokens(result.messages)


def test_reported_usage_triggers_compaction_at_the_next_loop_entry() -> None:
    """A provider count above the budget makes the next loop entry compact."""
    over = Usage(requests=1, input_tokens=950, output_tokens=5)
    model = ScriptedModel(
        [
            tool_call("ping", usage=NO_INPUT),
            tool_call("ping", usage=NO_INPUT),
            tool_call("ping", usage=over),
            text("ok", usage=NO_INPUT),
        ],
        context_window=1_000,
    )
    events, result = stream(Agent(model, tools=[ping], system_prompt="sys"), "go")
    compacted = [e for e in events if isinstance(e, CompactedEvent)]
    assert len(compacted) == 1
    assert compacted[0].tokens_before > 800 >= compacted[0].tokens_after
    assert result.stop_reason is StopReason.COMPLETED


# -- settings --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "strategies",
    [(), ("summarize",), ("sliding_window", "summarize"), ("sliding_window", "sliding_window")],
)
def test_incoherent_strategy_lists_are_policy_errors(strategies: tuple[str, ...]) -> None:
    """Empty, repeated, or a summary without a window after it: a PolicyError."""
    with pytest.raises(PolicyError):
        CompactionSettings(strategies=strategies)


def test_settings_build_the_named_strategies_in_order() -> None:
    """Compactor.from_settings builds the built-in strategies the settings name, in order."""
    settings = CompactionSettings(
        strategies=("summarize", "trim_tool_outputs", "sliding_window"),
        summary_max_tokens=99,
        trim_tool_outputs_over=7,
    )
    compactor = Compactor.from_settings(settings)
    assert [s.name for s in compactor.strategies] == [
        "summarize",
        "trim_tool_outputs",
        "sliding_window",
    ]
    summarize, trim, _ = compactor.strategies
    assert isinstance(summarize, Summarize)
    assert summarize.max_tokens == 99
    assert isinstance(trim, TrimToolOutputs)
    assert trim.over == 7


# -- strategies, one by one ------------------------------------------------------------------
def call_turn(index: int, size: int = 2_000) -> list[Message]:
    """An assistant call and its result of ``size`` characters."""
    call = ToolCall.create(f"c{index}", "look", {"q": index})
    result = ToolResult(call_id=call.id, name="look", content=blob(size, index))
    return [Message.assistant("", [call]), Message.tool(result)]


def long_history(turns: int = 10, size: int = 2_000) -> list[Message]:
    """System prompt, task, then ``turns`` call turns."""
    messages = [Message.system("sys"), Message.user("task")]
    for index in range(turns):
        messages += call_turn(index, size)
    return messages


def test_sliding_window_keeps_head_tail_and_groups() -> None:
    """The window drops the oldest call groups whole, keeping system, task and recent turns."""
    history = long_history()
    result = compact(history, CompactionJob(target=1_500), Compactor([SlidingWindow()]))
    assert result.strategy == "sliding_window"
    assert result.messages[:2] == tuple(history[:2])
    assert result.messages[-2:] == tuple(history[-2:])
    assert result.removed % 2 == 0
    assert result.tokens_after <= 1_500
    assert_well_formed(result.messages)


def test_sliding_window_by_messages() -> None:
    """With a message cap and no token goal, the window drops groups down to the cap."""
    history = long_history()
    job = CompactionJob(target=None, max_messages=8)
    result = compact(history, job, Compactor([SlidingWindow()]))
    assert len(result.messages) <= 8
    assert result.messages[:2] == tuple(history[:2])
    assert_well_formed(result.messages)


def test_sliding_window_keeps_the_newest_user_message_in_place() -> None:
    """A user message in the middle (the newest) survives while groups around it go."""
    history = (
        long_history(4)
        + [Message.user("new question")]
        + [m for i in range(4, 8) for m in call_turn(i)]
    )
    result = compact(history, CompactionJob(target=10), Compactor([SlidingWindow()]))
    assert Message.user("new question") in result.messages
    assert_well_formed(result.messages)
    assert protected_layout(result.messages, 2)[2] == 2  # right after the head now


def test_nothing_removable_means_no_change() -> None:
    """System, task and the recent turns alone: the window cannot help and says so."""
    history = [Message.system("sys"), Message.user("x" * 10_000), *call_turn(0)]
    result = compact(history, CompactionJob(target=10), Compactor([SlidingWindow()]))
    assert not result.changed
    assert result.messages == tuple(history)


def test_trim_tool_outputs_keeps_ids_and_marks_the_output() -> None:
    """Trimming replaces old long outputs with the marker; ids, order and recent ones stay."""
    history = long_history(5)
    result = compact(history, CompactionJob(target=400), Compactor([TrimToolOutputs(over=100)]))
    assert result.strategy == "trim_tool_outputs"
    assert result.removed == 0
    assert len(result.messages) == len(history)
    trimmed = [r for m in result.messages for r in m.tool_results if "trimmed" in r.content]
    assert trimmed
    assert trimmed[0].content.startswith("[output of look trimmed")
    assert result.messages[-1] == history[-1]  # the newest result is kept verbatim
    assert_well_formed(result.messages)


def test_trimming_twice_changes_nothing_more() -> None:
    """An output already trimmed to the marker is not trimmed again."""
    compactor = Compactor([TrimToolOutputs(over=10)])
    once = compact(long_history(5), CompactionJob(target=1), compactor)
    twice = compact(once.messages, CompactionJob(target=1), compactor)
    assert once.changed
    assert not twice.changed


def test_summarize_replaces_the_oldest_part_and_keeps_recent_turns() -> None:
    """A summary message replaces the oldest groups; the recent turns stay verbatim."""
    history = long_history(10)
    model = summary_model()
    result = compact(history, job_with(model, target=2_000), Compactor([Summarize()]))
    assert result.strategy == "summarize"
    summary = result.messages[2]
    assert summary.role is Role.ASSISTANT
    assert summary.text.startswith(SUMMARY_HEADER)
    assert result.messages[-2:] == tuple(history[-2:])
    assert result.messages[:2] == tuple(history[:2])
    assert_well_formed(result.messages)
    (request,) = model.requests
    assert request.tools == ()
    assert request.max_tokens == 1024
    assert "assistant called look" in request.messages[0].text


def test_failed_summary_falls_back_to_the_window() -> None:
    """A summary call that fails is recorded and the sliding window shortens the history."""
    model = summary_model(ProviderServerError("down", status_code=503))
    compactor = Compactor([Summarize(), SlidingWindow()])
    result = compact(long_history(10), job_with(model, target=2_000), compactor)
    assert result.strategy == "sliding_window"
    assert len(result.errors) == 1
    assert "summarize: ProviderServerError" in result.errors[0]
    assert result.tokens_after <= 2_000


def test_summarize_without_a_model_call_does_nothing() -> None:
    """A job without a model call leaves summarisation out."""
    result = compact(long_history(10), CompactionJob(target=100), Compactor([Summarize()]))
    assert not result.changed


def test_compactor_needs_a_strategy() -> None:
    """A Compactor with no strategy is refused."""
    with pytest.raises(ValueError, match="at least one"):
        Compactor([])


def test_thread_sizes_must_match() -> None:
    """A Thread with a size missing is refused."""
    with pytest.raises(ValueError, match="one size per message"):
        Thread((Message.user("a"),), ())


# -- properties ------------------------------------------------------------------------------
strategy_lists = st.sampled_from(
    [
        ("window",),
        ("trim", "window"),
        ("summary", "window"),
        ("summary_fails", "window"),
        ("trim", "summary", "window"),
    ]
)


@given(
    history=histories(),
    target=st.integers(0, 6_000),
    max_messages=st.none() | st.integers(2, 40),
    keep_recent=st.integers(1, 6),
    names=strategy_lists,
)
def test_compaction_never_breaks_a_conversation(
    history: list[Message],
    target: int,
    max_messages: int | None,
    keep_recent: int,
    names: tuple[str, ...],
) -> None:
    """Invariant 5 after any compaction: every call keeps exactly one result in order, no
    orphan, the system prompt first and once, the first and newest user messages kept; the
    result fits the goal unless nothing removable is left."""
    model = summary_model(ProviderServerError("x") if "summary_fails" in names else None)
    built: dict[str, CompactionStrategy] = {
        "window": SlidingWindow(),
        "trim": TrimToolOutputs(over=50),
        "summary": Summarize(),
        "summary_fails": Summarize(),
    }
    compactor = Compactor([built[n] for n in names])
    job = job_with(model, target=target, max_messages=max_messages, keep_recent=keep_recent)
    result = compact(history, job, compactor)
    kept = result.messages
    assert_well_formed(kept)
    assert (kept[0].role is Role.SYSTEM) == (history[0].role is Role.SYSTEM)
    if history[0].role is Role.SYSTEM:
        assert kept[0] == history[0]
    assert first_user(kept) == first_user(history)
    assert newest_user(history) in kept
    assert result.tokens_after == tokens(kept) <= result.tokens_before
    assert result.removed == len(history) - len(kept)
    if not job.fits(result.tokens_after, len(kept)):
        head, tail, newest = protected_layout(kept, keep_recent)
        removable = [i for i in range(head, tail) if i != newest]
        assert removable == [], "the window stopped while it could still remove something"


@given(history=histories(system=False), window=st.integers(200, 8_000), forced=st.booleans())
def test_machine_compaction_keeps_requests_well_formed_and_within_budget(
    history: list[Message], window: int, forced: bool
) -> None:
    """Through the machine: the first request after loop-entry (or forced) compaction is well
    formed, keeps the system prompt, the first and newest user turns, and fits the budget,
    unless the run reported cannot_compact."""
    turns = [finish("length", usage=NO_INPUT)] if forced else []
    model = ScriptedModel([*turns, text("ok", usage=NO_INPUT)], context_window=window)
    agent = Agent(model, system_prompt="sys", policy=Policy(max_compaction_attempts=5))
    result = agent.run_sync("newest question", history=history)
    outcomes = [m.outcome for m in result.trace if m.source is State.COMPACTING]
    if Outcome.CANNOT_COMPACT in outcomes:
        assert outcomes[-1] is Outcome.CANNOT_COMPACT
        assert result.stop_reason is StopReason.CONTEXT_LIMIT
        return
    assert result.stop_reason is StopReason.COMPLETED
    last = model.requests[-1].messages
    assert_well_formed(last)
    assert last[0] == Message.system("sys")
    assert first_user(last) == first_user(history)
    assert newest_user(last) == Message.user("newest question")
    assert tokens(last) <= int(0.8 * window)


# -- the machine -----------------------------------------------------------------------------
@tool
def look(q: int) -> str:
    """Look something up."""
    return "y" * 1_600


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def stream(
    agent: Agent[None], prompt: str, history: Sequence[Message] = ()
) -> tuple[list[Event], RunResult]:
    """Every event of a run, and its result."""
    handle = RunHandle()

    async def go() -> list[Event]:
        return [e async for e in agent.run_stream(prompt, history=history, handle=handle)]

    events = asyncio.run(go())
    assert handle.result is not None
    return events, handle.result


def looking(steps: int, window: int | None, **kwargs: object) -> ScriptedModel:
    """A model that calls ``look`` ``steps`` times and then answers."""
    turns = [tool_call("look", {"q": i}, usage=NO_INPUT) for i in range(steps)]
    return ScriptedModel([*turns, text("done", usage=NO_INPUT)], context_window=window)


def test_loop_entry_compaction_keeps_a_long_run_going() -> None:
    """Over budget at loop entry: compaction runs (not forced) as often as the run needs,
    since a turn that fits resets the attempts, and the run completes."""
    agent = Agent(looking(12, 2_000), tools=[look], policy=Policy(max_compaction_attempts=1))
    events, result = stream(agent, "go")
    compacted = [e for e in events if isinstance(e, CompactedEvent)]
    assert compacted
    assert not any(e.forced for e in compacted)
    assert all(e.tokens_after <= 1_600 < e.tokens_before for e in compacted)
    assert len(compacted) > 1
    assert result.stop_reason is StopReason.COMPLETED
    assert_well_formed(result.messages)


def test_history_over_budget_is_compacted_before_the_first_call() -> None:
    """A run handed a history over budget compacts it before calling the model."""
    model = ScriptedModel([text("ok", usage=NO_INPUT)], context_window=2_000)
    agent = Agent(model, system_prompt="sys")
    result = agent.run_sync("next", history=long_history(10)[1:])
    assert [m.outcome for m in result.trace[:2]] == [Outcome.START, Outcome.COMPACTED]
    assert tokens(model.requests[0].messages) <= 1_600
    assert result.ok


@pytest.mark.parametrize(
    "overflow",
    [finish("length", usage=FILLED), fail(ContextWindowExceededError("prompt is too long"))],
    ids=["length", "context_window_exceeded"],
)
def test_forced_compaction(overflow: object) -> None:
    """A length finish near the budget or a context-window error forces a compaction, then the
    call again."""
    model = ScriptedModel([overflow, text("ok", usage=NO_INPUT)])  # type: ignore[list-item]
    agent = Agent(model, system_prompt="sys", policy=Policy(compaction=WINDOW))
    events, result = stream(agent, "next", history=long_history(6)[1:])
    (compacted,) = [e for e in events if isinstance(e, CompactedEvent)]
    assert compacted.forced
    assert compacted.tokens_after <= compacted.tokens_before // 2
    assert result.stop_reason is StopReason.COMPLETED
    assert [m.counters.compactions for m in result.trace if m.outcome is Outcome.COMPACTED] == [1]
    assert result.counters.compactions == 0  # the turn that fit reset the attempts
    assert tokens(model.requests[1].messages) <= tokens(model.requests[0].messages) // 2


def test_cannot_compact_once_attempts_are_spent() -> None:
    """Over budget with no attempt left: cannot_compact, finalizing, context_limit."""
    model = ScriptedModel([], context_window=1_000)
    agent = Agent(model, system_prompt="s", policy=Policy(max_compaction_attempts=0))
    result = agent.run_sync("next", history=long_history(6)[1:])
    assert result.trace[1].outcome is Outcome.CANNOT_COMPACT
    assert result.stop_reason is StopReason.CONTEXT_LIMIT
    assert result.ok
    assert result.output == "The conversation no longer fits the model's context window."
    assert model.requests == []


def test_cannot_compact_when_nothing_can_be_removed() -> None:
    """A prompt alone over budget: nothing removable, so context_limit without a model call."""
    model = ScriptedModel([], context_window=1_000)
    result = Agent(model, system_prompt="s").run_sync("x" * 10_000)
    assert result.trace[1].outcome is Outcome.CANNOT_COMPACT
    assert result.stop_reason is StopReason.CONTEXT_LIMIT
    assert result.counters.compactions == 0


def test_repeated_length_ends_with_context_limit_within_the_attempts() -> None:
    """A model that always overflows: compactions stay within the limit; ends context_limit."""
    model = ScriptedModel([finish("length", usage=FILLED)] * 10)
    policy = Policy(max_compaction_attempts=3, compaction=WINDOW)
    agent = Agent(model, system_prompt="s", policy=policy)
    result = agent.run_sync("next", history=long_history(40)[1:])
    assert result.stop_reason is StopReason.CONTEXT_LIMIT
    assert result.counters.compactions <= 3


def test_message_window_compacts_without_a_token_budget() -> None:
    """max_messages keeps the history short even with no known context window."""
    settings = CompactionSettings(max_messages=10)
    agent = Agent(
        looking(20, None),
        tools=[look],
        policy=Policy(max_compaction_attempts=50, compaction=settings),
    )
    result = agent.run_sync("go")
    assert result.ok
    assert len(result.messages) <= 12
    assert_well_formed(result.messages)


def test_message_window_with_nothing_removable_proceeds() -> None:
    """A full message window with nothing removable is no reason to stop the run."""
    history = [Message.user("a"), Message.assistant("b")]
    settings = CompactionSettings(max_messages=2, keep_recent_messages=5)
    model = ScriptedModel([text("ok", usage=NO_INPUT)])
    result = Agent(model, policy=Policy(compaction=settings)).run_sync("c", history=history)
    assert result.stop_reason is StopReason.COMPLETED
    assert result.counters.compactions == 0


def test_summarisation_in_the_run_counts_its_call_and_usage() -> None:
    """A summary compaction's model call counts in model_calls and usage, tools off."""
    settings = CompactionSettings(strategies=("summarize", "sliding_window"))
    summary = Usage(requests=1, output_tokens=40)
    model = ScriptedModel(
        [text("they looked things up", usage=summary), text("ok", usage=NO_INPUT)],
        context_window=4_000,
    )
    agent = Agent(model, system_prompt="sys", policy=Policy(compaction=settings))
    events, result = stream(agent, "next", history=long_history(10)[1:])
    (compacted,) = [e for e in events if isinstance(e, CompactedEvent)]
    assert compacted.strategy == "summarize"
    assert not compacted.errors
    assert model.requests[0].tools == ()
    assert any(m.text.startswith(SUMMARY_HEADER) for m in model.requests[1].messages)
    assert result.model_calls == 2
    assert result.usage.output_tokens == 45
    assert [e.type for e in events].count("usage") == 2


def test_failed_summarisation_falls_back_and_is_never_fatal() -> None:
    """A failing summary call: the window compacts instead, the attempt counts, the run goes on."""
    settings = CompactionSettings(strategies=("summarize", "sliding_window"))
    model = ScriptedModel([fail("overloaded"), text("ok", usage=NO_INPUT)], context_window=4_000)
    agent = Agent(model, system_prompt="sys", policy=Policy(compaction=settings))
    events, result = stream(agent, "next", history=long_history(10)[1:])
    (compacted,) = [e for e in events if isinstance(e, CompactedEvent)]
    assert compacted.strategy == "sliding_window"
    assert compacted.errors
    assert "overloaded" in compacted.errors[0]
    assert result.stop_reason is StopReason.COMPLETED
    assert [m.counters.compactions for m in result.trace if m.outcome is Outcome.COMPACTED] == [1]
    assert result.model_calls == 2
    assert result.usage.requests == 1


def test_cancel_during_the_summary_call_aborts_the_run() -> None:
    """Cancelling while the summary call is in flight ends the run aborted, cancelled."""
    settings = CompactionSettings(strategies=("summarize", "sliding_window"))
    model = Held(context_window=4_000)
    agent = Agent(model, system_prompt="sys", policy=Policy(compaction=settings))
    handle = RunHandle()

    async def go() -> RunResult:
        task = asyncio.create_task(agent.run("next", history=long_history(10)[1:], handle=handle))
        await model.entered.wait()
        handle.cancel()
        return await task

    result = asyncio.run(go())
    assert result.stop_reason is StopReason.CANCELLED
    assert result.state is State.ABORTED
    assert result.model_calls == 1


# -- a long run ------------------------------------------------------------------------------
def long_run(steps: int) -> Agent[None]:
    """An agent whose model calls ``look`` ``steps`` times, then answers, under a 4,000-token
    window; the model keeps no log of its requests, so memory measured is the kernel's."""
    call = tool_call("look", {"q": 1}, id="call_1", usage=NO_INPUT)
    model = ScriptedModel(
        [call] * steps + [text("done", usage=NO_INPUT)], context_window=4_000, keep_requests=False
    )
    policy = Policy(max_steps=steps + 1, max_compaction_attempts=steps)
    return Agent(model, tools=[look], system_prompt="sys", policy=policy)


def test_a_long_run_keeps_its_history_within_the_window() -> None:
    """2,000 steps with a 4,000-token window: the run completes, the history ends within the
    budget, compacted hundreds of times, well formed."""

    async def go() -> RunResult:
        return await long_run(2_000).run("go")

    result = asyncio.run(go())
    assert result.ok
    assert result.run_state is not None
    assert result.run_state.context_tokens <= 3_200
    assert sum(m.outcome is Outcome.COMPACTED for m in result.trace) > 100
    assert_well_formed(result.messages)


@pytest.mark.slow
def test_ten_thousand_steps_with_a_small_window_stay_bounded() -> None:
    """10,000 steps with a 4,000-token window finish with peak memory far below what the
    uncompacted history alone would take (~20 MB of tool output). What still grows with the
    steps is the run's trace (one move per transition, ~0.7 KB a step)."""
    agent = long_run(10_000)

    async def go() -> tuple[bool, int]:
        # Returns no RunResult: asyncio.run would repr it on exit (Python 3.11).
        result = await agent.run("go")
        return result.ok, len(result.messages)

    tracemalloc.start()
    try:
        ok, kept = asyncio.run(go())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ok
    assert kept < 200
    assert peak < 12_000_000, f"peak {peak / 1e6:.1f} MB"
