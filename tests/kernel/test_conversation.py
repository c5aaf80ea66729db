"""Conversation continuity across runs [S004 Known Issues], compacted like a single run."""

from __future__ import annotations

import asyncio

import pytest

from fsm_agent import (
    Agent,
    ConfigurationError,
    Counters,
    InvalidInputError,
    Message,
    Outcome,
    Role,
    State,
    StopReason,
    Usage,
    tool,
)
from fsm_agent.compaction import estimate_tokens
from fsm_agent.conversation import Conversation
from fsm_agent.events import CompactedEvent
from fsm_agent.kernel.agent import RunResult
from fsm_agent.testing import ScriptedModel, text, tool_call
from helpers import Held

NO_INPUT = Usage(requests=1, output_tokens=5)


@tool
def fetch(page: int) -> str:
    """Fetch a page."""
    return f"page {page}: " + "z" * 1_200


def test_each_run_continues_from_the_last() -> None:
    """The second run's request holds the first run's messages, the system prompt once, first."""
    model = ScriptedModel([text("Hi Ada."), text("Your name is Ada.")])
    conversation = Conversation(Agent(model, system_prompt="Be brief."))
    conversation.run_sync("My name is Ada.")
    result = conversation.run_sync("What is my name?")
    sent = model.requests[1].messages
    assert [m.role for m in sent] == [Role.SYSTEM, Role.USER, Role.ASSISTANT, Role.USER]
    assert sent[1] == Message.user("My name is Ada.")
    assert conversation.messages == result.messages
    assert conversation.last_result is result
    assert result.output == "Your name is Ada."


def test_a_conversation_can_start_from_stored_messages() -> None:
    """Messages given at construction are the history of the first run."""
    earlier = (Message.user("Remember 7."), Message.assistant("Noted."))
    model = ScriptedModel([text("7")])
    conversation = Conversation(Agent(model), earlier)
    assert conversation.messages == earlier
    assert conversation.last_result is None
    conversation.run_sync("Which number?")
    assert model.requests[0].messages[:2] == earlier


def test_every_run_of_a_conversation_carries_its_id() -> None:
    """Runs of one conversation carry its id in their run state, streamed or not; a given id
    is kept; a run outside a conversation has none; an empty id is refused."""
    agent = Agent(ScriptedModel([text("a"), text("b"), text("c"), text("d")]))
    conversation = Conversation(agent)
    first = conversation.run_sync("one")

    async def streamed() -> None:
        async for _ in conversation.run_stream("two"):
            pass

    asyncio.run(streamed())
    second = conversation.last_result
    assert second is not None and first.run_state is not None and second.run_state is not None
    assert first.run_state.conversation_id == second.run_state.conversation_id
    assert conversation.conversation_id == first.run_state.conversation_id != first.run_id
    named = Conversation(agent, conversation_id="thread-7").run_sync("x").run_state
    assert named is not None and named.conversation_id == "thread-7"
    alone = agent.run_sync("y")
    assert alone.run_state is not None and alone.run_state.conversation_id is None
    with pytest.raises(InvalidInputError, match="conversation_id"):
        Conversation(agent, conversation_id="")
    with pytest.raises(InvalidInputError, match="conversation_id"):
        agent.run_sync("z", conversation_id="")


def test_a_long_conversation_is_compacted_at_loop_entry() -> None:
    """Over many runs under a small window, each request fits the budget, stays well formed,
    and keeps the system prompt, the conversation's first message and the newest prompt."""
    turns = []
    for page in range(8):
        turns += [tool_call("fetch", {"page": page}, usage=NO_INPUT), text("read", usage=NO_INPUT)]
    model = ScriptedModel(turns, context_window=2_000)
    agent = Agent(model, tools=[fetch], system_prompt="sys")
    conversation = Conversation(agent)
    compactions = 0
    for page in range(8):
        result = conversation.run_sync(f"read page {page}")
        assert result.stop_reason is StopReason.COMPLETED
        compactions += sum(m.outcome is Outcome.COMPACTED for m in result.trace)
    assert compactions >= 2
    for request in model.requests:
        sent = request.messages
        assert sent[0] == Message.system("sys")
        assert sent[1] == Message.user("read page 0")
        assert sum(m.role is Role.SYSTEM for m in sent) == 1
        calls = [c.id for m in sent for c in m.tool_calls]
        results = [r.call_id for m in sent for r in m.tool_results]
        assert calls == results
        assert sum(estimate_tokens(m) for m in sent) <= 1_600
    last = model.requests[-1].messages
    assert Message.user("read page 7") in last


def test_run_stream_moves_the_conversation_on() -> None:
    """A streamed run, consumed to the end, becomes the conversation's latest run."""
    model = ScriptedModel([text("one"), text("two")], context_window=100_000)
    conversation = Conversation(Agent(model))

    async def go() -> list[str]:
        return [e.type async for e in conversation.run_stream("first")]

    types = asyncio.run(go())
    assert types[-1] == "final"
    assert conversation.last_result is not None
    assert conversation.last_result.output == "one"
    conversation.run_sync("second")
    assert model.requests[1].messages[0] == Message.user("first")


def test_compaction_events_reach_a_streamed_conversation() -> None:
    """A conversation whose history is over budget emits a compacted event on its next run."""
    history = [Message.user("start")]
    for page in range(6):
        history += [Message.user(f"q{page}"), Message.assistant("z" * 2_000)]
    model = ScriptedModel([text("ok", usage=NO_INPUT)], context_window=1_500)
    conversation = Conversation(Agent(model), history)

    async def go() -> list[object]:
        return [e async for e in conversation.run_stream("next")]

    events = asyncio.run(go())
    assert any(isinstance(e, CompactedEvent) for e in events)
    assert conversation.messages[0] == Message.user("start")
    assert conversation.messages[-2] == Message.user("next")


def test_async_run_records_the_result() -> None:
    """await conversation.run(...) records its result like run_sync."""
    model = ScriptedModel([text("a")])
    conversation = Conversation(Agent(model))

    async def go() -> str | None:
        return (await conversation.run("q")).output

    assert asyncio.run(go()) == "a"
    assert len(conversation.messages) == 2


def suspended_result(messages: tuple[Message, ...]) -> RunResult:
    """A result whose run waits for a human."""
    return RunResult(
        run_id="run_x",
        output=None,
        stop_reason=StopReason.SUSPENDED,
        state=State.SUSPENDED,
        usage=Usage(),
        messages=messages,
        trace=(),
        counters=Counters(),
        model_calls=1,
        tool_executions=0,
    )


def test_a_suspended_last_run_must_be_resumed_first() -> None:
    """After a suspended run, a new run is refused until a resumed result is recorded."""
    conversation = Conversation(Agent(ScriptedModel([text("ok")])))
    conversation.record(suspended_result((Message.user("delete it?"),)))
    with pytest.raises(InvalidInputError, match="suspended"):
        conversation.run_sync("and then?")
    resumed = conversation.agent.run_sync("delete it?")
    conversation.record(resumed)
    assert conversation.messages == resumed.messages


def test_one_run_at_a_time() -> None:
    """A second run while one is in progress is refused."""
    model = Held([text("done")])
    conversation = Conversation(Agent(model))

    async def go() -> str | None:
        first = asyncio.create_task(conversation.run("one"))
        await asyncio.sleep(0)
        with pytest.raises(InvalidInputError, match="in progress"):
            await conversation.run("two")
        model.release.set()
        return (await first).output

    assert asyncio.run(go()) == "done"


def test_a_conversation_needs_an_agent() -> None:
    """Anything but an Agent is a configuration error."""
    with pytest.raises(ConfigurationError, match="Agent"):
        Conversation(object())  # type: ignore[arg-type]
