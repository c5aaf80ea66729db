"""Record and replay: a recording re-runs with no network to the same events, a changed policy
or tool shows exactly where the run diverges, and the CLI reads recordings and stored runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from durable_scenario import PROMPT, make_agent
from fsm_agent import Policy, tool
from fsm_agent.cli import main
from fsm_agent.cli.demo import DEMO_PROMPT, demo_agent
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.replay import read_recording, record, replay


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    path = tmp_path / "run.jsonl"
    asyncio.run(record(make_agent(None, lambda _: None), PROMPT, path))
    return path


def test_a_recording_is_a_header_then_every_event(recording: Path) -> None:
    """The first line describes the agent; the rest are the run's events with every response
    and tool result."""
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert lines[0]["type"] == "recording" and lines[0]["verifier"] is True
    types = [line["type"] for line in lines[1:]]
    assert types.count("model_request") == 5 and types.count("model_response") == 4
    assert types.count("tool_result") == 3 and types[-1] == "final"


def test_a_replay_reproduces_the_recorded_run(recording: Path) -> None:
    """Replayed model, tools and verifier give the same events: no divergence."""
    report = asyncio.run(replay(recording))
    assert report.ok, report.divergence
    assert report.events[-1].type == "final"


def test_a_changed_policy_shows_where_the_run_diverges(recording: Path) -> None:
    """A smaller step limit diverges at the move where the limit bites, with both values."""
    policy = read_recording(recording).header.policy.model_copy(update={"max_steps": 2})
    report = asyncio.run(replay(recording, policy=policy))
    assert report.divergence is not None
    assert 'dest: recorded "compacting", replayed "finalizing"' in str(report.divergence)
    assert report.divergence.line is not None


def test_a_changed_tool_shows_where_the_run_diverges(recording: Path) -> None:
    """A real tool with another result diverges at that tool's result event."""
    from fsm_agent.replay import replayed_tools

    @tool(name="charge")
    def charge(amount: int) -> str:
        """Charge, the new way."""
        return f"charged {amount * 2}"

    recorded = read_recording(recording)
    tools = [t for t in replayed_tools(recorded) if t.name != "charge"] + [charge]
    report = asyncio.run(replay(recorded, tools=tools))
    assert report.divergence is not None
    assert report.divergence.recorded is not None
    assert report.divergence.recorded.type == "model_request" or "charged" in str(report.divergence)


def test_the_replay_command_passes_and_fails_with_the_place(
    recording: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fsm-agent replay exits 0 on a match and 1 on a divergence, naming the event and line."""
    assert main(["replay", str(recording)]) == 0
    assert "replay matches the recording" in capsys.readouterr().out
    policy = tmp_path / "policy.json"
    policy.write_text(Policy(max_steps=2).model_dump_json())
    assert main(["replay", str(recording), "--policy", str(policy), "-q"]) == 1
    assert "diverged at event" in capsys.readouterr().err


def test_demo_record_is_replayable_and_drawable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """demo --record writes a recording that replay and diagram --trace both read."""
    path = tmp_path / "demo.jsonl"
    assert main(["demo", "--record", str(path), "--no-diagram"]) == 0
    assert main(["replay", str(path), "-q"]) == 0
    assert main(["diagram", "--trace", str(path)]) == 0
    assert "digraph" in capsys.readouterr().out


def test_a_bad_recording_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that is not a recording exits 2 with the line that is wrong."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type": "nonsense"}\n')
    assert main(["replay", str(path)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err


def test_runs_list_show_and_diagram_of_a_stored_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """runs list/show read a checkpoint database; diagram --trace draws a stored run."""
    db = tmp_path / "runs.db"
    agent = demo_agent()
    agent.checkpointer = SQLiteCheckpointer(db)
    agent.run_sync(DEMO_PROMPT)
    assert main(["runs", "list", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "run_demo" in out and "completed" in out
    assert main(["runs", "show", "run_demo", "--db", f"sqlite:///{db}"]) == 0
    out = capsys.readouterr().out
    assert "state      done" in out and "finalizing --finalized--> done" in out
    assert "run_demo/1/model/1: recorded" in out
    assert main(["diagram", "--trace", f"sqlite:///{db}#run_demo"]) == 0
    assert "run run_demo" in capsys.readouterr().out
    assert main(["runs", "show", "nope", "--db", str(db)]) == 2
    assert "no checkpoint holds run 'nope'" in capsys.readouterr().err
