"""Shared context on purpose: a child agent used as a tool can be given its parent's
dependencies (as they are, or mapped) and a filtered view of its parent's conversation,
instead of only the task; user code that shares them and fails gives the call an error result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fsm_agent import Agent, ConfigurationError, Role, ToolContext, tool
from fsm_agent.kernel.handoffs import without_tool_calls
from fsm_agent.messages import Message
from fsm_agent.testing import ScriptedModel, text, tool_call


@dataclass(frozen=True)
class Shop:
    """The parent's dependencies."""

    currency: str
    rates: dict[str, float]


@tool
def currency(context: ToolContext[Any]) -> str:
    """The currency prices are given in."""
    return repr(context.deps)


@tool
def stock(item: str) -> str:
    """How many of an item are in stock."""
    return f"3 {item}"


SHOP = Shop("EUR", {"USD": 1.1})


def parent_with(child: Agent[Any, str], **shared: Any) -> tuple[Agent[Shop, str], ScriptedModel]:
    """A parent with ``child`` as the tool 'price' (shared as asked), whose model checks the
    stock, then asks the child."""
    model = ScriptedModel(
        [
            tool_call("stock", {"item": "tea"}),
            tool_call("price", {"task": "Price 3 tea."}, text="Stock checked; pricing now."),
            text("Done."),
        ]
    )
    parent = Agent(
        model,
        tools=[stock, child.as_tool(name="price", description="Price items.", **shared)],
        deps=SHOP,
    )
    return parent, model


def child_agent(deps: Any = None) -> tuple[Agent[Any, str], ScriptedModel]:
    model = ScriptedModel([tool_call("currency", {}), text("36 EUR.")])
    return Agent(model, tools=[currency], system_prompt="You price items.", deps=deps), model


def tool_results(agent_model: ScriptedModel) -> list[str]:
    return [r.content for m in agent_model.requests[-1].messages for r in m.tool_results]


def test_by_default_the_child_has_its_own_deps_and_sees_only_the_task() -> None:
    """Nothing shared: the child's tool reads the child's deps, its first request holds its
    system prompt and the task only."""
    child, child_model = child_agent(deps="own")
    parent, _ = parent_with(child)
    assert parent.run_sync("Price my basket.").output == "Done."
    assert tool_results(child_model) == ["'own'"]
    roles = [m.role for m in child_model.requests[0].messages]
    assert roles == [Role.SYSTEM, Role.USER]


def test_share_deps_gives_the_child_the_parents_deps() -> None:
    """``share_deps=True``: the child's tools get the deps of the calling run."""
    child, child_model = child_agent(deps="own")
    parent, _ = parent_with(child, share_deps=True)
    parent.run_sync("Price my basket.")
    assert tool_results(child_model) == [repr(SHOP)]


def test_deps_from_maps_the_parents_deps_to_the_childs() -> None:
    """``deps_from``: the child's deps are built from the calling run's."""
    child, child_model = child_agent()
    parent, _ = parent_with(child, deps_from=lambda shop: shop.currency)
    parent.run_sync("Price my basket.")
    assert tool_results(child_model) == ["'EUR'"]


def test_a_deps_mapper_that_raises_is_the_calls_error_result() -> None:
    """A ``deps_from`` that raises: the child is not run, the call's result says why, the
    parent goes on."""
    child, child_model = child_agent()
    parent, parent_model = parent_with(child, deps_from=lambda shop: shop.missing)
    assert parent.run_sync("Price my basket.").output == "Done."
    assert child_model.requests == []
    (last,) = [r for m in parent_model.requests[-1].messages for r in m.tool_results][-1:]
    assert last.is_error and "deps_from raised AttributeError" in last.content


def test_conversation_gives_the_child_a_filtered_view_before_the_task() -> None:
    """``conversation=without_tool_calls``: the child sees the user's message and what the
    parent said, not its tool calls, then the task."""
    child, child_model = child_agent()
    parent, _ = parent_with(child, conversation=without_tool_calls)
    parent.run_sync("Price my basket.")
    seen = child_model.requests[0].messages
    assert seen[0] == Message.system("You price items.")
    assert [m.text for m in seen[1:]] == [
        "Price my basket.",
        "Stock checked; pricing now.",
        "Price 3 tea.",
    ]
    assert not any(m.tool_calls or m.tool_results for m in seen)


def test_conversation_as_it_is_keeps_settled_calls_and_leaves_out_the_call_in_progress() -> None:
    """An identity view: the earlier tool turn, with its result, is shared; the turn that calls
    the child, whose results are not in yet, shares only its text."""
    child, child_model = child_agent()
    parent, _ = parent_with(child, conversation=lambda messages: messages)
    parent.run_sync("Price my basket.")
    seen = child_model.requests[0].messages
    assert [r.content for m in seen for r in m.tool_results] == ["3 tea"]
    assert [c.name for m in seen for c in m.tool_calls] == ["stock"]
    assert seen[-1].text == "Price 3 tea." and seen[-2].text == "Stock checked; pricing now."


@pytest.mark.parametrize(
    "conversation",
    [
        lambda messages: [m for m in messages if m.role is not Role.TOOL],  # a call unanswered
        lambda messages: 1 / 0,
    ],
)
def test_a_conversation_filter_that_fails_is_the_calls_error_result(conversation: Any) -> None:
    """A filter that raises or breaks the history: the child is not run and the call's
    result says to keep every tool call with its one result."""
    child, child_model = child_agent()
    parent, parent_model = parent_with(child, conversation=conversation)
    assert parent.run_sync("Price my basket.").output == "Done."
    assert child_model.requests == []
    last = [r for m in parent_model.requests[-1].messages for r in m.tool_results][-1]
    assert last.is_error and "conversation filter failed" in last.content


def test_the_task_schema_says_what_the_child_sees() -> None:
    """With a shared conversation the task's description no longer says the child sees
    nothing else."""
    child, _ = child_agent()
    alone = child.as_tool(name="a", description="x").definition.parameters
    shared = child.as_tool(name="b", description="x", conversation=without_tool_calls)
    assert "sees nothing else" in str(alone)
    assert "also sees this conversation" in str(shared.definition.parameters)


def test_sharing_is_declared_once() -> None:
    """``share_deps`` and ``deps_from`` together, or a filter that is not callable: refused."""
    child, _ = child_agent()
    with pytest.raises(ConfigurationError, match="not both"):
        child.as_tool(name="a", description="x", share_deps=True, deps_from=str)
    with pytest.raises(ConfigurationError, match="conversation must be callable"):
        child.as_tool(name="a", description="x", conversation="all")  # type: ignore[arg-type]
