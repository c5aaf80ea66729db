"""The driver keeps its word at the seams: every run gets an ending, hooks see interrupted runs
to the end, the caller's cancellation goes on, the summary call obeys the limits, and what the
kernel swallows on purpose is logged."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from fsm_agent import (
    Agent,
    ConfigurationError,
    InvalidInputError,
    ModelRequest,
    ModelResponse,
    Policy,
    RunHandle,
    RunState,
    State,
    StopReason,
    UsageLimits,
    tool,
)
from fsm_agent.events import (
    AbortedEvent,
    Event,
    FinalEvent,
    HookErrorEvent,
    ModelRequestEvent,
    TextEvent,
)
from fsm_agent.kernel import driver
from fsm_agent.kernel.plan import declarations_checked, plan_of
from fsm_agent.kernel.states import HANDLERS, SUMMARY_FALLBACK, Verdict
from fsm_agent.machine.agent_machine import MEMO_LIMITS, AgentMachine
from fsm_agent.machine.bounds import bounds
from fsm_agent.machine.formulas import evaluate_all
from fsm_agent.machine.table import TABLE, Outcome
from fsm_agent.messages import FinishReason
from fsm_agent.testing import ScriptedModel, fail, finish, text, tool_call
from helpers import look, make_agent, stream


class Recorder:
    """A hook object that records the moves and the ending it is told about."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, str]] = []
        self.endings: list[str] = []

    def on_transition(self, *, move: Any, **kw: Any) -> None:
        self.moves.append((move.source.value, move.dest.value))

    def after_run(self, *, result: Any, **kw: Any) -> None:
        self.endings.append(result.stop_reason.value)


class SlowSummary:
    """A model that asks for a tool, then takes ``delay`` seconds over the tools-off summary
    (not a ScriptedModel: it answers by the request, whether tools are offered)."""

    name = "slow-summary"
    context_window: int | None = None

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if not request.tools:
            await asyncio.sleep(self.delay)
            turn = text("the summary")
        else:
            turn = tool_call("look", {"topic": "a"})
        assert isinstance(turn, ModelResponse)
        return turn


# -- the ending: a stop condition that raises --------------------------------------------------
def _raises(run_state: RunState) -> bool:
    raise RuntimeError("the quota service is down")


def test_a_raising_stop_condition_is_a_failed_hook_and_the_run_goes_on() -> None:
    """Under the default hook failure mode a stop condition that raises reports hook_error, does
    not fire, and the run reaches its ending: terminal event, after_run, result set."""
    recorder = Recorder()
    agent, _, _ = make_agent([text("done")], stop_conditions=[_raises], hooks=[recorder])
    events, result = stream(agent)
    assert result.state is State.DONE and result.stop_reason is StopReason.COMPLETED
    assert any(isinstance(e, HookErrorEvent) and "_raises" in e.hook for e in events)
    assert isinstance(events[-1], FinalEvent)
    assert recorder.endings == ["completed"]


def test_a_raising_stop_condition_aborts_under_hook_failure_mode_fail() -> None:
    """Under hook_failure_mode="fail" it aborts the run with hook_error, with every ending."""
    recorder = Recorder()
    agent, _, _ = make_agent(
        [text("done")],
        stop_conditions=[_raises],
        hooks=[recorder],
        policy=Policy(hook_failure_mode="fail"),
    )
    events, result = stream(agent)
    assert result.state is State.ABORTED and result.stop_reason is StopReason.HOOK_ERROR
    assert "quota service" in ((result.error and str(result.error)) or "")
    assert isinstance(events[-1], AbortedEvent)
    assert recorder.endings == ["hook_error"]


def test_the_string_a_stop_condition_returns_is_the_stop_detail() -> None:
    def budget(run_state: RunState) -> str:
        return "the budget of 3 lookups is spent" if run_state.tool_executions >= 1 else ""

    agent, _, _ = make_agent(
        [tool_call("look"), text("never")], tools=[look], stop_conditions=[budget]
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.STOP_CONDITION
    assert result.stop_detail == "the budget of 3 lookups is spent"


# -- the deadline during the step-limit summary call -------------------------------------------
def test_the_deadline_during_the_summary_call_ends_the_run_with_a_fallback() -> None:
    model = SlowSummary(delay=5)
    agent = Agent(model, tools=[look], policy=Policy(max_steps=1, max_wall_clock_s=0.05))
    result = agent.run_sync("go")
    assert result.state is State.DONE and result.stop_reason is StopReason.TIMEOUT
    assert result.output == SUMMARY_FALLBACK
    assert len(model.requests) == 2


def test_a_listener_holding_the_summary_request_past_the_deadline() -> None:
    model = SlowSummary(delay=0)
    agent = Agent(model, tools=[look], policy=Policy(max_steps=1, max_wall_clock_s=0.05))
    handle = RunHandle()
    events: list[Event] = []

    async def main() -> None:
        async for event in agent.run_stream("go", handle=handle):
            events.append(event)
            if isinstance(event, ModelRequestEvent) and not event.request.tools:
                await asyncio.sleep(0.2)  # the deadline passes while the listener holds it

    asyncio.run(main())
    assert handle.result is not None
    assert handle.result.stop_reason is StopReason.TIMEOUT
    assert handle.result.output == SUMMARY_FALLBACK
    assert isinstance(events[-1], FinalEvent)


# -- hooks after an interrupt ------------------------------------------------------------------
def test_every_hook_sees_an_interrupted_run_to_its_end() -> None:
    """After the deadline interrupts a run, every on_transition and after_run hook still runs,
    not only the first one of each point."""

    @tool
    async def slow() -> str:
        """Work past the deadline."""
        await asyncio.sleep(5)
        return "late"

    first, second = Recorder(), Recorder()
    agent, _, _ = make_agent(
        [tool_call("slow"), text("never")],
        tools=[slow],
        hooks=[first, second],
        policy=Policy(max_wall_clock_s=0.05),
    )
    result = agent.run_sync("go")
    assert result.stop_reason is StopReason.TIMEOUT
    assert second.moves == first.moves
    assert first.moves[-2:] == [("dispatching", "finalizing"), ("finalizing", "done")]
    assert first.endings == second.endings == ["timeout"]


# -- the caller's cancellation -----------------------------------------------------------------
class Hangs:
    """A model that calls ``on_call`` and then waits forever (not ``helpers.Held``: ``on_call``
    must run in the very loop tick after the call arrives)."""

    def __init__(self, on_call: Any) -> None:
        self.on_call = on_call

    async def complete(self, request: ModelRequest) -> ModelResponse:
        asyncio.get_running_loop().call_soon(self.on_call)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_caller_cancel_in_the_same_tick_as_the_runs_own_goes_on() -> None:
    handle = RunHandle()
    box: dict[str, asyncio.Task[Any]] = {}

    def both() -> None:
        handle.cancel()  # the run's own interrupt ...
        box["task"].cancel()  # ... and the caller's cancel, in the same tick

    async def main() -> None:
        agent = Agent(Hangs(both))
        task = box["task"] = asyncio.create_task(agent.run("go", handle=handle))
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()

    asyncio.run(main())
    assert handle.result is not None and handle.result.stop_reason is StopReason.CANCELLED


def test_an_asyncio_timeout_firing_with_the_runs_interrupt_raises_timeout_error() -> None:
    handle = RunHandle()

    async def main() -> None:
        async with asyncio.timeout(60) as scope:

            def both() -> None:  # the policy's deadline and the caller's timeout, one tick
                loop = asyncio.get_running_loop()
                when = loop.time() + 0.01
                loop.call_at(when, handle.cancel)
                scope.reschedule(when)

            agent = Agent(Hangs(both))
            await agent.run("go", handle=handle)

    with pytest.raises(TimeoutError):
        asyncio.run(main())


def test_the_runs_own_cancel_leaves_the_task_uncancelled() -> None:
    handle = RunHandle()

    async def main() -> None:
        agent = Agent(Hangs(handle.cancel))
        result = await agent.run("go", handle=handle)
        assert result.stop_reason is StopReason.CANCELLED
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0

    asyncio.run(main())


def test_a_cancelled_caller_still_gets_after_run() -> None:
    recorder = Recorder()
    box: dict[str, asyncio.Task[Any]] = {}

    async def main() -> None:
        agent = Agent(Hangs(lambda: box["task"].cancel()), hooks=[recorder])
        task = box["task"] = asyncio.create_task(agent.run("go"))
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert recorder.endings == ["cancelled"]


# -- the summary call under usage limits -------------------------------------------------------
def test_the_summary_call_is_not_made_past_max_requests() -> None:
    policy = Policy(max_steps=2, usage_limits=UsageLimits(max_requests=2))
    agent, model, _ = make_agent(
        [tool_call("look"), tool_call("look"), text("summary")], tools=[look], policy=policy
    )
    result = agent.run_sync("go")
    assert len(model.requests) == 2 and result.model_calls == 2
    assert result.state is State.DONE and result.stop_reason is StopReason.USAGE_LIMIT
    assert result.output == SUMMARY_FALLBACK
    assert bounds(policy).max_model_calls == 2
    assert evaluate_all(policy)["model calls"] == 2


def test_the_summary_call_is_not_made_past_a_token_cap() -> None:
    policy = Policy(max_steps=1, usage_limits=UsageLimits(max_total_tokens=15))
    agent, model, _ = make_agent([tool_call("look"), text("summary")], tools=[look], policy=policy)
    result = agent.run_sync("go")
    assert len(model.requests) == 1
    assert result.stop_reason is StopReason.USAGE_LIMIT


def test_the_summary_call_is_still_made_within_the_limits() -> None:
    policy = Policy(max_steps=1, usage_limits=UsageLimits(max_requests=2))
    agent, _, _ = make_agent([tool_call("look"), text("summary")], tools=[look], policy=policy)
    result = agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.MAX_STEPS, "summary")
    assert bounds(policy).max_model_calls == evaluate_all(policy)["model calls"] == 2


# -- the done tool and the verifier ------------------------------------------------------------
def test_require_done_tool_with_a_verifier_is_refused() -> None:
    def verify(*, output: str, run_state: RunState) -> bool:
        return True

    with pytest.raises(ConfigurationError, match="verifier would never run"):
        make_agent([text("x")], verifier=verify, policy=Policy(require_done_tool=True))
    agent, _, _ = make_agent([text("x")], verifier=verify)
    with pytest.raises(ConfigurationError, match="verifier would never run"):
        agent.policy = Policy(require_done_tool=True)


# -- smaller points ----------------------------------------------------------------------------
def test_no_text_event_for_the_accepted_answer() -> None:
    verdicts = iter([Verdict.reject("more"), Verdict.accept()])

    def verify(*, output: str, run_state: RunState) -> Verdict:
        return next(verdicts)

    agent, _, _ = make_agent([text("first try"), text("final answer")], verifier=verify)
    events, result = stream(agent)
    assert result.output == "final answer"
    assert [e.text for e in events if isinstance(e, TextEvent)] == ["first try"]


def test_a_new_policy_is_honoured_in_full() -> None:
    agent, model, _ = make_agent(
        [tool_call("look"), tool_call("look"), text("answer")],
        tools=[look],
        policy=Policy(max_steps=1),
    )
    agent.policy = Policy(max_steps=5, parallel_tool_calls=False)
    result = agent.run_sync("go")
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "answer")
    assert model.requests[0].parallel_tool_calls is False
    agent.policy = Policy(require_done_tool=True)
    assert "done" in agent.tools


class _Misspells:
    def on_transition(self, *, run_state: RunState, **kw: Any) -> None:
        run_state.outptu = "typo"  # type: ignore[attr-defined]


def _misspelling_condition(run_state: RunState) -> bool:
    run_state.stop_reasn = "typo"  # type: ignore[attr-defined]
    return False


@pytest.mark.parametrize(
    "where", [{"hooks": [_Misspells()]}, {"stop_conditions": [_misspelling_condition]}]
)
def test_a_misspelt_run_state_write_fails_and_is_reported(where: dict[str, Any]) -> None:
    """User code that writes a name the run state has no field for is a failing hook: the
    write raises where it is made (nothing is written) and hook_error names it and the
    fields."""
    agent, _, _ = make_agent([text("done")], **where)
    events, result = stream(agent)
    errors = [e.error for e in events if isinstance(e, HookErrorEvent)]
    assert errors and ("'outptu'" in errors[0] or "'stop_reasn'" in errors[0])
    assert "its fields are: run_id," in errors[0]
    assert result.run_state is not None
    assert not hasattr(result.run_state, "outptu") and not hasattr(result.run_state, "stop_reasn")
    under_fail, _, _ = make_agent([text("done")], policy=Policy(hook_failure_mode="fail"), **where)
    assert under_fail.run_sync("go").stop_reason is StopReason.HOOK_ERROR


def test_a_misspelt_write_by_the_verifier_rejects_the_answer() -> None:
    def verify(*, output: str, run_state: RunState) -> bool:
        run_state.feedbak = "typo"  # type: ignore[attr-defined]
        return True

    agent, _, _ = make_agent([text("a"), text("b")], verifier=verify)
    events, result = stream(agent)
    assert any(
        isinstance(e, HookErrorEvent) and "'feedbak'" in e.error and "fields are" in e.error
        for e in events
    )
    assert result.stop_reason is not StopReason.COMPLETED  # each answer was rejected
    assert result.run_state is not None and not hasattr(result.run_state, "feedbak")


def test_the_raw_reason_of_an_other_finish_is_kept() -> None:
    agent, _, _ = make_agent([finish(FinishReason.OTHER, "partial", raw_reason="recitation")])
    result = agent.run_sync("go")
    assert result.raw_finish_reason == "recitation"
    assert result.run_state is not None and result.run_state.raw_finish_reason == "recitation"


def test_the_remembered_moves_are_bounded_per_process() -> None:
    machine = AgentMachine(TABLE)
    for steps in range(1, MEMO_LIMITS + 20):
        agent = Agent(ScriptedModel([text("ok")]), machine=machine, policy=Policy(max_steps=steps))
        agent.run_sync("go")
    assert len(machine._remembered) <= MEMO_LIMITS


def test_an_undeclared_outcome_is_caught_by_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    async def drifted(ctx: Any) -> Outcome:
        return Outcome.TOOLS_DONE

    monkeypatch.setitem(HANDLERS, State.IDLE, drifted)
    agent, _, _ = make_agent([text("x")])
    with pytest.raises(driver.UndeclaredOutcomeError, match="'idle' reported 'tools_done'"):
        agent.run_sync("go")


def test_the_declaration_check_is_off_without_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(driver.CHECK_ENV)
    assert not declarations_checked()
    agent, _, _ = make_agent([text("x")])
    assert not plan_of(agent).checks_declarations  # read when the plan is compiled
    monkeypatch.setenv(driver.CHECK_ENV, "1")
    assert declarations_checked()


# -- logging -----------------------------------------------------------------------------------
class _Broken:
    def on_transition(self, **kw: Any) -> None:
        raise ValueError("audit sink unreachable")


def test_what_a_run_swallows_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    def verify(*, output: str, run_state: RunState) -> bool:
        raise KeyError("judge")

    caplog.set_level(logging.WARNING, logger="fsm_agent")
    agent, _, _ = make_agent(
        [text("a"), text("b")],
        hooks=[_Broken()],
        verifier=verify,
        policy=Policy(max_verifications=1),
    )
    agent.run_sync("go")
    messages = [r.getMessage() for r in caplog.records if r.name == "fsm_agent"]
    assert any("_Broken.on_transition failed" in m and "audit sink" in m for m in messages)
    assert any("verifier failed" in m for m in messages)


def test_a_summary_fallback_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fsm_agent")
    agent = Agent(
        SlowSummary(delay=5), tools=[look], policy=Policy(max_steps=1, max_wall_clock_s=0.05)
    )
    agent.run_sync("go")
    assert any("no step-limit summary" in r.getMessage() for r in caplog.records)


def test_the_logger_is_silent_by_default() -> None:
    logger = logging.getLogger("fsm_agent")
    assert any(isinstance(h, logging.NullHandler) for h in logger.handlers)


def test_building_a_machine_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    AgentMachine(TABLE)
    assert [r for r in caplog.records if r.name.startswith("transitions")] == []


# -- user code that hangs or answers garbage ---------------------------------------------------
def test_a_hanging_verifier_rejects_the_answer_after_the_hook_timeout() -> None:
    calls: list[str] = []

    async def verify(*, output: str, run_state: RunState) -> bool:
        calls.append(output)
        if len(calls) == 1:
            await asyncio.sleep(60)
        return True

    agent, _, _ = make_agent(
        [text("first"), text("second")], verifier=verify, policy=Policy(hook_timeout_s=0.01)
    )
    events, result = stream(agent)
    assert (result.stop_reason, result.output) == (StopReason.COMPLETED, "second")
    assert any(isinstance(e, HookErrorEvent) and "TimeoutError" in e.error for e in events)


def test_a_verifier_answering_garbage_rejects_the_answer() -> None:
    async def verify(*, output: str, run_state: RunState) -> object:
        return "looks fine to me"

    agent, _, _ = make_agent(
        [text("first"), text("second")], verifier=verify, policy=Policy(max_verifications=1)
    )
    events, result = stream(agent)
    assert result.stop_reason is StopReason.UNVERIFIED
    assert any(isinstance(e, HookErrorEvent) and e.hook == "verifier" for e in events)


def test_a_run_inside_a_task_group_is_cancelled_with_its_siblings() -> None:
    """A sibling's failure cancels the run's task in the same tick as the run's own cancel:
    the TaskGroup still sees the run cancelled and raises the sibling's error."""
    handle = RunHandle()

    async def sibling() -> None:
        await asyncio.sleep(0.01)
        handle.cancel()
        raise ValueError("the sibling failed")

    async def main() -> None:
        agent = Agent(Hangs(lambda: None))
        async with asyncio.TaskGroup() as group:
            run = group.create_task(agent.run("go", handle=handle))
            group.create_task(sibling())
        raise AssertionError(f"unreachable: {run}")

    with pytest.raises(ExceptionGroup) as info:
        asyncio.run(main())
    assert info.group_contains(ValueError)
    assert handle.result is not None and handle.result.stop_reason is StopReason.CANCELLED


def test_a_listener_that_stops_reading_unwinds_the_run_where_it_stands() -> None:
    recorder = Recorder()
    agent, model, _ = make_agent(
        [tool_call("look"), tool_call("look"), text("never")], tools=[look], hooks=[recorder]
    )
    handle = RunHandle()

    async def main() -> None:
        async for event in agent.run_stream("go", handle=handle):
            if event.type == "tool_result":
                break  # the listener leaves: the stream is closed

    asyncio.run(main())
    assert handle.result is None and recorder.endings == []
    assert len(model.requests) == 1  # nothing ran after the listener left


def test_fsm_agent_fuzz_turns_the_declaration_check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from fsm_agent.cli import main

    monkeypatch.delenv(driver.CHECK_ENV)
    assert main(["fuzz", "--examples", "3", "--seed", "1"]) == 0
    assert declarations_checked()


# -- run_sync ----------------------------------------------------------------------------------
@pytest.mark.parametrize("prompt", ["go", ""], ids=["adapter_error", "invalid_input"])
def test_an_error_out_of_run_sync_carries_no_event_loop_check(prompt: str) -> None:
    """An exception out of ``run_sync`` has no ``RuntimeError('no running event loop')`` as its
    context: its traceback shows the error alone."""
    with pytest.raises((ValueError, InvalidInputError)) as caught:
        # a model adapter with a bug: its call raises an error that is not a model error
        Agent(ScriptedModel([fail(ValueError("adapter bug"))])).run_sync(prompt)
    chain: list[BaseException] = []
    error: BaseException | None = caught.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert not any("no running event loop" in str(e) for e in chain)
