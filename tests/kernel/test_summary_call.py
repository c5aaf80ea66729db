"""The step-limit summary call is a model call like the others: streamed under ``run_stream``,
reported in the events' order, and its answer kept in the run's messages."""

from __future__ import annotations

import json

import httpx

from fsm_agent import Agent, Message, Policy, Role, StopReason
from fsm_agent.conversation import Conversation
from fsm_agent.events import (
    AttemptDiscardedEvent,
    FinalEvent,
    ModelRequestEvent,
    ModelResponseEvent,
    StateChangedEvent,
    TextDeltaEvent,
    UsageEvent,
)
from fsm_agent.kernel.states import SUMMARY_FALLBACK, SUMMARY_PROMPT
from fsm_agent.messages import validate_history
from fsm_agent.providers import OpenAIChatModel
from fsm_agent.testing import ScriptedModel, fail, text, tool_call
from helpers import look, make_agent, stream

STEP_LIMIT = Policy(max_steps=1)


def test_the_summary_call_is_streamed_and_reported_in_order() -> None:
    """Under ``run_stream`` the summary call streams its text deltas, and its events come as
    every call's do: ``model_request``, deltas, ``model_response``, ``usage``, then ``final``."""
    agent, _, _ = make_agent(
        [tool_call("look"), text("what I found")], tools=[look], policy=STEP_LIMIT
    )
    events, result = stream(agent)
    assert (result.stop_reason, result.output) == (StopReason.MAX_STEPS, "what I found")
    last_request = max(i for i, e in enumerate(events) if isinstance(e, ModelRequestEvent))
    kinds = [type(e) for e in events[last_request:] if not type(e).__name__.startswith("State")]
    assert kinds[0] is ModelRequestEvent and kinds[-1] is FinalEvent
    assert kinds[1:-1] == [
        *[TextDeltaEvent] * (len(kinds) - 4),
        ModelResponseEvent,
        UsageEvent,
    ]
    assert len(kinds) > 4  # at least one delta
    deltas = [e.text for e in events[last_request:] if isinstance(e, TextDeltaEvent)]
    assert "".join(deltas) == "what I found"


def test_the_summary_answer_is_in_the_runs_messages() -> None:
    """The summary answer ends the run's messages (the prompt asking for it does not), and the
    history stays valid."""
    agent, _, _ = make_agent(
        [tool_call("look"), text("what I found")], tools=[look], policy=STEP_LIMIT
    )
    result = agent.run_sync("go")
    last = result.messages[-1]
    assert (last.role, last.text) == (Role.ASSISTANT, "what I found")
    assert all(m.text != SUMMARY_PROMPT for m in result.messages)
    validate_history(result.messages)


def test_a_conversation_continues_after_the_summary_the_user_saw() -> None:
    """The next run of a conversation sends the summary answer the user was given."""
    model = ScriptedModel([tool_call("look"), text("what I found"), text("more")])
    conversation = Conversation(Agent(model, tools=[look], policy=STEP_LIMIT))
    conversation.run_sync("go")
    conversation.run_sync("and then?")
    sent = model.requests[-1].messages
    assert [m.text for m in sent[-2:]] == ["what I found", "and then?"]


def test_no_answer_no_message_when_the_summary_call_fails() -> None:
    """A failed summary call gives the fallback output and adds no message."""
    agent, _, _ = make_agent([tool_call("look"), fail()], tools=[look], policy=STEP_LIMIT)
    result = agent.run_sync("go")
    assert result.output == SUMMARY_FALLBACK and result.messages[-1].role is Role.TOOL


def test_a_failed_streamed_summary_call_discards_its_attempt() -> None:
    """When the streamed summary call fails, ``attempt_discarded`` tells the listener to drop
    what it showed; ``final`` then carries the fallback text."""
    agent, _, _ = make_agent([tool_call("look"), fail()], tools=[look], policy=STEP_LIMIT)
    events, result = stream(agent)
    assert result.output == SUMMARY_FALLBACK
    last_request = max(i for i, e in enumerate(events) if isinstance(e, ModelRequestEvent))
    kinds = [type(e) for e in events[last_request + 1 :] if not isinstance(e, StateChangedEvent)]
    assert kinds == [AttemptDiscardedEvent, FinalEvent]


def test_a_tool_call_in_the_summary_answer_is_not_kept() -> None:
    """A model that calls a tool in the summary anyway: its text is kept, the call is not (no
    call in the history goes without a result)."""
    agent, _, _ = make_agent(
        [tool_call("look"), tool_call("look", text="all I know")], tools=[look], policy=STEP_LIMIT
    )
    result = agent.run_sync("go")
    assert result.output == "all I know"
    assert result.messages[-1] == Message.assistant("all I know")
    validate_history(result.messages)


def test_the_summary_request_sends_no_tools_on_the_wire() -> None:
    """On the wire (OpenAI-compatible), the summary request carries no ``tools`` and no
    ``tool_choice``, while the history keeps its tool calls and results."""
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        if len(bodies) == 1:
            message: dict[str, object] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "look", "arguments": "{}"},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": "summary"}, "stop"
        return httpx.Response(
            200,
            json={
                "id": "r",
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            },
        )

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    model = OpenAIChatModel("m", base_url="http://model.test/v1", api_key="k", client=client)
    result = Agent(model, tools=[look], policy=STEP_LIMIT).run_sync("go")
    assert result.output == "summary"
    first, summary = bodies
    assert "tools" in first
    assert "tools" not in summary and "tool_choice" not in summary
    roles = [m["role"] for m in summary["messages"]]  # type: ignore[attr-defined]
    assert roles[-3:] == ["assistant", "tool", "user"]
