"""Approval and human input: allow, deny, ask → suspended → resume; ask_human; pause; bad
resume handles."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from fsm_agent import (
    Policy,
    ResumeError,
    RunHandle,
    RunState,
    State,
    StopReason,
    ToolCall,
    ToolContext,
    ToolResult,
    tool,
)
from fsm_agent.approval import Approval, ResumeHandle
from fsm_agent.events import SuspendedEvent, ToolResultEvent
from fsm_agent.messages import Role
from fsm_agent.testing import text, tool_call, tool_calls
from helpers import make_agent, stream
from invariants import check_history

RAN: list[str] = []


@tool
def write(path: str) -> str:
    """Write a file."""
    RAN.append(path)
    return f"wrote {path}"


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    RAN.append(f"rm {path}")
    return f"deleted {path}"


@pytest.fixture(autouse=True)
def _forget_approval_tools_ran() -> None:
    RAN.clear()


def results(messages: Any) -> list[ToolResult]:
    """Every tool result of a history, in order."""
    return [r for m in messages if m.role is Role.TOOL for r in m.tool_results]


class Gate:
    """Allows writes to /tmp, denies /etc, asks about everything else."""

    def approve_tool(self, *, call: ToolCall, **kw: Any) -> Approval:
        path = str((call.arguments or {}).get("path", ""))
        if path.startswith("/tmp"):
            return Approval.allow()
        if path.startswith("/etc"):
            return Approval.deny("system files are off limits")
        return Approval.ask("writes outside /tmp need a human")


def test_allowed_calls_run_and_denied_ones_get_the_reason_as_an_error() -> None:
    """allow runs the call; deny answers with an is_error result carrying the reason."""
    agent, model, _ = make_agent(
        [tool_calls(("write", {"path": "/tmp/a"}), ("write", {"path": "/etc/x"})), text("ok")],
        tools=[write],
        hooks=[Gate()],
    )
    agent.run_sync("go")
    assert RAN == ["/tmp/a"]
    got = results(model.requests[1].messages)
    assert got[0].content == "wrote /tmp/a"
    assert got[1].is_error
    assert "system files are off limits" in got[1].content


def test_ask_suspends_with_pending_calls_and_a_resume_handle() -> None:
    """An ask suspends the run before any tool of the turn runs."""
    agent, _, _ = make_agent(
        [tool_calls(("write", {"path": "/tmp/a"}), ("write", {"path": "/home/b"})), text("ok")],
        tools=[write],
        hooks=[Gate()],
    )
    events, result = stream(agent)
    assert result.state is State.SUSPENDED
    assert result.stop_reason is StopReason.SUSPENDED
    assert [c.arguments for c in result.pending] == [{"path": "/home/b"}]
    assert result.resume_handle is not None
    assert result.resume_handle.questions == {
        result.pending[0].id: "writes outside /tmp need a human"
    }
    assert RAN == []
    assert isinstance(events[-1], SuspendedEvent)
    assert events[-1].pending == result.pending


def test_resume_runs_approved_calls_once_and_continues_from_dispatching() -> None:
    """After approval every call runs exactly once, in order, and the run completes."""
    agent, model, _ = make_agent(
        [tool_calls(("write", {"path": "/tmp/a"}), ("write", {"path": "/home/b"})), text("ok")],
        tools=[write],
        hooks=[Gate()],
    )
    first = agent.run_sync("go")
    assert first.resume_handle is not None
    done = asyncio.run(agent.resume(first.resume_handle, {first.pending[0].id: True}))
    assert done.ok
    assert done.output == "ok"
    assert RAN == ["/tmp/a", "/home/b"]
    assert done.run_id == first.run_id
    assert done.tool_executions == 2
    assert done.trace[len(first.trace)].outcome.value == "resume"
    check_history(model.requests[1].messages)


def test_resume_with_a_denial_gives_the_model_the_human_reason() -> None:
    """A human denial becomes an is_error result with the human's reason."""
    agent, model, _ = make_agent(
        [tool_call("write", {"path": "/home/b"}), text("fine")], tools=[write], hooks=[Gate()]
    )
    first = agent.run_sync("go")
    assert first.resume_handle is not None
    call_id = first.pending[0].id
    done = asyncio.run(agent.resume(first.resume_handle, {call_id: Approval.deny("no thanks")}))
    assert done.ok
    assert RAN == []
    (only,) = results(model.requests[1].messages)
    assert only.is_error
    assert "no thanks" in only.content


def test_a_needs_approval_tool_asks_when_no_hook_decides() -> None:
    """needs_approval makes an undecided call wait for a human; a hook may still allow it."""
    agent, _, _ = make_agent([tool_call("delete", {"path": "x"}), text("ok")], tools=[delete])
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.SUSPENDED
    assert RAN == []

    class AllowAll:
        def approve_tool(self, **kw: Any) -> bool:
            return True

    agent, _, _ = make_agent(
        [tool_call("delete", {"path": "x"}), text("ok")], tools=[delete], hooks=[AllowAll()]
    )
    assert agent.run_sync("go").ok
    assert RAN == ["rm x"]


def test_a_tool_can_ask_the_human_and_gets_the_answer_as_its_result() -> None:
    """ctx.ask_human suspends the run; the answer on resume is the call's result."""
    asked: list[str] = []

    @tool
    def pick(ctx: ToolContext[None], options: str) -> str:
        """Ask the human to pick."""
        asked.append(options)
        ctx.ask_human(f"Which one of {options}?")

    agent, model, _ = make_agent([tool_call("pick", {"options": "a,b"}), text("ok")], tools=[pick])
    events, first = stream(agent)
    assert first.stop_reason is StopReason.SUSPENDED
    assert first.resume_handle is not None
    call_id = first.pending[0].id
    assert events[-1].questions == {call_id: "Which one of a,b?"}  # type: ignore[union-attr]
    done = asyncio.run(agent.resume(first.resume_handle, {call_id: "b"}))
    assert done.ok
    assert asked == ["a,b"]
    (only,) = results(model.requests[1].messages)
    assert (only.content, only.is_error) == ("b", False)


def test_a_question_in_a_parallel_batch_keeps_the_other_results() -> None:
    """Calls that finished before the suspension are recorded once, in call order."""

    @tool
    def ask(ctx: ToolContext[None]) -> str:
        """Ask something."""
        ctx.ask_human("ok?")

    agent, model, _ = make_agent(
        [
            tool_calls(("write", {"path": "/tmp/1"}), ("ask", {}), ("write", {"path": "/tmp/2"})),
            text("ok"),
        ],
        tools=[write, ask],
    )
    first = agent.run_sync("go")
    assert first.resume_handle is not None
    assert RAN == ["/tmp/1", "/tmp/2"]
    done = asyncio.run(agent.resume(first.resume_handle, {first.pending[0].id: "yes"}))
    assert RAN == ["/tmp/1", "/tmp/2"]
    assert done.ok
    assert [r.content for r in results(model.requests[1].messages)] == [
        "wrote /tmp/1",
        "yes",
        "wrote /tmp/2",
    ]


def test_resume_stream_emits_each_call_result_once_across_the_suspension() -> None:
    """Every call gets one tool_result event over the two invocations."""
    agent, _, _ = make_agent(
        [tool_calls(("write", {"path": "/tmp/a"}), ("write", {"path": "/home/b"})), text("ok")],
        tools=[write],
        hooks=[Gate()],
    )
    first_events, first = stream(agent)
    assert first.resume_handle is not None

    async def resume() -> list[Any]:
        handle = first.resume_handle
        assert handle is not None
        return [e async for e in agent.resume_stream(handle, {first.pending[0].id: True})]

    later = asyncio.run(resume())
    ids = [e.call_id for e in [*first_events, *later] if isinstance(e, ToolResultEvent)]
    calls = [c.id for m in first.messages for c in m.tool_calls]
    assert len(calls) == 2
    assert sorted(ids) == sorted(calls)
    assert later[-1].type == "final"


def test_pause_suspends_before_the_next_tool_call_and_resume_continues() -> None:
    """handle.pause() takes effect at the next safe point; resume needs no decisions."""
    handle = RunHandle()

    @tool
    def first_step() -> str:
        """Pause the run from inside (as an outside caller would)."""
        handle.pause()
        return "one"

    agent, _, _ = make_agent(
        [tool_calls(("first_step", {}), ("write", {"path": "/tmp/z"})), text("ok")],
        tools=[first_step, write],
        policy=Policy(parallel_tool_calls=False),
    )
    paused = asyncio.run(agent.run("go", handle=handle))
    assert paused.stop_reason is StopReason.SUSPENDED
    assert paused.pending == ()
    assert RAN == []
    assert paused.resume_handle is not None
    done = asyncio.run(agent.resume(paused.resume_handle, handle=handle))
    assert done.ok
    assert RAN == ["/tmp/z"]
    assert [r.content for r in results(done.messages)] == ["one", "wrote /tmp/z"]


# -- bad resume handles and decisions ----------------------------------------------------------
def _suspended() -> tuple[Any, Any]:
    agent, _, _ = make_agent(
        [tool_call("write", {"path": "/home/b"}), text("ok")], tools=[write], hooks=[Gate()]
    )
    result = agent.run_sync("go")
    assert result.resume_handle is not None
    return agent, result


def test_resume_with_an_already_used_handle_is_refused_and_runs_nothing() -> None:
    """A second resume with the same handle raises ResumeError; the tool does not run again."""
    agent, result = _suspended()
    call_id = result.pending[0].id
    asyncio.run(agent.resume(result.resume_handle, {call_id: True}))
    with pytest.raises(ResumeError, match="already used"):
        asyncio.run(agent.resume(result.resume_handle, {call_id: True}))
    assert RAN == ["/home/b"]


def test_resume_with_an_unknown_handle_is_refused_and_runs_nothing() -> None:
    """A forged token or a run that is not suspended raises ResumeError."""
    agent, result = _suspended()
    forged = dataclasses.replace(result.resume_handle, token="nope")
    with pytest.raises(ResumeError, match="unknown resume handle"):
        asyncio.run(agent.resume(forged, {result.pending[0].id: True}))
    with pytest.raises(ResumeError, match="is not suspended"):
        ResumeHandle.of(RunState(run_id="other"))
    with pytest.raises(ResumeError, match="needs the ResumeHandle"):
        asyncio.run(agent.resume("handle", {}))  # type: ignore[arg-type]
    assert RAN == []
    assert result.run_state.state is State.SUSPENDED


def test_decisions_that_do_not_fit_are_refused_without_using_the_handle() -> None:
    """Missing, unknown or wrongly typed decisions raise; the handle stays usable."""
    agent, result = _suspended()
    handle = result.resume_handle
    call_id = result.pending[0].id
    with pytest.raises(ResumeError, match="needs a decision"):
        asyncio.run(agent.resume(handle))
    with pytest.raises(ResumeError, match="no pending call has id 'x'"):
        asyncio.run(agent.resume(handle, {call_id: True, "x": True}))
    with pytest.raises(ResumeError, match="an approval needs"):
        asyncio.run(agent.resume(handle, {call_id: "yes"}))
    assert RAN == []
    assert asyncio.run(agent.resume(handle, {call_id: True})).ok


def test_a_suspended_run_state_survives_a_json_round_trip() -> None:
    """The suspended state serialises; ResumeHandle.of rebuilds a handle that resumes it."""
    agent, result = _suspended()
    restored = RunState.model_validate_json(result.run_state.model_dump_json())
    handle = ResumeHandle.of(restored)
    done = asyncio.run(agent.resume(handle, {result.pending[0].id: True}))
    assert done.ok
    assert RAN == ["/home/b"]
