"""Replaying a composed run: the recording keeps each child's definition and events, and the
replay runs the children again on them, grandchildren included, with the recorded run ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fsm_agent import Agent, Policy, RetryPolicy, tool
from fsm_agent.events import ChildEvent, StateChangedEvent, ToolResultEvent
from fsm_agent.replay import read_recording, record, replay
from fsm_agent.testing import ScriptedModel, text, tool_call, tool_calls


@tool
def search(query: str) -> str:
    """Search the archive."""
    return f"3 articles about {query}"


def writer() -> Agent[None]:
    """A writer that asks a researcher twice (who asks a digger once per question, and runs
    out of steps the second time), then writes."""
    digger = Agent(
        ScriptedModel([text("Dug: the moon."), text("Dug: the sun.")]), system_prompt="Dig."
    )
    researcher = Agent(
        ScriptedModel(
            [
                tool_calls(("dig", {"task": "moon"}), ("search", {"query": "tides"})),
                text("The moon pulls the tides."),
                tool_call("dig", {"task": "sun"}),
                tool_call("search", {"query": "spring tides"}),
                text("Spring tides come at new and full moon."),
            ]
        ),
        tools=[search, digger.as_tool(name="dig", description="Dig one fact.")],
        system_prompt="Research.",
        policy=Policy(max_steps=2, retry=RetryPolicy(max_retries=0), summarize_on_max_steps=False),
    )
    return Agent(
        ScriptedModel(
            [
                tool_call("research", {"task": "Why tides?"}),
                tool_call("research", {"task": "When strongest?"}),
                text("A piece on tides."),
            ]
        ),
        tools=[researcher.as_tool(name="research", description="Research one question.")],
        system_prompt="Write.",
    )


def test_a_composed_run_replays_with_its_children(tmp_path: Path) -> None:
    """The recording of a writer, its researcher (called twice, stopped by its step limit the
    second time) and their digger replays to the same events, the children's included."""
    path = tmp_path / "run.jsonl"
    result = asyncio.run(record(writer(), "Write on tides.", path))
    recording = read_recording(path)
    (researcher,) = recording.header.children.values()
    assert researcher.system_prompt == "Research." and list(researcher.children) == ["dig"]
    nested = [e for e in recording.events if isinstance(e, ChildEvent)]
    assert {e.depth for e in nested} == {1, 2}
    assert len({e.child_run_id for e in nested if e.depth == 1}) == 2
    answers = [e for e in recording.events if isinstance(e, ToolResultEvent)]
    assert [a.is_error for a in answers] == [False, True]  # the second stopped at max_steps

    report = asyncio.run(replay(path))

    assert report.ok, report.divergence
    replayed = [e for e in report.events if isinstance(e, ChildEvent)]
    moves = [
        (e.child_run_id, e.event.source, e.event.dest)
        for e in replayed
        if isinstance(e.event, StateChangedEvent)
    ]
    assert moves == [
        (e.child_run_id, e.event.source, e.event.dest)
        for e in nested
        if isinstance(e.event, StateChangedEvent)
    ]
    assert len(moves) > 10
    assert report.events[-1].type == "final" and result.output == "A piece on tides."
