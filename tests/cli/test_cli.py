"""The ``fsm-agent`` command line, driven as a user drives it: in a subprocess."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fsm_agent.cli import COMMANDS
from fsm_agent.cli.diagram import REGENERATE
from fsm_agent.diagrams import overview_dot, overview_mermaid, to_dot, to_mermaid
from fsm_agent.events import event_adapter
from provider_server import Reply, Request, Turn, openai_sse, server_in_thread, sse_reply

ROOT = Path(__file__).resolve().parents[2]


def fsm_agent(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m fsm_agent ARGS`` from ``cwd`` with this checkout importable."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "FSM_AGENT_"))}
    environ["PYTHONPATH"] = str(ROOT)
    environ["PYTHONIOENCODING"] = "utf-8"
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "fsm_agent", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=30,
        check=False,
    )


def _error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a failed command (Graphviz's font warnings aside)."""
    lines = [x for x in result.stderr.splitlines() if not x.startswith("Fontconfig")]
    assert len(lines) == 1, result.stderr
    return lines[0]


# --- help and usage errors -------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], *([c.name] for c in COMMANDS)])
def test_help_on_every_command(command: list[str], tmp_path: Path) -> None:
    """``--help`` works on the program and on every command, exit code 0."""
    result = fsm_agent(*command, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: fsm-agent")


def test_no_command_is_a_usage_error(tmp_path: Path) -> None:
    """Without a command, one error line and exit code 2."""
    result = fsm_agent(cwd=tmp_path)
    assert result.returncode == 2
    assert _error_line(result).startswith("fsm-agent: error:")


def test_bad_argument_is_one_line_exit_2(tmp_path: Path) -> None:
    """An unknown format is one error line naming the choices, exit code 2."""
    result = fsm_agent("diagram", "--format", "jpeg", cwd=tmp_path)
    assert result.returncode == 2
    line = _error_line(result)
    assert line.startswith("fsm-agent diagram: error:")
    assert "jpeg" in line


@pytest.mark.parametrize("option", ["--trace", "--policy"])
def test_missing_file_is_a_usage_error(option: str, tmp_path: Path) -> None:
    """A missing --trace or --policy file is one error line naming it, exit code 2."""
    result = fsm_agent("diagram", option, "missing.json", cwd=tmp_path)
    assert result.returncode == 2
    assert "missing.json" in _error_line(result)


def test_invalid_policy_file_is_a_usage_error(tmp_path: Path) -> None:
    """A policy file that does not validate is one error line with the problem, exit code 2."""
    (tmp_path / "policy.json").write_text('{"max_steps": 0}')
    result = fsm_agent("diagram", "--policy", "policy.json", cwd=tmp_path)
    assert result.returncode == 2
    assert "max_steps" in _error_line(result)


# --- diagram ---------------------------------------------------------------------------------


def test_diagram_prints_dot_and_mermaid(tmp_path: Path) -> None:
    """``diagram`` prints the overview's DOT by default, Mermaid with --format mermaid, and
    every row with --level full."""
    dot = fsm_agent("diagram", cwd=tmp_path)
    assert dot.returncode == 0, dot.stderr
    assert dot.stdout == overview_dot()
    mermaid = fsm_agent("diagram", "--format", "mermaid", cwd=tmp_path)
    assert mermaid.stdout == overview_mermaid()
    assert fsm_agent("diagram", "--level", "full", cwd=tmp_path).stdout == to_dot()
    full = fsm_agent("diagram", "--level", "full", "--format", "mermaid", cwd=tmp_path)
    assert full.stdout == to_mermaid()


def test_diagram_renders_svg_and_png_files(tmp_path: Path) -> None:
    """``-o`` picks the format from the suffix: a valid SVG, a PNG."""
    assert fsm_agent("diagram", "-o", "m.svg", cwd=tmp_path).returncode == 0
    ElementTree.parse(tmp_path / "m.svg")
    assert fsm_agent("diagram", "-o", "m.png", cwd=tmp_path).returncode == 0
    assert (tmp_path / "m.png").read_bytes().startswith(b"\x89PNG")
    result = fsm_agent("diagram", "--format", "png", cwd=tmp_path)
    assert result.returncode == 2
    assert "-o FILE" in _error_line(result)


def test_diagram_with_policy_uses_its_numbers(tmp_path: Path) -> None:
    """``--policy`` fills the guards with the policy's numbers and greys what it excludes."""
    (tmp_path / "policy.json").write_text(json.dumps({"retry": {"max_retries": 7}}))
    result = fsm_agent(
        "diagram", "--level", "full", "--format", "mermaid", "--policy", "policy.json", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "1. retryable_error [retries < 7]" in result.stdout
    assert "class verifying unreachable" in result.stdout


def test_write_all_check_reports_stale_files(tmp_path: Path) -> None:
    """``--write-all DIR --check`` exits 1 on a stale directory, naming the regenerate command."""
    result = fsm_agent("diagram", "--write-all", "out", "--check", cwd=tmp_path)
    assert result.returncode == 1
    assert REGENERATE in _error_line(result)


# --- demo ------------------------------------------------------------------------------------


def test_demo_runs_offline_fast_and_draws_its_run(tmp_path: Path) -> None:
    """``demo`` runs offline, traces its moves and effects, records JSONL and writes the
    machine with its run drawn on it; ``diagram --trace`` reads the recording."""
    result = fsm_agent("demo", "--record", "run.jsonl", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for expected in (
        "idle → compacting",
        "calling → calling",  # the retried model error
        "verify rejected",
        "tool   multiply(a=3, b=4)",
        "final (completed)",
    ):
        assert expected in out, expected
    svg = ElementTree.parse(tmp_path / "fsm-agent-demo.svg").getroot()
    assert svg.tag.endswith("svg")
    lines = (tmp_path / "run.jsonl").read_text(encoding="utf-8").splitlines()
    assert event_adapter.validate_json(lines[-1]).type == "final"
    traced = fsm_agent("diagram", "--trace", "run.jsonl", "--format", "mermaid", cwd=tmp_path)
    assert traced.returncode == 0, traced.stderr
    assert "class done final" in traced.stdout


def test_demo_rejects_an_unknown_diagram_suffix(tmp_path: Path) -> None:
    """``demo --diagram x.txt`` is a usage error."""
    result = fsm_agent("demo", "--diagram", "x.txt", cwd=tmp_path)
    assert result.returncode == 2
    assert ".txt" in _error_line(result)


# --- run -------------------------------------------------------------------------------------


def test_run_without_a_model_is_a_usage_error(tmp_path: Path) -> None:
    """``run`` with no --model and no FSM_AGENT_MODEL is one error line, exit code 2."""
    result = fsm_agent("run", "hello", cwd=tmp_path)
    assert result.returncode == 2
    assert "--model" in _error_line(result)


def test_run_with_an_unknown_provider_is_a_usage_error(tmp_path: Path) -> None:
    """An unknown provider prefix is one error line, exit code 2."""
    result = fsm_agent("run", "hello", "--model", "nope:model", cwd=tmp_path)
    assert result.returncode == 2
    assert "nope:model" in _error_line(result)


def test_run_streams_a_real_provider_answer(tmp_path: Path) -> None:
    """``run`` against a local OpenAI-compatible server streams the answer and ends done."""

    def handler(request: Request) -> Reply:
        return sse_reply(openai_sse(Turn(text="Hello from the server.")))

    with server_in_thread(handler) as url:
        result = fsm_agent(
            "run",
            "Say hello.",
            "--model",
            "openai:test-model",
            "--base-url",
            f"{url}/v1",
            "--record",
            "run.jsonl",
            cwd=tmp_path,
            env={"OPENAI_API_KEY": "sk-test"},
        )
    assert result.returncode == 0, result.stderr
    assert "Hello from the server." in result.stdout
    assert "finalizing → done" in result.stdout
    assert (tmp_path / "run.jsonl").read_text(encoding="utf-8").count("\n") > 3


def test_the_command_modules_import_no_cycle() -> None:
    """Inside fsm_agent.cli, imports form no cycle: only the package's ``__init__`` (main and
    the parser) imports the command modules, and no command module imports it back."""
    package = ROOT / "fsm_agent" / "cli"
    modules = {path.stem for path in package.glob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name in modules:
        tree = ast.parse((package / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:  # from . import x: a sibling module, or the package
                    targets = {a.name if a.name in modules else "__init__" for a in node.names}
                else:
                    targets = {node.module.partition(".")[0]}
                graph[name] |= targets & modules
    assert all("__init__" not in graph[name] for name in modules - {"__init__"}), graph

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph[start]
        )

    assert [name for name in sorted(modules) if reaches(name, name, set())] == []


def test_help_cites_no_document_outside_the_repository() -> None:
    """No command's help points at DESIGN.md, which the repository does not hold."""
    from fsm_agent.cli import build_parser

    texts = [build_parser().format_help()]
    for command in COMMANDS:
        parser = argparse.ArgumentParser(prog=command.name, description=command.help)
        command.add_arguments(parser)
        texts.append(parser.format_help())
    assert not [text for text in texts if "DESIGN" in text]
