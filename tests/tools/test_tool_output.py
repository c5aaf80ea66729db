"""Tool output limits: cut results with a marker, the per-run store, the paging tool, and the
trimming of old outputs before each model call."""

from __future__ import annotations

from typing import Any

import pytest

from fsm_agent import CompactionSettings, Policy, StopReason, Tool, tool
from fsm_agent.messages import Role, ToolResult
from fsm_agent.policy import ToolOutputSettings
from fsm_agent.testing import text, tool_call
from fsm_agent.tools.output import PAGER_NAME
from helpers import make_agent
from invariants import check_history


@pytest.fixture(scope="module")
def big() -> str:
    """10 MB of numbered lines, built once and only for the tests that ask for it."""
    return "".join(f"{i:07d}\n" for i in range(1_250_000))


@pytest.fixture
def dump(big: str) -> Tool:
    """A tool that returns :func:`big`."""

    @tool
    def dump() -> str:
        """Return a 10 MB text."""
        return big

    return dump


@tool
def small(n: int) -> str:
    """Return n characters."""
    return "y" * n


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


def test_a_10_mb_result_is_cut_in_the_history_with_a_marker_and_kept_whole(
    big: str, dump: Tool
) -> None:
    """The history holds max_chars plus a marker; the run's store holds all 10 MB."""
    agent, model, _ = make_agent([tool_call("dump", {}, id="d"), text("ok")], tools=[dump])
    result = agent.run_sync("go")
    (only,) = results(model.requests[1].messages)
    assert len(big) == 10_000_000
    assert only.content.startswith(big[:50_000])
    assert "showing 50000 of 10000000 characters" in only.content
    assert f'{PAGER_NAME}(call_id="d", offset=50000)' in only.content
    assert len(only.content) < 50_200
    assert result.run_state is not None
    assert result.run_state.tool_outputs["d"] == big


def test_the_paging_tool_is_offered_only_once_an_output_was_cut(dump: Tool) -> None:
    """Requests carry read_tool_output only after the store holds something."""
    agent, model, _ = make_agent(
        [tool_call("small", {"n": 3}), tool_call("dump", {}), text("ok")], tools=[small, dump]
    )
    agent.run_sync("go")
    names = [[t.name for t in r.tools] for r in model.requests]
    assert names == [["small", "dump"], ["small", "dump"], ["small", "dump", PAGER_NAME]]


def test_the_model_pages_through_the_full_output(big: str, dump: Tool) -> None:
    """read_tool_output returns consecutive pages of the stored text."""
    policy = Policy(tool_output=ToolOutputSettings(max_chars=1_000))
    agent, model, _ = make_agent(
        [
            tool_call("dump", {}, id="d"),
            tool_call(PAGER_NAME, {"call_id": "d", "offset": 1_000}),
            tool_call(PAGER_NAME, {"call_id": "d", "offset": 1_800}),
            text("ok"),
        ],
        tools=[dump],
        policy=policy,
    )
    result = agent.run_sync("go")
    pages = [r.content for r in results(result.messages)][1:]
    assert pages[0].startswith(big[1_000:1_800])
    assert "next: offset=1800" in pages[0]
    assert pages[1].startswith(big[1_800:2_600])
    check_history(model.requests[-1].messages)


def test_paging_an_unknown_call_id_is_an_error_the_model_sees(dump: Tool) -> None:
    """Asking for an output that was never stored gives an is_error result."""
    agent, _, _ = make_agent(
        [tool_call("dump", {}, id="d"), tool_call(PAGER_NAME, {"call_id": "zz"}), text("ok")],
        tools=[dump],
    )
    result = agent.run_sync("go")
    last = results(result.messages)[-1]
    assert last.is_error
    assert "no stored output for call id 'zz' (stored: d)" in last.content


def test_the_paging_tool_is_unknown_while_nothing_was_cut() -> None:
    """Before any output is cut, read_tool_output is an unknown tool."""
    agent, _, _ = make_agent([tool_call(PAGER_NAME, {"call_id": "x"}), text("ok")], tools=[small])
    (only,) = results(agent.run_sync("go").messages)
    assert only.content == f"Error: Unknown tool '{PAGER_NAME}'"


def test_old_outputs_are_trimmed_before_each_model_call() -> None:
    """With keep_recent=1, every result but the newest is cut to old_max_chars."""
    policy = Policy(
        tool_output=ToolOutputSettings(keep_recent=1, old_max_chars=10),
        compaction=CompactionSettings(use_reported_usage=False),  # keep the estimate to check
    )
    agent, model, _ = make_agent(
        [
            tool_call("small", {"n": 500}, id="a"),
            tool_call("small", {"n": 400}, id="b"),
            tool_call("small", {"n": 5}, id="c"),
            text("ok"),
        ],
        tools=[small],
        policy=policy,
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.COMPLETED
    sizes = [[len(r.content) for r in results(req.messages)] for req in model.requests]
    assert sizes[1] == [500]
    first, second = results(model.requests[2].messages)
    assert first.content.startswith("y" * 10)
    assert "showing 10 of 500" in first.content
    assert len(second.content) == 400
    third = results(model.requests[3].messages)
    assert "showing 10 of 400" in third[1].content
    assert third[2].content == "yyyyy"
    assert result.run_state is not None
    assert result.run_state.tool_outputs == {"a": "y" * 500, "b": "y" * 400}
    tokens = sum(agent.compactor.tokenizer(m) for m in result.messages)
    assert result.run_state.context_tokens == tokens


def test_max_chars_none_keeps_outputs_whole_and_offers_no_pager() -> None:
    """Without limits, outputs go into the history as they are."""
    policy = Policy(tool_output=ToolOutputSettings(max_chars=None))
    agent, model, _ = make_agent(
        [tool_call("small", {"n": 60_000}), text("ok")], tools=[small], policy=policy
    )
    agent.run_sync("go")
    (only,) = results(model.requests[1].messages)
    assert len(only.content) == 60_000
    assert agent._plan.pager is None
