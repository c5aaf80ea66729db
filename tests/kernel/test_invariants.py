"""Property tests: DESIGN §8 invariants 1–9 hold for generated scripts, policies, verifiers
and cancellation points, on the real kernel with the scripted model."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from fsm_agent import Agent, Policy, RunHandle, Runtime
from fsm_agent.events import Event
from fsm_agent.machine.table import TERMINAL
from fsm_agent.policy import limits_of
from fsm_agent.testing import ScriptedModel, Turn, VirtualClock
from invariants import RunRecord, check_invariants
from strategies import TOOLS, policies, scripts, verifiers


def run_generated(
    script: list[Turn],
    policy: Policy,
    verifier: Callable[..., object] | None,
    cancel_after: int | None,
) -> RunRecord:
    """Run the kernel on a script, cancelling after ``cancel_after`` events when set."""
    clock = VirtualClock()
    model = ScriptedModel(script)
    if policy.require_done_tool:
        verifier = None  # the agent refuses a verifier the done tool would bypass
    agent = Agent(
        model,
        tools=TOOLS,
        system_prompt="You are tested.",
        policy=policy,
        verifier=verifier,  # type: ignore[arg-type]
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )
    handle = RunHandle()
    events: list[Event] = []
    cancelled_at: tuple[int, int] | None = None

    async def main() -> None:
        nonlocal cancelled_at
        async for event in agent.run_stream("Do the task.", handle=handle):
            events.append(event)
            if (
                cancel_after is not None
                and len(events) == cancel_after
                and cancelled_at is None
                and getattr(event, "dest", None) not in TERMINAL
                and event.type not in ("final", "aborted", "suspended")
            ):
                handle.cancel()
                state = handle._rs
                assert state is not None
                cancelled_at = (len(model.requests), state.tool_executions)

    asyncio.run(main())
    assert handle.result is not None
    return RunRecord(
        result=handle.result,
        events=events,
        model=model,
        policy=policy,
        limits=limits_of(policy, verification=verifier is not None),
        cancelled_at=cancelled_at,
    )


@given(scripts, policies(), verifiers, st.none() | st.integers(1, 30))
def test_invariants_hold_for_generated_runs(
    script: list[Turn],
    policy: Policy,
    verifier: Callable[..., object] | None,
    cancel_after: int | None,
) -> None:
    """Invariants 1–9: termination, bounded work, legal moves only (every state_changed is the
    row decide() picks, so its guard held), one ending, well-formed history at every request,
    stop reason agrees, usage adds up, nothing starts after cancel, counters within limits."""
    check_invariants(run_generated(script, policy, verifier, cancel_after))


@given(scripts, policies())
def test_run_and_run_stream_agree(script: list[Turn], policy: Policy) -> None:
    """run() (no events built) and run_stream() take the same moves to the same ending."""
    streamed = run_generated(script, policy, None, None).result
    clock = VirtualClock()
    agent = Agent(
        ScriptedModel(script),
        tools=TOOLS,
        system_prompt="You are tested.",
        policy=policy,
        runtime=Runtime(sleep=clock.sleep, clock=clock.now),
    )
    plain = agent.run_sync("Do the task.")
    assert plain.trace == streamed.trace
    assert plain.stop_reason is streamed.stop_reason
    assert plain.output == streamed.output
    assert plain.usage == streamed.usage
