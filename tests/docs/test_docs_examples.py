"""Every Python block of README.md and docs/, and every program of examples/, runs offline as
written: scripted models, or an OpenAI-compatible server on 127.0.0.1 named by the environment."""

from __future__ import annotations

import ast
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from docs_blocks import ROOT, Program, doc_blocks, examples
from provider_server import (
    Reply,
    Request,
    Turn,
    json_reply,
    openai_json,
    openai_sse,
    server_in_thread,
    sse_reply,
)

LOCAL_ANSWER = "Hello from the local server."


def _chat_completions(request: Request) -> Reply:
    turn = Turn(text=LOCAL_ANSWER)
    if request.json.get("stream"):
        return sse_reply(openai_sse(turn))
    return json_reply(openai_json(turn))


@pytest.fixture(scope="module")
def local_server() -> Iterator[str]:
    """An OpenAI-compatible server on 127.0.0.1 that answers every request with one text."""
    with server_in_thread(_chat_completions) as url:
        yield f"{url}/v1"


@pytest.fixture
def sandbox(local_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch working directory and the environment a user's shell would hold: the local
    server as the OpenAI endpoint, a dummy key, and no other provider's key."""
    for name in ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", local_server)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    monkeypatch.setenv("FSM_AGENT_MODEL", "openai:local-model")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _runnable(programs: list[Program]) -> list[Program]:
    return [p for p in programs if p.not_run is None]


def test_every_page_with_code_has_a_runnable_block() -> None:
    """Blocks kept from running are few, and each says why."""
    blocks = doc_blocks()
    skipped = [b for b in blocks if b.not_run is not None]
    assert len(blocks) >= 35 and len(skipped) <= 3
    assert all(b.not_run for b in skipped)


@pytest.mark.parametrize("program", _runnable(doc_blocks()), ids=lambda p: p.name)
def test_docs_block_runs(program: Program, sandbox: Path) -> None:
    """The block runs to the end as a program and its assertions hold."""
    code = compile(program.code, str(ROOT / program.name), "exec")
    exec(code, {"__name__": "__main__"})


@pytest.mark.parametrize("program", examples(), ids=lambda p: p.name)
def test_example_runs(program: Program, sandbox: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The example runs to the end as a script and prints what it did."""
    runpy.run_path(str(ROOT / program.name), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_examples_exist() -> None:
    """examples/ holds the programs the docs point users to."""
    names = {Path(p.name).stem for p in examples()}
    assert {"provider_from_env", "durable_approval", "streamed_run", "test_fuzz_policy"} <= names


def test_provider_example_talks_to_the_configured_server(
    sandbox: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real-provider example reads its model and server from the environment."""
    runpy.run_path(str(ROOT / "examples" / "provider_from_env.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert f"[openai:local-model] completed: {LOCAL_ANSWER}" in out


def _header_commands(path: Path) -> list[str]:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return [line.strip() for line in doc.splitlines() if line.strip().startswith("fsm-agent ")]


def test_the_phases_example_header_commands_run_from_the_repository_root() -> None:
    """The commands in ``plan_act_check.py``'s header work as written, from the root (in a
    fresh process: nothing but the current directory makes the example importable)."""
    commands = _header_commands(ROOT / "examples" / "plan_act_check.py")
    assert len(commands) == 2
    for command in commands:
        done = subprocess.run(
            [sys.executable, "-m", "fsm_agent", *shlex.split(command)[1:]],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (command, done.stderr)


def test_a_denied_refund_is_not_reported_as_settled(
    sandbox: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``durable_approval.py deny``: no refund is made, and the answer does not claim one."""
    monkeypatch.setattr(sys, "argv", ["durable_approval.py", "deny"])
    runpy.run_path(str(ROOT / "examples" / "durable_approval.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert "refunds made: []" in out
    assert "settled" not in out and "did not make the refund" in out
