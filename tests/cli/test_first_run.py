"""A newcomer's first real run: the real-provider example and the quickstart's program say why a
run failed and exit non-zero, end in seconds when nothing listens, and count only the model
calls that were answered; ``fsm-agent run`` refuses a base URL that is not one before it runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_errors import cli, usage_error

from docs_blocks import ROOT, doc_blocks
from fsm_agent.errors import ConfigurationError
from fsm_agent.providers import infer_model
from provider_server import Reply, Request, Turn, json_reply, openai_json, server_in_thread

PROVIDER_EXAMPLE = ROOT / "examples" / "provider_from_env.py"
ANSWER = "It is the 29th of November."


def _quickstart_program(tmp_path: Path) -> Path:
    """The quickstart's first agent, written to a file as a reader would save it."""
    (block,) = [
        b for b in doc_blocks() if b.name.startswith("docs/quickstart.md#") and "utc_now" in b.code
    ]
    path = tmp_path / "first_agent.py"
    path.write_text(block.code, encoding="utf-8")
    return path


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _environment(base_url: str, **extra: str) -> dict[str, str]:
    """A shell's environment with no provider key and the OpenAI endpoint at ``base_url``."""
    keys = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
    env = {k: v for k, v in os.environ.items() if k not in keys and not k.startswith("FSM_AGENT")}
    return {**env, "OPENAI_BASE_URL": base_url, **extra}


def _run(
    program: Path, base_url: str, **extra: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    """Run ``program`` as a script against ``base_url`` (``extra`` more environment
    variables); the result and the seconds it took."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(program)],
            env=_environment(base_url, **extra),
            capture_output=True,
            text=True,
            timeout=25,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{program.name} was still retrying after 25 s with nothing listening")
    return done, time.monotonic() - started


@pytest.fixture
def flaky_server() -> Iterator[str]:
    """An OpenAI-compatible server that answers its first request 503, then with one text."""
    seen: list[Request] = []

    def handle(request: Request) -> Reply:
        seen.append(request)
        if len(seen) == 1:
            return json_reply({"error": {"message": "overloaded"}}, status=503)
        return json_reply(openai_json(Turn(text=ANSWER)))

    with server_in_thread(handle) as url:
        yield f"{url}/v1"


@pytest.mark.parametrize("which", ["example", "quickstart"])
def test_a_refused_connection_fails_fast_with_its_cause(which: str, tmp_path: Path) -> None:
    """With no key and no server, the program prints the cause and exits 1 within seconds."""
    program = PROVIDER_EXAMPLE if which == "example" else _quickstart_program(tmp_path)
    done, seconds = _run(program, f"http://127.0.0.1:{_closed_port()}/v1")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the run failed" in done.stderr and "connection failed" in done.stderr
    assert "None" not in done.stdout and "model call" not in done.stdout
    assert seconds < 15


@pytest.mark.parametrize(
    ("example", "variable"),
    [("writer_researcher", "WRITER_MODEL"), ("plan_act_check", "PLAN_ACT_CHECK_MODEL")],
)
def test_examples_on_a_real_model_fail_fast_with_their_cause(example: str, variable: str) -> None:
    """The examples that take a real model from the environment fail as the first one does."""
    program = ROOT / "examples" / f"{example}.py"
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    done, seconds = _run(program, url, **{variable: "openai:local-model"})
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "the run failed" in done.stderr and "connection failed" in done.stderr
    assert seconds < 15


def test_the_quickstart_counts_answered_calls_apart_from_attempts(
    flaky_server: str, tmp_path: Path
) -> None:
    """A call refused with 503 and retried is an attempt, not a model call that answered."""
    done, _ = _run(_quickstart_program(tmp_path), flaky_server)
    assert done.returncode == 0, done.stderr
    assert ANSWER in done.stdout
    assert "1 model answer(s), 2 attempt(s)" in done.stdout


def test_the_provider_example_succeeds_after_a_retry(flaky_server: str) -> None:
    """A run that ends well exits 0 and prints its answer, however many attempts it took."""
    done, _ = _run(PROVIDER_EXAMPLE, flaky_server)
    assert done.returncode == 0, done.stderr
    assert f"completed: {ANSWER}" in done.stdout


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8000/v1", "ftp://host/v1", "http://"])
def test_run_refuses_a_base_url_that_is_not_one_before_it_starts(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fsm-agent run --base-url`` with no http(s) scheme or host is one line, exit 2, no run."""
    code, out, err = cli(
        capsys, monkeypatch, tmp_path, "run", "hi", "--model", "openai:m", "--base-url", url
    )
    line = usage_error((code, out, err))
    assert repr(url) in line and "http://" in line
    assert out == ""


def test_a_provider_refuses_a_base_url_from_the_environment() -> None:
    """A malformed base URL is a ``ConfigurationError`` naming where it came from."""
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL"):
        infer_model("openai:m", env={"OPENAI_BASE_URL": "localhost:8000/v1"})
    with pytest.raises(ConfigurationError, match="'notaurl'"):
        infer_model("anthropic:m", api_key="k", base_url="notaurl")
    assert infer_model("openai:m", base_url="http://127.0.0.1:8000/v1/").base_url == (
        "http://127.0.0.1:8000/v1"
    )
