"""One way to name a checkpoint store on the command line: ``--store PATH_OR_DSN``, or the
environment variable ``FSM_AGENT_STORE``, for ``runs``, ``inspect`` and ``diagram --trace``;
the older spellings (``runs --db``, ``inspect STORE``, ``--trace STORE#RUN_ID``) still work, and a
store given where a run belongs is answered with the form that names one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli_errors import cli, usage_error

from fsm_agent import Agent
from fsm_agent.cli import main
from fsm_agent.persistence import SQLiteCheckpointer
from fsm_agent.testing import ScriptedModel, text

ENV = "FSM_AGENT_STORE"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, str]:
    """A SQLite store holding one finished run, and that run's id."""
    path = tmp_path / "runs.db"
    agent = Agent(ScriptedModel([text("Hello.")]), checkpointer=SQLiteCheckpointer(path))
    result = agent.run_sync("Hi.")
    assert result.ok
    return path, result.run_id


@pytest.fixture(autouse=True)
def no_store_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test says where its store comes from."""
    monkeypatch.delenv(ENV, raising=False)


@pytest.mark.parametrize("spelling", ["--store", "--db", "environment"])
def test_runs_takes_the_store_as_store_db_or_from_the_environment(
    spelling: str,
    stored: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``runs list`` finds the run with ``--store``, its alias ``--db``, or ``FSM_AGENT_STORE``."""
    path, run_id = stored
    if spelling == "environment":
        monkeypatch.setenv(ENV, str(path))
        given: tuple[str, ...] = ()
    else:
        given = (spelling, str(path))
    code, out, err = cli(capsys, monkeypatch, tmp_path, "runs", "list", *given)
    assert code == 0, err
    assert run_id in out


def test_runs_without_a_store_names_both_ways_to_give_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``--store`` and no ``FSM_AGENT_STORE``: one line naming both."""
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "runs", "list"))
    assert "--store PATH_OR_DSN" in line and ENV in line


def test_a_store_in_the_environment_is_checked_like_one_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``FSM_AGENT_STORE`` naming no store is one line that names the variable."""
    monkeypatch.setenv(ENV, str(tmp_path / "missing.db"))
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "runs", "list"))
    assert ENV in line and "no SQLite store" in line


@pytest.mark.parametrize("spelling", ["--store", "environment", "url", "path"])
def test_diagram_draws_a_stored_run_named_by_its_id(
    spelling: str,
    stored: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``diagram --trace RUN_ID`` with ``--store`` or ``FSM_AGENT_STORE`` draws the run, as
    ``--trace sqlite:///PATH#RUN_ID`` (kept) and ``--trace PATH#RUN_ID`` do."""
    path, run_id = stored
    trace = {
        "--store": ["--store", str(path), "--trace", run_id],
        "environment": ["--trace", run_id],
        "url": ["--trace", f"sqlite:///{path}#{run_id}"],
        "path": ["--trace", f"{path}#{run_id}"],
    }[spelling]
    if spelling == "environment":
        monkeypatch.setenv(ENV, str(path))
    code, out, err = cli(capsys, monkeypatch, tmp_path, "diagram", "--format", "mermaid", *trace)
    assert code == 0, err
    assert f"run {run_id}" in out and "finalizing" in out


@pytest.mark.parametrize("given", ["plain", "url"])
def test_a_store_given_as_a_trace_is_told_the_form_that_names_a_run(
    given: str,
    stored: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``diagram --trace runs.db`` (a store, no run) is one line naming ``--store … --trace
    RUN_ID`` and the ``#RUN_ID`` form, not a complaint about the file's encoding."""
    path, _ = stored
    target = str(path) if given == "plain" else f"sqlite:///{path}"
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "diagram", "--trace", target))
    assert "UTF-8" not in line
    assert "--trace RUN_ID" in line and "#RUN_ID" in line and "--store" in line


def test_store_without_trace_is_a_usage_error(
    stored: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``diagram --store PATH`` alone says the store is for ``--trace RUN_ID``."""
    path, _ = stored
    line = usage_error(cli(capsys, monkeypatch, tmp_path, "diagram", "--store", str(path)))
    assert "--trace RUN_ID" in line


def _inspect(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``fsm-agent inspect ARGS`` with a port out of range, so that it stops before serving
    once the store is read: which error it gives says how far it got."""
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in {**os.environ, **env}.items() if v},
    )


def test_inspect_takes_store_and_keeps_the_positional_alias(
    stored: tuple[Path, str], tmp_path: Path
) -> None:
    """``inspect --store PATH`` and ``inspect PATH`` read the same store; a store given both
    ways, or a missing one, is one line."""
    missing = str(tmp_path / "missing.db")
    for args in (["--store", missing], [missing]):
        done = _inspect(*args, env={ENV: ""})
        assert done.returncode == 2 and "no SQLite store" in done.stderr, done.stderr
    path = str(stored[0])
    both = _inspect(path, "--store", path, env={ENV: ""})
    assert both.returncode == 2 and "once" in both.stderr, both.stderr
    none = _inspect(env={ENV: ""})
    assert none.returncode == 2
    assert "--store PATH_OR_DSN" in none.stderr and ENV in none.stderr


@pytest.mark.parametrize("command", ["runs", "inspect", "diagram"])
def test_every_command_s_help_names_store_and_the_variable(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--help`` of each command that reads a store shows ``--store PATH_OR_DSN`` and
    ``FSM_AGENT_STORE``."""
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--store PATH_OR_DSN" in shown and ENV in shown


def test_with_a_store_in_the_environment_a_trace_file_is_still_read_as_a_file(
    stored: tuple[Path, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``FSM_AGENT_STORE`` set, ``diagram --trace run.jsonl`` draws the recording that exists."""
    code, _, err = cli(capsys, monkeypatch, tmp_path, "demo", "--no-diagram", "--record", "r.jsonl")
    assert code == 0, err
    monkeypatch.setenv(ENV, str(stored[0]))
    code, out, err = cli(capsys, monkeypatch, tmp_path, "diagram", "--trace", "r.jsonl")
    assert code == 0, err
    assert "run r.jsonl" in out
