"""Phases: the user's task machine above the loop (declaration, offered tools, refusals, moves
by the model, by code and by budget, checkpoint and resume, events and the phase trace)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fsm_agent import Agent, Policy, StopReason, tool
from fsm_agent.events import (
    Event,
    PhaseChangedEvent,
    StateChangedEvent,
    StepStartEvent,
    ToolResultEvent,
)
from fsm_agent.persistence import InMemoryCheckpointer
from fsm_agent.phases import (
    MOVE_TOOL,
    MovePhase,
    Phase,
    PhaseDefinitionError,
    Phases,
    PhaseView,
    Transition,
)
from fsm_agent.run_state import RunState
from fsm_agent.testing import ScriptedModel, Turn, text, tool_call, tool_calls

RAN: list[str] = []


@tool
def read(path: str) -> str:
    """Read a file."""
    RAN.append("read")
    return f"contents of {path}"


@tool
def write(path: str, body: str) -> str:
    """Write a file."""
    RAN.append("write")
    return "written"


@tool
def run_tests() -> MovePhase | str:
    """Run the test suite."""
    RAN.append("run_tests")
    return MovePhase("act", "2 tests failed")


@tool(needs_approval=True)
def deploy() -> str:
    """Deploy (a human approves)."""
    RAN.append("deploy")
    return "deployed"


def plan_act_check(**check: Any) -> Phases:
    return Phases(
        [
            Phase("plan", ("read",), "Plan the change; read only."),
            Phase("act", ("read", "write", "deploy"), "Make the change."),
            Phase("check", ("run_tests",), "Run the tests.", **check),
        ],
        [("plan", "act"), ("act", "check"), ("check", "act")],
        goals=["check"],
    )


def agent_for(turns: list[Turn], phases: Phases | None = None, **kwargs: Any) -> Agent[None]:
    return Agent(
        ScriptedModel(turns),
        tools=[read, write, run_tests, deploy],
        system_prompt="You are careful.",
        phases=phases or plan_act_check(),
        **kwargs,
    )


def move(phase: str) -> Turn:
    return tool_call(MOVE_TOOL, {"phase": phase})


async def events_of(agent: Agent[None], prompt: str = "go") -> list[Event]:
    return [e async for e in agent.run_stream(prompt)]


@pytest.fixture(autouse=True)
def _forget_phase_tools_ran() -> None:
    RAN.clear()


# -- declaration ---------------------------------------------------------------------------
def test_a_table_with_every_fault_lists_them_all() -> None:
    """Unknown phases, unreachable phases, no goal and a bad budget are reported at once."""
    with pytest.raises(PhaseDefinitionError) as caught:
        Phases(
            [Phase("a"), Phase("b", max_steps=0), Phase("a")],
            [("a", "zz")],
            goals=[],
        )
    message = str(caught.value)
    assert "declared more than once" in message
    assert "max_steps must be at least 1" in message
    assert "no goal phase" in message
    assert "unknown phase 'zz'" in message


def test_unreachable_phases_and_phases_without_a_goal_are_refused() -> None:
    """A phase nothing leads to, and a cycle with no way to a goal, are definition errors."""
    with pytest.raises(PhaseDefinitionError) as caught:
        Phases(
            [Phase("plan"), Phase("loop"), Phase("spin"), Phase("done"), Phase("orphan")],
            [("plan", "loop"), ("loop", "spin"), ("spin", "loop"), ("plan", "done")],
            goals=["done"],
        )
    message = str(caught.value)
    assert "'orphan' is unreachable" in message
    assert "'loop' can never reach a goal" in message
    assert "'spin' can never reach a goal" in message


def test_a_phase_naming_an_unknown_tool_is_refused_when_the_agent_is_built() -> None:
    """The agent checks every phase's tools against its own and names the unknown ones."""
    phases = Phases([Phase("only", ("nope",))], [], goals=["only"])
    with pytest.raises(PhaseDefinitionError, match="unknown tool 'nope'"):
        Agent(ScriptedModel([]), tools=[read], phases=phases)


def test_on_budget_needs_a_budget_and_a_known_phase() -> None:
    """``on_budget`` without ``max_steps``, or naming no phase, is a definition error."""
    with pytest.raises(PhaseDefinitionError, match="on_budget needs a max_steps"):
        Phases([Phase("a", on_budget="a")], [], goals=["a"])
    with pytest.raises(PhaseDefinitionError, match="unknown phase 'x'"):
        Phases([Phase("a", max_steps=2, on_budget="x")], [], goals=["a"])


# -- offered tools and refusals --------------------------------------------------------------
def test_each_request_offers_the_phase_tools_and_its_instructions() -> None:
    """The model sees only the current phase's tools, the move tool with the legal targets as
    an enum, and the phase's instructions after the system prompt."""
    agent = agent_for([move("act"), text("finished")])
    asyncio.run(agent.run("go"))
    model = agent.model
    assert isinstance(model, ScriptedModel)
    first, second = model.requests
    assert [t.name for t in first.tools] == ["read", MOVE_TOOL]
    move_spec = first.tools[-1].parameters["properties"]
    assert move_spec["phase"]["enum"] == ["act"]  # type: ignore[index,call-overload]
    assert first.messages[0].text == "You are careful.\n\nPlan the change; read only."
    assert [t.name for t in second.tools] == ["read", "write", "deploy", MOVE_TOOL]
    assert second.messages[0].text.endswith("Make the change.")


def test_a_tool_outside_the_phase_is_refused_before_it_runs() -> None:
    """A call to a tool of another phase never runs; its one result says what to do."""
    agent = agent_for([tool_call("write", {"path": "a", "body": "x"}), text("ok")])
    result = asyncio.run(agent.run("go"))
    assert RAN == []
    (tool_result,) = [r for m in result.messages for r in m.tool_results]
    assert tool_result.is_error
    assert "not available in phase 'plan'" in tool_result.content
    assert "Its tools: read" in tool_result.content


def test_an_out_of_phase_tool_that_needs_approval_asks_no_one() -> None:
    """Refusal comes before the permission check: the run does not suspend for it."""
    agent = agent_for([tool_call("deploy", {}), text("ok")])
    result = asyncio.run(agent.run("go"))
    assert result.stop_reason is StopReason.COMPLETED
    assert RAN == []


def test_an_illegal_move_is_refused_and_lists_the_legal_ones() -> None:
    """Moving to a phase that may not follow is an error result; the phase is unchanged."""
    agent = agent_for([move("check"), tool_call(MOVE_TOOL, {"target": "act"}), text("ok")])
    result = asyncio.run(agent.run("go"))
    assert result.run_state is not None
    assert result.run_state.phase == "plan"
    refusals = [r.content for m in result.messages for r in m.tool_results]
    assert (
        "cannot move from phase 'plan' to 'check': the legal next phases are act" in (refusals[0])
    )
    assert "legal next phases are act" in refusals[1]


def test_a_guarded_move_waits_for_its_guard() -> None:
    """A transition guard over the phase's own steps refuses the move until it holds."""

    def planned_twice(view: PhaseView) -> bool:
        return view.phase_steps >= 2

    phases = Phases(
        [Phase("plan", ("read",)), Phase("act", ("write",))],
        [Transition("plan", "act", planned_twice, "phase_steps >= 2")],
        goals=["act"],
    )
    agent = agent_for([move("act"), move("act"), text("ok")], phases)
    result = asyncio.run(agent.run("go"))
    assert result.run_state is not None
    first, second = [r for m in result.messages for r in m.tool_results]
    assert first.is_error and "phase_steps >= 2 does not hold" in first.content
    assert not second.is_error
    assert result.run_state.phase == "act"


def test_a_failing_exit_check_refuses_the_move() -> None:
    """An exit check that says no, or raises, keeps the run in its phase (fails closed)."""
    answers: list[Any] = ["read the spec first", RuntimeError("boom"), True]

    def ready(rs: RunState) -> bool | str:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer  # type: ignore[no-any-return]

    phases = Phases(
        [Phase("plan", ("read",), exit_check=ready), Phase("act", ("write",))],
        [("plan", "act")],
        goals=["act"],
    )
    agent = agent_for([move("act"), move("act"), move("act"), text("ok")], phases)
    result = asyncio.run(agent.run("go"))
    contents = [r.content for m in result.messages for r in m.tool_results]
    assert "is not finished: read the spec first" in contents[0]
    assert "exit check of phase 'plan' failed (RuntimeError: boom)" in contents[1]
    assert contents[2].startswith("Moved to phase 'act'")


# -- moves by code and by budget ---------------------------------------------------------------
def test_a_tool_moves_the_phase_by_returning_move_phase() -> None:
    """``MovePhase`` from a tool moves the run (a legal move); its content is the result."""
    turns = [move("act"), move("check"), tool_call("run_tests", {}), text("ok")]
    agent = agent_for(turns)
    events = asyncio.run(events_of(agent))
    changes = [(e.source, e.dest, e.by) for e in events if isinstance(e, PhaseChangedEvent)]
    assert changes == [
        ("plan", "act", "model"),
        ("act", "check", "model"),
        ("check", "act", "code"),
    ]
    results = [e for e in events if e.type == "tool_result"]
    assert results[-1].content == "2 tests failed"  # type: ignore[union-attr]


def test_an_illegal_move_by_code_is_refused_in_the_result() -> None:
    """A tool asking for a move its phase may not make leaves the phase and says so."""

    @tool
    def jump() -> MovePhase:
        """Jump."""
        return MovePhase("check", "jumped")

    phases = Phases(
        [Phase("plan", ("jump",)), Phase("check")], [("plan", "check")], goals=["check"]
    )
    phases_without = Phases(
        [Phase("plan", ("jump",)), Phase("act"), Phase("check")],
        [("plan", "act"), ("act", "check")],
        goals=["check"],
    )
    del phases
    agent = Agent(
        ScriptedModel([tool_call("jump", {}), text("ok")]), tools=[jump], phases=phases_without
    )
    result = asyncio.run(agent.run("go"))
    (jumped,) = [r for m in result.messages for r in m.tool_results]
    assert jumped.is_error
    assert "cannot move from phase 'plan' to 'check'" in jumped.content
    assert result.run_state is not None and result.run_state.phase == "plan"


def test_a_spent_budget_moves_to_on_budget() -> None:
    """After ``max_steps`` turns in a phase, the next turn starts in its ``on_budget`` phase."""
    phases = plan_act_check(max_steps=1, on_budget="act")
    read_x = tool_call("read", {"path": "x"})
    turns = [move("act"), move("check"), read_x, read_x, text("ok")]
    agent = agent_for(turns, phases)
    events = asyncio.run(events_of(agent))
    changes = [(e.source, e.dest, e.by) for e in events if isinstance(e, PhaseChangedEvent)]
    assert changes[-1] == ("check", "act", "budget")
    assert RAN == ["read"]  # refused in check (its one step), run in act after the move


def test_a_spent_budget_without_on_budget_stops_the_run() -> None:
    """Without ``on_budget`` the run stops with the phase_budget detail before its next turn."""
    phases = Phases(
        [Phase("plan", ("read",), max_steps=2), Phase("act")], [("plan", "act")], goals=["act"]
    )
    turns = [tool_call("read", {"path": "a"})] * 5
    result = asyncio.run(agent_for(turns, phases).run("go"))
    assert result.stop_reason is StopReason.STOP_CONDITION
    assert result.stop_detail == "phase_budget: phase 'plan' spent its 2 steps"
    assert result.model_calls == 2


# -- run state, events, trace, resume ------------------------------------------------------------
def test_events_and_the_phase_trace_agree_with_the_run_state() -> None:
    """Every state_changed and step_start event carries the phase; the phase trace lines up
    with the loop trace."""
    turns = [
        tool_calls(("read", {"path": "a"}), (MOVE_TOOL, {"phase": "act"})),
        tool_call("write", {"path": "a", "body": "b"}),
        text("ok"),
    ]
    agent = agent_for(turns)
    events = asyncio.run(events_of(agent))
    steps = [(e.tool_name, e.phase) for e in events if isinstance(e, StepStartEvent)]
    assert steps == [("read", "plan"), (MOVE_TOOL, "plan"), ("write", "act")]
    phases_seen = [e.phase for e in events if isinstance(e, StateChangedEvent)]
    assert phases_seen[0] == "plan" and phases_seen[-1] == "act"
    final = asyncio.run(agent_for(turns).run("go")).run_state
    assert final is not None
    assert [(c.source, c.dest, c.by) for c in final.phase_trace] == [
        (None, "plan", "start"),
        ("plan", "act", "model"),
    ]
    change = final.phase_trace[1]
    assert final.trace[change.move].source.value == "dispatching"


def test_the_phase_survives_a_checkpoint_and_resume() -> None:
    """A run suspended in a phase resumes in it, from the stored checkpoint, in a new agent."""
    store = InMemoryCheckpointer()
    turns = [
        move("act"),
        tool_call("deploy", {}),
        tool_call("write", {"path": "a", "body": "b"}),
        text("ok"),
    ]
    first = asyncio.run(agent_for(turns, checkpointer=store).run("go"))
    assert first.stop_reason is StopReason.SUSPENDED
    saved = store.load(first.run_id).state
    assert saved.phase == "act"
    assert RunState.model_validate_json(saved.model_dump_json()).phase_trace == saved.phase_trace
    again = agent_for(turns[2:], checkpointer=store)
    assert first.resume_handle is not None
    done = asyncio.run(again.resume(first.resume_handle, {first.pending[0].id: True}))
    assert done.stop_reason is StopReason.COMPLETED
    assert RAN == ["deploy", "write"]
    assert done.run_state is not None and done.run_state.phase == "act"


def test_an_agent_without_phases_keeps_no_phase() -> None:
    """Without phases nothing changes: no phase in the state or events, every tool offered."""
    agent = Agent(
        ScriptedModel([tool_call("write", {"path": "a", "body": "b"}), text("ok")]),
        tools=[read, write],
        policy=Policy(),
    )
    result = asyncio.run(agent.run("go"))
    assert result.run_state is not None
    assert result.run_state.phase is None and result.run_state.phase_trace == ()
    assert RAN == ["write"]


# -- replay and the definition fingerprint ---------------------------------------------------------
def test_a_recorded_run_under_phases_replays_without_divergence(tmp_path: Any) -> None:
    """Replayed with its phases, a run with refusals, model moves and a code move makes the
    same moves; replayed with another table, it diverges."""
    from fsm_agent.replay import record, replay

    turns = [
        tool_call("write", {"path": "a", "body": "x"}),
        move("act"),
        move("check"),
        tool_call("run_tests", {}),
        text("ok"),
    ]
    path = tmp_path / "run.jsonl"
    asyncio.run(record(agent_for(turns), "go", path))
    report = asyncio.run(replay(path, phases=plan_act_check()))
    assert report.ok, report.divergence
    changes = [e for e in report.events if isinstance(e, PhaseChangedEvent)]
    assert [(c.dest, c.by) for c in changes] == [
        ("act", "model"),
        ("check", "model"),
        ("act", "code"),
    ]
    other = Phases(
        [Phase("plan", ("read", "write")), Phase("act")], [("plan", "act")], goals=["act"]
    )
    assert not asyncio.run(replay(path, phases=other)).ok


def test_resuming_under_another_phase_table_is_refused() -> None:
    """The phases are part of the agent's definition fingerprint; agents without phases keep
    the fingerprint they had."""
    from fsm_agent.errors import DefinitionChangedError

    store = InMemoryCheckpointer()
    turns = [move("act"), tool_call("deploy", {}), text("ok")]
    first = asyncio.run(agent_for(turns, checkpointer=store).run("go"))
    other = Phases(
        [Phase("plan", ("read",)), Phase("act", ("write", "deploy"))],
        [("plan", "act")],
        goals=["act"],
    )
    assert first.resume_handle is not None
    with pytest.raises(DefinitionChangedError) as caught:
        asyncio.run(agent_for(turns[2:], other, checkpointer=store).resume(first.resume_handle))
    assert caught.value.changed == ("phases",)
    plain = Agent(ScriptedModel([]), tools=[read])
    assert "phases=" not in plain._plan.definition


def test_resuming_under_another_exit_check_is_refused() -> None:
    """A phase's exit check is part of the definition fingerprint: a resume under a changed
    one raises ``DefinitionChangedError`` naming ``phases``."""
    from fsm_agent.errors import DefinitionChangedError

    def lenient(rs: RunState) -> bool:
        return True

    def strict(rs: RunState) -> str:
        return "not yet"

    def table(check: Any) -> Phases:
        return Phases(
            [Phase("plan", ("read",), exit_check=check), Phase("act", ("write", "deploy"))],
            [("plan", "act")],
            goals=["act"],
        )

    store = InMemoryCheckpointer()
    turns = [move("act"), tool_call("deploy", {}), text("ok")]
    first = asyncio.run(agent_for(turns, table(lenient), checkpointer=store).run("go"))
    assert first.resume_handle is not None
    again = agent_for(turns[2:], table(strict), checkpointer=store)
    with pytest.raises(DefinitionChangedError) as caught:
        asyncio.run(again.resume(first.resume_handle))
    assert caught.value.changed == ("phases",)
    same = agent_for(turns[2:], table(lenient), checkpointer=store)
    assert asyncio.run(same.resume(first.resume_handle, {first.pending[0].id: True})).ok


def test_an_after_tool_hook_moves_the_phase_by_returning_move_phase() -> None:
    """A hook moves the task by code too; an illegal move it asks for is refused the same way."""

    class Advance:
        def after_tool(self, *, call: Any, result: Any, **_: Any) -> MovePhase | None:
            if call.name == "read":
                return MovePhase("act", "read; moving on")
            if call.name == "write":
                return MovePhase("plan")  # not a legal next phase of act
            return None

    turns = [
        tool_call("read", {"path": "a"}),
        tool_call("write", {"path": "a", "body": "b"}),
        text("ok"),
    ]
    agent = agent_for(turns, hooks=[Advance()])
    events = asyncio.run(events_of(agent))
    changes = [(e.source, e.dest, e.by) for e in events if isinstance(e, PhaseChangedEvent)]
    assert changes == [("plan", "act", "code")]
    results = [e for e in events if e.type == "tool_result"]
    assert results[0].content == "read; moving on"  # type: ignore[union-attr]
    assert "cannot move from phase 'act' to 'plan'" in results[1].content  # type: ignore[union-attr]


def test_a_run_without_a_phase_resumed_under_phases_starts_in_the_initial_phase() -> None:
    """A run started without phases and resumed (allow_changed_definition) by an agent with
    them is put in the initial phase before its next call, and its calls are gated."""
    store = InMemoryCheckpointer()
    plain = Agent(
        ScriptedModel([tool_call("deploy", {})]), tools=[read, write, deploy], checkpointer=store
    )
    first = asyncio.run(plain.run("go"))
    assert first.stop_reason is StopReason.SUSPENDED
    assert first.resume_handle is not None
    later = agent_for(
        [tool_call("write", {"path": "a", "body": "b"}), text("ok")], checkpointer=store
    )
    done = asyncio.run(
        later.resume(
            first.resume_handle, {first.pending[0].id: True}, allow_changed_definition=True
        )
    )
    assert done.run_state is not None
    assert done.run_state.phase == "plan"
    assert [(c.source, c.dest, c.by) for c in done.run_state.phase_trace] == [
        (None, "plan", "start")
    ]
    assert RAN == []  # deploy and write are not plan tools: refused, the approval notwithstanding


def test_a_call_after_a_move_in_the_same_turn_is_checked_in_the_new_phase() -> None:
    """Calls run one after the other: the write after move_to_phase('act') runs."""
    turn = tool_calls((MOVE_TOOL, {"phase": "act"}), ("write", {"path": "a", "body": "b"}))
    agent = agent_for([turn, text("ok")], policy=Policy(parallel_tool_calls=False))
    asyncio.run(agent.run("go"))
    assert RAN == ["write"]


def test_concurrent_calls_are_checked_in_the_phase_their_turn_started_in() -> None:
    """With parallel tool calls, a write beside a move out of plan is refused, as its
    step_start event (phase plan) says, whichever task starts first (found by the fuzzer)."""
    turn = tool_calls((MOVE_TOOL, {"phase": "act"}), ("write", {"path": "a", "body": "b"}))
    agent = agent_for([turn, text("ok")], policy=Policy(parallel_tool_calls=True))
    events = asyncio.run(events_of(agent))
    starts = {e.tool_name: e.phase for e in events if isinstance(e, StepStartEvent)}
    assert starts == {MOVE_TOOL: "plan", "write": "plan"}
    assert RAN == []
    assert [e.dest for e in events if isinstance(e, PhaseChangedEvent)] == ["act"]


def test_a_second_move_in_a_concurrent_turn_is_judged_in_the_turns_phase() -> None:
    """Two moves made together (plan→act, then act→check): the second is judged in plan, where
    the turn started and its step_start says it is, and refused; the task stays in act."""
    turn = tool_calls((MOVE_TOOL, {"phase": "act"}), (MOVE_TOOL, {"phase": "check"}))
    agent = agent_for([turn, text("ok")], policy=Policy(parallel_tool_calls=True))
    events = asyncio.run(events_of(agent))
    assert [e.phase for e in events if isinstance(e, StepStartEvent)] == ["plan", "plan"]
    assert [e.dest for e in events if isinstance(e, PhaseChangedEvent)] == ["act"]
    results = [e for e in events if isinstance(e, ToolResultEvent)]
    assert [r.is_error for r in results] == [False, True]
    assert "started in phase 'plan'" in results[1].content


def test_phases_must_be_a_phase_table() -> None:
    """Anything but a Phases value is refused when the agent is built."""
    from fsm_agent.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"phases must be a fsm_agent\.Phases, got list"):
        Agent(ScriptedModel([]), phases=[Phase("a")])  # type: ignore[arg-type]


def test_require_done_tool_offers_done_in_the_goal_phases_only() -> None:
    """The done tool of require_done_tool is offered, and allowed, in every goal phase."""
    model = ScriptedModel(
        [
            tool_call("done", {"message": "early"}),
            move("act"),
            move("check"),
            tool_call("done", {"message": "finished"}),
        ]
    )
    agent = Agent(
        model,
        tools=[read, write, run_tests, deploy],
        phases=plan_act_check(),
        policy=Policy(require_done_tool=True),
    )
    result = asyncio.run(agent.run("go"))
    assert "done" not in [t.name for t in model.requests[0].tools]
    assert "done" in [t.name for t in model.requests[-1].tools]
    assert result.output == "finished"


def test_phase_instructions_join_a_system_message_from_the_history() -> None:
    """Without a system prompt, a system message given in the history is kept and the phase's
    instructions follow it."""
    from fsm_agent.messages import Message

    model = ScriptedModel([text("ok")])
    agent = Agent(model, tools=[read, write, run_tests, deploy], phases=plan_act_check())
    asyncio.run(agent.run("go", history=[Message.system("Be terse.")]))
    assert model.requests[0].messages[0].text == "Be terse.\n\nPlan the change; read only."


def test_the_example_runs_on_a_model_over_http(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/plan_act_check.py with PLAN_ACT_CHECK_MODEL talks to an OpenAI-compatible
    server (here on 127.0.0.1): each request offers its phase's tools, and the model's
    move_to_phase calls move the task."""
    import runpy
    from pathlib import Path

    from provider_server import Request, Turn, json_reply, openai_json, server_in_thread

    fixed = "def greet(name):\n    return f'Hello, {name}!'\n"
    script = [
        Turn(calls=[("c1", MOVE_TOOL, {"phase": "act"})]),
        Turn(calls=[("c2", "write_file", {"path": "greet.py", "content": fixed})]),
        Turn(calls=[("c3", MOVE_TOOL, {"phase": "check"})]),
        Turn(calls=[("c4", "run_tests", {})]),
        Turn(text="The tests pass."),
    ]
    offered: list[list[str]] = []

    def handler(request: Request) -> Any:
        offered.append([t["function"]["name"] for t in request.json.get("tools", [])])
        return json_reply(openai_json(script[len(offered) - 1]))

    example = Path(__file__).resolve().parents[2] / "examples" / "plan_act_check.py"
    with server_in_thread(handler) as url:
        monkeypatch.setenv("PLAN_ACT_CHECK_MODEL", "openai:local-model")
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
        runpy.run_path(str(example), run_name="__main__")
    out = capsys.readouterr().out
    assert "completed in phase check: The tests pass." in out
    assert "phases: plan -> act -> check" in out
    assert offered[0] == ["read_file", MOVE_TOOL]
    assert offered[1] == ["read_file", "write_file", MOVE_TOOL]
    assert offered[3] == ["run_tests", MOVE_TOOL]
